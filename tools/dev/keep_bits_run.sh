#!/usr/bin/env bash
# One device call (~8 minutes): KDSL_BWD_KEEP_BITS=1 (a guarded step's kept elements as bits, the mask's
# arithmetic and loads done while the step's tiles arrive) with and without KDSL_BWD_PACK_EARLY=1 (P and dS to
# bf16 pairs as each k16 step finishes). Offline (forty-eighth session) both together build document_mask,
# natten2d and alibi at head dim 128 without the spills the default builds have (48 / 24 / 8 B), and give
# padded_causal and prefix_lm 128-query steps at 64; PACK_EARLY alone cost causal 2 % at 64. Backward alone, in
# turns, then the <= 128 backward GPU tests (part c) and the data-dependent ones built with both.
set -uo pipefail
source bench/device_env.sh
export PYTHONPATH=$PYTHONPATH:$PWD/tools/dev
L=$OUT/keep-bits.log
V="default;-DKDSL_BWD_KEEP_BITS=1;-DKDSL_BWD_KEEP_BITS=1 -DKDSL_BWD_PACK_EARLY=1"
(cd tools/dev
 timeout 200 python3 backward_ab.py --programs document_mask,natten2d,alibi,causal,plain --shape 2,16,4096,4096,128 \
   --variants="$V" --reps 10 >> $L 2>&1
 timeout 200 python3 backward_ab.py --programs padded_causal,prefix_lm,document_mask,causal,plain --shape 4,16,4096,4096,64 \
   --variants="$V" --reps 10 >> $L 2>&1
 # bench/variants.kd: packed_window's 128 spill 56 -> 16 B with both, t5_bias's 8 -> 24, periodic_bias's 0 -> 8
 timeout 150 python3 backward_ab.py --file ../../bench/variants.kd --programs packed_window,t5_bias,periodic_bias \
   --shape 2,16,4096,4096,128 --variants="$V" --reps 10 >> $L 2>&1)
grep "^|\|regs" $L
KDSL_DEFINES="KDSL_BWD_KEEP_BITS=1 KDSL_BWD_PACK_EARLY=1" timeout 170 python3 -m pytest -q -p no:cacheprovider \
  tests/gpu/test_backward_gpu.py -k "1x2x2x1x1x64x64 or 2x4x2x127x129x128x128 or 1x4x4x200x333x64x64 or \
  1x4x2x190x250x96x64 or data_dependent or learned_bias_under" > $OUT/pytest.log 2>&1; tail -3 $OUT/pytest.log
