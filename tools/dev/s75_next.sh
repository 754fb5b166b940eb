#!/usr/bin/env bash
# The next session's device calls (after the seventy-fourth), each within one call's 600 s:
#   OUT=... PART="a b" [DEADLINE=520] bash tools/dev/s75_next.sh; logs in $OUT/logs.tgz. An item is
#   skipped once the call has run DEADLINE seconds.
#   a: tests/gpu/test_mask_floats_gpu.py and held-out set 30 `kdsl check --grad` on the GPU (the float
#      bounds' square and integer-product cases, e46933a / 467ae0e, have not run on a GPU).
#   b: set 30 and tools/dev/float_masks.kd against Flex, forward and fwd+bwd, D=128 (disc_2d ran 0.36x
#      before the square case; grid_disc is the integer disc).
#   c: tools/dev/float_data_bench.py --backward (event times, fwd+bwd against KDSL_MASK_FLOATS=0).
#   d: backward_ab of decay_cutoff, fractional_lookback and log_radius against KDSL_MASK_FLOATS=0 (their
#      backward builds spill 16-40 B with the float predicate, 0 without: sass_survey, seventy-fourth session)
#      and against KDSL_MASK_FLOATS=forward.
# Order: a, b, c, d. If an H100 is lent, issue 8 first: PART=a bash bench/fp8_done_when.sh, then PART=b.
set -uo pipefail
L=$OUT/logs; mkdir -p $L
save() { tar czf $OUT/logs.tgz -C $OUT logs; }
late() { [ $SECONDS -gt ${DEADLINE:-520} ] && echo "skipped (deadline): $*"; }
for part in ${PART:-a}; do
case $part in
a)
  timeout 200 python3 -m pytest -q tests/gpu/test_mask_floats_gpu.py > $L/pytest-mask-floats.log 2>&1
  tail -1 $L/pytest-mask-floats.log
  STEP=check bash tools/dev/heldout_gpu.sh tools/dev/heldout30.kd 30; save ;;
b)
  OUT=$OUT STEP=bench bash tools/dev/heldout_gpu.sh tools/dev/heldout30.kd 30
  late float_masks || OUT=$OUT STEP=bench bash tools/dev/heldout_gpu.sh tools/dev/float_masks.kd 0 ;;
c)
  timeout 200 python3 tools/dev/float_data_bench.py --backward --reps 10 > $L/float-data-bwd.log 2>&1
  tail -3 $L/float-data-bwd.log; save ;;
d)
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
