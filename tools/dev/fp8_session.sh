#!/usr/bin/env bash
# One device call for the next session's open FP8 questions (bench/NOTES.md, twentieth
# session's leads), from the repo root on the GPU machine with .whl/ carried (see
# bench/gpu_session.sh):
#   1. the FP8 GPU tests, and T5's bucket boundaries against the CPU reference;
#   2. fp8_forms.py over every shape: the kernel as it is, an A/A row of it ("same"), and
#      192-row tiles issuing without turns ("free", KDSL_FP8_TURNS_192=0), in turns with _scaled_mm;
#   3. clocks and power under kdsl's and cuBLAS's kernels at 4096x7168x16384 (fp8_power.py);
#   4. the FP8 rows of the standard suite (the read-b floor and the dense summary line);
#   5. racecheck over the FP8 sanitize workload.
# REPS (default 50) sets the launches per row. The timeouts add up to 570 s, inside a call's 600.
set -uo pipefail
source bench/device_env.sh
timeout 80 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fp8_gpu.py > "$OUT/fp8-tests.log" 2>&1
tail -2 "$OUT/fp8-tests.log"
timeout 60 python3 tools/dev/t5_probe.py > "$OUT/t5-probe.log" 2>&1; cat "$OUT/t5-probe.log" | tail -12
timeout 50 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_offset_table_gpu.py -k "boundaries" \
  > "$OUT/t5-boundaries.log" 2>&1
grep -E "^E .*(Assert|gap)|passed|failed" "$OUT/t5-boundaries.log" | head -5
timeout 150 python3 tools/dev/fp8_forms.py --only all --reps "${REPS:-50}" --form same= \
  --form free=-DKDSL_FP8_TURNS_192=0 > "$OUT/fp8-forms.log" 2>&1
grep -v "^$" "$OUT/fp8-forms.log"
timeout 40 python3 tools/dev/fp8_power.py > "$OUT/fp8-power.log" 2>&1; cat "$OUT/fp8-power.log"
timeout 120 python3 -m kdsl.cli bench --suite standard --only fp8_gemm,fp8_grouped_contiguous,fp8_grouped_masked \
  -o "$OUT/suite" > "$OUT/bench-fp8.log" 2>&1
grep -E "scaled_mm|floor|grouped|FP8 dense" "$OUT/bench-fp8.log" | cut -c1-170
timeout 70 compute-sanitizer --tool racecheck --error-exitcode 1 python3 tools/dev/sanitize.py --fp8 --quick \
  > "$OUT/fp8-racecheck.log" 2>&1
tail -2 "$OUT/fp8-racecheck.log"
