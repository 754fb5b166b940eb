#!/usr/bin/env bash
# One device call for branch wide-unserialized (the wide backward's wgmmas pipelined: the same
# instructions for both warpgroups, columns in turn by 64-column blocks), from the repo root with
# the wheels in .whl/: its GPU tests at the wide head dims, forward + backward against cuDNN at
# 192 / 256 (main's last ratios: plain 0.77 / 0.85, causal 0.78 / 0.85 at 256 / 192, H200), the
# dQ pieces A/B, then memcheck and racecheck at 256. Logs under $OUT. About 9 minutes on an H200.
set -uo pipefail
source bench/device_env.sh
export PYTHONPATH=$PYTHONPATH:$PWD/tools/dev
timeout 170 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_backward_gpu.py -k "mla or 256 or 192 or 160 or dq_helper or cp_async" \
  2>&1 | tee "$OUT/pytest-wide.log" | tail -3
timeout 100 python3 -m kdsl.cli bench samples/plain.kd samples/causal.kd --backward --vs cudnn \
  --shapes B=2,H=16,M=4096,N=4096,D=256 B=2,H=16,M=4096,N=4096,D=192 --reps 10 -o "$OUT/bench" 2>&1 | grep "^|" | tail -4
(cd tools/dev && timeout 80 python3 backward_ab.py --programs plain,causal --shape 2,16,4096,4096,256 \
  --variants "default;-DKDSL_BWD_WIDE_DQ_PIECES=1" --reps 10 2>&1 | tee "$OUT/ab-pieces.log" | grep "^|")
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 1 python3 tools/dev/sanitize.py --backward --quick \
  --head-dim 256 > "$OUT/memcheck-256.log" 2>&1; tail -2 "$OUT/memcheck-256.log"
timeout 110 compute-sanitizer --tool racecheck --error-exitcode 1 python3 tools/dev/sanitize.py --backward --quick \
  --head-dim 256 > "$OUT/racecheck-256.log" 2>&1; tail -2 "$OUT/racecheck-256.log"
