#!/usr/bin/env bash
# The next session's device calls (after the seventy-sixth), each within one call's 600 s:
#   OUT=... PART="a b" [DEADLINE=520] bash tools/dev/s77_next.sh; logs in $OUT/logs.tgz. An item is
#   skipped once the call has run DEADLINE seconds.
#   a: `kdsl check --grad` of what changed untested: held-out 32's bigbird_blocks (block corners, f769078)
#      and the kernels whose tile classes lost an `x == x` (a439071): mixed_heads, head_phases,
#      head_types_dv, hashed_dropout, head_label; the rest of set 32; Hypothesis' generated programs on the
#      GPU (tests/exprgen.py draws divisors of the item's sizes since the seventy-sixth session).
#   b: held-out set 32 against Flex, forward and fwd+bwd (bigbird_blocks was 0.67 forward before f769078);
#      set 33's `kdsl check --grad` (never on a GPU).
#   c: held-out set 33 against Flex, forward and fwd+bwd; tools/dev/divisors.kd and held-out 31 against
#      Flex, fwd+bwd (the divisors of sizes, forward only so far).
# Order: a, b, c. If an H100 is lent, issue 8 first: PART=a bash bench/fp8_done_when.sh, then PART=b.
set -uo pipefail
source tools/dev/device_steps.sh
for part in ${PART:-a}; do
case $part in
a)
  check tools/dev/heldout32.kd bigbird_blocks
  for spec in "heldout mixed_heads" "heldout12 head_phases" "heldout17 head_types_dv" "heldout19 hashed_dropout" \
      "heldout23 head_label"; do set -- $spec; check tools/dev/$1.kd $2; done
  for k in head_count_stripes distance_per_head dilated_globals softcap_batch_window; do check tools/dev/heldout32.kd $k; done
  late generated || { timeout 200 python3 -m pytest -q tests/gpu/test_attention_gpu.py -k generated > $L/pytest-generated.log 2>&1
    echo "generated: $(tail -1 $L/pytest-generated.log)"; }
  save ;;
b)
  bench h32 tools/dev/heldout32.kd
  bench h32-bwd tools/dev/heldout32.kd --backward
  for k in local_global_heads prefix_per_head gqa_block_phase sparse_fixed sinks_head_window bucket_table_bias \
      chunk_distance_score decay_per_head; do check tools/dev/heldout33.kd $k; done; save ;;
c)
  bench h33 tools/dev/heldout33.kd
  bench h33-bwd tools/dev/heldout33.kd --backward
  bench divisors-bwd tools/dev/divisors.kd --backward
  bench h31-bwd tools/dev/heldout31.kd --backward --only growing_blocks,scaled_cross,head_dilation ;;
esac
done
