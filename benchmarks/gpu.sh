#!/usr/bin/env bash
# The README's GPU figures: the CUDA tests, padded vs padding-free (same batches, same process), and ours vs plain
# transformers through a Trainer, eager and compiled. Every table (markdown, JSON, log) is also written to OUT_DIR.
# The 128-token parts also profile 3 steps after the timed ones (`--profile 3`: device busy, time by kernel kind),
# so that the step loop and the Trainer runs show where each spends its time.
#   benchmarks/gpu.sh OUT_DIR [TEXT_FILE] [PART ...]
#   PART: fixed tests layouts layouts512 plain plain512 compiled compiled_loop large (default: all)
# A device command runs at most 10 minutes and brings back at most 8 files: run the parts in these calls, the
# issue's targets first (each part writes 3 files; the CUDA tests 1):
#   gpu.sh OUT TEXT fixed                     (est. 9 min: issue 28's new default, fixed-shape steps compiled as CUDA
#                                              graphs, against the old dynamic padding-free step and plain
#                                              transformers, one run each in fresh processes: BERT-base and
#                                              ELECTRA-small, real tokens/s, x plain, MFU, peak memory)
#   gpu.sh OUT TEXT compiled tests            (est. 7 min: ours compiled vs plain through a Trainer, the 1.8x, MFU and
#                                              ELECTRA-small targets; the CUDA tests, 2 min on an H100 before)
#   gpu.sh OUT TEXT plain compiled_loop       (est. 7 min: the same eager; the step alone compiled: what the Trainer costs)
#   gpu.sh OUT TEXT large                     (est. 7 min: the first two at 2x and 4x the batch; 256x128 fills a
#                                              tenth of an H100's memory, and launch costs shrink per token as it grows)
#   gpu.sh OUT TEXT layouts layouts512        (when time is left: padded vs padding-free, eager step loop)
# (plain512: ours vs plain at 512 tokens, when time is left.)
set -uo pipefail
out=${1:?usage: benchmarks/gpu.sh OUT_DIR [TEXT_FILE] [PART ...]}
text=${2:-../shared/data/wikitext-2-raw/wiki.valid.raw}
shift $(($# > 1 ? 2 : 1))
parts=${*:-fixed tests layouts layouts512 plain plain512 compiled compiled_loop large}
py=${PYTHON:-python3}
$py -c "import hf_bertology" || { echo "gpu.sh: $py cannot import hf_bertology (set PYTHON or PYTHONPATH)"; exit 2; }
mkdir -p "$out"
failed=0
bench() {  # name, then step_cost.py flags
  local name=$1
  shift
  echo "== $name: step_cost.py $*"
  $py benchmarks/step_cost.py --text "$text" --json "$out/$name.json" "$@" 2>"$out/$name.log" | tee "$out/$name.md" | grep '^|'
  [ "${PIPESTATUS[0]}" -eq 0 ] || failed=1
  grep -i "error" "$out/$name.log" | tail -3
}
for part in $parts; do
  case $part in
    fixed) bench fixed128_compiled --recipes bert-base,electra-small --seq_len 128 --batch_size 256 --steps 30 --vs_plain --fixed_shape --compile ;;
    tests) $py -m pytest -q -m cuda tests/test_gpu.py -p no:cacheprovider 2>&1 | tee "$out/cuda_tests.log" | tail -3
      [ "${PIPESTATUS[0]}" -eq 0 ] || failed=1 ;;
    layouts) bench layouts128 --recipes bert-base,roberta-base,electra-small,electra-base --seq_len 128 --batch_size 256 --steps 20 --profile 3 ;;
    layouts512) bench layouts512 --recipes bert-base,roberta-base --seq_len 512 --batch_size 64 --steps 20 ;;
    plain) bench vs_plain128 --recipes bert-base,roberta-base,electra-small --seq_len 128 --batch_size 256 --steps 30 --vs_plain --profile 3 ;;
    plain512) bench vs_plain512 --recipes bert-base,roberta-base,electra-base --seq_len 512 --batch_size 64 --steps 20 --vs_plain ;;
    compiled) bench vs_plain128_compiled --recipes bert-base,electra-small --seq_len 128 --batch_size 256 --steps 30 --vs_plain --compile --profile 3 ;;
    compiled_loop) bench layouts128_compiled --recipes bert-base,roberta-base,electra-small --seq_len 128 --batch_size 256 --steps 20 --compile --profile 3 ;;
    large) bench vs_plain128_b512_compiled --recipes bert-base --seq_len 128 --batch_size 512 --steps 30 --vs_plain --compile
      bench layouts128_b1024_compiled --recipes bert-base,electra-small --seq_len 128 --batch_size 1024 --steps 20 --compile ;;
    *) echo "unknown part $part"; failed=1 ;;
  esac
done
exit $failed
