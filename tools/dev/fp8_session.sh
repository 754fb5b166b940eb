#!/usr/bin/env bash
# One device call for the FP8 kernel's open A/Bs (bench/NOTES.md, nineteenth session's leads),
# from the repo root on the GPU machine with .whl/ carried (see bench/gpu_session.sh):
#   1. the FP8 GPU tests (192-row tiles included);
#   2. fp8_forms.py over every shape: the kernel as it is, an A/A row of it built again ("same"),
#      128-row tiles in turns ("turns"), and 192-row tiles (attrs), in turns with _scaled_mm;
#   3. racecheck over the FP8 sanitize workload (192-row tiles included).
# REPS (default 50) sets the launches per row.
set -uo pipefail
source bench/device_env.sh
timeout 90 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fp8_gpu.py > "$OUT/fp8-tests.log" 2>&1
tail -2 "$OUT/fp8-tests.log"
timeout 420 python3 tools/dev/fp8_forms.py --only all --reps "${REPS:-50}" \
  --form same=-DKDSL_FP8_PREFETCH_SCALES=1 --form turns=-DKDSL_FP8_TURNS_128=1 \
  --variants "tile_m=192,tile_n=128;tile_m=192,tile_n=112;tile_m=192,tile_n=96" > "$OUT/fp8-forms.log" 2>&1
grep -v "^$" "$OUT/fp8-forms.log"
timeout 75 compute-sanitizer --tool racecheck --error-exitcode 1 python3 tools/dev/sanitize.py --fp8 --quick \
  > "$OUT/fp8-racecheck.log" 2>&1
tail -2 "$OUT/fp8-racecheck.log"
