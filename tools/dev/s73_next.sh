#!/usr/bin/env bash
# The next session's device calls (after the seventy-second), each within one call's 600 s:
#   OUT=... PART=a|b|...|j bash tools/dev/s73_next.sh; logs in $OUT/logs.tgz.
#   a: the trial KDSL_BWD_SUMMARY_FULL=0 (beside a score that loads, a tile the summary calls full
#      takes the masked path: one path, bias_bool's D=128 backward 12 -> 3 spill instructions): with
#      the summary in both passes (KDSL_SUMMARY_BESIDE_LOADS=1), does the backward on random bits
#      stop losing (x0.63 fwd+bwd last time) and keep the structured masks' gain? bias_bool fwd+bwd
#      (structured_masks.py: on = 1, off = forward, the third column = 1 with the define), then
#      bias_level against Flex under both. Where it wins everywhere: BESIDE_LOADS_DEFAULT = "1"
#      (mask_analysis.py) with the define's default 0, then PART=c's tests.
#   b: the trial KDSL_BWD_WIDE_READS=1 (the wide backward, head dims past 128, prefetches its
#      streamed tensors' step tiles into L2 and evaluates a streamed mask first), backward_ab at
#      D=256 on kernels that stream there; document_mask as the control (no streamed tensor).
#   c: GPU tests of the trials with their switches on, four processes at once (dense-mask summary
#      tests run their kernels with the summary in both passes already; the streamed-mask backward
#      tests at 256; key-mask and mask-corner tests and `kdsl check --grad` under bits and key parts).
#   g: the mask-first default where its builds spill more than without (a survey of the 84 loading-mask
#      backwards at D=128: local memory grew in 14, shrank in 36): backward_ab against -DKDSL_BWD_MASK_FIRST=0
#      on the six worst, and the trial KDSL_BWD_MASK_FIRST_DIVIDES=0 (a mask dividing by data left out:
#      batch_blocks, chunked_runtime); a loss there narrows the rule.
#   h: the trial KDSL_BWD_MASK_BITS=1 (a mask loading rows' values at the query, none at a (query, key)
#      pair, beside a score that loads nothing,
#      evaluated for a thread's 32 elements into one word first: D=128 local memory 40 -> 0 B query_limits,
#      88 -> 48 span_per_query, 72 -> 40 two_level_docs, 56 -> 32 document_mask), and the trial
#      KDSL_BWD_KEY_MASK=1 (a key mask's key part once a step: head_label 72 -> 0 B), backward_ab.
#   d / e: held-out 24 / 25 `kdsl check --grad` on the GPU; f: held-out 26, 27 and 28's; i / j: 26 and
#      27 / 28 against Flex (tools/dev/heldout_gpu.sh).
# Order: a, b, g, h (flip or narrow what the timings say; record the commit per call), c, then d-f, i, j.
# If an H100 is lent, issue 8 first: PART=a bash bench/fp8_done_when.sh, then PART=b.
set -uo pipefail
L=$OUT/logs; mkdir -p $L
save() { tar czf $OUT/logs.tgz -C $OUT logs; }
# PART may name several parts ("a b"); an item is skipped once the call has run DEADLINE seconds.
late() { [ $SECONDS -gt ${DEADLINE:-520} ] && echo "skipped (deadline): $*"; }
for part in ${PART:-a}; do
case $part in
a)
  timeout 300 python3 tools/dev/structured_masks.py --switch KDSL_SUMMARY_BESIDE_LOADS --on 1 --off forward \
    --defines KDSL_BWD_SUMMARY_FULL=0 --kernels bias_bool --kinds documents,padded,random \
    --shape 2,16,4096,128 2,16,4096,64 --backward --reps 5 > $L/summary-full.log 2>&1
  grep "|" $L/summary-full.log; save
  for env in "KDSL_SUMMARY_BESIDE_LOADS=forward" "KDSL_SUMMARY_BESIDE_LOADS=1 KDSL_DEFINES=KDSL_BWD_SUMMARY_FULL=0"; do
    tag=$(echo $env | tr -c 'A-Za-z0-9\n' _)
    env $env timeout 100 kdsl bench tools/dev/heldout23.kd --only bias_level --backward --vs flex --reps 10 --seed 0 \
      --shapes B=2,H=16,M=4096,N=4096,D=128 -o $L/bench-$tag > $L/bench-$tag.log 2>&1
    echo "$env"; grep -h "|" $L/bench-$tag/*.md | cut -d'|' -f2-11 | tail -1
    save
  done ;;
b)
  for spec in "tools/dev/heldout22.kd bias_under_keep" "tools/dev/heldout23.kd bias_level" \
              "tools/dev/heldout25.kd key_gate" "samples/document_mask.kd document_mask"; do
    late $spec && continue
    set -- $spec
    timeout 60 python3 tools/dev/backward_ab.py --file $1 --programs $2 --shape 2,16,4096,4096,256 --seed 0 --reps 10 \
      --variants "default;-DKDSL_BWD_WIDE_READS=1" > $L/wide-$2.log 2>&1
    echo "$spec"; grep "cubin\|^|" $L/wide-$2.log | cut -c1-150
    save
  done ;;
c)
  KDSL_DEFINES="KDSL_BWD_SUMMARY_FULL=0" timeout 300 python3 -m pytest -q tests/gpu/test_dense_mask_summary_gpu.py \
    > $L/tests-summary-full0.log 2>&1 &
  KDSL_DEFINES="KDSL_BWD_WIDE_READS=1" timeout 300 python3 -m pytest -q tests/gpu/test_backward_stream_gpu.py \
    tests/gpu/test_head_dims_gpu.py > $L/tests-wide-reads.log 2>&1 &
  KDSL_DEFINES="KDSL_BWD_MASK_BITS=1 KDSL_BWD_KEY_MASK=1" timeout 300 python3 -m pytest -q \
    tests/gpu/test_key_mask_gpu.py tests/gpu/test_mask_corners_gpu.py > $L/tests-bits-keys.log 2>&1 &
  ( for spec in "samples/document_mask.kd document_mask 1" "tools/dev/heldout10.kd query_limits 10" \
        "tools/dev/heldout23.kd head_label 23" "tools/dev/heldout27.kd two_level_docs 27" \
        "tools/dev/heldout5.kd bool_logic 5" "tools/dev/heldout18.kd span_per_query 18"; do
      late $spec && continue
    set -- $spec
      KDSL_DEFINES="KDSL_BWD_MASK_BITS=1 KDSL_BWD_KEY_MASK=1" timeout 90 kdsl check $1 --kernel $2 --grad --seed $3 \
        > $L/check-$2.log 2>&1
      echo "check $2 (bits, key parts): $(grep -ci fail $L/check-$2.log) fail lines; $(tail -1 $L/check-$2.log)"
    done ) > $L/checks.log 2>&1 &
  wait
  for f in $L/tests-*.log; do echo "$(basename $f): $(tail -1 $f)"; done; cat $L/checks.log; save ;;
g)
  for spec in "heldout3.kd batch_blocks 128" "heldout28.kd chunked_runtime 128" "heldout28.kd chunked_runtime 64" \
              "heldout19.kd two_dense_masks,document_bias 128" "heldout18.kd span_per_query 128" \
              "heldout4.kd chunk_prefill 128" "heldout10.kd query_limits 128" "heldout24.kd per_head_window 128"; do
    late $spec && continue
    set -- $spec
    timeout 70 python3 tools/dev/backward_ab.py --file tools/dev/$1 --programs $2 --shape 2,16,4096,4096,$3 --seed 0 \
      --reps 10 --variants "default;-DKDSL_BWD_MASK_FIRST=0;-DKDSL_BWD_MASK_FIRST_DIVIDES=0" \
      > $L/mask-first-${2%%,*}-d$3.log 2>&1
    echo "$spec"; grep "cubin\|^|" $L/mask-first-${2%%,*}-d$3.log | cut -c1-150
    save
  done ;;
h)
  for spec in "samples/document_mask.kd document_mask 128" "samples/document_mask.kd document_mask 64" \
              "tools/dev/heldout27.kd two_level_docs 128" "tools/dev/heldout18.kd span_per_query 128" \
              "tools/dev/heldout10.kd query_limits 128" "tools/dev/heldout15.kd segment_causal,cross_documents 128" \
"tools/dev/heldout23.kd u8_documents 128" \
              "tools/dev/heldout23.kd head_label,key_importance 128" "tools/dev/heldout25.kd not_stale 128"; do
    late $spec && continue
    set -- $spec
    timeout 80 python3 tools/dev/backward_ab.py --file $1 --programs $2 --shape 2,16,4096,4096,$3 --seed 0 --reps 10 \
      --variants "default;-DKDSL_BWD_MASK_BITS=1;-DKDSL_BWD_KEY_MASK=1" > $L/mask-bits-${2%%,*}-d$3.log 2>&1
    echo "$spec"; grep "cubin\|^|" $L/mask-bits-${2%%,*}-d$3.log | cut -c1-150
    save
  done ;;
k)  # after MASK_BITS / KEY_MASK became defaults: the kernels that did not gain, then the GPU tests, five processes
  for spec in "tools/dev/heldout15.kd segment_causal,cross_documents 128" "tools/dev/heldout5.kd bool_logic 128" \
              "tools/dev/heldout18.kd span_per_query 64"; do
    late $spec && continue
    set -- $spec
    timeout 80 python3 tools/dev/backward_ab.py --file $1 --programs $2 --shape 2,16,4096,4096,$3 --seed 1 --reps 10 \
      --variants="-DKDSL_BWD_MASK_BITS=0;default;-DKDSL_BWD_MASK_BITS=0 -DKDSL_BWD_KEY_MASK=0" > $L/flip-${2%%,*}-d$3.log 2>&1
    echo "$spec"; grep "cubin\|^|" $L/flip-${2%%,*}-d$3.log | cut -c1-150
    save
  done
  python3 -m pytest -q --collect-only tests/gpu/test_backward_gpu.py 2>/dev/null | grep "::" > $L/ids.txt
  split -n l/3 -d $L/ids.txt $L/ids-
  for f in $L/ids-0*; do
    timeout 420 python3 -c "import pytest,sys; sys.exit(pytest.main(['-q','-p','no:cacheprovider']+open('$f').read().splitlines()))" \
      > $L/tests-backward-$(basename $f).log 2>&1 &
  done
  timeout 420 python3 -m pytest -q tests/gpu/test_key_mask_gpu.py tests/gpu/test_mask_corners_gpu.py \
    tests/gpu/test_backward_stream_gpu.py > $L/tests-keys-corners-stream.log 2>&1 &
  ( for spec in "samples/document_mask.kd document_mask 1" "tools/dev/heldout10.kd query_limits 10" \
        "tools/dev/heldout23.kd head_label 23" "tools/dev/heldout27.kd two_level_docs 27" \
        "tools/dev/heldout5.kd bool_logic 5" "tools/dev/heldout18.kd span_per_query 18" \
        "tools/dev/heldout25.kd not_stale 25" "tools/dev/heldout15.kd segment_causal 15"; do
      set -- $spec
      timeout 90 kdsl check $1 --kernel $2 --grad --seed $3 > $L/check-$2.log 2>&1
      echo "check $2: rc $?; $(grep -ci fail $L/check-$2.log) fail lines; $(tail -1 $L/check-$2.log)"
    done ) > $L/checks.log 2>&1 &
  wait
  for f in $L/tests-*.log; do echo "$(basename $f): $(tail -1 $f)"; done; cat $L/checks.log; save ;;
l)  # which part of bool_logic's mask the bits cost (x0.90 in PART=k)
  for name in bool_logic_whole pad_and_odd odd_parity int_logic; do
    late $name && continue
    timeout 60 python3 tools/dev/backward_ab.py --file tools/dev/bits_probe.kd --programs $name --shape 2,16,4096,4096,128 \
      --seed 2 --reps 10 --variants="-DKDSL_BWD_MASK_BITS=0;default" > $L/probe-$name.log 2>&1
    echo "$name"; grep "cubin\|^|" $L/probe-$name.log | cut -c1-150
    save
  done ;;
m)  # held-out 24-28 `kdsl check --grad` on the GPU, five sets at once (they mostly compile)
  for set in 24 25 26 27 28; do
    OUT=$OUT STEP=check bash tools/dev/heldout_gpu.sh tools/dev/heldout$set.kd $set > $L/heldout-check-$set.txt 2>&1 &
  done
  wait
  for set in 24 25 26 27 28; do echo "set $set:"; cat $L/heldout-check-$set.txt; done; save ;;
n)  # after the flips, fwd+bwd against Flex where the bits and the key part apply
  for spec in "samples/document_mask.kd document_mask" "tools/dev/heldout23.kd head_label"; do
    late $spec && continue
    set -- $spec
    timeout 100 kdsl bench $1 --only $2 --backward --vs flex --reps 10 --seed 0 \
      --shapes B=2,H=16,M=4096,N=4096,D=128 -o $L/bench-$2 > $L/bench-$2.log 2>&1
    grep -h "|" $L/bench-$2/*.md | cut -d'|' -f2-11 | tail -1
    save
  done ;;
d) OUT=$OUT STEP=check bash tools/dev/heldout_gpu.sh tools/dev/heldout24.kd 24 ;;
e) OUT=$OUT STEP=check bash tools/dev/heldout_gpu.sh tools/dev/heldout25.kd 25 ;;
f) for set in 26 27 28; do OUT=$OUT STEP=check bash tools/dev/heldout_gpu.sh tools/dev/heldout$set.kd $set; done ;;
i) for set in 26 27; do OUT=$OUT STEP=bench bash tools/dev/heldout_gpu.sh tools/dev/heldout$set.kd $set; done ;;
j) OUT=$OUT STEP=bench bash tools/dev/heldout_gpu.sh tools/dev/heldout28.kd 28 ;;
esac
done
