#!/usr/bin/env bash
# Issue 8's done-when lines in two device calls (each well inside a call's 600 s), from the repo root on the
# GPU machine with .whl/ carried (bench/gpu_session.sh says how). The lines need an H100: the device name is
# printed first.
#   PART=a: the FP8 GPU tests (QGMMA kernels, tile edges, grouped forms, the CUDA-graph capture) and
#           `kdsl check` of every FP8 sample (calc_diff < 1e-3 at M, N, K on block edges and +-1);
#   PART=b: the FP8 rows of the standard suite (dense ratios to `_scaled_mm` with their lowest and median,
#           grouped TFLOPS, host time per eager launch), then memcheck and racecheck over small and ragged
#           FP8 shapes. The SASS line (QGMMA, UTMALDG, no local memory) is tests/test_codegen.py, in CI.
set -uo pipefail
source bench/device_env.sh
case "${PART:-a}" in
  a)
    timeout 420 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fp8_gpu.py tests/gpu/test_fast_launch_gpu.py \
      > "$OUT/fp8-tests.log" 2>&1; echo "pytest rc $?"; tail -2 "$OUT/fp8-tests.log"
    timeout 150 python3 -m kdsl.cli check samples/fp8_*.kd > "$OUT/fp8-check.log" 2>&1; echo "check rc $?"
    grep -E "cases pass|FAIL|all kernels" "$OUT/fp8-check.log" ;;
  b)
    timeout 300 python3 -m kdsl.cli bench --suite standard --only fp8_gemm,fp8_grouped_contiguous,fp8_grouped_masked \
      -o "$OUT/suite" > "$OUT/fp8-suite.log" 2>&1; echo "suite rc $?"
    grep -E "scaled_mm|grouped|FP8 dense|eager|out= given|allocating|operand sets" "$OUT/fp8-suite.log" | cut -c1-170
    timeout 120 compute-sanitizer --tool memcheck --error-exitcode 1 python3 tools/dev/sanitize.py --fp8 \
      > "$OUT/fp8-memcheck.log" 2>&1; echo "memcheck rc $?"; tail -2 "$OUT/fp8-memcheck.log"
    timeout 120 compute-sanitizer --tool racecheck --error-exitcode 1 python3 tools/dev/sanitize.py --fp8 --quick \
      > "$OUT/fp8-racecheck.log" 2>&1; echo "racecheck rc $?"; tail -2 "$OUT/fp8-racecheck.log" ;;
  *) echo "PART must be a or b"; exit 2 ;;
esac
