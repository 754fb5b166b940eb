#!/usr/bin/env bash
# Seventy-seventh session: the backward's prepared divisors and item warm (KDSL_BWD_ITEM_WARM),
# within one device call: OUT=... [DEADLINE=520] bash tools/dev/s77_warm.sh; logs in $OUT/logs.tgz.
#   `kdsl check --grad` of kernels whose backward changed (a divisor prepared a step, or the
#   item's divisions warmed), then the backward alone against the source as it was
#   (KDSL_MAGIC_DIVISION=0 KDSL_BWD_ITEM_WARM=0) and against the prepared divisors unwarmed,
#   in turns (tools/dev/backward_ab.py), then held-out 33's last three checks. Run on a trial tree
#   whose backward kernels called Variant::item_warm at each step unless -DKDSL_BWD_ITEM_WARM=0:
#   that did not land (it changed nothing where a divisor is prepared and cost x0.93-0.96 where only
#   the item's divisions were warmed), so on main the third variant is the default's build.
set -uo pipefail
source tools/dev/device_steps.sh
AB_VARIANTS="default;-DKDSL_MAGIC_DIVISION=0 -DKDSL_BWD_ITEM_WARM=0;-DKDSL_BWD_ITEM_WARM=0"
check tools/dev/heldout32.kd head_count_stripes
check tools/dev/divisors.kd head_stride
check tools/dev/divisors.kd runtime_natten
check tools/dev/heldout33.kd gqa_block_phase
check tools/dev/heldout17.kd evicted_cache
save
ab tools/dev/heldout32.kd head_count_stripes,chunk_or_causal,scaled_top_left
ab tools/dev/divisors.kd head_stride,runtime_natten,periodic_head_bias,runtime_chunks
ab tools/dev/heldout31.kd growing_blocks
ab tools/dev/evicted_probe.kd evicted_cache,kept_only
for k in bucket_table_bias chunk_distance_score decay_per_head; do check tools/dev/heldout33.kd $k; done
save
