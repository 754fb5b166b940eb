#!/usr/bin/env bash
# The paired ring's first device call (bench/NOTES.md, thirty-third session's leads), from the
# repo root on the GPU machine with .whl/ carried (bench/device_env.sh). Timeouts add up to 560 s:
# a mistake in the pairing shows as a hang, and each step is cut off on its own.
#   1. the kernel, an A/A build and the paired form, in turns, with calc_diff per row;
#   2. the FP8 GPU tests with every build paired (kernels of even stage counts change);
#   3. racecheck on the two cases with even stage counts and odd block counts.
set -uo pipefail
source bench/device_env.sh
SH="4096x24576x1536;4096x2112x7168;128x24576x1536;128x32768x512;128x7168x16384;4096x4096x7168"
SH="$SH;4096x7168x2048;masked:256x4096x7168x4;contiguous:32768x4096x7168x4;1000x3000x1920"
timeout 240 python3 tools/dev/fp8_forms.py --reps 20 --per-shape tools/dev/pair_shapes.json \
  --form aa=-DKDSL_FP8_AA_CONTROL=1 --form pair=-DKDSL_FP8_PAIR_STAGES=1 --shapes "$SH" > "$OUT/pair-forms.log" 2>&1
echo "forms: rc $?"; grep -v "^$" "$OUT/pair-forms.log" | grep -v "Deprecat\|^  main()"
KDSL_DEFINES="KDSL_FP8_PAIR_STAGES=1" timeout 200 python3 -m pytest -q -x -p no:cacheprovider \
  tests/gpu/test_fp8_gpu.py > "$OUT/pair-pytest.log" 2>&1
echo "tests: rc $?"; tail -3 "$OUT/pair-pytest.log"
KDSL_DEFINES="KDSL_FP8_PAIR_STAGES=1" timeout 120 python3 tools/dev/fp8_race_probe.py --out "$OUT/race" --forms 0 \
  --cases dense-pairs,masked-pairs,cluster-pairs > "$OUT/pair-race.log" 2>&1
echo "racecheck: rc $?"; tail -6 "$OUT/pair-race.log"
