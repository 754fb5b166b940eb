#!/usr/bin/env bash
# One device call (~6 minutes): the backward's CTA order, one group of every (b, k/v head) pair
# (-DKDSL_BWD_HEAD_GROUP=4096: larger than any B * Hkv) against backward_block's head groups,
# backward alone, 10 reps in turns (tools/dev/backward_order_sim.py predicts 9-14 % under causal
# masks, ignoring L2); the dQ own-keys-first switch (KDSL_BWD_DQ_OWN_FIRST=1) at 64 and 128; the
# GPU tests not yet run (a learned bias under a document mask).
set -uo pipefail
source bench/device_env.sh
export PYTHONPATH=$PYTHONPATH:$PWD/tools/dev
mkdir -p $OUT/order
(cd tools/dev
 V="default;-DKDSL_BWD_HEAD_GROUP=4096"
 timeout 100 python3 backward_ab.py --programs causal,document_mask,natten2d --shape 4,16,4096,4096,64 \
   --variants "$V" --reps 10 > $OUT/order/ab-64.log 2>&1; grep "^|" $OUT/order/ab-64.log
 timeout 100 python3 backward_ab.py --programs causal,document_mask,sliding_window --shape 2,16,4096,4096,128 \
   --variants "$V" --reps 10 > $OUT/order/ab-128.log 2>&1; grep "^|" $OUT/order/ab-128.log
 timeout 100 python3 backward_ab.py --programs plain,causal --shape 4,16,4096,4096,64 \
   --variants "default;-DKDSL_BWD_DQ_OWN_FIRST=1" --reps 10 > $OUT/order/ab-own-64.log 2>&1; grep "^|\|regs" $OUT/order/ab-own-64.log)
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_backward_gpu.py -k "learned_bias_under" \
  > $OUT/order/pytest.log 2>&1; tail -3 $OUT/order/pytest.log
