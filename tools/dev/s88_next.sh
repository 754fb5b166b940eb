#!/usr/bin/env bash
# The eighty-eighth session's work, for a session with a GPU (that session was lent none), each part within
# one call's 600 s:  OUT=... PART="e" [DEADLINE=520] bash tools/dev/s88_next.sh; logs in $OUT/logs.tgz.
# Run tools/dev/s87_next.sh's parts d, v, w, x, y and s86_next.sh's o, s, t, u too (still unmeasured).
#   e: examples/ on the GPU (their GPU branches have never run: the check at full size and the timing against
#      Flex / torch._scaled_mm), then held-out sets 60 and 62 (helper functions) and 61 (unequal lengths): `check
#      --grad` of all twenty-four, forward + backward against Flex.
set -uo pipefail
source tools/dev/device_steps.sh
CHECK_SEED=88 CHECK_TIMEOUT=90
for part in ${PART:-e}; do
case $part in
e)
  for ex in softcap_alibi document_mask_training decode_with_cache attention_sinks fp8_gemm; do
    late ex-$ex && continue
    timeout 150 python3 examples/$ex.py > $L/example-$ex.log 2>&1
    echo "[example $ex] rc $?"; tail -3 $L/example-$ex.log; save
  done
  for n in 60 61 62 63; do
    for k in $(grep -o "^attention [a-z0-9_]*" tools/dev/heldout$n.kd | cut -d' ' -f2); do check tools/dev/heldout$n.kd $k; done
  done
  for n in 60 61 62 63; do bench h$n-bwd tools/dev/heldout$n.kd --backward; done ;;
esac
done
