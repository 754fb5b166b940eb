#!/usr/bin/env bash
# The next session's device calls (after the seventy-eighth), each within one call's 600 s:
#   OUT=... PART="a b" [DEADLINE=520] bash tools/dev/s79_next.sh; logs in $OUT/logs.tgz. An item is
#   skipped once the call has run DEADLINE seconds.
#   a: tests/gpu/test_prepared_divisors_gpu.py (its backward now prepared and plain, f3740d7) and
#      held-out set 34's `kdsl check --grad` (never on a GPU).
#      Held-out 12's growing_window, whose tile classes the monotone corners made exact (never run).
#   b: held-out sets 34 and 35 against Flex, forward and fwd+bwd (image_rows_cols' backward spills 24 B;
#      set 35's lsh_local 120 B, axial_causal 8 B, relpos_2d 16 B and its forward 16 B); SAM's
#      decomposed relative position (tools/dev/query_tables.kd: its forward spills 48 B at D=128);
#      growing_window forward and fwd+bwd against Flex, with the corners and without
#      (KDSL_MONOTONE_CORNERS=0: its tile classes as before, 772 / 788 empty tiles, 72 / 84 full).
#   c: the backward's load balance: gqa_block_phase's busy CTAs (128 of 1024 at 2x16x4096², a key
#      block each) walk up to 64 query steps against 32 a SM on average (a host count of its tile
#      classes, seventy-seventh session): the backward alone with the query tiles split 2 and 4 ways
#      (KDSL_BWD_QUERY_SPLITS), beside head_count_stripes and dilated_globals (balanced: a control).
#      And sinks beside a window at long context with few heads (B=1 H=8 16384², W=512): a host model
#      (seventy-eighth session, 0.5 step a CTA's overhead) has key block 0's CTAs walk 256 query steps
#      against ~95 an SM: 37 % of the SMs' time busy unsplit, 77 % at 2 ranges, 99 % at 4; and the
#      trial that picks a split from that count (KDSL_BWD_SPLIT_BY_WORK=1: 3 ranges there).
#   d: held-out set 35's `kdsl check --grad` (seventy-eighth session, never on a GPU).
#   e: the backward of lsh_local (set 35) spills 120 B under the mask bits and none without them
#      (D=128 sm_90a); document_mask 32 B with them, 56 B without: both timed against
#      -DKDSL_BWD_MASK_BITS=0 (local memory did not predict the bits' gain before: span_per_query
#      0 -> 64 B ran x1.06, seventy-third session).
#   f: key bounds through a factor of the item (seventy-ninth session): aligned_cross and scaled_cross
#      `kdsl check --grad`, then the forward against -DKDSL_KEY_BOUNDS=0 (their mask per element, as
#      before) at 4096² and with lengths apart (2048 x 8192, 8192 x 2048).
# Order: a, d, f, b, c, e. If an H100 is lent, issue 8 first: PART=a bash bench/fp8_done_when.sh, then PART=b.
set -uo pipefail
source tools/dev/device_steps.sh
CHECK_SEED=78 CHECK_TIMEOUT=90 AB_VARIANTS="default;KDSL_BWD_QUERY_SPLITS=2;KDSL_BWD_QUERY_SPLITS=4"
for part in ${PART:-a}; do
case $part in
a)
  late prepared || { timeout 250 python3 -m pytest -q tests/gpu/test_prepared_divisors_gpu.py > $L/pytest-divisors.log 2>&1
    echo "prepared divisors: $(tail -1 $L/pytest-divisors.log)"; }
  for k in multi_scale_window offset_sinks_window doc_len_300 anti_causal_softcap group_causal_window image_rows_cols \
      tiered_head_window symmetric_alibi; do check tools/dev/heldout34.kd $k; done
  check tools/dev/heldout12.kd growing_window
  save ;;
d)
  for k in axial_causal clamped_band alternating_direction lsh_local chunk_flat_bias aligned_cross relpos_2d \
      cos_window; do check tools/dev/heldout35.kd $k; done
  save ;;
b)
  bench h34 tools/dev/heldout34.kd
  bench h34-bwd tools/dev/heldout34.kd --backward
  bench h35 tools/dev/heldout35.kd
  bench h35-bwd tools/dev/heldout35.kd --backward
  bench query-tables tools/dev/query_tables.kd
  bench h12-growing tools/dev/heldout12.kd --only growing_window
  KDSL_MONOTONE_CORNERS=0 bench h12-growing-off tools/dev/heldout12.kd --only growing_window
  bench h12-growing-bwd tools/dev/heldout12.kd --only growing_window --backward
  KDSL_MONOTONE_CORNERS=0 bench h12-growing-bwd-off tools/dev/heldout12.kd --only growing_window --backward ;;
c)
  ab tools/dev/heldout33.kd gqa_block_phase
  ab tools/dev/heldout32.kd head_count_stripes,dilated_globals
  late sinks_long || { timeout 200 python3 tools/dev/backward_ab.py --file tools/dev/heldout21.kd --programs sinks_window \
      --shape 1,8,16384,16384,128 --reps 10 --seed 0 --variants="$AB_VARIANTS;KDSL_BWD_SPLIT_BY_WORK=1" > $L/ab-sinks-long.log 2>&1
    echo "[ab sinks_window 1x8x16384²]"; grep "^|\|regs" $L/ab-sinks-long.log; save; } ;;
e)
  AB_VARIANTS="default;-DKDSL_BWD_MASK_BITS=0" ab tools/dev/heldout35.kd lsh_local
  AB_VARIANTS="default;-DKDSL_BWD_MASK_BITS=0" ab samples/document_mask.kd document_mask ;;
f)
  check tools/dev/heldout31.kd scaled_cross
  check tools/dev/heldout35.kd aligned_cross
  for shape in 2,16,4096,4096,128 2,16,2048,8192,128 2,16,8192,2048,128; do
    late fwd-ab-$shape && break
    timeout 150 python3 tools/dev/forward_ab.py tools/dev/heldout35.kd --programs aligned_cross --shape $shape \
      --variants "default;KDSL_DEFINES=KDSL_KEY_BOUNDS=0" > $L/fwd-ab-aligned-$shape.log 2>&1
    timeout 150 python3 tools/dev/forward_ab.py tools/dev/heldout31.kd --programs scaled_cross --shape $shape \
      --variants "default;KDSL_DEFINES=KDSL_KEY_BOUNDS=0" > $L/fwd-ab-scaled-$shape.log 2>&1
    echo "[forward ab $shape]"; grep -h "^| [a-z]" $L/fwd-ab-*-$shape.log; grep -h -i error $L/fwd-ab-*-$shape.log | tail -2
  done
  save ;;
esac
done
