#!/usr/bin/env bash
# Sixty-eighth session, call 2: is the backward of a dense captured tensor (a [B, H, M, N] bool mask or
# float bias, read per element from global memory) behind Flex's? fwd+bwd against compiled Flex,
# seeds 0 (random bits) and 1 (runs); and where dilated_window at D=64 spends its time against Flex (ncu).
# OUT=... bash tools/dev/s68_call2.sh; logs in $OUT/logs.tgz (the device returns few files)
set -uo pipefail
L=$OUT/logs; mkdir -p $L
for seed in 0 1; do
  for d in 128; do
    timeout 220 kdsl bench bench/variants.kd tools/dev/head_mask_parts.kd --only bool_attn_mask,bias_bhqk,head_bool,head_bytes_causal \
      --backward --vs flex --reps 10 --seed $seed --shapes B=2,H=16,M=4096,N=4096,D=$d -o $L/bwd-s$seed-d$d > $L/bwd-s$seed-d$d.log 2>&1
    grep -h "fwd+bwd" $L/bwd-s$seed-d$d/*.md | cut -d'|' -f2-11
  done
done
timeout 200 ncu --profile-from-start off --section SpeedOfLight --section WarpStateStats --section InstructionStats \
  --section LaunchStats --section Occupancy python3 tools/dev/ncu_versus_flex.py --seed=0 \
  tools/dev/heldout21.kd:dilated_window:2,16,4096,4096,64 > $L/ncu-dilated64.log 2>&1
grep -E "^  [a-z_]+.*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Executed Ipc A|Issue Slots Busy|Warp Cycles Per Issued|Block Size|Grid Size" $L/ncu-dilated64.log | head -40
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
