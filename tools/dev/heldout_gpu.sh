#!/usr/bin/env bash
# A held-out set on the GPU, OUT=... bash tools/dev/heldout_gpu.sh N: `kdsl check` of every program of
# tools/dev/heldoutN.kd, then each against compiled Flex at B=2 H=16 4096², head dims 128 and 64
# (logs and the bench table under $OUT: checkN.log, benchN/).
set -uo pipefail
n=$1
timeout 220 kdsl check "tools/dev/heldout$n.kd" > "$OUT/check$n.log" 2>&1
grep -i "cases pass\|fail\|all kernels" "$OUT/check$n.log" | head -12
timeout 330 kdsl bench "tools/dev/heldout$n.kd" --vs flex --reps 10 --seed 0 \
  --shapes B=2,H=16,M=4096,N=4096,D=128 B=2,H=16,M=4096,N=4096,D=64 -o "$OUT/bench$n" > "$OUT/bench$n.log" 2>&1
grep "|" "$OUT/bench$n"/*.md | cut -d'|' -f2-11 | tail -18
