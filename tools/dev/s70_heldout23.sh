#!/usr/bin/env bash
# Held-out set 23 (integer captures compared with each other and with constants; scores that load beside masks)
# on the GPU: `kdsl check --grad`, then forward and forward + backward against compiled Flex at B=2 H=16 4096²,
# D=128. OUT=... bash tools/dev/s70_heldout23.sh; logs in $OUT/logs.tgz
set -uo pipefail
L=$OUT/logs; mkdir -p $L
save() { tar czf $OUT/logs.tgz -C $OUT logs; }
for k in key_importance u8_documents prefix_or_causal head_label checkerboard query_temperature kv_head_bias bias_level; do
  timeout 45 kdsl check tools/dev/heldout23.kd --kernel $k --grad --seed 23 > $L/check23-$k.log 2>&1
  grep -i "cases pass\|fail\|note" $L/check23-$k.log | head -3
done
save
for mode in "" "--backward"; do
  timeout 170 kdsl bench tools/dev/heldout23.kd $mode --vs flex --reps 10 --seed 0 \
    --shapes B=2,H=16,M=4096,N=4096,D=128 -o $L/bench23$mode > $L/bench23$mode.log 2>&1
  tail -1 $L/bench23$mode.log; grep -h "|" $L/bench23$mode/*.md | cut -d'|' -f2-11 | tail -9
  save
done
# the backward search keeping its round costs head_label 16 B more local memory at D=128 (80 -> 96): A/B it
timeout 100 python3 tools/dev/backward_ab.py --file tools/dev/heldout23.kd --programs head_label,u8_documents \
  --shape 2,16,4096,4096,128 --variants "default;-DKDSL_BWD_KEEP_ROUND=0" --reps 10 --seed 0 > $L/keep-round.log 2>&1
grep -E "^\||regs" $L/keep-round.log
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
