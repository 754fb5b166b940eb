#!/usr/bin/env bash
# One device call (sixty-fourth session's follow-up): the GPU numerics fuzz over the generator's new
# parts (global tokens by flag beside a window, a bitmap per key-value head: key masks and the item's
# divisions), and the leads' timings against plain causal. OUT=... bash tools/dev/s64_followup.sh
set -uo pipefail
timeout 330 python3 tools/gpu_fuzz.py --minutes 5 --seed 6431 --out "$OUT/gpu-fuzz" > "$OUT/gpu-fuzz.log" 2>&1
tail -8 "$OUT/gpu-fuzz.log"
timeout 200 python3 tools/dev/launch_profile.py tools/dev/heldout18.kd:byte_bias_masked:2,16,4096,4096,128 \
  tools/dev/heldout18.kd:block_bias_2d:2,16,4096,4096,128 tools/dev/heldout18.kd:head_mode_select:2,16,4096,4096,128 \
  tools/dev/heldout18.kd:strict_causal:2,16,4096,4096,128 2>&1 | grep -v Warn | tee "$OUT/leads-profile.log" | grep "=="
