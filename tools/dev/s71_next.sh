#!/usr/bin/env bash
# The next session's device calls (after the seventieth), each within one call's 600 s:
#   OUT=... PART=a|b|c|d|e bash tools/dev/s71_next.sh; logs in $OUT/logs.tgz.
#   a: the trial KDSL_SUMMARY_BESIDE_LOADS (mask_analysis.whole_tiles: a whole-block summary beside a
#      score that loads at the query or key): GPU tests of bias_bool (a bias per head beside a bool
#      mask); on / off / Flex forward; on / off fwd+bwd, on in both passes and in the forward alone
#      (=forward) (tools/dev/structured_masks.py).
#   b: held-out 23's bias_level and 22's bias_under_keep against Flex with it on, and with / without it in
#      one process (tools/dev/attrs_sweep.py); held-out 25's D=64 forwards that spill, against other
#      schedules. Flip BESIDE_LOADS_DEFAULT where it wins on structured masks and costs little on random.
#   c: held-out sets 24 and 25 against Flex; d / e: their GPU checks (tools/dev/heldout_gpu.sh).
#   f: (after calls 1-3 flipped the switch's default to =forward) where bias_under_keep's fwd+bwd time
#      goes with it =0 / =forward / =1 (tools/dev/pass_kernels.py; random bits and runs), and bias_gate's
#      and bias_level's against Flex; `kdsl check --grad` of the kernels the flip changed.
#   g: the backward beside a summary (call4: its kernel 4276 / 2459 µs on random bits): the trial
#      KDSL_BWD_ONE_PATH=1 (full tiles take the masked copy), backward alone (tools/dev/backward_ab.py).
#      (g's and h's trial switches were removed after they ran: bench/NOTES.md, seventy-first session)
#   h: (call5: D=64 lost x0.72 without spills: not the code) the backward's head groups under a summary
#      (geometry.attention_head_group reads_data: at least half the SMs' heads) against groups by L2
#      alone (KDSL_BWD_MIX_HEADS=0), on bias_under_keep with the summary and the masks that had it.
#   i: the trial KDSL_BWD_PREFETCH=1 (the backward asks the step tiles of tensors it reads per element,
#      a score's bias, into L2 one step ahead: attention_bwd_stream.cuh), backward alone; bool_attn_mask
#      (its mask copied, nothing to prefetch) must build the same cubin.
set -uo pipefail
L=$OUT/logs; mkdir -p $L
save() { tar czf $OUT/logs.tgz -C $OUT logs; }
case "${PART:-a}" in
a)
  timeout 180 python3 -m pytest -q tests/gpu/test_dense_mask_summary_gpu.py -k bias_bool > $L/tests-bias-bool.log 2>&1
  tail -2 $L/tests-bias-bool.log
  save
  timeout 170 python3 tools/dev/structured_masks.py --switch KDSL_SUMMARY_BESIDE_LOADS --kernels bias_bool \
    --kinds documents,padded,band,random --shape 2,16,4096,128 2,16,4096,64 --reps 10 > $L/beside-fwd.log 2>&1
  grep "|" $L/beside-fwd.log | tail -8
  save
  # fwd+bwd: the summary in both passes, then in the forward alone (the backward spills 24-112 B beside it)
  for on in 1 forward; do
    timeout 110 python3 tools/dev/structured_masks.py --switch KDSL_SUMMARY_BESIDE_LOADS --on $on --kernels bias_bool \
      --kinds documents,padded,random --shape 2,16,4096,128 --backward --reps 5 > $L/beside-bwd-$on.log 2>&1
    echo "on=$on"; grep "|" $L/beside-bwd-$on.log | tail -3
    save
  done ;;
