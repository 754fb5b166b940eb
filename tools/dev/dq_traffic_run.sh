#!/usr/bin/env bash
# Two device calls (PART=a, then PART=b; ~5 minutes each): what dQ's reductions cost the backward, two A/B
# switches off by default (forty-ninth session; without its reductions the wide backward ran x1.27-1.38 faster at
# head dim 256, dq-bound.log):
#   KDSL_BWD_ROTATE=1        a CTA's query tiles from its keys' diagonal, wrapping (BwdSteps): the ~64 CTAs of a
#                            head no longer add into the same dQ tile at a time where no mask skips tiles (causal
#                            rows: the order is unchanged, a control)
#   KDSL_BWD_WIDE_DQ2_BULK=1 the wide kernel's second dQ piece staged in the step's own Q blocks and added by one
#                            bulk reduction a warp (UBLKRED) instead of 8 REDG.128 a thread
# PART=a: backward alone in turns (256, 192: both switches and both together; 128, 64: ROTATE). PART=b: the
# backward GPU tests built with both switches (wide head dims, value head dims, GQA / ragged shapes at 64 / 128).
set -uo pipefail
source bench/device_env.sh
export PYTHONPATH=$PYTHONPATH:$PWD/tools/dev
PART=${PART:-a}
if [ "$PART" = a ]; then
  L=$OUT/dq-traffic.log
  V="default;-DKDSL_BWD_ROTATE=1;-DKDSL_BWD_WIDE_DQ2_BULK=1;-DKDSL_BWD_ROTATE=1 -DKDSL_BWD_WIDE_DQ2_BULK=1"
  (cd tools/dev
   timeout 170 python3 backward_ab.py --programs plain,softcap,causal --shape 2,16,4096,4096,256 --variants="$V" --reps 10 >> $L 2>&1
   timeout 110 python3 backward_ab.py --programs plain,causal --shape 2,16,4096,4096,192 --variants="$V" --reps 10 >> $L 2>&1
   timeout 100 python3 backward_ab.py --programs plain,relpos,causal --shape 2,16,4096,4096,128 \
     --variants="default;-DKDSL_BWD_ROTATE=1" --reps 10 >> $L 2>&1
   timeout 90 python3 backward_ab.py --programs plain,causal --shape 4,16,4096,4096,64 \
     --variants="default;-DKDSL_BWD_ROTATE=1" --reps 10 >> $L 2>&1)
  grep "^|\|regs" $L
else
  KDSL_DEFINES="KDSL_BWD_ROTATE=1 KDSL_BWD_WIDE_DQ2_BULK=1" timeout 480 python3 -m pytest -q -p no:cacheprovider \
    tests/gpu/test_backward_gpu.py -k "256 or 192 or value_head_dim or 1x2x2x1x1x64x64 or 2x4x2x127x129x128x128 or \
    1x4x4x200x333x64x64 or data_dependent" > $OUT/pytest.log 2>&1; tail -3 $OUT/pytest.log
fi
