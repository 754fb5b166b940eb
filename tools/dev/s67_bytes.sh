#!/usr/bin/env bash
# One device call (sixty-seventh session): whole-block summaries of 1-byte masks read 16 bytes a
# thread and stopped once their min and max decide the tile predicates (attention_summary.cuh
# summarize_block_bytes; mask_analysis.summary_saturation). OUT=... bash tools/dev/s67_bytes.sh
#   GPU tests of the byte path and the dense-mask summaries;
#   A/B of the byte path against the element path (-DKDSL_SUMMARY_BYTES=0), shared masks and
#   per-head ones (KDSL_TILE_SUMMARY_HEADS=1), runs (seed 1) and random bytes (seed 0);
#   per-head summaries on against off; head_byte_mask against Flex with them on.
set -uo pipefail
timeout 420 python3 -m pytest -q -x tests/gpu/test_summary_bytes_gpu.py tests/gpu/test_dense_mask_summary_gpu.py \
  > "$OUT/gpu-tests.log" 2>&1
tail -3 "$OUT/gpu-tests.log"
P=tools/dev/head_mask_parts.kd
for seed in 1 0; do
  timeout 150 python3 tools/dev/attrs_sweep.py --reps 20 --seed $seed \
    "bench/variants.kd:bool_attn_mask:2,16,4096,4096,128:-DKDSL_SUMMARY_BYTES=0" \
    "$P:shared_bytes_causal:2,16,4096,4096,128:-DKDSL_SUMMARY_BYTES=0" > "$OUT/ab-bytes-shared-seed$seed.log" 2>&1
  KDSL_TILE_SUMMARY_HEADS=1 timeout 200 python3 tools/dev/attrs_sweep.py --reps 20 --seed $seed \
    "$P:head_bool:2,16,4096,4096,128:-DKDSL_SUMMARY_BYTES=0" \
    "$P:head_bytes_causal:2,16,4096,4096,128:-DKDSL_SUMMARY_BYTES=0" > "$OUT/ab-bytes-heads-seed$seed.log" 2>&1
  timeout 250 python3 tools/dev/attrs_sweep.py --reps 20 --seed $seed \
    "$P:head_bool:2,16,4096,4096,128:KDSL_TILE_SUMMARY_HEADS=1" \
    "$P:head_bytes_causal:2,16,4096,4096,128:KDSL_TILE_SUMMARY_HEADS=1" \
    "$P:head_bytes_causal:2,16,4096,4096,64:KDSL_TILE_SUMMARY_HEADS=1" \
    "$P:head_bytes:2,16,4096,4096,128:KDSL_TILE_SUMMARY_HEADS=1" > "$OUT/ab-heads-seed$seed.log" 2>&1
  grep -h -A2 "^==" "$OUT"/ab-*-seed$seed.log
done
KDSL_TILE_SUMMARY_HEADS=1 timeout 200 kdsl bench tools/dev/heldout20.kd --only head_byte_mask --vs flex --reps 10 \
  --seed 0 --shapes B=2,H=16,M=4096,N=4096,D=128 B=2,H=16,M=4096,N=4096,D=64 -o "$OUT/flex" > "$OUT/flex.log" 2>&1
grep "|" "$OUT"/flex/*.md | cut -d'|' -f2-11 | tail -4
