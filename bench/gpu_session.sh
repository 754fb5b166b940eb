#!/usr/bin/env bash
# One device call: install, GPU tests, benchmark; the benchmark's table prints last.
# Run from the repo root on the GPU machine with the lark and pyelftools wheels carried in .whl/
# (python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl lark==1.3.1 pyelftools==0.32).
set -uo pipefail
source bench/device_env.sh
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  python3 -m pytest -q -p no:cacheprovider ${PYTEST_ARGS:-tests} 2>&1 | tee "$OUT/pytest.log" | tail -25
fi
if [ "${SKIP_CHECK:-0}" != 1 ]; then
  python3 -m kdsl.cli check samples/*.kd 2>&1 | tee "$OUT/check.log" | tail -3
  # every sample and variant at lengths 1, 63, 129, 1000, M != N, GQA; racecheck on a subset
  timeout 400 compute-sanitizer --tool memcheck --error-exitcode 1 python3 tools/dev/sanitize.py \
    > "$OUT/memcheck.log" 2>&1; tail -2 "$OUT/memcheck.log"
  timeout 300 compute-sanitizer --tool racecheck --error-exitcode 1 python3 tools/dev/sanitize.py --quick \
    > "$OUT/racecheck.log" 2>&1; tail -2 "$OUT/racecheck.log"
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  python3 bench/launch_overhead.py 2>&1 | tee "$OUT/launch.log" | tail -8
  python3 -m kdsl.cli bench --suite standard -o "$OUT" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | tail -80
fi
