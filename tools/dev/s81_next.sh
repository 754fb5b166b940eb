#!/usr/bin/env bash
# The next session's device calls (after the eightieth), each within one call's 600 s:
#   OUT=... PART="a b" [DEADLINE=520] bash tools/dev/s81_next.sh; logs in $OUT/logs.tgz. An item is
#   skipped once the call has run DEADLINE seconds.
#   a: what the eightieth session left unmeasured on a GPU: tests/gpu/test_infinite_scores_gpu.py with its decode
#      shapes (split keys, never run), tests/gpu/test_prepared_divisors_gpu.py (its backward now divides a
#      position's divisor unsigned: floormod_nonneg), and `kdsl check --grad` of the five kernels whose source
#      the unsigned division changed.
#   b: the unsigned division timed in turns against KDSL_UNSIGNED_DIVISION=0 (SASS: growing_stride's backward
#      4,992 -> 4,640 instructions, batch_blocks' local memory 88 -> 40 B, chunked_runtime's 40 -> 24 B):
#      backward alone and forward alone.
#   c: held-out set 37 (eightieth session, interpreter-checked only): `kdsl check --grad` of all eight.
#   d: set 37 against Flex, forward and fwd+bwd (doc_prefix_shared spills 8 B forward, 48 B backward at D=128).
#   e: held-out set 38 (eighty-first session): `kdsl check --grad` of all eight.
#   f: set 38 against Flex, forward and fwd+bwd; then the grouped programs whose k/v head count has a name of its
#      own (set 37's kv_group_parity had no bench row: KeyError 'G', fixed) at grouped, uneven shapes.
#   g: kv_group_parity's backward at B=2 H=12 Hkv=4 3000² D=128 (fwd+bwd 0.88 against Flex, its forward 1.72): the
#      backward alone under head and query splits, and fwd+bwd against Flex at neighbouring shapes.
#   h: the backward's splits from its simulated schedule (runtime/backward_schedule.py) against the counting rules
#      alone (KDSL_BWD_SCHEDULE=0), on the shapes where the model changes the choice.
# If an H100 is lent, issue 8 first: PART=a bash bench/fp8_done_when.sh, then PART=b.
set -uo pipefail
source tools/dev/device_steps.sh
CHECK_SEED=81 CHECK_TIMEOUT=90
for part in ${PART:-a}; do
case $part in
a)
  late infinite || { timeout 200 python3 -m pytest -q tests/gpu/test_infinite_scores_gpu.py > $L/pytest-infinite.log 2>&1
    echo "infinite scores: $(tail -1 $L/pytest-infinite.log)"; grep -h "^FAILED" $L/pytest-infinite.log | head -12; save; }
  late divisors || { timeout 250 python3 -m pytest -q tests/gpu/test_prepared_divisors_gpu.py > $L/pytest-divisors.log 2>&1
    echo "prepared divisors: $(tail -1 $L/pytest-divisors.log)"; save; }
  check tools/dev/heldout28.kd chunked_runtime
  check tools/dev/heldout3.kd batch_blocks
  check tools/dev/heldout36.kd growing_stride
  check tools/dev/row_divisors.kd key_rows
  check tools/dev/row_divisors.kd row_stride
  save ;;
b)
  AB_VARIANTS="default;-DKDSL_UNSIGNED_DIVISION=0" ab tools/dev/heldout36.kd growing_stride
  AB_VARIANTS="default;-DKDSL_UNSIGNED_DIVISION=0" ab tools/dev/heldout3.kd batch_blocks
  AB_VARIANTS="default;-DKDSL_UNSIGNED_DIVISION=0" ab tools/dev/heldout28.kd chunked_runtime
  AB_VARIANTS="default;-DKDSL_UNSIGNED_DIVISION=0" ab tools/dev/row_divisors.kd key_rows
  late fwd-ab || { timeout 150 python3 tools/dev/forward_ab.py tools/dev/row_divisors.kd --programs key_rows \
      --shape 2,16,4096,4096,128 --variants "default;KDSL_DEFINES=KDSL_UNSIGNED_DIVISION=0" > $L/fwd-ab-key-rows.log 2>&1
    echo "[forward ab]"; grep -h "^| [a-z]\|regs" $L/fwd-ab-key-rows.log; }
  save ;;
c)
  for k in periodic_band doc_prefix_shared head_interleaved min_pos_bias query_block_bidir bucket16_table \
      kv_group_parity log_sigmoid_key; do check tools/dev/heldout37.kd $k; done
  save ;;
d)
  bench h37 tools/dev/heldout37.kd
  bench h37-bwd tools/dev/heldout37.kd --backward ;;
e)
  for k in perm_causal renamed_gqa_window row_cap rational_cap chunk_position_decay parity_local doc_temperature \
      head_offset_cross; do check tools/dev/heldout38.kd $k; done
  save ;;
f)
  bench h38 tools/dev/heldout38.kd
  bench h38-bwd tools/dev/heldout38.kd --backward
  for mode in "" --backward; do
    late grouped$mode || { timeout 200 kdsl bench tools/dev/heldout38.kd tools/dev/heldout37.kd \
        --only renamed_gqa_window,kv_group_parity --vs flex --reps 10 --seed 0 $mode \
        --shapes B=2,H=12,Hkv=4,M=3000,N=3000,D=128,Dv=64 B=1,H=16,Hkv=2,M=1000,N=5000,D=64 \
        -o $L/bench-grouped$mode > $L/bench-grouped$mode.log 2>&1
      echo "[grouped$mode]"; grep -h "|" $L/bench-grouped$mode/*.md | cut -d'|' -f2-11 | tail -4; save; }
  done ;;
g)
  late g-ab || { timeout 200 python3 tools/dev/backward_ab.py --file tools/dev/heldout37.kd --programs kv_group_parity \
      --shape 2,12,3000,3000,128,4 --reps 10 --seed 0 \
      --variants="default;KDSL_BWD_HEAD_SPLITS=3;KDSL_BWD_QUERY_SPLITS=2;KDSL_BWD_SPLIT_BY_WORK=1" > $L/ab-g.log 2>&1
    echo "[ab kv_group_parity]"; grep "^|\|regs" $L/ab-g.log; save; }
  late g-bench || { timeout 300 kdsl bench tools/dev/heldout37.kd bench/variants.kd --only kv_group_parity,gqa_causal \
      --vs flex --reps 10 --seed 0 --backward \
      --shapes B=2,H=12,Hkv=4,M=3000,N=3000,D=128 B=2,H=12,Hkv=4,M=4096,N=4096,D=128 B=2,H=12,M=3000,N=3000,D=128 \
      -o $L/bench-g > $L/bench-g.log 2>&1
    echo "[g fwd+bwd]"; grep -h "|" $L/bench-g/*.md | cut -d'|' -f2-11 | tail -6; save; } ;;
h)
  ab_at KDSL_BWD_SCHEDULE=0 tools/dev/heldout37.kd kv_group_parity 2,12,3000,3000,128,4
  ab_at KDSL_BWD_SCHEDULE=0 tools/dev/heldout33.kd gqa_block_phase 2,16,4096,4096,128,4
  ab_at KDSL_BWD_SCHEDULE=0 tools/dev/heldout21.kd sinks_window 1,8,16384,16384,128
  ab_at KDSL_BWD_SCHEDULE=0 tools/dev/heldout37.kd kv_group_parity 2,12,4096,4096,128,4
  ab_at KDSL_BWD_SCHEDULE=0 bench/variants.kd gqa_causal 2,12,3000,3000,128,4 ;;
esac
done
