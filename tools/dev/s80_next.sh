#!/usr/bin/env bash
# The eightieth session's device calls, each within one call's 600 s:
#   OUT=... PART="a b" [DEADLINE=520] bash tools/dev/s80_next.sh; logs in $OUT/logs.tgz. An item is
#   skipped once the call has run DEADLINE seconds.
#   a: held-out set 36's `kdsl check --grad` (written this session, interpreter-checked only), and set 35's
#      cos_window (skipped at the deadline last session).
#   b: held-out set 36 against Flex, forward and fwd+bwd.
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
esac
done
