#!/usr/bin/env bash
# The eighty-sixth session's device calls, each within one call's 600 s:
#   OUT=... PART="i" [DEADLINE=520] bash tools/dev/s86_next.sh; logs in $OUT/logs.tgz.
#   i: a work item's divisions in the form NVVM hoists out of the forward's kv loop (divisor.cuh
#      floordiv_invariant, make_divisor by max(|d|, 1)): the forward alone against KDSL_INVARIANT_DIVISION=0
#      on the kernels whose SASS it changed (group_dilation: 14 -> 10 calls of the 64-bit division routine,
#      local 0 -> 40 B), the header's GPU tests, `check --grad` of group_dilation, set 44 against Flex.
#   h: held-out set 46 (tools/dev/heldout46.kd, interpreter-checked): `check --grad` of all eight, then fwd+bwd
#      against Flex.
#   o: (next session) data moving one way along a position bounded at the tile's edges (mask_analysis
#      _monotone_interval: `j <= i + off[b]` and seven more corpus kernels from tile-summary to data-dependent,
#      so no summary kernel, and their backward now ordered): `check --grad` of the nine, the forward and the
#      backward alone against KDSL_MONOTONE_BOUNDS=0.
#   s: (next session) held-out sets 47 and 48 (interpreter-checked): `check --grad` of all sixteen, fwd+bwd against
#      Flex.
#   t: (next session) held-out sets 49 and 50 (interpreter-checked): `check --grad` of all sixteen, fwd+bwd against
#      Flex.
#   u: (next session) held-out set 51 (interpreter-checked): `check --grad` of all eight, fwd+bwd against Flex.
set -uo pipefail
source tools/dev/device_steps.sh
CHECK_SEED=86 CHECK_TIMEOUT=90
fab() {  # file programs B,H,M,N,D: the forward alone, default against KDSL_INVARIANT_DIVISION=0, in turns
  late fab-$2-$3 && return
  timeout 200 python3 tools/dev/forward_ab.py $1 --programs $2 --shape $3 --reps 10 --seed 0 \
    --variants "default;KDSL_DEFINES=KDSL_INVARIANT_DIVISION=0" > $L/fab-$2-${3//,/x}.log 2>&1
  echo "[fab $2 $3] rc $?"; grep "^|.*x[0-9]\|Error" $L/fab-$2-${3//,/x}.log
  save
}
for part in ${PART:-i}; do
case $part in
i)
  check tools/dev/heldout44.kd group_dilation
  fab tools/dev/heldout44.kd group_dilation 2,16,4096,4096,128
  fab tools/dev/heldout44.kd group_dilation 2,16,4096,4096,64
  fab tools/dev/heldout37.kd kv_group_parity 2,16,4096,4096,128
  fab tools/dev/heldout33.kd gqa_block_phase 2,16,4096,4096,128
  fab tools/dev/divisors.kd runtime_natten 2,16,4096,4096,128
  fab tools/dev/heldout22.kd kv_head_keep 2,16,4096,4096,128
  fab tools/dev/heldout13.kd head_key_temperature 2,16,4096,4096,128
  late p-div || { timeout 120 python3 -m pytest -q tests/gpu/test_shared_divisions_gpu.py tests/gpu/test_prepared_divisors_gpu.py \
      > $L/pytest-divisions.log 2>&1; echo "divisions GPU tests: $(tail -1 $L/pytest-divisions.log)"; save; }
  bench h44-bwd tools/dev/heldout44.kd --backward ;;
h)
  for k in ssmax_causal image_text_bidir head_window_width causal_or_local_heads clamped_relbias_gqa \
      query_start_causal sqrt_decay_softcap fixed_sparse; do check tools/dev/heldout46.kd $k; done
  bench h46-bwd tools/dev/heldout46.kd --backward ;;
o)
  for spec in heldout11:cache_fill heldout15:min_limit heldout24:qk_scales heldout25:floored_window \
      heldout28:offset_causal_gqa heldout4:chunk_prefill heldout44:cache_window heldout6:ring_shard heldout47:window_from_start; do
    check tools/dev/${spec%%:*}.kd ${spec##*:}
  done
  for spec in heldout4:chunk_prefill heldout44:cache_window heldout28:offset_causal_gqa heldout47:window_from_start; do
    late fab-${spec##*:} && continue
    timeout 150 python3 tools/dev/forward_ab.py tools/dev/${spec%%:*}.kd --programs ${spec##*:} --shape 2,16,4096,4096,128 \
      --reps 10 --seed 0 --variants "default;KDSL_MONOTONE_BOUNDS=0" > $L/fab-${spec##*:}.log 2>&1
    echo "[fab ${spec##*:}]"; grep "^|.*x[0-9]\|Error" $L/fab-${spec##*:}.log; save
  done
  ab_at KDSL_MONOTONE_BOUNDS=0 tools/dev/heldout4.kd chunk_prefill 2,16,4096,4096,128
  ab_at KDSL_MONOTONE_BOUNDS=0 tools/dev/heldout44.kd cache_window 2,16,4096,4096,128 ;;
s)
  for k in periodic_bias2d window_from_start diagonal_bias prefix_where chunk_and_previous cosine_phase block_table \
      decayed_threshold; do check tools/dev/heldout47.kd $k; done
  for k in bucketed_relbias batch_head_window cache_tail_causal sink_temperature half_anticausal flat_alibi \
      hashed_jitter table_dilation; do check tools/dev/heldout48.kd $k; done
  bench h47-bwd tools/dev/heldout47.kd --backward
  bench h48-bwd tools/dev/heldout48.kd --backward ;;
t)
  for k in double_window strided_distance key_slope_batch half_rate_causal head_block_stripes batch_relbias \
      key_interval odd_keys_halved; do check tools/dev/heldout49.kd $k; done
  for k in periodic_head_window batch_blocks_diag negated_window head0_skips_start nearer_position_bias \
      double_rate_band two_segments sinks_doubled; do check tools/dev/heldout50.kd $k; done
  bench h49-bwd tools/dev/heldout49.kd --backward
  bench h50-bwd tools/dev/heldout50.kd --backward ;;
u)
  for k in near_edges rate_three_halves block_checkerboard segment_distance half_length_window counted_local_heads \
      both_sides_padded parity_causal; do check tools/dev/heldout51.kd $k; done
  bench h51-bwd tools/dev/heldout51.kd --backward ;;
esac
done
