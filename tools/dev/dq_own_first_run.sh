#!/usr/bin/env bash
# Branch dq-own-first's first device run (one call, ~8 minutes): backward alone with and without
# KDSL_BWD_DQ_OWN_FIRST=1 at head dims 64 and 128, then the <= 128 backward GPU tests (part c) built with it.
set -uo pipefail
source bench/device_env.sh
export PYTHONPATH=$PYTHONPATH:$PWD/tools/dev
mkdir -p $OUT/own-first
(cd tools/dev
 timeout 120 python3 backward_ab.py --programs plain,causal --shape 4,16,4096,4096,64 \
   --variants "default;-DKDSL_BWD_DQ_OWN_FIRST=1" --reps 10 > $OUT/own-first/ab-64.log 2>&1
 grep "^|\|regs" $OUT/own-first/ab-64.log
 timeout 120 python3 backward_ab.py --programs plain,causal,relpos --shape 2,16,4096,4096,128 \
   --variants "default;-DKDSL_BWD_DQ_OWN_FIRST=1" --reps 10 > $OUT/own-first/ab-128.log 2>&1
 grep "^|\|regs" $OUT/own-first/ab-128.log)
KDSL_DEFINES="KDSL_BWD_DQ_OWN_FIRST=1" timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_backward_gpu.py \
  -k "1x2x2x1x1x64x64 or 2x4x2x127x129x128x128 or 1x4x4x200x333x64x64 or 1x4x2x190x250x96x64" \
  > $OUT/own-first/pytest.log 2>&1; tail -3 $OUT/own-first/pytest.log
