#!/usr/bin/env bash
# The next session's device calls (after the seventy-third), each within one call's 600 s:
#   OUT=... PART="a b" [DEADLINE=520] bash tools/dev/s74_next.sh; logs in $OUT/logs.tgz. An item is
#   skipped once the call has run DEADLINE seconds.
#   a: held-out set 29 (tools/dev/heldout29.kd) `kdsl check --grad` on the GPU, four kernels a process.
#   b: set 29 against Flex, forward and fwd+bwd, D=128 (tools/dev/heldout_gpu.sh STEP=bench).
#   c: sets 26-28 against Flex (not run in the seventy-third session).
#   d: the backward's mask bits (default since 9379616) where bool classes are compared: bool_logic
#      lost x0.90 / x0.92 with them; set 29's bool_pair_differs (bits: 16 -> 0 B local) and
#      tools/dev/bits_probe.kd's four, backward_ab against -DKDSL_BWD_MASK_BITS=0, then an ncu
#      source-counters pass of bool_logic_whole's backward with and without (where its time goes).
# Order: a, b, d, c. If an H100 is lent, issue 8 first: PART=a bash bench/fp8_done_when.sh, then PART=b.
set -uo pipefail
L=$OUT/logs; mkdir -p $L
save() { tar czf $OUT/logs.tgz -C $OUT logs; }
late() { [ $SECONDS -gt ${DEADLINE:-520} ] && echo "skipped (deadline): $*"; }
for part in ${PART:-a}; do
case $part in
a)
  kernels=$(sed -n 's/^attention \([A-Za-z_0-9]*\).*/\1/p' tools/dev/heldout29.kd)
  set -- $kernels
  for half in "$1 $2 $3 $4" "$5 $6 $7 $8"; do
    ( for k in $half; do
        timeout 120 kdsl check tools/dev/heldout29.kd --kernel $k --grad --seed 29 > $L/check-heldout29-$k.log 2>&1
        echo "$k: rc $?; $(grep -i "cases pass" $L/check-heldout29-$k.log | tr '\n' ' ')"
      done ) > $L/checks-$(echo $half | cut -d' ' -f1).txt 2>&1 &
  done
  wait; cat $L/checks-*.txt; save ;;
b) OUT=$OUT STEP=bench bash tools/dev/heldout_gpu.sh tools/dev/heldout29.kd 29 ;;
c) for set in 26 27 28; do late set $set && continue; OUT=$OUT STEP=bench bash tools/dev/heldout_gpu.sh tools/dev/heldout$set.kd $set; done ;;
d)
  for spec in "tools/dev/heldout29.kd bool_pair_differs" "tools/dev/heldout5.kd bool_logic" \
              "tools/dev/bits_probe.kd bool_logic_whole,pad_and_odd,odd_parity,int_logic"; do
    late $spec && continue
    set -- $spec
    timeout 150 python3 tools/dev/backward_ab.py --file $1 --programs $2 --shape 2,16,4096,4096,128 --seed 3 --reps 10 \
      --variants="-DKDSL_BWD_MASK_BITS=0;default" > $L/bits-${2%%,*}.log 2>&1
    echo "$spec"; grep "cubin\|^|" $L/bits-${2%%,*}.log | cut -c1-150
    save
  done
  for def in "" "KDSL_BWD_MASK_BITS=0"; do
    late ncu $def && continue
    KDSL_DEFINES="$def" timeout 150 ncu --kernel-name regex:bwd --launch-count 1 --section SourceCounters \
      --section WarpStateStats --section SchedulerStats python3 tools/dev/backward_ab.py --file tools/dev/bits_probe.kd \
      --programs bool_logic_whole --shape 2,16,4096,4096,128 --seed 3 --reps 1 --variants default \
      > $L/ncu-bool_logic_whole-${def:-bits}.log 2>&1
    grep -i "stall\|issued\|warp cycles\|eligible" $L/ncu-bool_logic_whole-${def:-bits}.log | head -20
    save
  done ;;
esac
done
