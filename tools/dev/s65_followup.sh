#!/usr/bin/env bash
# One device call (sixty-fifth session's follow-up): the GPU numerics fuzz over the generator's
# bias beside a dense byte mask (two streamed rings in every such draw; passes/streaming.py), and the
# whole streaming GPU test file on the code as it stands. OUT=... bash tools/dev/s65_followup.sh
set -uo pipefail
timeout 280 python3 tools/gpu_fuzz.py --minutes 4 --seed 6561 --out "$OUT/gpu-fuzz" > "$OUT/gpu-fuzz.log" 2>&1
tail -8 "$OUT/gpu-fuzz.log"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_streaming_gpu.py 2>&1 | tail -6 > "$OUT/streaming-gpu.log"
tail -2 "$OUT/streaming-gpu.log"
