#!/usr/bin/env bash
# Sixty-eighth session, call 3: the wgmma backward copying a dense mask's tiles into shared memory
# (attention_bwd_stream.cuh): its GPU tests and the other backward tests of masks that read data,
# then the backward alone against the per-element reads (-DKDSL_BWD_STREAM_MASK=0), per-head bool
# (summarised) and u8 under causal, random (seed 0) and runs (seed 1), D=128 and 64.
# OUT=... bash tools/dev/s68_call3.sh; logs in $OUT/logs.tgz
set -uo pipefail
L=$OUT/logs; mkdir -p $L
timeout 330 python3 -m pytest -q tests/gpu/test_backward_stream_gpu.py tests/gpu/test_byte_captures_gpu.py \
  tests/gpu/test_backward_gpu.py "tests/gpu/test_summary_bytes_gpu.py::test_one_byte_mask_gradients_match_the_reference" \
  tests/gpu/test_dense_mask_summary_gpu.py::test_dense_mask_gradients_match_the_reference > $L/gpu-tests.log 2>&1
tail -3 $L/gpu-tests.log; grep -E "^(FAILED|ERROR)" $L/gpu-tests.log | head -20
for seed in 0 1; do
  for d in 128 64; do
    timeout 100 python3 tools/dev/backward_ab.py --file tools/dev/head_mask_parts.kd --programs head_bool,head_bytes_causal \
      --shape 2,16,4096,4096,$d --variants "default;-DKDSL_BWD_STREAM_MASK=0" --reps 10 --seed $seed \
      > $L/bwd-s$seed-d$d.log 2>&1
    echo "seed $seed D=$d"; grep -E "^\||regs" $L/bwd-s$seed-d$d.log
  done
done
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
