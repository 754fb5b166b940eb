#!/usr/bin/env bash
# The eightieth session's device calls, each within one call's 600 s:
#   OUT=... PART="a b" [DEADLINE=520] bash tools/dev/s80_next.sh; logs in $OUT/logs.tgz. An item is
#   skipped once the call has run DEADLINE seconds.
#   a: held-out set 36's `kdsl check --grad` (written this session, interpreter-checked only), and set 35's
#      cos_window (skipped at the deadline last session).
#   b: held-out set 36 against Flex, forward and fwd+bwd.
#   c: divisors of the query position prepared per row (item_divisions.divisors, this session): the
#      GPU test of prepared divisors (two programs more), growing_stride forward and backward alone in
#      turns against KDSL_MAGIC_DIVISION=0 (every division plain), and against Flex.
#   d: after c (the backward ran x0.86 preparing the query's divisor: its rows are keys), the backward
#      prepares a key's divisor instead: the GPU test again, the backward alone against
#      KDSL_MAGIC_DIVISION=0 for growing_stride (now plain both ways) and key_rows (a key's divisors).
#   e: after d (a key's divisors prepared in the backward ran x0.74), the backward prepares the item's only,
#      as before: the GPU test again; the forward of the row programs against KDSL_MAGIC_DIVISION=0; growing_stride
#      fwd+bwd against Flex.
#   f: tests/gpu/test_infinite_scores_gpu.py (-inf scores from data: additive masks, a key's -inf, a capped
#      score with one; written this session); growing_stride's check --grad (its rows of stride 1 now full
#      tiles, mask_analysis) and against Flex, forward and fwd+bwd.
#   g: after f (the wgmma backward's full tiles gave NaN dq for rows whose every score is -inf: backward_lse),
#      the -inf scores test again, and `kdsl check --grad` of causal, softcap and document_mask.
# If an H100 is lent, issue 8 first: PART=a bash bench/fp8_done_when.sh, then PART=b.
set -uo pipefail
source tools/dev/device_steps.sh
CHECK_SEED=80 CHECK_TIMEOUT=90
for part in ${PART:-a}; do
case $part in
a)
  for k in fire_bias kerple_log chunk_lookback growing_stride batch_head_mode sinks_window_globals ring_cache \
      group_place_window; do check tools/dev/heldout36.kd $k; done
  check tools/dev/heldout35.kd cos_window
  save ;;
b)
  bench h36 tools/dev/heldout36.kd
  bench h36-bwd tools/dev/heldout36.kd --backward ;;
c)
  late divisors || { timeout 250 python3 -m pytest -q tests/gpu/test_prepared_divisors_gpu.py > $L/pytest-divisors.log 2>&1
    echo "prepared divisors: $(tail -1 $L/pytest-divisors.log)"; }
  late fwd-ab || { timeout 150 python3 tools/dev/forward_ab.py tools/dev/heldout36.kd --programs growing_stride \
      --shape 2,16,4096,4096,128 --variants "default;KDSL_DEFINES=KDSL_MAGIC_DIVISION=0" > $L/fwd-ab-growing.log 2>&1
    echo "[forward ab]"; grep -h "^| [a-z]\|regs" $L/fwd-ab-growing.log; grep -h -i error $L/fwd-ab-growing.log | tail -2; }
  AB_VARIANTS="default;-DKDSL_MAGIC_DIVISION=0" ab tools/dev/heldout36.kd growing_stride
  bench growing tools/dev/heldout36.kd --only growing_stride
  bench growing-bwd tools/dev/heldout36.kd --only growing_stride --backward ;;
d)
  late divisors || { timeout 250 python3 -m pytest -q tests/gpu/test_prepared_divisors_gpu.py > $L/pytest-divisors.log 2>&1
    echo "prepared divisors: $(tail -1 $L/pytest-divisors.log)"; }
  AB_VARIANTS="default;-DKDSL_MAGIC_DIVISION=0" ab tools/dev/heldout36.kd growing_stride
  AB_VARIANTS="default;-DKDSL_MAGIC_DIVISION=0" ab tools/dev/row_divisors.kd key_rows,row_signed ;;
e)
  late divisors || { timeout 250 python3 -m pytest -q tests/gpu/test_prepared_divisors_gpu.py > $L/pytest-divisors.log 2>&1
    echo "prepared divisors: $(tail -1 $L/pytest-divisors.log)"; }
  late fwd-ab || { timeout 150 python3 tools/dev/forward_ab.py tools/dev/row_divisors.kd --programs row_stride,row_signed,key_rows \
      --shape 2,16,4096,4096,128 --variants "default;KDSL_DEFINES=KDSL_MAGIC_DIVISION=0" > $L/fwd-ab-rows.log 2>&1
    echo "[forward ab]"; grep -h "^| [a-z]\|regs" $L/fwd-ab-rows.log; grep -h -i error $L/fwd-ab-rows.log | tail -2; }
  bench growing-bwd tools/dev/heldout36.kd --only growing_stride --backward ;;
f)
  late infinite || { timeout 300 python3 -m pytest -q tests/gpu/test_infinite_scores_gpu.py > $L/pytest-infinite.log 2>&1
    echo "infinite scores: $(tail -1 $L/pytest-infinite.log)"; grep -h "^FAILED\|^E  " $L/pytest-infinite.log | head -12; save; }
  check tools/dev/heldout36.kd growing_stride
  bench growing tools/dev/heldout36.kd --only growing_stride
  bench growing-bwd tools/dev/heldout36.kd --only growing_stride --backward ;;
g)
  late infinite || { timeout 200 python3 -m pytest -q tests/gpu/test_infinite_scores_gpu.py > $L/pytest-infinite.log 2>&1
    echo "infinite scores: $(tail -1 $L/pytest-infinite.log)"; grep -h "^FAILED" $L/pytest-infinite.log | head -12; save; }
  for k in causal softcap document_mask; do check samples/$k.kd $k; done
  save ;;
esac
done
