#!/usr/bin/env bash
# The eighty-fourth session's device calls, each within one call's 600 s:
#   OUT=... PART="k" [DEADLINE=520] bash tools/dev/s84_next.sh; logs in $OUT/logs.tgz.
#   k: two values at the query in the backward (KDSL_BWD_QUERY_VALUES2, on; key_values.query_parts) and the
#      forward's key values with keys past N dropped once a tile (KDSL_KEY_VALUES_RANGE, on since call 1):
#      tests/gpu/test_key_values_gpu.py whole; `check --grad` of the three corpus kernels with two query values;
#      the backward alone against KDSL_BWD_QUERY_VALUES2=0 (score_band 16 -> 0 B local, two_level_docs 40 -> 0).
#   f: held-out 42's score_band (0.99 of Flex forward, 0.89 fwd+bwd in call 2) and set 42 again against Flex.
#   h: held-out set 43 (interpreter-checked; sinks_window's D=64 forward spills 16 B, head_key_keep's D=128
#      backward 48 B): `check --grad` of all eight, then against Flex forward and fwd+bwd.
#   n: (next session) log_decay_softcap's `check --grad` against the gated reference (its GPU pass in call 4 had a
#      NaN reference, dropped by max()); segment_rules' backward against KDSL_BWD_QUERY_VALUES=0 again (x1.08 for
#      off in call 1); the two weak fwd+bwd of set 43 (sinks_window 1.01, chunks_globals 0.99 of Flex) at D=64 too;
#      tools/dev/masked_index.kd (indices clamped in the kernel where the mask keeps them in range; CPU only so far).
# Ran: k, f (call 3), h (call 4), bench/results/h200-2026-12-04-s84/. If an H100 is lent, issue 8 first.
set -uo pipefail
source tools/dev/device_steps.sh
CHECK_SEED=84 CHECK_TIMEOUT=90
for part in ${PART:-k}; do
case $part in
k)
  late kv-test || { timeout 330 python3 -m pytest -q tests/gpu/test_key_values_gpu.py > $L/pytest-key-values.log 2>&1
    echo "key values GPU tests: $(tail -1 $L/pytest-key-values.log)"; grep "^FAILED\|Error" $L/pytest-key-values.log | head; save; }
  check tools/dev/heldout42.kd score_band
  check tools/dev/heldout27.kd two_level_docs
  check tools/dev/heldout18.kd span_per_query
  ab_at -DKDSL_BWD_QUERY_VALUES2=0 tools/dev/heldout42.kd score_band 2,16,4096,4096,128
  ab_at -DKDSL_BWD_QUERY_VALUES2=0 tools/dev/heldout27.kd two_level_docs 2,16,4096,4096,128
  ab_at -DKDSL_BWD_QUERY_VALUES2=0 tools/dev/heldout18.kd span_per_query 2,16,4096,4096,128 ;;
f)
  bench h42 tools/dev/heldout42.kd
  bench h42-bwd tools/dev/heldout42.kd --backward ;;
h)
  for k in sinks_window log_bucket_bias prefix_lm gated_temperature dilated_band head_key_keep chunks_globals \
      log_decay_softcap; do check tools/dev/heldout43.kd $k; done
  bench h43 tools/dev/heldout43.kd
  bench h43-bwd tools/dev/heldout43.kd --backward ;;
n)
  check tools/dev/heldout43.kd log_decay_softcap
  check tools/dev/masked_index.kd log_bucket_causal
  check tools/dev/masked_index.kd log_bucket_anticausal
  ab_at -DKDSL_BWD_QUERY_VALUES=0 tools/dev/heldout2.kd segment_rules 2,16,4096,4096,128
  late n-bench || { timeout 200 kdsl bench tools/dev/heldout43.kd --only sinks_window,chunks_globals --backward --vs flex \
      --reps 10 --seed 0 --shapes B=2,H=16,M=4096,N=4096,D=64 B=2,H=16,M=4096,N=4096,D=128 -o $L/bench-n > $L/bench-n.log 2>&1
    echo "[n]"; grep -h "|" $L/bench-n/*.md | cut -d'|' -f2-11 | tail -5; save; } ;;
esac
done
