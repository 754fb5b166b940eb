#!/usr/bin/env bash
# Rings only the mask reads left unloaded on full tiles (KDSL_STREAM_SKIP_FULL, attention_wgmma.cuh's producer):
# a dense u8 mask whose tiles were nearly all full ran 0.92x Flex (held-out 22's label_not_three), its kernel
# 657 us against plain's 509 under ncu (bench/results/h200-2026-12-02-s69/call5). GPU tests of streamed masks,
# then dense_bool with and without the skip (structured_masks.py --defines), then held-out 22 against Flex.
# OUT=... bash tools/dev/s69_skip_full.sh; logs in $OUT/logs.tgz
set -uo pipefail
L=$OUT/logs; mkdir -p $L
save() { tar czf $OUT/logs.tgz -C $OUT logs; }
timeout 150 python3 -m pytest -q -x tests/gpu/test_streaming_gpu.py tests/gpu/test_stream_nonzero_gpu.py \
  tests/gpu/test_byte_captures_gpu.py tests/gpu/test_dense_mask_summary_gpu.py -k "not gradient" > $L/tests.log 2>&1
tail -2 $L/tests.log
save
timeout 90 python3 tools/dev/structured_masks.py --reps 10 --shape 2,16,4096,128 --kinds documents,padded,random \
  --kernels dense_bool --defines "KDSL_STREAM_SKIP_FULL=0" > $L/skip.log 2>&1; grep "|" $L/skip.log | tail -6
save
timeout 90 kdsl bench tools/dev/heldout22.kd --only label_not_three,causal_keep,head_keep_diag,bias_under_keep --vs flex \
  --reps 10 --seed 0 --shapes B=2,H=16,M=4096,N=4096,D=128 -o $L/bench22 > $L/bench22.log 2>&1
grep -h "|" $L/bench22/*.md | cut -d'|' -f2-11 | tail -4
save
