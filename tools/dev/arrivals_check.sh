#!/usr/bin/env bash
# One device call for what the fifty-fourth session left unrun (bench/NOTES.md), from the repo root
# on the GPU machine with .whl/ carried (see bench/gpu_session.sh):
#   1. racecheck past a pass of the forward's ring with every consumer thread arriving
#      (KDSL_RACECHECK_ARRIVALS=1): the shapes whose default builds racecheck reported, and
#      sanitize.py --few-items;
#   2. one consumer warpgroup handing K stages back warp by warp (the ordering the PTX model counts; the
#      default since the fifty-fifth session, which this step timed as KDSL_WARP_RELEASE=1 against thread 0
#      alone): the decode tests, and its cost in turns against KDSL_WARP_RELEASE=0 where one warpgroup runs
#      (decode, 64-row items), outputs compared.
set -uo pipefail
source bench/device_env.sh
export PYTHONPATH=$PYTHONPATH:$PWD/tools/dev
race() {
  local tag=$1; shift
  KDSL_DEFINES=KDSL_RACECHECK_ARRIVALS=1 timeout 90 compute-sanitizer --tool racecheck --racecheck-report all \
    --print-limit 4 --error-exitcode 1 python3 tools/dev/race_one.py "$@" > "$OUT/race-$tag.log" 2>&1
  echo "$tag rc=$? $(grep 'launch ok\|SUMMARY' "$OUT/race-$tag.log" | tr '\n' ' ')"
}
race plain-long samples/plain.kd plain 1,1,1,2000,6000,128
race plain-192 samples/plain.kd plain 2,8,8,1000,1500,192
race causal-192-split samples/causal.kd causal 1,2,2,1000,1500,192
race causal-192-one samples/causal.kd causal 1,2,2,1000,1500,192 --attrs consumers=1
race causal-64-three samples/causal.kd causal 2,4,4,2000,2000,64
race document samples/document_mask.kd document_mask 1,4,4,1500,1500,128
race mla samples/mla.kd mla 1,2,2,1000,1500,192 --dv 128
race decode samples/plain.kd plain 1,8,2,1,6000,128
KDSL_DEFINES=KDSL_RACECHECK_ARRIVALS=1 timeout 150 compute-sanitizer --tool racecheck --error-exitcode 1 \
  python3 tools/dev/sanitize.py --quick --few-items > "$OUT/racecheck-few-arrivals.log" 2>&1
echo "sanitize --few-items rc=$? $(tail -1 "$OUT/racecheck-few-arrivals.log")"
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_decode_gpu.py \
  > "$OUT/pytest-decode-warp-release.log" 2>&1; echo "decode tests, warp release: $(tail -1 "$OUT/pytest-decode-warp-release.log")"
timeout 200 python3 tools/dev/attrs_sweep.py --reps 30 --attrs="-DKDSL_WARP_RELEASE=0" \
  samples/plain.kd:plain:1,16,1,8192,128 samples/plain.kd:plain:8,16,1,4096,128 \
  samples/sliding_window.kd:sliding_window:4,16,1,16384,128 samples/document_mask.kd:document_mask:2,16,1,8192,128 \
  samples/plain.kd:plain:4,8,64,8192,64 samples/relpos.kd:relpos:2,8,48,4096,128 \
  2>&1 | grep -v Warn | tee "$OUT/warp-release-sweep.log" | tail -30
