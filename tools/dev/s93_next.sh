#!/usr/bin/env bash
# The ninety-third session's device calls, each part within one call's 600 s, all under the default
# KDSL_KEY_STRIDES (on since the ninety-second session):
#   OUT=... PART="s" [DEADLINE=520] bash tools/dev/s93_next.sh; logs in $OUT/logs.tgz.
#   s: launch overhead and `kdsl bench --suite standard` (against cuDNN, Flex and cuBLAS's _scaled_mm).
#   t: the GPU tests of parts b, g, f, h and i of bench/gpu_session.sh (TEST_PARTS; part a ran under the switch in
#      the ninety-second session). In the ninety-third session the old part b (now b and g) ran 520 s
#      without finishing; it is split now: TEST_PARTS="b", then "g", then "f h", then "i", a call each.
#   v: (ran in the ninety-third session) the 3-D against the 4-D key maps at 8192², D = 128 / 192 / 256.
#   u: what is left of s91_next.sh's part k: `check --grad` on held-out 64's two_biases and all of 65 (the
#      ninety-third session checked 63 and the rest of 64), then the backward benches of held-out 60-61
#      against Flex (each check ~33 s on the H100: nine fit a call beside two benches).
#   w, x: `check --grad` on held-out 66 (w) and 67 (x), interpreter-checked in the ninety-third session, then
#      the backward bench of held-out 62 (w) or 63 (x).
set -uo pipefail
source tools/dev/device_steps.sh
CHECK_SEED=88 CHECK_TIMEOUT=90
for part in ${PART:-s}; do
case $part in
s)
  SKIP_TESTS=1 SKIP_CHECK=1 timeout $(left) bash bench/gpu_session.sh > $L/bench-suite.log 2>&1
  cp $OUT/*standard*.md $OUT/bench.log $OUT/launch.log $L/ 2>/dev/null; save
  tail -60 $L/bench-suite.log ;;
t)
  for p in ${TEST_PARTS:-b}; do
    late tests-$p && continue
    TESTS_PART=$p SKIP_CHECK=1 SKIP_BENCH=1 timeout $(left) bash bench/gpu_session.sh > $L/tests-$p.log 2>&1
    cp $OUT/pytest-$p.log $L/ 2>/dev/null; tail -6 $L/tests-$p.log; save
  done ;;
v)
  timeout 200 python3 tools/dev/strided_keys.py --reps 10 --shapes \
    "plain,2,16,16,8192,8192,256;plain,2,16,16,8192,8192,128;plain,2,16,16,8192,8192,192;causal,2,16,16,8192,8192,128" \
    > $L/strided-long.log 2>&1; cat $L/strided-long.log; save ;;
u)
  check tools/dev/heldout64.kd two_biases
  for k in $(grep -o "^attention [a-z0-9_]*" tools/dev/heldout65.kd | cut -d' ' -f2); do check tools/dev/heldout65.kd $k; done
  for n in 60 61; do bench h$n-bwd tools/dev/heldout$n.kd --backward; done ;;
w|x)
  n=$([ $part = w ] && echo 66 || echo 67); bwd=$([ $part = w ] && echo 62 || echo 63)
  for k in $(grep -o "^attention [a-z0-9_]*" tools/dev/heldout$n.kd | cut -d' ' -f2); do check tools/dev/heldout$n.kd $k; done
  bench h$bwd-bwd tools/dev/heldout$bwd.kd --backward ;;
esac
done
