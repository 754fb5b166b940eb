#!/usr/bin/env bash
# One device call for branch bwd-tma (the <= 128 backward with Q and dO loaded by TMA), from the repo
# root with the wheels in .whl/: its GPU tests with the kind forced, a racecheck, then the kinds timed in
# turns (backward_kind_ab.py). Logs under $OUT. About 6-7 minutes on an H200.
set -uo pipefail
source bench/device_env.sh
export PYTHONPATH=$PYTHONPATH:$PWD/tools/dev
KDSL_BWD_KERNEL=wgmma_tma timeout 280 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_backward_gpu.py \
  -k "not mla and not 256 and not 192 and not 160" 2>&1 | tee "$OUT/pytest-tma.log" | tail -4
KDSL_BWD_KERNEL=wgmma_tma timeout 150 compute-sanitizer --tool racecheck --error-exitcode 1 \
  python3 tools/dev/sanitize.py --backward --quick > "$OUT/racecheck-tma.log" 2>&1; tail -2 "$OUT/racecheck-tma.log"
cd tools/dev
for spec in "plain.kd 2,16,4096,4096,128" "causal.kd 2,16,4096,4096,128" "softcap.kd 2,16,4096,4096,128" \
            "plain.kd 4,16,4096,4096,64" "causal.kd 4,16,4096,4096,64"; do
  set -- $spec
  timeout 90 python3 backward_kind_ab.py --file ../../samples/$1 --shape $2 --kinds "wgmma;wgmma_tma" --reps 20 \
    2>&1 | tee -a "$OUT/ab-tma.log" | grep "^|"
done
