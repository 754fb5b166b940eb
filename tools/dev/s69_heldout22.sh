#!/usr/bin/env bash
# Held-out set 22 (dense masks with their backward) on the GPU: `kdsl check --grad`, then forward and
# forward + backward against compiled Flex at B=2 H=16 4096², D=128 (the bench's own k/v heads for
# kv_head_keep). OUT=... bash tools/dev/s69_heldout22.sh; logs in $OUT/logs.tgz
set -uo pipefail
L=$OUT/logs; mkdir -p $L
save() { tar czf $OUT/logs.tgz -C $OUT logs; }  # after each step: a call cut short keeps the rest
timeout 200 kdsl check tools/dev/heldout22.kd --grad --seed 22 > $L/check22.log 2>&1
grep -i "cases pass\|fail\|all kernels" $L/check22.log | head -12
save
for mode in "" "--backward"; do
  timeout 180 kdsl bench tools/dev/heldout22.kd $mode --vs flex --reps 10 --seed 0 \
    --shapes B=2,H=16,M=4096,N=4096,D=128 \
    -o $L/bench22$mode > $L/bench22$mode.log 2>&1
  grep -h "|" $L/bench22$mode/*.md | cut -d'|' -f2-11 | tail -12
  save
done
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
