#!/usr/bin/env bash
# One device call for what the fifty-second session left untimed in split-KV forwards (bench/NOTES.md),
# from the repo root on the GPU machine with .whl/ carried (see bench/gpu_session.sh):
#   1. rows merged at once with three consumer warpgroups: 4 (the default) against 2 (which spared a
#      generated score's spill, tools/dev/split_build_fuzz.py) and 1, at few-item shapes that split;
#   2. few items at head dim 64: two consumer warpgroups (128-row tiles, 2 even splits) against the
#      default three (192 rows, splits of 6 / 6 / 4 tiles), and an unsplit run; cuDNN beside them.
# Each attrs_sweep.py case compares every variant's output with the default's.
set -uo pipefail
source bench/device_env.sh
export PYTHONPATH=$PYTHONPATH:$PWD/tools/dev
timeout 200 python3 tools/dev/attrs_sweep.py --reps 30 \
  --attrs="-DKDSL_MERGE_ROWS=2;-DKDSL_MERGE_ROWS=1;consumers=2;splits=1" \
  samples/plain.kd:plain:1,4,2048,2048,64 samples/plain.kd:plain:1,2,4096,4096,64 \
  samples/relpos.kd:relpos:1,4,2048,4096,64 samples/softcap.kd:softcap:1,6,1536,1536,32 \
  2>&1 | grep -v Warn | tee "$OUT/merge-rows-three.log"
