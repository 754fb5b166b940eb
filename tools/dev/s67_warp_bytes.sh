#!/usr/bin/env bash
# One device call (sixty-seventh session, after call3): 1-byte summaries at one warp an entry
# (summarize_warp_bytes). OUT=... bash tools/dev/s67_warp_bytes.sh
#   GPU tests; per-head summaries on against off, runs (seed 1) and random (seed 0); the summary
#   kernel's and the attention kernel's time and DRAM throughput under ncu; head_byte_mask and the
#   shared bool mask against Flex.
set -uo pipefail
timeout 300 python3 -m pytest -q -x tests/gpu/test_summary_bytes_gpu.py tests/gpu/test_dense_mask_summary_gpu.py \
  > "$OUT/gpu-tests.log" 2>&1
tail -2 "$OUT/gpu-tests.log"
P=tools/dev/head_mask_parts.kd
for seed in 1 0; do
  timeout 200 python3 tools/dev/attrs_sweep.py --reps 20 --seed $seed \
    "$P:head_bool:2,16,4096,4096,128:KDSL_TILE_SUMMARY_HEADS=1" \
    "$P:head_bytes_causal:2,16,4096,4096,128:KDSL_TILE_SUMMARY_HEADS=1" \
    "$P:head_bytes_causal:2,16,4096,4096,64:KDSL_TILE_SUMMARY_HEADS=1" \
    "$P:head_bytes:2,16,4096,4096,128:KDSL_TILE_SUMMARY_HEADS=1" > "$OUT/ab-heads-seed$seed.log" 2>&1
  grep -h -A1 "^==" "$OUT"/ab-heads-seed$seed.log | grep -v "^--"
  KDSL_TILE_SUMMARY_HEADS=1 timeout 120 ncu --profile-from-start off --section SpeedOfLight \
    python3 tools/dev/ncu_versus_flex.py --seed=$seed "$P:head_bool:2,16,4096,4096,128" "$P:head_bytes:2,16,4096,4096,128" \
    > "$OUT/ncu-seed$seed.log" 2>&1
  grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput" "$OUT/ncu-seed$seed.log" | head -40
done
KDSL_TILE_SUMMARY_HEADS=1 timeout 150 kdsl bench tools/dev/heldout20.kd --only head_byte_mask --vs flex --reps 10 \
  --seed 0 --shapes B=2,H=16,M=4096,N=4096,D=128 B=2,H=16,M=4096,N=4096,D=64 -o "$OUT/flex" > "$OUT/flex.log" 2>&1
grep -h "|" "$OUT"/flex/*.md | cut -d'|' -f2-11 | tail -3
