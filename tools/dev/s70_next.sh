#!/usr/bin/env bash
# The next session's device call (after the sixty-ninth): the byte summary's stepped scan (KDSL_SUMMARY_STEPPED,
# attention_summary.cuh; off by default until this runs) for correctness, then timed against the divided one;
# the streamed-mask tests that the sixty-ninth session's call6 cut. OUT=... PART=a|b bash tools/dev/s70_next.sh;
# logs in $OUT/logs.tgz. If the tests pass and the stepped scan is faster everywhere, flip its default.
# Two calls: PART=a (the summary's scan), PART=b (the backward's score-first trial, the streamed-mask tests).
set -uo pipefail
L=$OUT/logs; mkdir -p $L
save() { tar czf $OUT/logs.tgz -C $OUT logs; }
if [ "${PART:-a}" = a ]; then
timeout 120 python3 -m pytest -q -x tests/gpu/test_summary_bytes_gpu.py -k both_byte_scans > $L/scans.log 2>&1
tail -2 $L/scans.log
KDSL_DEFINES="KDSL_SUMMARY_STEPPED=1" timeout 200 python3 -m pytest -q -x tests/gpu/test_summary_bytes_gpu.py \
  tests/gpu/test_dense_mask_summary_gpu.py tests/gpu/test_tile_summary_gpu.py > $L/tests-stepped.log 2>&1
tail -2 $L/tests-stepped.log
save
for spec in "tools/dev/heldout22.kd:label_not_three 0" "tools/dev/head_mask_parts.kd:head_bool 0" \
            "tools/dev/head_mask_parts.kd:head_bool 1" "bench/variants.kd:bool_attn_mask 1"; do
  set -- $spec
  timeout 45 python3 tools/dev/summary_ab.py $1 2,16,4096,4096,128 --variants "default;KDSL_SUMMARY_STEPPED=1" \
    --reps 10 --seed $2 > $L/ab-$(basename $1 .kd)-${1##*:}-s$2.log 2>&1
  echo "$spec"; grep "|" $L/ab-$(basename $1 .kd)-${1##*:}-s$2.log | tail -2
done
save
timeout 80 python3 tools/dev/structured_masks.py --reps 10 --shape 2,16,4096,128 --kinds documents,padded,random \
  --kernels dense_bool --defines "KDSL_SUMMARY_STEPPED=1" > $L/structured.log 2>&1; grep "|" $L/structured.log | tail -6
save
exit 0
fi
# the backward's score-first trial (KDSL_BWD_SCORE_FIRST, attention_bwd_wgmma.cuh element_grads; off by default):
# gradients of scores that load beside masks under it, then backward alone against the default
KDSL_DEFINES="KDSL_BWD_SCORE_FIRST=1" timeout 200 python3 -m pytest -q -x tests/gpu/test_backward_stream_gpu.py \
  tests/gpu/test_backward_gpu.py -k "stream or captured or ring" > $L/tests-score-first.log 2>&1
tail -2 $L/tests-score-first.log
for d in 128 64; do
  timeout 100 python3 tools/dev/backward_ab.py --file tools/dev/heldout22.kd --programs bias_under_keep \
    --shape 2,16,4096,4096,$d --variants "default;-DKDSL_BWD_SCORE_FIRST=1" --reps 10 --seed 0 > $L/sf-d$d.log 2>&1
  echo "bias_under_keep D=$d"; grep -E "^\||regs" $L/sf-d$d.log
done
timeout 100 python3 tools/dev/backward_ab.py --file bench/variants.kd --programs bias_bhqk,learned_relpos \
  --shape 2,16,4096,4096,128 --variants "default;-DKDSL_BWD_SCORE_FIRST=1" --reps 10 --seed 0 > $L/sf-bias.log 2>&1
grep -E "^\||regs" $L/sf-bias.log
save
# held-out 22's two one-sided checks again, with inputs whose comparisons go both ways (kdsl.cases.compared_ranges)
for k in label_not_three level_threshold; do
  timeout 60 kdsl check tools/dev/heldout22.kd --kernel $k --grad --seed 22 > $L/check22-$k.log 2>&1
  grep -i "cases pass\|fail\|note" $L/check22-$k.log | head -4
done
save
timeout 200 python3 -m pytest -q -x tests/gpu/test_dense_mask_summary_gpu.py tests/gpu/test_byte_captures_gpu.py \
  tests/gpu/test_stream_nonzero_gpu.py > $L/tests-stream.log 2>&1; tail -2 $L/tests-stream.log
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
