#!/usr/bin/env bash
# The next session's device call (after the sixty-eighth): what the backward's copied mask tiles
# (attention_bwd_stream.cuh) left unmeasured. OUT=... bash tools/dev/s69_next.sh; logs in $OUT/logs.tgz
#   dense masks' fwd+bwd against Flex at D=64 (D=128 ran in the sixty-eighth session's call4);
#   the per-head summary's backward against none (KDSL_TILE_SUMMARY_HEADS=0) now that the mask's
#   tiles are copied (on random bits the summary cost 27-39 % with per-element loads: the sixty-eighth
#   session's call1); GPU numerics fuzz with gradients.
set -uo pipefail
L=$OUT/logs; mkdir -p $L
save() { tar czf $OUT/logs.tgz -C $OUT logs; }  # after each step: a call cut short keeps the rest
for seed in 0 1; do
  timeout 150 kdsl bench bench/variants.kd tools/dev/head_mask_parts.kd --only bool_attn_mask,head_bool,head_bytes_causal \
    --backward --vs flex --reps 10 --seed $seed --shapes B=2,H=16,M=4096,N=4096,D=64 -o $L/bwd-s$seed > $L/bwd-s$seed.log 2>&1
  grep -h "fwd+bwd" $L/bwd-s$seed/*.md | cut -d'|' -f2-11
done
save
for seed in 0 1; do
  for d in 128 64; do
    timeout 100 python3 tools/dev/backward_ab.py --file tools/dev/head_mask_parts.kd --programs head_bool \
      --shape 2,16,4096,4096,$d --variants "default;KDSL_TILE_SUMMARY_HEADS=0" --reps 10 --seed $seed \
      > $L/heads-s$seed-d$d.log 2>&1
    echo "seed $seed D=$d"; grep -E "^\||regs" $L/heads-s$seed-d$d.log
  done
done
save
# head_bool in runs: half its tiles empty, half full, yet its backward took about a dense one's time
# (1301 us at D=128): every launch of the backward under ncu (summary, delta, kernel, dQ rows)
timeout 150 ncu --profile-from-start off --section SpeedOfLight --section LaunchStats python3 tools/dev/ncu_backward.py \
  --seed=1 tools/dev/head_mask_parts.kd:head_bool 2,16,4096,128 > $L/ncu-head-bool-runs.log 2>&1
grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput" $L/ncu-head-bool-runs.log | head -16
save
timeout 200 python3 tools/gpu_fuzz.py --minutes 2.5 --grad --seed 6901 --out $L/fuzz > $L/fuzz.log 2>&1; tail -3 $L/fuzz.log
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
