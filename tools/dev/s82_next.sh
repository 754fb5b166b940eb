#!/usr/bin/env bash
# The next session's device calls (after the eighty-first), each within one call's 600 s:
#   OUT=... PART="a b" [DEADLINE=520] bash tools/dev/s82_next.sh; logs in $OUT/logs.tgz. An item is
#   skipped once the call has run DEADLINE seconds.
#   a: held-out set 39 (eighty-first session, interpreter-checked only): `kdsl check --grad` of all eight; and the
#      GPU test of the backward's splits from its simulated schedule once more.
#   b: set 39 against Flex, forward and fwd+bwd; and the two held-out programs that had no Flex peer before the
#      eighty-first session (heldout25 causal_mean, heldout8 dim_scaled); doc_temperature with its ids now drawn as
#      documents (0.98 against Flex with doc_q drawn as a scattered index).
#   c: the simulated schedule's splits against the rules (KDSL_BWD_SCHEDULE=0) at shapes where the model changes the
#      choice and that have not been timed (host model, 132 SMs): sinks_window 1x8 8192² (1,1) -> (1,3);
#      gqa_block_phase 1x32/8 8192² (1,1) -> (4,1); kv_group_parity 1x8/2 16384² (1,1) -> (2,1) and 1x32/4 4096²
#      (2,1) -> (8,2); and the model taking fewer splits than the rules: renamed_gqa_window 2x16/4 2048² (2,1) -> (1,1).
#   d: every program's FlexAttention peer, forward and fwd+bwd, eager at a small shape, against the reference
#      (tools/dev/flex_peer_sweep.py: the forward passes for all 346 on the CPU; Flex has no CPU backward).
#   e: held-out set 40 (eighty-first session, interpreter-checked): `kdsl check --grad` of all eight; then against
#      Flex forward and fwd+bwd; aligned_chunks' key interval (new: a query block scaled by a size, kv_bounds
#      _magnitude) against its mask per element (-DKDSL_KEY_BOUNDS=0) at cross shapes.
#   f: the backward's mask-bits trial (compiler.mask_bits_trial: a build that spills is built again without the
#      bits, the one with less local memory kept) against the bits always (KDSL_BWD_BITS_TRIAL=0), backward alone,
#      on the kernels where it drops them: lsh_buckets_gqa (GQA 4) and row_threshold at D=128 (184 -> 40 B and
#      168 -> 0 B), lsh_local at D=64 (16 -> 0 B), packed_window at D=128 (64 -> 24 B), where_documents (24 -> 8 B);
#      first `kdsl check --grad` of the four builds it changed outside set 40 (set 40's: part e).
# If an H100 is lent, issue 8 first: PART=a bash bench/fp8_done_when.sh, then PART=b.
set -uo pipefail
source tools/dev/device_steps.sh
CHECK_SEED=82 CHECK_TIMEOUT=90
for part in ${PART:-a}; do
case $part in
a)
  for k in dilation_per_head quadratic_score strided_globals_local causal_image_2d logsig_pair_gate \
      seq_head_temperature docs_bottom_right alibi_window_96; do check tools/dev/heldout39.kd $k; done
  late sched-test || { timeout 120 python3 -m pytest -q tests/gpu/test_backward_gpu.py -k schedule_picks > $L/pytest-schedule.log 2>&1
    echo "schedule picks: $(tail -1 $L/pytest-schedule.log)"; }
  save ;;
b)
  bench h39 tools/dev/heldout39.kd
  bench h39-bwd tools/dev/heldout39.kd --backward
  bench peers tools/dev/heldout25.kd tools/dev/heldout8.kd --only causal_mean,dim_scaled
  bench doc-temp tools/dev/heldout38.kd --only doc_temperature ;;
c)
  ab_at KDSL_BWD_SCHEDULE=0 tools/dev/heldout21.kd sinks_window 1,8,8192,8192,128
  ab_at KDSL_BWD_SCHEDULE=0 tools/dev/heldout33.kd gqa_block_phase 1,32,8192,8192,128,8
  ab_at KDSL_BWD_SCHEDULE=0 tools/dev/heldout37.kd kv_group_parity 1,8,16384,16384,128,2
  ab_at KDSL_BWD_SCHEDULE=0 tools/dev/heldout37.kd kv_group_parity 1,32,4096,4096,128,4
  ab_at KDSL_BWD_SCHEDULE=0 tools/dev/heldout38.kd renamed_gqa_window 2,16,2048,2048,128,4 ;;
d)
  for mode in "" --backward; do
    late sweep$mode || { timeout 250 python3 tools/dev/flex_peer_sweep.py $mode > $L/flex-sweep$mode.log 2>&1
      echo "[flex peer sweep $mode]"; grep -v "warn\|Warning\|SOLUTION\|debug\|This will\|^$\|torch.nn" $L/flex-sweep$mode.log | tail -8; save; }
  done ;;
e)
  for k in lsh_buckets_gqa group_decay row_threshold head_prefix sqrt_distance_window aligned_chunks \
      growing_temperature key_weight_log_f16; do check tools/dev/heldout40.kd $k; done
  bench h40 tools/dev/heldout40.kd
  bench h40-bwd tools/dev/heldout40.kd --backward
  late chunks-ab || { timeout 150 python3 tools/dev/forward_ab.py tools/dev/heldout40.kd --programs aligned_chunks \
      --shape 2,16,1024,4096,128 --variants "default;KDSL_DEFINES=KDSL_KEY_BOUNDS=0" > $L/fwd-ab-chunks.log 2>&1
    echo "[forward ab aligned_chunks 1024 x 4096]"; grep -h "^| [a-z]\|regs" $L/fwd-ab-chunks.log; save; } ;;
f)
  check tools/dev/heldout35.kd lsh_local
  check tools/dev/heldout5.kd bool_logic
  check tools/dev/heldout8.kd where_documents
  check bench/variants.kd packed_window
  ab_at KDSL_BWD_BITS_TRIAL=0 tools/dev/heldout40.kd lsh_buckets_gqa 2,16,4096,4096,128,4
  ab_at KDSL_BWD_BITS_TRIAL=0 tools/dev/heldout40.kd row_threshold 2,16,4096,4096,128
  ab_at KDSL_BWD_BITS_TRIAL=0 tools/dev/heldout35.kd lsh_local 4,16,4096,4096,64
  ab_at KDSL_BWD_BITS_TRIAL=0 bench/variants.kd packed_window 2,16,4096,4096,128
  ab_at KDSL_BWD_BITS_TRIAL=0 tools/dev/heldout8.kd where_documents 2,16,4096,4096,128 ;;
esac
done
