#!/usr/bin/env bash
# The next session's device calls (after the seventieth). OUT=... PART=a|b bash tools/dev/s71_next.sh;
# logs in $OUT/logs.tgz.
#   a: the trial KDSL_SUMMARY_BESIDE_LOADS (mask_analysis.whole_tiles: a whole-block summary beside a
#      score that loads at the query or key): GPU tests of bias_bool (a bias per head beside a bool
#      mask), then on / off / Flex forward and on / off fwd+bwd, on in both passes and in the forward
#      alone (=forward) (tools/dev/structured_masks.py), and
#      held-out 23's bias_level and 22's bias_under_keep against Flex with it on. Flip its default
#      where it wins on structured masks and costs little on random ones.
#   b: held-out set 24 (tools/dev/heldout_gpu.sh).
set -uo pipefail
L=$OUT/logs; mkdir -p $L
save() { tar czf $OUT/logs.tgz -C $OUT logs; }
if [ "${PART:-a}" = a ]; then
timeout 200 python3 -m pytest -q tests/gpu/test_dense_mask_summary_gpu.py -k bias_bool > $L/tests-bias-bool.log 2>&1
tail -2 $L/tests-bias-bool.log
save
timeout 150 python3 tools/dev/structured_masks.py --switch KDSL_SUMMARY_BESIDE_LOADS --kernels bias_bool \
  --kinds documents,padded,band,random --shape 2,16,4096,128 2,16,4096,64 --reps 10 > $L/beside-fwd.log 2>&1
grep "|" $L/beside-fwd.log | tail -8
save
# fwd+bwd: the summary in both passes, then in the forward alone (the backward spills 24-112 B beside it)
for on in 1 forward; do
  timeout 120 python3 tools/dev/structured_masks.py --switch KDSL_SUMMARY_BESIDE_LOADS --on $on --kernels bias_bool \
    --kinds documents,padded,random --shape 2,16,4096,128 --backward --reps 5 > $L/beside-bwd-$on.log 2>&1
  echo "on=$on"; grep "|" $L/beside-bwd-$on.log | tail -3
done
save
for spec in "tools/dev/heldout23.kd bias_level" "tools/dev/heldout22.kd bias_under_keep"; do
  set -- $spec
  for mode in "" "--backward"; do
    KDSL_SUMMARY_BESIDE_LOADS=1 timeout 100 kdsl bench $1 --only $2 $mode --vs flex --reps 10 --seed 0 \
      --shapes B=2,H=16,M=4096,N=4096,D=128 -o $L/bench-$2$mode > $L/bench-$2$mode.log 2>&1
    grep -h "|" $L/bench-$2$mode/*.md | cut -d'|' -f2-11 | tail -1
  done
done
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
exit 0
fi
OUT=$OUT bash tools/dev/heldout_gpu.sh tools/dev/heldout24.kd 24