b)
  for spec in "tools/dev/heldout23.kd bias_level" "tools/dev/heldout22.kd bias_under_keep"; do
    set -- $spec
    for mode in "" "--backward"; do
      KDSL_SUMMARY_BESIDE_LOADS=1 timeout 80 kdsl bench $1 --only $2 $mode --vs flex --reps 10 --seed 0 \
        --shapes B=2,H=16,M=4096,N=4096,D=128 -o $L/bench-$2$mode > $L/bench-$2$mode.log 2>&1
      grep -h "|" $L/bench-$2$mode/*.md | cut -d'|' -f2-11 | tail -1
    done
  done
  save
  # the same two forwards with and without it, one process (seed 0: bias_level's lvl sorted along keys,
  # bias_under_keep's bits random; seed 1: both sorted)
  for seed in 0 1; do
    timeout 70 python3 tools/dev/attrs_sweep.py tools/dev/heldout23.kd:bias_level:2,16,4096,4096,128 \
      tools/dev/heldout22.kd:bias_under_keep:2,16,4096,4096,128 --attrs "KDSL_SUMMARY_BESIDE_LOADS=1" --reps 20 \
      --seed $seed > $L/beside-ab-s$seed.log 2>&1
    echo "seed $seed"; grep "|" $L/beside-ab-s$seed.log | tail -4
  done
  save
  # held-out 25's two D=64 forwards that spill at 3 consumers (softplus_gate 32 B in its loop, floored_window
  # 16 B in the producer): the built schedule against 2 consumers and narrower kv tiles, one process
  timeout 110 python3 tools/dev/attrs_sweep.py tools/dev/heldout25.kd:softplus_gate:2,16,4096,4096,64 \
    tools/dev/heldout25.kd:floored_window:2,16,4096,4096,64 --attrs "consumers=2;tile_n=96;tile_n=64" --reps 20 \
    > $L/spill-d64.log 2>&1
  grep "|" $L/spill-d64.log | tail -8
  save ;;
c) for set in 24 25; do OUT=$OUT STEP=bench bash tools/dev/heldout_gpu.sh tools/dev/heldout$set.kd $set; done ;;
d) OUT=$OUT STEP=check bash tools/dev/heldout_gpu.sh tools/dev/heldout24.kd 24 ;;
e) OUT=$OUT STEP=check bash tools/dev/heldout_gpu.sh tools/dev/heldout25.kd 25 ;;
f)
  for seed in 0 1; do
    timeout 120 python3 tools/dev/pass_kernels.py tools/dev/heldout22.kd:bias_under_keep 2,16,4096,4096,128 --seed $seed \
      --variants "KDSL_SUMMARY_BESIDE_LOADS=0;KDSL_SUMMARY_BESIDE_LOADS=forward;KDSL_SUMMARY_BESIDE_LOADS=1" \
      > $L/kernels-bias_under_keep-s$seed.log 2>&1
    grep "µs a call" $L/kernels-bias_under_keep-s$seed.log
    save
  done
  for spec in heldout25.kd:bias_gate heldout23.kd:bias_level; do
    timeout 90 python3 tools/dev/pass_kernels.py tools/dev/$spec 2,16,4096,4096,128 > $L/kernels-${spec#*:}.log 2>&1
    head -8 $L/kernels-${spec#*:}.log | cut -c1-90
  done
  save
  for spec in "heldout22.kd bias_under_keep 22" "heldout23.kd bias_level 23" "heldout24.kd key_gate 24"; do
    set -- $spec
    timeout 80 kdsl check tools/dev/$1 --kernel $2 --grad --seed $3 > $L/check-$2.log 2>&1
    echo "$2: $(grep -ci fail $L/check-$2.log) fail lines"; tail -2 $L/check-$2.log
  done
  save ;;
g)
  for spec in "heldout22.kd bias_under_keep 128 0" "heldout22.kd bias_under_keep 128 1" "heldout23.kd bias_level 128 0" \
              "heldout22.kd bias_under_keep 64 0"; do
    set -- $spec
    timeout 130 python3 tools/dev/backward_ab.py --file tools/dev/$1 --programs $2 --shape 2,16,4096,4096,$3 --seed $4 \
      --reps 10 --variants "KDSL_SUMMARY_BESIDE_LOADS=0;KDSL_SUMMARY_BESIDE_LOADS=1;KDSL_SUMMARY_BESIDE_LOADS=1 -DKDSL_BWD_ONE_PATH=1" \
      > $L/one-path-$2-d$3-s$4.log 2>&1
    echo "$spec"; tail -5 $L/one-path-$2-d$3-s$4.log
    save
  done ;;
h)
  B=2,16,4096,4096
  for spec in "heldout22.kd bias_under_keep 128 0" "heldout22.kd bias_under_keep 128 1" "heldout22.kd bias_under_keep 64 0"; do
    set -- $spec
    timeout 100 python3 tools/dev/backward_ab.py --file tools/dev/$1 --programs $2 --shape $B,$3 --seed $4 --reps 10 \
      --variants "KDSL_SUMMARY_BESIDE_LOADS=0;KDSL_SUMMARY_BESIDE_LOADS=1;KDSL_SUMMARY_BESIDE_LOADS=1 KDSL_BWD_MIX_HEADS=0" \
      > $L/mix-$2-d$3-s$4.log 2>&1
    echo "$spec"; grep "^|" $L/mix-$2-d$3-s$4.log
    save
  done
  for spec in "heldout23.kd head_label 128 0" "heldout23.kd key_importance 128 0" "heldout23.kd u8_documents 128 0" \
              "heldout23.kd bias_level 128 0" "heldout22.kd label_not_three 128 0" "document_mask.kd document_mask 128 0" \
              "document_mask.kd document_mask 64 0"; do
    set -- $spec
    f=tools/dev/$1; [ -f $f ] || f=samples/$1
    timeout 70 python3 tools/dev/backward_ab.py --file $f --programs $2 --shape $B,$3 --seed $4 --reps 10 \
      --variants "default;KDSL_BWD_MIX_HEADS=0" > $L/mix-$2-d$3-s$4.log 2>&1
    echo "$spec"; grep "^|" $L/mix-$2-d$3-s$4.log
    save
  done ;;
i)
  for spec in "bench/variants.kd bias_bhqk 128 0" "bench/variants.kd bias_qk 128 0" "tools/dev/heldout22.kd bias_under_keep 128 0" \
              "tools/dev/heldout22.kd bias_under_keep 64 0" "tools/dev/heldout25.kd bias_gate 128 0" \
              "tools/dev/heldout23.kd bias_level 128 0" "bench/variants.kd bias_bhqk 64 0" "bench/variants.kd bool_attn_mask 128 0"; do
    set -- $spec
    timeout 60 python3 tools/dev/backward_ab.py --file $1 --programs $2 --shape 2,16,4096,4096,$3 --seed $4 --reps 10 \
      --variants "default;-DKDSL_BWD_PREFETCH=1" > $L/prefetch-$2-d$3.log 2>&1
    echo "$spec"; grep "cubin\|^|" $L/prefetch-$2-d$3.log | cut -c1-150
    save
  done ;;
esac
