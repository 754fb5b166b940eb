#!/usr/bin/env bash
# One device call for the backward's query split (bench/NOTES.md, fifty-first session: built and
# checked offline, off by default), from the repo root on the GPU machine with .whl/ carried
# (see bench/gpu_session.sh):
#   1. its GPU tests (the split program at head dims 64 / 128 / 256 and on mma.sync, 1 / 2 / 3 / 16
#      ranges; the query-head split beside it) and part c's shapes of the default backward (its
#      launch, reordered on the host);
#   2. memcheck and racecheck of the backward sanitize workload with 3 ranges forced;
#   3. backward alone against forced counts, in turns (backward_ab.py), at the held-out
#      cross-attention shapes: B=1 H=8 M=8192 N=1024 D=128 (64 CTAs) and B=2 H=8 M=4096 N=77 D=64
#      (16 CTAs); geometry.backward_query_splits would take 2 and 8.
# (Run in the fifty-second session: passed and won, so the split is now on by default; the A/B here
# times the unsplit program (forced 1) against the default and a forced count. bench/NOTES.md.)
# The timeouts add up to 560 s, inside a call's 600.
set -uo pipefail
source bench/device_env.sh
export PYTHONPATH=$PYTHONPATH:$PWD/tools/dev
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_backward_gpu.py \
  -k "query_tiles_split or query_heads_split or 2x4x2x127x129x128x128" > "$OUT/split-tests.log" 2>&1
tail -2 "$OUT/split-tests.log"
for tool in memcheck racecheck; do
  KDSL_BWD_QUERY_SPLITS=3 timeout 130 compute-sanitizer --tool $tool --error-exitcode 1 \
    python3 tools/dev/sanitize.py --backward --quick > "$OUT/split-$tool.log" 2>&1
  echo "$tool rc=$?"; tail -2 "$OUT/split-$tool.log"
done
cd tools/dev
timeout 80 python3 backward_ab.py --programs plain,causal --shape 1,8,8192,1024,128 --reps 10 \
  --variants "KDSL_BWD_QUERY_SPLITS=1;default;KDSL_BWD_QUERY_SPLITS=4" 2>&1 | tee "$OUT/split-ab-8192.log" | tail -12
timeout 70 python3 backward_ab.py --programs plain --shape 2,8,4096,77,64 --reps 10 \
  --variants "KDSL_BWD_QUERY_SPLITS=1;default;KDSL_BWD_QUERY_SPLITS=4" 2>&1 | tee "$OUT/split-ab-77.log" | tail -8
