#!/usr/bin/env bash
# The next session's device call (after the sixty-seventh): what per-head summaries by default left
# unmeasured. OUT=... bash tools/dev/s68_next.sh
#   the backward of per-head masks with their summary against none (KDSL_TILE_SUMMARY_HEADS=0): at
#   D=128 it builds at 255 registers with 40-48 bytes of local memory (as shared summaries' do),
#   runs (seed 1) and random (seed 0); decode with a per-head mask, with and without its summary (one more
#   launch a call); the standard suite's shared bool mask, whose summary kernel
#   changed (16-byte reads), against Flex; the summary GPU tests after their helper moved to conftest.
set -uo pipefail
timeout 200 python3 -m pytest -q tests/gpu/test_summary_bytes_gpu.py tests/gpu/test_dense_mask_summary_gpu.py \
  > "$OUT/gpu-tests.log" 2>&1
tail -1 "$OUT/gpu-tests.log"
for seed in 1 0; do
  for d in 128 64; do
    timeout 150 python3 tools/dev/backward_ab.py --file tools/dev/head_mask_parts.kd --programs head_bool,head_bytes_causal \
      --shape 2,16,4096,4096,$d --variants "default;KDSL_TILE_SUMMARY_HEADS=0" --reps 10 --seed $seed \
      > "$OUT/bwd-heads-seed$seed-d$d.log" 2>&1
    tail -6 "$OUT/bwd-heads-seed$seed-d$d.log"
  done
done
# decode with a per-head mask [B, H, 1, N]: the summary is one more launch a call
for seed in 1 0; do
  timeout 120 python3 tools/dev/attrs_sweep.py --reps 20 --seed $seed \
    "tools/dev/head_mask_parts.kd:head_bool:1,16,1,4096,128:KDSL_TILE_SUMMARY_HEADS=0" \
    "tools/dev/head_mask_parts.kd:head_bool:64,16,1,4096,128:KDSL_TILE_SUMMARY_HEADS=0" \
    "tools/dev/head_mask_parts.kd:head_bytes:8,32,1,16384,128:KDSL_TILE_SUMMARY_HEADS=0" \
    > "$OUT/decode-heads-seed$seed.log" 2>&1
  grep -h -A1 "^==" "$OUT/decode-heads-seed$seed.log" | grep -v "^--" | sed 's/default {.*}://'
done
timeout 150 kdsl bench bench/variants.kd --only bool_attn_mask --vs flex --reps 10 --seed 0 \
  --shapes B=4,H=16,M=4096,N=4096,D=128 -o "$OUT/flex" > "$OUT/flex.log" 2>&1
grep -h "|" "$OUT"/flex/*.md | cut -d'|' -f2-11 | tail -2
