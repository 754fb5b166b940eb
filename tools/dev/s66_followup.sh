#!/usr/bin/env bash
# Two device calls (sixty-sixth session's follow-up), OUT=... PART=a|b bash tools/dev/s66_followup.sh
#   a: does a shared dense mask whose blocks the summary classifies (laid out in runs: --seed 1 sorts a
#      bool capture along its rows) run faster without its ring? At D=128 the ring forces 2 stages where
#      the plain kernel has 3, and full tiles never read it (bench/NOTES.md, sixty-sixth session): A/B
#      against `stream_capture=null` on structured (seed 1) and random (seed 0) masks; then the GPU
#      numerics fuzz (seed 6661);
#   b: held-out set 21 (written last session, compiled only): `kdsl check`, against Flex.
set -uo pipefail
if [ "${PART:-a}" = a ]; then
  for seed in 1 0; do
    timeout 200 python3 tools/dev/attrs_sweep.py --reps 20 --seed $seed \
      "bench/variants.kd:bool_attn_mask:2,16,4096,4096,128:stream_capture=null" \
      "bench/variants.kd:bool_attn_mask:2,16,4096,4096,64:stream_capture=null" \
      "tools/dev/head_mask_parts.kd:shared_bytes_causal:2,16,4096,4096,128:stream_capture=null" \
      "tools/dev/head_mask_parts.kd:head_bool:2,16,4096,4096,128:stream_capture=null;KDSL_TILE_SUMMARY_HEADS=1" \
      > "$OUT/ab-ring-seed$seed.log" 2>&1
    grep -A3 "^==" "$OUT/ab-ring-seed$seed.log"
  done
  timeout 170 python3 tools/gpu_fuzz.py --minutes 2.5 --seed 6661 --out "$OUT/gpu-fuzz" > "$OUT/gpu-fuzz.log" 2>&1
  tail -8 "$OUT/gpu-fuzz.log"
else
  bash tools/dev/heldout_gpu.sh 21
fi
