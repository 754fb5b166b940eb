#!/usr/bin/env bash
# One device call (~4 minutes): do masked backwards at head dim 64 run faster with 128-query steps that spill
# than with the 64-query steps compiler.build falls back to? Forty-eighth session (H200): sliding_window (40 B,
# 14 spill instructions) x1.041, natten2d (88 B, 36) x1.055, document_mask (128 B, 92) x0.818. This times the
# rest, whose forced 128-query builds spill 88-224 B (36-203 LDL/STL): the data for a rule in compiler.build
# (keep the 128-query build below some spill size) or for none.
set -uo pipefail
source bench/device_env.sh
export PYTHONPATH=$PYTHONPATH:$PWD/tools/dev
L=$OUT/spill-tolerance.log
cd tools/dev
V="default;-DKDSL_BWD_BM=128"
timeout 200 python3 backward_ab.py --programs alibi,padded_causal,prefix_lm --shape 4,16,4096,4096,64 \
  --variants="$V" --reps 10 >> $L 2>&1
timeout 250 python3 backward_ab.py --file ../../bench/variants.kd --programs gemma2_local,chunked_causal,alibi_softcap_gqa,packed_window \
  --shape 4,16,4096,4096,64 --variants="$V" --reps 10 >> $L 2>&1
grep "^|\|regs" $L
