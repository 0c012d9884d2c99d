#!/usr/bin/env bash
# The README's GPU figures in one go: the CUDA tests, padded vs padding-free (same batches, same process), and ours
# vs plain transformers through a Trainer. Every table is also written under OUT_DIR.
#   benchmarks/gpu.sh OUT_DIR [TEXT_FILE] [eager|compiled|all]
set -uo pipefail
out=${1:?usage: benchmarks/gpu.sh OUT_DIR [TEXT_FILE] [eager|compiled|all]}
text=${2:-../shared/data/wikitext-2-raw/wiki.valid.raw}
part=${3:-all}
py=${PYTHON:-python3}
mkdir -p "$out"
bench() {  # name, then step_cost.py flags
  local name=$1; shift
  echo "== $name: step_cost.py $*"
  $py benchmarks/step_cost.py --text "$text" --json "$out/$name.json" "$@" 2>"$out/$name.err" | tee "$out/$name.md" | grep '^|'
  tail -3 "$out/$name.err" | grep -i error
}
if [ "$part" != compiled ]; then
  $py -m pytest -q -m cuda tests/test_gpu.py -p no:cacheprovider 2>&1 | tee "$out/cuda_tests.log" | tail -3
  bench layouts128 --recipes bert-base,roberta-base,electra-small,electra-base --seq_len 128 --batch_size 256 --steps 20
  bench layouts512 --recipes bert-base,roberta-base --seq_len 512 --batch_size 64 --steps 20
  bench vs_plain128 --recipes bert-base,roberta-base,electra-small --seq_len 128 --batch_size 256 --steps 30 --vs_plain
fi
if [ "$part" != eager ]; then
  bench vs_plain128_compiled --recipes bert-base,electra-small --seq_len 128 --batch_size 256 --steps 30 --vs_plain --compile
  bench layouts512_compiled --recipes bert-base --seq_len 512 --batch_size 64 --steps 20 --compile
fi
