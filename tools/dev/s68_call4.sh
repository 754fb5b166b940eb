#!/usr/bin/env bash
# Sixty-eighth session, call 4: the backward tests of masks that read data call 3's timeout left
# out, then dense masks' fwd+bwd against Flex with the backward's copied tiles (as call 2 before).
# OUT=... bash tools/dev/s68_call4.sh; logs in $OUT/logs.tgz
set -uo pipefail
L=$OUT/logs; mkdir -p $L
timeout 230 python3 -m pytest -q tests/gpu/test_dense_mask_summary_gpu.py::test_dense_mask_gradients_match_the_reference \
  "tests/gpu/test_summary_bytes_gpu.py::test_one_byte_mask_gradients_match_the_reference" \
  tests/gpu/test_byte_captures_gpu.py > $L/gpu-tests.log 2>&1
tail -2 $L/gpu-tests.log; grep -E "^(FAILED|ERROR)" $L/gpu-tests.log | head -20
for seed in 0 1; do
  timeout 150 kdsl bench bench/variants.kd tools/dev/head_mask_parts.kd --only bool_attn_mask,head_bool,head_bytes_causal \
    --backward --vs flex --reps 10 --seed $seed --shapes B=2,H=16,M=4096,N=4096,D=128 -o $L/bwd-s$seed > $L/bwd-s$seed.log 2>&1
  grep -h "fwd+bwd" $L/bwd-s$seed/*.md | cut -d'|' -f2-11
done
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
