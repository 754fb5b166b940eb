#!/usr/bin/env bash
# One device call: the two warpgroup leads of bench/NOTES.md's sixty-first session, at D=64,
# B=2 H=16 4096², each against the default in the same process (attrs_sweep, in turns):
#  - scores that read data per query row only (hoisted loads), kept at two warpgroups by the
#    tall hint: three (consumers=3);
#  - offset tables beside three warpgroups, which spill 8-16 B (periodic_bias, odd_far; softplus_distance
#    builds without a spill, the control): two (consumers=2).
# Run from the repo root on the GPU machine with the lark wheel carried in .whl/. Logs under $OUT.
set -uo pipefail
source bench/device_env.sh
S="2,16,4096,4096,64"
ROWS="bench/variants.kd:gated_rows bench/variants.kd:temperature_padding tools/dev/heldout10.kd:query_limits
 tools/dev/heldout12.kd:head_query_scale tools/dev/heldout13.kd:query_flag_scale tools/dev/heldout3.kd:local_boost
 tools/dev/heldout8.kd:shifted_edges"
TABLES="bench/variants.kd:periodic_bias tools/dev/heldout13.kd:odd_far tools/dev/heldout9.kd:softplus_distance"
CASES=""
for c in $ROWS; do CASES="$CASES $c:$S:consumers=3"; done
for c in $TABLES; do CASES="$CASES $c:$S:consumers=2"; done
# shellcheck disable=SC2086
timeout "${SWEEP_TIMEOUT:-500}" python3 tools/dev/attrs_sweep.py $CASES --reps 20 2>&1 | tee "$OUT/warpgroup-leads.log" \
  | grep -E "==|x[0-9]|Error" | cut -c1-150
