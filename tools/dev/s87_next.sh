#!/usr/bin/env bash
# The eighty-seventh session's work, for a session with a GPU (that session was lent none), each part within
# one call's 600 s:  OUT=... PART="d" [DEADLINE=520] bash tools/dev/s87_next.sh; logs in $OUT/logs.tgz.
# Run tools/dev/s86_next.sh's parts o, s, t and u too (the eighty-sixth session's, still unmeasured).
#   d: tile() prepares an item's divisor once (kdsl::tile_divisor, common.cuh): the forward and the backward
#      alone against KDSL_TILE_DIVISORS=0 on the kernels whose SASS it changed most (group_dilation fwd 4504 ->
#      4376 instructions, local 40 -> 24 B; ring_window and head_count_stripes bwd local 40 -> 0; aligned_chunks
#      fwd 3256 -> 3520 and 6 -> 10 calls of the 64-bit division routine; scaled_top_left bwd D=64 3216 -> 4760),
#      `check --grad` of four of them. Then a constant divisor (no power of two) of a dividend >= 0 divided
#      unsigned (cexpr.py): the forward and backward alone against KDSL_UNSIGNED_DIVISION=0 (which also turns
#      the older per-element unsigned divisions off) on the kernels whose SASS moved most (hashed_jitter,
#      mixed_clamp D=64 fwd: 2984 -> 2824 instructions but local 0 -> 48 B; batch_head_mode D=64 bwd 2728 -> 3688).
#   v: held-out sets 52 and 53 (interpreter-checked): `check --grad` of all sixteen, fwd+bwd against Flex;
#      runtime_grid's remainder by captured width bounded without a tile summary, against KDSL_MONOTONE_BOUNDS=0.
#   w, x, y: held-out sets 54-55, 56-57 and 58-59 (interpreter-checked) the same way.
set -uo pipefail
source tools/dev/device_steps.sh
CHECK_SEED=87 CHECK_TIMEOUT=90
fab() {  # switch file program B,H,M,N,D: the forward alone, default against one switch, in turns
  late fab-$3-$4 && return
  timeout 200 python3 tools/dev/forward_ab.py $2 --programs $3 --shape $4 --reps 10 --seed 0 \
    --variants "default;$1" > $L/fab-$3-${4//,/x}.log 2>&1
  echo "[fab $3 $4 against $1] rc $?"; grep "^|.*x[0-9]\|Error" $L/fab-$3-${4//,/x}.log
  save
}
TD=KDSL_DEFINES=KDSL_TILE_DIVISORS=0
for part in ${PART:-d}; do
case $part in
d)
  late p-div || { timeout 150 python3 -m pytest -q tests/gpu/test_prepared_divisors_gpu.py > $L/pytest-divisors.log 2>&1
    echo "prepared divisors GPU tests: $(tail -1 $L/pytest-divisors.log)"; save; }
  for spec in heldout44:group_dilation heldout53:ring_window heldout32:head_count_stripes heldout40:aligned_chunks; do
    check tools/dev/${spec%%:*}.kd ${spec##*:}
  done
  fab $TD tools/dev/heldout44.kd group_dilation 2,16,4096,4096,128
  fab $TD tools/dev/heldout44.kd group_dilation 2,16,4096,4096,64
  fab $TD tools/dev/heldout40.kd aligned_chunks 2,16,4096,4096,128
  fab $TD tools/dev/divisors.kd runtime_chunks 2,16,4096,4096,128
  fab $TD tools/dev/heldout53.kd ring_window 2,16,4096,4096,128
  ab_at $TD tools/dev/heldout53.kd ring_window 2,16,4096,4096,128
  ab_at $TD tools/dev/heldout32.kd head_count_stripes 2,16,4096,4096,128
  ab_at $TD tools/dev/heldout32.kd scaled_top_left 2,16,4096,4096,64
  ab_at $TD tools/dev/heldout44.kd group_dilation 2,16,4096,4096,128
  for spec in heldout12:mixed_clamp heldout48:hashed_jitter heldout36:batch_head_mode; do
    check tools/dev/${spec%%:*}.kd ${spec##*:}
  done
  UD=KDSL_DEFINES=KDSL_UNSIGNED_DIVISION=0
  fab $UD tools/dev/heldout12.kd mixed_clamp 2,16,4096,4096,64
  fab $UD tools/dev/heldout48.kd hashed_jitter 2,16,4096,4096,128
  fab $UD tools/dev/heldout32.kd bigbird_blocks 2,16,4096,4096,128
  ab_at $UD tools/dev/heldout48.kd hashed_jitter 2,16,4096,4096,128
  ab_at $UD tools/dev/heldout36.kd batch_head_mode 2,16,4096,4096,64
  ab_at $UD tools/dev/row_divisors.kd row_signed 2,16,4096,4096,128 ;;
v)
  for k in t5_log_buckets prefix_bidirectional frame_causal lookback_chunk global_tokens key_log_weights \
      runtime_grid fixed_pattern_causal; do check tools/dev/heldout52.kd $k; done
  for k in ring_window computed_alibi capped_alibi landmark_window segments_with_globals limited_causal \
      head_rate_causal log_ratio_bias; do check tools/dev/heldout53.kd $k; done
  bench h52-bwd tools/dev/heldout52.kd --backward
  bench h53-bwd tools/dev/heldout53.kd --backward
  fab KDSL_MONOTONE_BOUNDS=0 tools/dev/heldout52.kd runtime_grid 2,16,4096,4096,128 ;;
w|x|y)
  sets=$(case $part in w) echo "54 55";; x) echo "56 57";; y) echo "58 59";; esac)
  for n in $sets; do
    for k in $(grep -o "^attention [a-z0-9_]*" tools/dev/heldout$n.kd | cut -d' ' -f2); do check tools/dev/heldout$n.kd $k; done
  done
  for n in $sets; do bench h$n-bwd tools/dev/heldout$n.kd --backward; done ;;
esac
done
