#!/usr/bin/env bash
# The backward's 32-wide step search keeping each round's answer (KDSL_BWD_KEEP_ROUND, attention_bwd_wgmma.cuh
# BwdSteps::next): on random bits the per-head summary's backward took 23-36 % longer than none
# (bench/results/h200-2026-12-02-s69/call1), about one dependent summary load a step. GPU tests of the
# summaries' gradients first, then A/B. OUT=... bash tools/dev/s69_keep_round.sh; logs in $OUT/logs.tgz
set -uo pipefail
L=$OUT/logs; mkdir -p $L
save() { tar czf $OUT/logs.tgz -C $OUT logs; }
timeout 240 python3 -m pytest -q -x tests/gpu/test_tile_summary_gpu.py tests/gpu/test_dense_mask_summary_gpu.py \
  tests/gpu/test_summary_bytes_gpu.py tests/gpu/test_backward_stream_gpu.py > $L/tests.log 2>&1; tail -2 $L/tests.log
save
for seed in 0 1; do
  for d in 128 64; do
    timeout 100 python3 tools/dev/backward_ab.py --file tools/dev/head_mask_parts.kd --programs head_bool \
      --shape 2,16,4096,4096,$d --variants "default;-DKDSL_BWD_KEEP_ROUND=0;KDSL_TILE_SUMMARY_HEADS=0" --reps 10 \
      --seed $seed > $L/heads-s$seed-d$d.log 2>&1
    echo "seed $seed D=$d"; grep -E "^\|" $L/heads-s$seed-d$d.log
  done
  timeout 80 python3 tools/dev/backward_ab.py --file samples/document_mask.kd --programs document_mask \
    --shape 2,16,4096,4096,128 --variants "default;-DKDSL_BWD_KEEP_ROUND=0" --reps 10 --seed $seed \
    > $L/doc-s$seed.log 2>&1
  echo "seed $seed document_mask D=128"; grep -E "^\|" $L/doc-s$seed.log
  save
done
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
