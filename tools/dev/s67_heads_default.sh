#!/usr/bin/env bash
# One device call (sixty-seventh session): per-head dense masks summarised by default
# (mask_analysis.HEADS_DEFAULT), a u8 tested against zero read as a bool. OUT=... bash tools/dev/s67_heads_default.sh
#   GPU tests (byte summaries, dense-mask summaries, the warps' byte test); the
#   default against KDSL_TILE_SUMMARY_HEADS=0 on runs (seed 1) and random (seed 0), D=128 / 64;
#   ncu of the summary kernels; the per-head masks against Flex.
set -uo pipefail
timeout 330 python3 -m pytest -q tests/gpu/test_summary_bytes_gpu.py tests/gpu/test_dense_mask_summary_gpu.py \
  tests/gpu/test_stream_nonzero_gpu.py > "$OUT/gpu-tests.log" 2>&1
tail -2 "$OUT/gpu-tests.log"
P=tools/dev/head_mask_parts.kd
for seed in 1 0; do
  timeout 240 python3 tools/dev/attrs_sweep.py --reps 10 --seed $seed \
    "$P:head_bool:2,16,4096,4096,128:KDSL_TILE_SUMMARY_HEADS=0" \
    "$P:head_bool:2,16,4096,4096,64:KDSL_TILE_SUMMARY_HEADS=0" \
    "$P:head_bytes_causal:2,16,4096,4096,128:KDSL_TILE_SUMMARY_HEADS=0" \
    "$P:head_bytes:2,16,4096,4096,128:KDSL_TILE_SUMMARY_HEADS=0" \
    "$P:head_bytes:2,16,4096,4096,64:KDSL_TILE_SUMMARY_HEADS=0" > "$OUT/ab-heads-seed$seed.log" 2>&1
  grep -h -A1 "^==" "$OUT"/ab-heads-seed$seed.log | grep -v "^--" | sed 's/default {.*}://'
done
timeout 100 ncu --profile-from-start off --section SpeedOfLight python3 tools/dev/ncu_versus_flex.py --seed=1 \
  "$P:head_bool:2,16,4096,4096,128" "$P:head_bytes:2,16,4096,4096,128" > "$OUT/ncu-seed1.log" 2>&1
grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput" "$OUT/ncu-seed1.log" | grep -B1 -A1 summary | head -12
timeout 200 kdsl bench tools/dev/head_mask_parts.kd --vs flex --reps 10 --seed 0 \
  --shapes B=2,H=16,M=4096,N=4096,D=128 B=2,H=16,M=4096,N=4096,D=64 -o "$OUT/flex" > "$OUT/flex.log" 2>&1
grep -h "|" "$OUT"/flex/*.md | cut -d'|' -f2-11 | grep -v "^---" | tail -11
