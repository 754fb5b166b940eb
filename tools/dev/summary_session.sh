#!/usr/bin/env bash
# Two device calls for what the fifty-eighth session left unmeasured (bench/NOTES.md), logs to $OUT:
#   PART=1  the dense-mask GPU tests (with the bool key-padding vector and per-head masks), again with
#           the summary's 4-byte row reads (KDSL_SUMMARY_BYTE_ROWS=1, a trial switch, off)
#   PART=2  timing: per-head whole-block summaries against none (KDSL_TILE_SUMMARY_HEADS, off by
#           default); the 4-byte row reads against the default; the backward's step search at D=128
#           beside a summary (the warp search spills 32-56 bytes there; KDSL_BWD_WARP_SKIP=0 is serial)
# Run from the repo root on the GPU machine.
set -uo pipefail
source bench/device_env.sh
export PYTHONPATH=${PYTHONPATH:-}:$PWD/tools/dev:$PWD/tests
if [ "${PART:-1}" = 1 ]; then
  timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_dense_mask_summary_gpu.py 2>&1 \
    | tee "$OUT/pytest-dense.log" | tail -4
  KDSL_DEFINES=KDSL_SUMMARY_BYTE_ROWS=1 timeout 200 python3 -m pytest -q -p no:cacheprovider \
    tests/gpu/test_dense_mask_summary_gpu.py -k "precomputed_summary or replay" 2>&1 | tee "$OUT/pytest-byte-rows.log" | tail -4
else
  timeout 150 python3 tools/dev/structured_masks.py --switch KDSL_TILE_SUMMARY_HEADS --kernels head_bool_causal \
    --shape 2,16,4096,128 2,16,4096,64 2>&1 | tee "$OUT/per-head.log" | grep -v "^  "
  timeout 120 python3 tools/dev/structured_masks.py --defines KDSL_SUMMARY_BYTE_ROWS=1 --kernels dense_bool \
    --kinds documents,padded,random --shape 2,16,4096,128 2>&1 | tee "$OUT/byte-rows.log" | grep -v "^  "
  for prog in "--file tools/dev/dense_masks.kd --programs bool_mask" "--programs document_mask"; do
    timeout 100 python3 tools/dev/backward_ab.py $prog --shape 2,16,4096,4096,128 --reps 10 \
      --variants="default;-DKDSL_BWD_WARP_SKIP=0" 2>&1 | tee -a "$OUT/bwd-search.log" | grep "^|"
  done
fi
