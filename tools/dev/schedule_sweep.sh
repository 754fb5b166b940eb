#!/usr/bin/env bash
# One device call: attention schedules against the default (and cuDNN for plain/causal), same
# process, same inputs; then the GPU test of non-default schedules. Logs under $OUT.
# Run from the repo root on the GPU machine with the lark wheel carried in .whl/.
set -uo pipefail
source bench/device_env.sh
W128="tile_n=176,stages=2;tile_n=128,stages=2;tile_n=112,stages=3"
W64="consumers=3,stages=2;consumers=3,stages=3;consumers=3,stages=4;tile_n=176,stages=3;tile_n=192,stages=2;tile_n=192,stages=3"
L8="2,16,8192,8192"; L2="8,16,2048,2048"
CASES=${CASES:-"samples/plain.kd:plain:$L8,128:$W128 samples/plain.kd:plain:$L2,128:$W128
 samples/causal.kd:causal:$L8,128:$W128 samples/causal.kd:causal:$L2,128:$W128
 samples/relpos.kd:relpos:$L8,128:tile_n=176,stages=2 samples/softcap.kd:softcap:$L8,128:tile_n=176,stages=2
 samples/alibi.kd:alibi:$L8,128:tile_n=176,stages=2
 samples/plain.kd:plain:$L8,64:$W64 samples/plain.kd:plain:$L2,64:$W64 samples/causal.kd:causal:$L8,64:$W64
 samples/relpos.kd:relpos:$L8,64:$W64"}
# shellcheck disable=SC2086
timeout ${SWEEP_TIMEOUT:-400} python3 tools/dev/attrs_sweep.py $CASES 2>&1 | tee "$OUT/sweep.log"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  python3 -m pytest -q -p no:cacheprovider tests/gpu/test_attention_gpu.py -k "${PYTEST_K:-schedules}" 2>&1 \
    | tee "$OUT/pytest.log" | tail -8
fi
grep -E "^==|TFLOPS" "$OUT/sweep.log" | sed 's/  */ /g'
