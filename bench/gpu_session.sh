#!/usr/bin/env bash
# One device call: install, GPU tests, benchmark; the benchmark's table prints last.
# Run from the repo root on the GPU machine with the lark and pyelftools wheels carried in .whl/
# (python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl lark==1.3.1 pyelftools==0.32).
set -uo pipefail
source bench/device_env.sh
# All GPU tests take over a device call's 10-minute limit: TESTS_PART=a, b, g, c, d, e, f, h or i runs one part
# (together every file under tests/gpu; a ~4 minutes cold on an H100; b and g were one part until it
# outgrew a call: the ninety-third session's ran 520 s on an H100 without finishing; c and d the
# backward's shapes, split by PYTEST_K: on an H200 ~1.5 and ~6 minutes cold before c took the
# query-split tests from d, 112 and 178 tests now); e the generated variants (tests/variantgen.py);
# f the files of the later score and mask forms (key tables, unions of key intervals, dense-mask
# summaries, float expressions); h and i the files written since for single features (h: the
# backward's order and streamed masks, infinite scores, summary bytes, streamed nonzero tests, key
# values; i: key masks, mask corners, float masks, prepared, shared and zero divisors: until the
# ninety-third session they ran only in the sessions that wrote them; tests/test_bench_cpu.py checks
# that every file is in a part); PYTEST_ARGS any set. Each part's pytest output goes to its own
# $OUT/pytest-PART.log, with the slowest tests' times (for splitting a part that outgrows a call).
BACKWARD_C="1x2x2x1x1x64x64 or 2x4x2x127x129x128x128 or 1x4x4x200x333x64x64 or 1x4x2x190x250x96x64 or query_tiles_split"
case "${TESTS_PART:-}" in
  a) PYTEST_ARGS=${PYTEST_ARGS:-"tests/gpu/test_attention_gpu.py tests/gpu/test_variants_gpu.py tests/gpu/test_interpreter_parity_gpu.py tests/gpu/test_decode_gpu.py tests/gpu/test_build_gpu.py tests/gpu/test_head_dims_gpu.py"} ;;
  b) PYTEST_ARGS=${PYTEST_ARGS:-"tests/gpu/test_slope_step_gpu.py tests/gpu/test_checker_gpu.py tests/gpu/test_fp8_gpu.py"} ;;
  g) PYTEST_ARGS=${PYTEST_ARGS:-"tests/gpu/test_torch_compile_gpu.py tests/gpu/test_tile_summary_gpu.py tests/gpu/test_streaming_gpu.py tests/gpu/test_row_sum_gpu.py tests/gpu/test_launch_edges_gpu.py tests/gpu/test_byte_captures_gpu.py tests/gpu/test_offset_table_gpu.py tests/gpu/test_fast_launch_gpu.py"} ;;
  c) PYTEST_ARGS=${PYTEST_ARGS:-"tests/gpu/test_backward_gpu.py"}
     PYTEST_K=${PYTEST_K:-"$BACKWARD_C"} ;;
  d) PYTEST_ARGS=${PYTEST_ARGS:-"tests/gpu/test_backward_gpu.py"}
     PYTEST_K=${PYTEST_K:-"not ($BACKWARD_C)"} ;;
  e) PYTEST_ARGS=${PYTEST_ARGS:-"tests/gpu/test_generated_gpu.py"} ;;
  f) PYTEST_ARGS=${PYTEST_ARGS:-"tests/gpu/test_key_table_gpu.py tests/gpu/test_key_unions_gpu.py tests/gpu/test_dense_mask_summary_gpu.py tests/gpu/test_float_expressions_gpu.py"} ;;
  h) PYTEST_ARGS=${PYTEST_ARGS:-"tests/gpu/test_backward_order_gpu.py tests/gpu/test_backward_stream_gpu.py tests/gpu/test_infinite_scores_gpu.py tests/gpu/test_summary_bytes_gpu.py tests/gpu/test_stream_nonzero_gpu.py tests/gpu/test_key_values_gpu.py"} ;;
  i) PYTEST_ARGS=${PYTEST_ARGS:-"tests/gpu/test_key_mask_gpu.py tests/gpu/test_mask_corners_gpu.py tests/gpu/test_mask_floats_gpu.py tests/gpu/test_prepared_divisors_gpu.py tests/gpu/test_shared_divisions_gpu.py tests/gpu/test_zero_divisors_gpu.py"} ;;
esac
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  python3 -m pytest -q -p no:cacheprovider --durations=15 ${PYTEST_ARGS:-tests} ${PYTEST_K:+-k "$PYTEST_K"} 2>&1 \
    | tee "$OUT/pytest${TESTS_PART:+-$TESTS_PART}.log" | tail -25
fi
if [ "${SKIP_CHECK:-0}" != 1 ]; then
  # the samples, and variants written as a held-out check (tools/dev/heldout.kd, bench/NOTES.md 38th session)
  python3 -m kdsl.cli check samples/*.kd tools/dev/heldout.kd 2>&1 | tee "$OUT/check.log" | tail -3
  # every sample and variant at lengths 1, 63, 129, 1000, M != N, GQA; racecheck on a subset
  timeout 400 compute-sanitizer --tool memcheck --error-exitcode 1 python3 tools/dev/sanitize.py \
    > "$OUT/memcheck.log" 2>&1; tail -2 "$OUT/memcheck.log"
  timeout 300 compute-sanitizer --tool racecheck --error-exitcode 1 python3 tools/dev/sanitize.py --quick \
    > "$OUT/racecheck.log" 2>&1; tail -2 "$OUT/racecheck.log"
  if [ "${SANITIZE_BACKWARD:-0}" = 1 ]; then  # the backward kernels (each forward + its backward)
    # SANITIZE_LEARNED=1: float captured tensors require grad too (the capture-gradient backward)
    LEARNED=$([ "${SANITIZE_LEARNED:-0}" = 1 ] && echo --learned)
    timeout 400 compute-sanitizer --tool memcheck --error-exitcode 1 python3 tools/dev/sanitize.py --backward --quick $LEARNED \
      > "$OUT/memcheck-backward.log" 2>&1; tail -2 "$OUT/memcheck-backward.log"
    timeout 300 compute-sanitizer --tool racecheck --error-exitcode 1 python3 tools/dev/sanitize.py --backward --quick $LEARNED \
      > "$OUT/racecheck-backward.log" 2>&1; tail -2 "$OUT/racecheck-backward.log"
  fi
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  python3 bench/launch_overhead.py 2>&1 | tee "$OUT/launch.log" | tail -8
  python3 -m kdsl.cli bench --suite standard -o "$OUT" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | tail -80
fi
