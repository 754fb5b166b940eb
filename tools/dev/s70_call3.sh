#!/usr/bin/env bash
# The seventieth session's third device call: the GPU tests of the two flipped defaults (the
# summary's stepped 1-byte scan, now its only one; the backward's score-first evaluation under a
# loaded mask), then held-out 23's `kdsl check --grad`. OUT=... bash tools/dev/s70_call3.sh
set -uo pipefail
L=$OUT/logs; mkdir -p $L
save() { tar czf $OUT/logs.tgz -C $OUT logs; }
timeout 200 python3 -m pytest -q tests/gpu/test_summary_bytes_gpu.py tests/gpu/test_dense_mask_summary_gpu.py \
  tests/gpu/test_tile_summary_gpu.py > $L/tests-summary.log 2>&1
tail -2 $L/tests-summary.log
timeout 170 python3 -m pytest -q tests/gpu/test_backward_stream_gpu.py tests/gpu/test_backward_gpu.py \
  -k "stream or captured or ring" > $L/tests-backward.log 2>&1
tail -2 $L/tests-backward.log
save
for k in key_importance u8_documents prefix_or_causal head_label checkerboard query_temperature kv_head_bias bias_level; do
  timeout 40 kdsl check tools/dev/heldout23.kd --kernel $k --grad --seed 23 > $L/check23-$k.log 2>&1
  grep -i "cases pass\|fail\|note" $L/check23-$k.log | head -3
done
save
