#!/usr/bin/env bash
# The next session's device calls (after the seventy-fifth), each within one call's 600 s:
#   OUT=... PART="a b" [DEADLINE=520] bash tools/dev/s76_next.sh; logs in $OUT/logs.tgz. An item is
#   skipped once the call has run DEADLINE seconds.
#   a: GPU tests never run on a GPU: tests/gpu/test_prepared_divisors_gpu.py (kdsl/divisor.cuh on the
#      device, prepared and plain), test_zero_divisors_gpu.py (a data divisor of 0 gives 0),
#      test_mask_floats_gpu.py (the float bounds' square and integer-product cases); held-out set 30's
#      `kdsl check --grad`, and held-out set 31's (never on a GPU).
#   b: tools/dev/divisors.kd forward against Flex, prepared divisors and KDSL_MAGIC_DIVISION=0 (the
#      prepared divisors are untimed: SASS only, seventy-fifth session).
#   c: held-out sets 30 and 31 and tools/dev/float_masks.kd against Flex, forward and fwd+bwd, D=128.
#   d: tools/dev/float_data_bench.py --backward; backward_ab of decay_cutoff / fractional_lookback and
#      log_radius against KDSL_MASK_FLOATS=0 and =forward (their backward builds spill 16-40 B).
# Order: a, b, c, d. If an H100 is lent, issue 8 first: PART=a bash bench/fp8_done_when.sh, then PART=b.
set -uo pipefail
L=$OUT/logs; mkdir -p $L
save() { tar czf $OUT/logs.tgz -C $OUT logs; }
late() { [ $SECONDS -gt ${DEADLINE:-520} ] && echo "skipped (deadline): $*"; }
for part in ${PART:-a}; do
case $part in
a)
  for t in prepared_divisors zero_divisors mask_floats; do
    late $t && continue
    timeout 240 python3 -m pytest -q tests/gpu/test_${t}_gpu.py > $L/pytest-$t.log 2>&1
    echo "$t: $(tail -1 $L/pytest-$t.log)"; save
  done
  late heldout30 || STEP=check bash tools/dev/heldout_gpu.sh tools/dev/heldout30.kd 30
  late heldout31 || STEP=check bash tools/dev/heldout_gpu.sh tools/dev/heldout31.kd 31; save ;;
b)
  for defs in "" "KDSL_MAGIC_DIVISION=0"; do
    KDSL_DEFINES=$defs timeout 250 kdsl bench tools/dev/divisors.kd --vs flex --reps 10 --seed 0 \
      --shapes B=2,H=16,M=4096,N=4096,D=128 -o $L/bench-divisors${defs:+-plain} > $L/bench-divisors${defs:+-plain}.log 2>&1
    echo "[$defs]"; grep -h "|" $L/bench-divisors${defs:+-plain}/*.md | cut -d'|' -f2-11 | tail -5
    save
  done ;;
c)
  OUT=$OUT STEP=bench bash tools/dev/heldout_gpu.sh tools/dev/heldout30.kd 30
  late float_masks || OUT=$OUT STEP=bench bash tools/dev/heldout_gpu.sh tools/dev/float_masks.kd 0
  late heldout31 || OUT=$OUT STEP=bench bash tools/dev/heldout_gpu.sh tools/dev/heldout31.kd 31 ;;
d)
  timeout 200 python3 tools/dev/float_data_bench.py --backward --reps 10 > $L/float-data-bwd.log 2>&1
  tail -3 $L/float-data-bwd.log; save
  for spec in "tools/dev/float_masks.kd decay_cutoff,fractional_lookback" "tools/dev/heldout8.kd log_radius"; do
    late $spec && continue
    set -- $spec
    timeout 200 python3 tools/dev/backward_ab.py --file $1 --programs $2 --shape 2,16,4096,4096,128 --seed 0 \
      --reps 10 --variants="KDSL_MASK_FLOATS=0;KDSL_MASK_FLOATS=forward;default" > $L/ab-${2%%,*}.log 2>&1
    grep "cubin\|^|" $L/ab-${2%%,*}.log | cut -c1-150
    save
  done ;;
esac
done
