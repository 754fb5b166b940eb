#!/usr/bin/env bash
# Device calls (PART=a, b, c; ~5 minutes each): what dQ's reductions cost the backward, A/B switches off by default
# (forty-ninth session; without its reductions the wide backward ran x1.27-1.38 faster at head dim 256,
# dq-bound.log):
#   KDSL_BWD_ROTATE=1        a CTA's query tiles from its keys' diagonal, wrapping (BwdSteps): the ~64 CTAs of a
#                            head no longer add into the same dQ tile at a time where no mask skips tiles (causal
#                            rows: the order is unchanged, a control)
#   KDSL_BWD_WIDE_DQ2_BULK=1 the wide kernel's second dQ piece staged in the step's own Q blocks and added by one
#                            bulk reduction a warp (UBLKRED) instead of 8 REDG.128 a thread
#   KDSL_BWD_WIDE_DQ2_BULK=2 at 256 / 256 both pieces so (the first in the own Q blocks, the second in the own dO
#                            blocks, dQ's products after dV's and dK's); elsewhere as 1
# PART=a: backward alone in turns (256: all; 192: ROTATE, DQ2_BULK=1; 128, 64: ROTATE). PART=b: the backward GPU
# tests built with ROTATE and DQ2_BULK=2 (wide head dims, value head dims, GQA / ragged shapes at 64 / 128);
# PART=c: the head dim 256 tests with DQ2_BULK=1.
set -uo pipefail
source bench/device_env.sh
export PYTHONPATH=$PYTHONPATH:$PWD/tools/dev
PART=${PART:-a}
if [ "$PART" = a ]; then
  L=$OUT/dq-traffic.log
  R="-DKDSL_BWD_ROTATE=1"
  (cd tools/dev
   timeout 230 python3 backward_ab.py --programs plain,causal --shape 2,16,4096,4096,256 --reps 10 \
     --variants="default;$R;-DKDSL_BWD_WIDE_DQ2_BULK=1;-DKDSL_BWD_WIDE_DQ2_BULK=2;$R -DKDSL_BWD_WIDE_DQ2_BULK=2" >> $L 2>&1
   timeout 110 python3 backward_ab.py --programs plain,causal --shape 2,16,4096,4096,192 --reps 10 \
     --variants="default;$R;-DKDSL_BWD_WIDE_DQ2_BULK=1" >> $L 2>&1
   timeout 100 python3 backward_ab.py --programs plain,relpos,causal --shape 2,16,4096,4096,128 --reps 10 \
     --variants="default;$R" >> $L 2>&1
   timeout 90 python3 backward_ab.py --programs plain,causal --shape 4,16,4096,4096,64 --reps 10 \
     --variants="default;$R" >> $L 2>&1)
  grep "^|\|regs" $L
elif [ "$PART" = b ]; then
  KDSL_DEFINES="KDSL_BWD_ROTATE=1 KDSL_BWD_WIDE_DQ2_BULK=2" timeout 480 python3 -m pytest -q -p no:cacheprovider \
    tests/gpu/test_backward_gpu.py -k "256 or 192 or value_head_dim or 1x2x2x1x1x64x64 or 2x4x2x127x129x128x128 or \
    1x4x4x200x333x64x64 or data_dependent" > $OUT/pytest.log 2>&1; tail -3 $OUT/pytest.log
else
  KDSL_DEFINES="KDSL_BWD_WIDE_DQ2_BULK=1" timeout 400 python3 -m pytest -q -p no:cacheprovider \
    tests/gpu/test_backward_gpu.py -k "256" > $OUT/pytest-c.log 2>&1; tail -3 $OUT/pytest-c.log
fi
