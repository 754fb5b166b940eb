# Steps the one-call device scripts share (tools/dev/s7*_next.sh; sourced, from the repo root on the
# GPU machine): logs under $OUT/logs, tarred into $OUT/logs.tgz after each step (the device returns
# only a few files), and every step skipped once the call has run DEADLINE seconds (default 520).
#   CHECK_SEED, CHECK_TIMEOUT: `kdsl check --grad`'s seed and time limit (77, 60 s)
#   AB_VARIANTS: the variants `ab` times (tools/dev/backward_ab.py --variants)
L=$OUT/logs; mkdir -p $L
save() { tar czf $OUT/logs.tgz -C $OUT logs; }
late() { [ $SECONDS -ge ${DEADLINE:-520} ] && echo "skipped (deadline): $*"; }
# seconds left before the deadline, at least 1 (for `timeout`: `timeout 0` would mean no limit at all)
left() { local n=$(( ${DEADLINE:-520} - SECONDS )); echo $(( n > 1 ? n : 1 )); }
check() {  # file kernel
  late $2 && return
  local log=$L/check-$(basename $1 .kd)-$2.log
  timeout ${CHECK_TIMEOUT:-60} kdsl check $1 --kernel $2 --grad --seed ${CHECK_SEED:-77} > $log 2>&1
  local rc=$?  # (before any other command: a $(...) in the echo below would reset $?)
  echo "$(basename $1 .kd):$2 rc $rc $(grep -i 'cases pass\|fail' $log | tr '\n' ' ' | cut -c1-160)"
  save  # (the device returns only a few loose files: the tarball is what keeps every check's log)
}
bench() {  # name file [args]: against compiled Flex at 2x16x4096², D=128
  late $1 && return
  timeout 200 kdsl bench $2 ${@:3} --vs flex --reps 10 --seed 0 --shapes B=2,H=16,M=4096,N=4096,D=128 -o $L/bench-$1 \
    > $L/bench-$1.log 2>&1
  echo "[$1]"; grep -h "|" $L/bench-$1/*.md | cut -d'|' -f2-11 | tail -9
  save
}
ab() {  # file programs: the backward alone under each of AB_VARIANTS, in turns
  late $2 && return
  timeout 200 python3 tools/dev/backward_ab.py --file $1 --programs $2 --shape 2,16,4096,4096,128 --reps 10 --seed 0 \
    --variants="$AB_VARIANTS" > $L/ab-$(basename $1 .kd).log 2>&1
  echo "[ab $1]"; grep "^|\|regs" $L/ab-$(basename $1 .kd).log
  save
}
ab_at() {  # switch file program B,H,M,N,D[,Hkv]: the backward alone, default against one switch, in turns
  late $3-$4 && return
  timeout 150 python3 tools/dev/backward_ab.py --file $2 --programs $3 --shape $4 --reps 10 --seed 0 \
    --variants="default;$1" > $L/ab-$3-${4//,/x}.log 2>&1
  echo "[ab $3 $4 against $1]"; grep "^|\|regs" $L/ab-$3-${4//,/x}.log
  save
}
