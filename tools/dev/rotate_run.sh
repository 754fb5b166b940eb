#!/usr/bin/env bash
# One device call (~7 minutes): KDSL_BWD_ROTATE=1 (a backward CTA's query tiles from its keys' diagonal,
# wrapping; BwdSteps) against the default order, backward alone in turns. Without a mask every CTA of a head
# walks the query tiles from 0, so the ~64 CTAs of a head add their dQ into the same tile at a time; at head dim
# 256 dQ's reductions cost x1.27-1.38 (forty-ninth session, dq-bound.log). Under causal masks the order is
# unchanged (the tiles before the diagonal are empty), so causal rows are a control. Then the backward GPU tests
# built with it (the wide head dims, value head dims, GQA shapes at 64 / 128).
set -uo pipefail
source bench/device_env.sh
export PYTHONPATH=$PYTHONPATH:$PWD/tools/dev
L=$OUT/rotate.log
V="default;-DKDSL_BWD_ROTATE=1"
(cd tools/dev
 timeout 150 python3 backward_ab.py --programs plain,softcap,causal --shape 2,16,4096,4096,256 --variants="$V" --reps 10 >> $L 2>&1
 timeout 100 python3 backward_ab.py --programs plain,causal --shape 2,16,4096,4096,192 --variants="$V" --reps 10 >> $L 2>&1
 timeout 100 python3 backward_ab.py --programs plain,relpos,causal --shape 2,16,4096,4096,128 --variants="$V" --reps 10 >> $L 2>&1
 timeout 100 python3 backward_ab.py --programs plain,causal --shape 4,16,4096,4096,64 --variants="$V" --reps 10 >> $L 2>&1)
grep "^|\|regs" $L
KDSL_DEFINES="KDSL_BWD_ROTATE=1" timeout 260 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_backward_gpu.py \
  -k "256 or 192 or value_head_dim or 1x2x2x1x1x64x64 or 2x4x2x127x129x128x128 or 1x4x4x200x333x64x64 or data_dependent" \
  > $OUT/pytest.log 2>&1; tail -3 $OUT/pytest.log
