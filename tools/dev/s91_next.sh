#!/usr/bin/env bash
# The ninety-first session's device calls, each part within one call's 600 s:
#   OUT=... PART="h" [DEADLINE=520] bash tools/dev/s91_next.sh; logs in $OUT/logs.tgz.
#   h: KDSL_FP8_LOAD_BATCH (the producer issues 2 / 4 / 8 stages' loads back to back, so that B's 128-byte
#      pieces of one row reach HBM together) timed in turns against the kernel as it is and an A/A build, on the
#      B-streaming shapes (M = 128 dense, the suite's masked grouping) and two compute-bound controls; then the
#      masked grouping with its store skipped at 3 and 4 stages (what a staging tile in the ring would buy); then
#      the FP8 GPU tests under the best-guess batch (4) for correctness.
#   j: part h's M = 128 A/B again (its first run hung at a batch of all 8 stages), then s89_next.sh's part f.
#   i: the standard suite's FP8 rows with KDSL_DEFINES=$BATCH (set BATCH, e.g. KDSL_FP8_LOAD_BATCH=4), then
#      without it, in one call (the lines of issue 8 against each other).
set -uo pipefail
source tools/dev/device_steps.sh
for part in ${PART:-h}; do
case $part in
h)
  timeout 330 python3 tools/dev/fp8_forms.py --reps 40 \
    --shapes "128x7168x16384;128x4096x7168;128x7168x2048;128x2112x7168;masked:256x4096x7168x4;4096x7168x2048" \
    --form aa=-DKDSL_AA_CONTROL=1 --form b2=-DKDSL_FP8_LOAD_BATCH=2 --form b4=-DKDSL_FP8_LOAD_BATCH=4 \
    --form b8=-DKDSL_FP8_LOAD_BATCH=8 > $L/load-batch.log 2>&1
  echo "forms rc $?"; grep -v "^\s*$" $L/load-batch.log | cut -c1-120; save
  # Would a fourth stage pay on the masked grouping if the staging tile took no room of its own? The store
  # skipped (KDSL_FP8_DEV_SKIP_STORE: wrong results, timing only) at 3 and 4 stages with row stores.
  late masked-stages || { timeout 120 python3 tools/dev/fp8_forms.py --reps 40 --shapes "masked:256x4096x7168x4" \
    --form skip=-DKDSL_FP8_DEV_SKIP_STORE=1 --form b2=-DKDSL_FP8_LOAD_BATCH=2 \
    --variants "skip:store=rows,stages=3;skip:store=rows,stages=4;store=rows,stages=4" > $L/masked-stages.log 2>&1
    echo "masked stages rc $?"; grep -v "^\s*$" $L/masked-stages.log | cut -c1-120; save; }
  late tests-b4 || { KDSL_DEFINES="KDSL_FP8_LOAD_BATCH=4" timeout $((560 - SECONDS)) python3 -m pytest -q \
    -p no:cacheprovider tests/gpu/test_fp8_gpu.py > $L/pytest-fp8-b4.log 2>&1; tail -3 $L/pytest-fp8-b4.log; save; } ;;
j)
  # Part h's first run hung at KDSL_FP8_LOAD_BATCH = STAGES (8 of 8; now clamped to STAGES - 1) and printed
  # nothing: the M = 128 shapes again, then the eighty-ninth session's part f with the time left.
  timeout 240 python3 tools/dev/fp8_forms.py --reps 30 --shapes "128x7168x16384;128x4096x7168;128x7168x2048" \
    --form aa=-DKDSL_AA_CONTROL=1 --form b2=-DKDSL_FP8_LOAD_BATCH=2 --form b4=-DKDSL_FP8_LOAD_BATCH=4 \
    > $L/load-batch-m128.log 2>&1
  echo "forms rc $?"; grep -v "^\s*$" $L/load-batch-m128.log | cut -c1-120; save
  OUT=$OUT/f DEADLINE=$((500 - SECONDS)) PART=f bash tools/dev/s89_next.sh
  cp $OUT/f/logs/* $L/ 2>/dev/null; rm -rf $OUT/f; save ;;
i)
  for d in "${BATCH:-KDSL_FP8_LOAD_BATCH=4}" ""; do
    late suite-$d && continue
    KDSL_DEFINES="$d" timeout 240 python3 -m kdsl.cli bench --suite standard \
      --only fp8_gemm,fp8_grouped_contiguous,fp8_grouped_masked -o $L/suite-${d:-now} > $L/suite-${d:-now}.log 2>&1
    echo "[suite ${d:-now}] rc $?"; grep -E "scaled_mm|grouped|FP8 dense" $L/suite-${d:-now}.log | cut -c1-150; save
  done ;;
esac
done
