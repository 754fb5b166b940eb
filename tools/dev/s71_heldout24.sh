#!/usr/bin/env bash
# Held-out set 24 (per-head windows and slopes, strided and dilated sparsity, type-pair tables,
# query / key scales, a bottom-right band, soft-capped ALiBi under grouped heads, a key gate) on
# the GPU: `kdsl check --grad`, then forward and fwd+bwd against compiled Flex at B=2 H=16 4096²,
# D=128. OUT=... bash tools/dev/s71_heldout24.sh; logs in $OUT/logs.tgz
set -uo pipefail
L=$OUT/logs; mkdir -p $L
save() { tar czf $OUT/logs.tgz -C $OUT logs; }
for k in per_head_window strided_sparse dilated_2d type_pair_table qk_scales bottom_right_band gqa_softcap_alibi key_gate; do
  timeout 60 kdsl check tools/dev/heldout24.kd --kernel $k --grad --seed 24 > $L/check24-$k.log 2>&1
  grep -i "cases pass\|fail\|note" $L/check24-$k.log | head -3
done
save
for mode in "" "--backward"; do
  timeout 170 kdsl bench tools/dev/heldout24.kd $mode --vs flex --reps 10 --seed 0 \
    --shapes B=2,H=16,M=4096,N=4096,D=128 -o $L/bench24$mode > $L/bench24$mode.log 2>&1
  tail -1 $L/bench24$mode.log; grep -h "|" $L/bench24$mode/*.md | cut -d'|' -f2-11 | tail -9
  save
done
