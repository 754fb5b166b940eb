#!/usr/bin/env bash
# The next session's device calls (after the seventy-first), each within one call's 600 s:
#   OUT=... PART=a|b|c|d|e|f|g|h|i bash tools/dev/s72_next.sh; logs in $OUT/logs.tgz.
#   a: GPU tests of what the seventy-first session changed without running it: the backward's L2
#      prefetch of tiles read per element (attention_bwd_stream.cuh, default under a loading mask at
#      head dims above 64) and the forward's summary beside a loading score (the new default): the
#      streamed-mask backward tests, the dense-mask summary tests, backward and streaming tests, and
#      `kdsl check --grad` of the held-out kernels both changes reach.
#   b: those kernels against Flex, forward and fwd+bwd (the ratios NOTES quotes were measured before),
#      and bias_bool's fwd+bwd with the summary in the forward (default) / both passes / neither.
#   c: whether the prefetch narrows the backward's loss beside a summary on random bits (pass_kernels
#      of bias_under_keep, seeds 0 / 1, KDSL_SUMMARY_BESIDE_LOADS=forward / =1); the prefetch at
#      head dim 256 and 96 (backward_ab, KDSL_BWD_PREFETCH=0 against the default).
#   i: the trial KDSL_BWD_MASK_FIRST=1 (a mask that loads evaluated before the bounds decide: sm_90a D=128 builds
#      halve their global loads a step, document_mask 93 -> 47, and spill fewer instructions), backward
#      alone on the data masks that reach it.
#   d / e: held-out 24's / 25's `kdsl check --grad` on the GPU (checked on the interpreter only);
#   f / g: held-out 26's / 27's; h: held-out 26 and 27 against Flex (tools/dev/heldout_gpu.sh).
# Order: a, i (flip KDSL_BWD_MASK_FIRST's default where it wins, then a's tests again), b, c, then d-h.
# If an H100 is lent, issue 8 first: PART=a bash bench/fp8_done_when.sh, then PART=b.
set -uo pipefail
L=$OUT/logs; mkdir -p $L
save() { tar czf $OUT/logs.tgz -C $OUT logs; }
case "${PART:-a}" in
a)
  timeout 200 python3 -m pytest -q tests/gpu/test_backward_stream_gpu.py > $L/tests-bwd-stream.log 2>&1
  tail -2 $L/tests-bwd-stream.log; save
  timeout 150 python3 -m pytest -q tests/gpu/test_dense_mask_summary_gpu.py tests/gpu/test_streaming_gpu.py \
    > $L/tests-summary-streaming.log 2>&1
  tail -2 $L/tests-summary-streaming.log; save
  for spec in "heldout25.kd bias_gate 25" "heldout22.kd bias_under_keep 22" "heldout23.kd bias_level 23" \
              "heldout24.kd key_gate 24" "heldout25.kd not_stale 25"; do
    set -- $spec
    timeout 60 kdsl check tools/dev/$1 --kernel $2 --grad --seed $3 > $L/check-$2.log 2>&1
    echo "$2: $(grep -ci fail $L/check-$2.log) fail lines; $(tail -1 $L/check-$2.log)"
  done
  save
  # a forward summary where there was none (bias beside a loaded mask) under torch.compile too
  timeout 150 python3 -m pytest -q tests/gpu/test_torch_compile_gpu.py > $L/tests-torch-compile.log 2>&1
  tail -2 $L/tests-torch-compile.log; save ;;
b)
  for spec in "heldout25.kd bias_gate" "heldout22.kd bias_under_keep" "heldout23.kd bias_level" "heldout24.kd key_gate"; do
    set -- $spec
    for mode in "" "--backward"; do
      timeout 60 kdsl bench tools/dev/$1 --only $2 $mode --vs flex --reps 10 --seed 0 \
        --shapes B=2,H=16,M=4096,N=4096,D=128 -o $L/bench-$2$mode > $L/bench-$2$mode.log 2>&1
      grep -h "|" $L/bench-$2$mode/*.md | cut -d'|' -f2-11 | tail -1
    done
    save
  done
  for on in 1 0; do
    timeout 110 python3 tools/dev/structured_masks.py --switch KDSL_SUMMARY_BESIDE_LOADS --on forward --off $on \
      --kernels bias_bool --kinds documents,padded,random --shape 2,16,4096,128 --backward --reps 5 \
      > $L/beside-bwd-off$on.log 2>&1
    echo "forward against $on"; grep "|" $L/beside-bwd-off$on.log | tail -3
    save
  done ;;
c)
  for seed in 0 1; do
    timeout 120 python3 tools/dev/pass_kernels.py tools/dev/heldout22.kd:bias_under_keep 2,16,4096,4096,128 --seed $seed \
      --variants "KDSL_SUMMARY_BESIDE_LOADS=forward;KDSL_SUMMARY_BESIDE_LOADS=1" > $L/kernels-s$seed.log 2>&1
    grep "µs a call\|_bwd$" $L/kernels-s$seed.log
    save
  done
  for d in 256 96; do
    timeout 90 python3 tools/dev/backward_ab.py --file tools/dev/heldout22.kd --programs bias_under_keep \
      --shape 2,16,4096,4096,$d --seed 0 --reps 10 --variants "default;-DKDSL_BWD_PREFETCH=0" > $L/prefetch-d$d.log 2>&1
    echo "D=$d"; grep "cubin\|^|" $L/prefetch-d$d.log | cut -c1-150
    save
  done ;;
i)
  for spec in "samples/document_mask.kd document_mask 128" "samples/document_mask.kd document_mask 64" \
              "tools/dev/heldout27.kd two_level_docs 128" "tools/dev/heldout23.kd head_label 128" \
              "tools/dev/heldout23.kd key_importance 128" "tools/dev/heldout25.kd bias_gate 128" \
              "tools/dev/heldout25.kd not_stale 128" "tools/dev/heldout23.kd head_label 64" \
              "tools/dev/heldout24.kd qk_scales 128"; do
    set -- $spec
    timeout 45 python3 tools/dev/backward_ab.py --file $1 --programs $2 --shape 2,16,4096,4096,$3 --seed 0 --reps 10 \
      --variants "default;-DKDSL_BWD_MASK_FIRST=1" > $L/mask-first-$2-d$3.log 2>&1
    echo "$spec"; grep "cubin\|^|" $L/mask-first-$2-d$3.log | cut -c1-150
    save
  done ;;
d) OUT=$OUT STEP=check bash tools/dev/heldout_gpu.sh tools/dev/heldout24.kd 24 ;;
e) OUT=$OUT STEP=check bash tools/dev/heldout_gpu.sh tools/dev/heldout25.kd 25 ;;
f) OUT=$OUT STEP=check bash tools/dev/heldout_gpu.sh tools/dev/heldout26.kd 26 ;;
g) OUT=$OUT STEP=check bash tools/dev/heldout_gpu.sh tools/dev/heldout27.kd 27 ;;
h) for set in 26 27; do OUT=$OUT STEP=bench bash tools/dev/heldout_gpu.sh tools/dev/heldout$set.kd $set; done ;;
esac
