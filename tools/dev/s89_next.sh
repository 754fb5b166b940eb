#!/usr/bin/env bash
# The eighty-ninth session's device calls, each part within one call's 600 s:
#   OUT=... PART="f" [DEADLINE=520] bash tools/dev/s89_next.sh; logs in $OUT/logs.tgz.
#   f: head dims off the multiples of 16 (tests/gpu/test_head_dims_gpu.py -k padded: zero-padded copies),
#      tests/gpu/test_attention_gpu.py (k and v in any layout: copied, or read in place by the 4-D
#      key maps of KDSL_KEY_STRIDES) and the decode tests, then tools/dev/strided_keys.py (the A/B of
#      3-D against 4-D maps on row-major arrays, a cache's view read in place against copied).
#   g: the GPU tests of part a under KDSL_KEY_STRIDES=1 (every attention test through 4-D maps).
set -uo pipefail
source tools/dev/device_steps.sh
for part in ${PART:-f}; do
case $part in
f)
  timeout 120 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_head_dims_gpu.py -k "padded" \
    > $L/pytest-head-pad.log 2>&1; tail -4 $L/pytest-head-pad.log; save
  timeout 240 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_attention_gpu.py tests/gpu/test_decode_gpu.py \
    > $L/pytest-attention.log 2>&1; tail -8 $L/pytest-attention.log; save
  late strided || { timeout 200 python3 tools/dev/strided_keys.py > $L/strided.log 2>&1; cat $L/strided.log; save; } ;;
g)
  KDSL_KEY_STRIDES=1 TESTS_PART=a SKIP_CHECK=1 SKIP_BENCH=1 timeout $((560 - SECONDS)) bash bench/gpu_session.sh \
    > $L/tests-a-key-strides.log 2>&1; tail -15 $L/tests-a-key-strides.log; save ;;
esac
done
