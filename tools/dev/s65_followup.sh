#!/usr/bin/env bash
# Two device calls (sixty-fifth session's follow-up), OUT=... PART=a|b bash tools/dev/s65_followup.sh
#   a: the GPU numerics fuzz over the generator's bias beside a dense byte mask (two streamed rings in
#      every such draw; passes/streaming.py), the whole streaming GPU test file, and
#      passes/tile_blocks.py on the GPU for the first time: `kdsl check` of every held-out program
#      it rewrites, and its time against the per-element twin (tools/dev/tile_blocks.kd);
#   b: held-out set twenty (written last session, compiled only): `kdsl check`, against Flex.
set -uo pipefail
if [ "${PART:-a}" = a ]; then
  timeout 170 python3 tools/gpu_fuzz.py --minutes 2.5 --seed 6561 --out "$OUT/gpu-fuzz" > "$OUT/gpu-fuzz.log" 2>&1
  tail -8 "$OUT/gpu-fuzz.log"
  timeout 170 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_streaming_gpu.py 2>&1 | tail -6 > "$OUT/streaming-gpu.log"
  tail -2 "$OUT/streaming-gpu.log"
  for fk in heldout.kd:grid_bias heldout2.kd:frame_causal heldout7.kd:block_bias heldout11.kd:block_table \
            heldout18.kd:block_bias_2d; do
    timeout 50 kdsl check "tools/dev/${fk%%:*}" --kernel "${fk##*:}" 2>&1 | tail -1
  done | tee "$OUT/check-tile-blocks.log"
  timeout 120 kdsl bench tools/dev/tile_blocks.kd --vs flex --reps 10 --seed 0 \
    --shapes B=2,H=16,M=4096,N=4096,D=128 B=2,H=16,M=4096,N=4096,D=64 -o "$OUT/bench-tile-blocks" \
    > "$OUT/bench-tile-blocks.log" 2>&1
  grep "|" "$OUT"/bench-tile-blocks/*.md | cut -d'|' -f2-11 | tail -4
else
  bash tools/dev/heldout_gpu.sh 20
fi
