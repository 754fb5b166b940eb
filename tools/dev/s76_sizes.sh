#!/usr/bin/env bash
# The seventy-sixth session's fourth device call: masks dividing by sizes of the item (passes/int_signs.py:
# `i // (8 * H) == j // (8 * H)`, `j // (16 * (h + 1))`) now get key bounds and skip tiles.
#   OUT=... [DEADLINE=520] bash tools/dev/s76_sizes.sh; logs in $OUT/logs.tgz
#   1. kdsl check --grad of every kernel whose sm_90a source changed (tools/dev/divisors.kd; held-out
#      sets 2, 26 and 31's strided / dilated heads and growing blocks).
#   2. tools/dev/divisors.kd forward against Flex; held-out 31's growing_blocks and head_dilation
#      forward and fwd+bwd.
set -uo pipefail
L=$OUT/logs; mkdir -p $L
save() { tar czf $OUT/logs.tgz -C $OUT logs; }
late() { [ $SECONDS -gt ${DEADLINE:-520} ] && echo "skipped (deadline): $*"; }
for spec in "tools/dev/divisors.kd head_stride" "tools/dev/divisors.kd runtime_natten" \
    "tools/dev/divisors.kd runtime_chunks" "tools/dev/heldout31.kd growing_blocks" \
    "tools/dev/heldout31.kd head_dilation" "tools/dev/heldout2.kd strided_heads" "tools/dev/heldout26.kd head_stride"; do
  set -- $spec
  late $2 && continue
  timeout 60 kdsl check $1 --kernel $2 --grad --seed 77 > $L/check-$(basename $1 .kd)-$2.log 2>&1
  echo "$(basename $1 .kd):$2 rc $? $(grep -i 'cases pass\|fail' $L/check-$(basename $1 .kd)-$2.log | tr '\n' ' ' | cut -c1-200)"
done
save
bench() {  # name, file, extra args
  late $1 && return
  timeout 200 kdsl bench $2 ${@:3} --vs flex --reps 10 --seed 0 --shapes B=2,H=16,M=4096,N=4096,D=128 -o $L/bench-$1 \
    > $L/bench-$1.log 2>&1
  echo "[$1]"; grep -h "|" $L/bench-$1/*.md | cut -d'|' -f2-11 | tail -5
  save
}
bench divisors tools/dev/divisors.kd
bench growing tools/dev/heldout31.kd --only growing_blocks,head_dilation
bench growing-bwd tools/dev/heldout31.kd --only growing_blocks,head_dilation --backward
