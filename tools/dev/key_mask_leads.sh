#!/usr/bin/env bash
# One device call (sixty-third session's leads): held-out set seventeen checked and against Flex, and the
# key mask on the 112- and 80-key tiles of head dims 192 and 256 (tests/gpu/test_key_mask_gpu.py), which
# must pass before tiling.KEY_MASK_DEFAULT_TILES takes them. OUT=... bash tools/dev/key_mask_leads.sh
set -uo pipefail
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_key_mask_gpu.py -k wide_head_dims 2>&1 \
  | tee "$OUT/pytest-wide.log" | tail -3
timeout 120 python3 -m kdsl.cli check tools/dev/heldout17.kd --trials 2 2>&1 | tee "$OUT/heldout17-check.log" \
  | grep -E "cases|rror" | grep -v " pass$"
timeout 280 python3 -m kdsl.cli bench tools/dev/heldout17.kd --vs flex --reps 10 \
  --shapes B=2,H=16,M=4096,N=4096,D=128 B=2,H=16,M=4096,N=4096,D=64 -o "$OUT/h17" > "$OUT/heldout17-bench.log" \
  2> "$OUT/heldout17-bench.err"; echo "bench rc $?"
grep "^| [a-z]" "$OUT/heldout17-bench.log" | awk -F'|' '{print $2,$3,$4,$5,$9,$11}' | cut -c1-150
