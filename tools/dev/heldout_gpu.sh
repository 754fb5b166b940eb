#!/usr/bin/env bash
# A held-out set on the GPU: `kdsl check --grad` of each kernel (STEP=check), forward and fwd+bwd
# against compiled Flex at B=2 H=16 4096², D=128 (STEP=bench), or both (the default; may pass one
# call's 600 s).
#   OUT=... [STEP=check|bench] bash tools/dev/heldout_gpu.sh tools/dev/heldout24.kd 24    (file, check seed)
# Logs in $OUT/logs.tgz (the device returns few files).
set -uo pipefail
FILE=$1; SEED=${2:-0}; SET=$(basename $FILE .kd)
L=$OUT/logs; mkdir -p $L
save() { tar czf $OUT/logs.tgz -C $OUT logs; }
STEP=${STEP:-all}
[ $STEP = bench ] || for k in $(sed -n 's/^attention \([A-Za-z_0-9]*\).*/\1/p' $FILE); do
  timeout 60 kdsl check $FILE --kernel $k --grad --seed $SEED > $L/check-$SET-$k.log 2>&1
  grep -i "cases pass\|fail\|note" $L/check-$SET-$k.log | head -3
done
save
[ $STEP = check ] || for mode in "" "--backward"; do
  timeout 130 kdsl bench $FILE $mode --vs flex --reps 10 --seed 0 \
    --shapes B=2,H=16,M=4096,N=4096,D=128 -o $L/bench-$SET$mode > $L/bench-$SET$mode.log 2>&1
  tail -1 $L/bench-$SET$mode.log; grep -h "|" $L/bench-$SET$mode/*.md | cut -d'|' -f2-11 | tail -9
  save
done
