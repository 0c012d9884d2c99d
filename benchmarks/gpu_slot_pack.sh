#!/usr/bin/env bash
# Packs what one GPU slot needs into .slot/ (ignored by git; the device tool's `carry` takes it): our dependencies
# that the machine's image lacks (or has older) as wheels for its Python 3.12, WikiText-2 valid, a compressed corpus
# (`--part learn`'s, and `wiki_00`, the speed part's Wikipedia text) and the GLUE tasks that ship with a training
# set. benchmarks/gpu_slot.md says how to run it.
#   benchmarks/gpu_slot_pack.sh [CORPUS_FILES]     (default 30: wiki_00..wiki_29, ~30 MB of text, ~8 MB packed)
set -euo pipefail
cd "$(dirname "$0")/.."
files=${1:-30}
data=../shared/data
out=.slot
grep -qx '/.slot/' .git/info/exclude 2>/dev/null || echo '/.slot/' >>.git/info/exclude
rm -rf "$out" && mkdir -p "$out/whl" "$out/data/glue"
# The versions our tests run with; the image has torch and accelerate, and transformers/tokenizers of its own.
pins=$(python3 - <<'PY'
import importlib.metadata as m
print(" ".join(f"{n}=={m.version(n)}" for n in ["transformers", "datasets", "evaluate", "dill", "multiprocess", "torch-optimi"]))
PY
)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$out/whl" $pins
cp "$data/wikitext-2-raw/wiki.valid.raw" "$out/data/"
for task in SST-2 CoLA STS-B WNLI; do
  mkdir -p "$out/data/glue/$task" && cp "$data/glue/$task/train.tsv" "$data/glue/$task/dev.tsv" "$out/data/glue/$task/"
done
corpus=$data/corpus/enwiki-2015-wikiextractor/AA
ls "$corpus" | sort | head -n "$files" | tar -C "$corpus" -cf - -T - | xz -T2 -6 >"$out/data/corpus.tar.xz"
du -sh "$out" "$out"/whl "$out"/data/corpus.tar.xz
