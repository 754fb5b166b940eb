#!/usr/bin/env bash
# The ninety-first session's device calls, each part within one call's 600 s:
#   OUT=... PART="k" [DEADLINE=520] bash tools/dev/s91_next.sh; logs in $OUT/logs.tgz.
# (Its parts h / j timed KDSL_FP8_LOAD_BATCH, the producer issuing a batch of stages' loads back to back; it lost
# on every shape and was removed: bench/NOTES.md, ninety-first session.)
#   k: the two training examples whose float64 references ran out of memory (now a head at a time), then the
#      rest of tools/dev/s88_next.sh's part e (held-out sets 61-63: `check --grad`, forward + backward
#      against Flex), and held-out sets 64 and 65 (written in the ninety-first and ninety-second sessions; the CPU interpreter's check passes).
set -uo pipefail
source tools/dev/device_steps.sh
CHECK_SEED=88 CHECK_TIMEOUT=90
for part in ${PART:-k}; do
case $part in
k)
  for ex in document_mask_training attention_sinks; do
    late ex-$ex && continue
    timeout 200 python3 examples/$ex.py > $L/example-$ex.log 2>&1
    echo "[example $ex] rc $?"; tail -3 $L/example-$ex.log; save
  done
  for k in $(grep -o "^attention [a-z0-9_]*" tools/dev/heldout61.kd | cut -d' ' -f2 | tail -n +4); do
    check tools/dev/heldout61.kd $k
  done
  for n in 62 63 64 65; do
    for k in $(grep -o "^attention [a-z0-9_]*" tools/dev/heldout$n.kd | cut -d' ' -f2); do check tools/dev/heldout$n.kd $k; done
  done
  save
  for n in 60 61 62 63; do bench h$n-bwd tools/dev/heldout$n.kd --backward; done ;;
esac
done
