#!/usr/bin/env bash
# The next session's device calls (after the eighty-second), each within one call's 600 s:
#   OUT=... PART="a b" [DEADLINE=520] bash tools/dev/s83_next.sh; logs in $OUT/logs.tgz. An item is
#   skipped once the call has run DEADLINE seconds.
#   a: key values (passes/key_values.py, built with KDSL_DEFINES=KDSL_KEY_VALUES=1; off by default until this runs)
#      and the backward's query values (KDSL_BWD_QUERY_VALUES=1, likewise): tests/gpu/test_key_values_gpu.py (both
#      ways, ragged shapes, D 64/96/128: the forward; the backward's gradients are part g), then `kdsl check --grad`
#      of six corpus kernels, built with both.
#   b: key values against the per-element gathers, forward alone, in turns (tools/dev/forward_ab.py): row_threshold
#      (0.78 of Flex forward, s82) at D=128 and 64, lsh_buckets_gqa, doc_temperature, perm_causal, lsh_local,
#      event_horizon, data_positions, document_mask. If they win, flip KDSL_KEY_VALUES's default (the template).
#   c: the Flex peer of a score that ignores s (causal_mean: Inductor failed on the constant), the flex peer sweep
#      fwd+bwd (Dynamo now reset per program: 82 tracing failures in s82 were the sweep's).
#   g: the query values' GPU gradient test (tests/gpu/test_key_values_gpu.py -k query_values; D 64/128/256, both ways).
#   e: query values against the per-element gathers, backward alone, in turns: row_threshold, document_mask (D=128
#      and 64), doc_temperature, segment_bidir_queries, lsh_buckets_gqa, packed_window. If they win, flip
#      KDSL_BWD_QUERY_VALUES's default (attention_bwd_wgmma.cuh).
#   d: held-out set 41 (eighty-second session, interpreter-checked; query_width spills 24 B at D=64's 192-row tile):
#      `kdsl check --grad` of all eight, then against Flex forward and fwd+bwd.
# Order for ~30 minutes of device time: "a b" (one call), "g e" (one call), then "c d". All three ran (H200,
# bench/results/h200-2026-12-04-s83/); then:
#   n: where a partial tile's time goes: Nsight Compute's full set on row_threshold (4 us a partial tile against
#      ~0.5 for a dense one) beside its Flex peer, and perm_causal; the hot SASS lines of each kdsl kernel.
#   z: heldout19's cosine_attention: kdsl's own `check --grad`, and the sweep fwd+bwd of heldout19 (its Flex peer's
#      dq was 8.3e9 where the float64 reference's is 0: norms drawn near 0 make the score's slope ~1e8).
#   p: P capped at 1 in the backward (element_grads; cosine_attention's P overflowed): the GPU test, check --grad
#      of cosine_attention, and the cap's cost against KDSL_BWD_P_CAP=0, backward alone (softcap, alibi, relpos).
#   r: (eighty-fourth session) the key values' trials KDSL_KEY_VALUES_RANGE=1 and KDSL_VALUED_ARMS=1: their GPU
#      tests, then forward A/B in turns. Ran (bench/results/h200-2026-12-04-s84/call1): range won, x1.04-1.23;
#      it is the default now and the arms trial is dropped; part r now runs the default against range off.
#   t: segment_rules and class_table (a table indexed by the key's value), which take key / query values now:
#      check --grad, forward and backward A/B against the gathers. Order next: "r t" (one call).
#   h: held-out set 42 (eighty-third session, interpreter-checked; six of eight take key values and split into arms):
#      `check --grad` of all eight, then against Flex forward and fwd+bwd.
#   q: the query values gathered only on the steps that read the mask (KDSL_BWD_QV_PARTIAL=1) and
#      KDSL_BWD_QUERY_VALUES=0 against the default, backward alone (document_mask D=64 ran x0.96 with them).
# If an H100 is lent, issue 8 first: PART=a bash bench/fp8_done_when.sh, then PART=b.
set -uo pipefail
source tools/dev/device_steps.sh
CHECK_SEED=83 CHECK_TIMEOUT=90
fab() {  # file programs shape: the forward alone, default against key values, in turns
  late $2-$3 && return
  timeout 200 python3 tools/dev/forward_ab.py $1 --programs $2 --shape $3 \
    --variants "default;${FAB_VARIANT:-KDSL_DEFINES=KDSL_KEY_VALUES=1}" > $L/fab-$(basename $1 .kd)-${3//,/x}.log 2>&1
  echo "[forward ab $1 $3]"; grep -h "^| [a-z]\|Error\|error" $L/fab-$(basename $1 .kd)-${3//,/x}.log | tail -12
  save
}
for part in ${PART:-a}; do
case $part in
a)
  late kv-test || { timeout 300 python3 -m pytest -q tests/gpu/test_key_values_gpu.py -k key_values_match \
      > $L/pytest-key-values.log 2>&1
    echo "key values GPU test: $(tail -1 $L/pytest-key-values.log)"; grep "^FAILED\|Error" $L/pytest-key-values.log | head; save; }
  export KDSL_DEFINES="KDSL_KEY_VALUES=1 KDSL_BWD_QUERY_VALUES=1"
  check tools/dev/heldout40.kd row_threshold
  check tools/dev/heldout40.kd lsh_buckets_gqa
  check tools/dev/heldout38.kd doc_temperature
  check tools/dev/heldout38.kd perm_causal
  check tools/dev/heldout35.kd lsh_local
  check tools/dev/heldout30.kd event_horizon
  unset KDSL_DEFINES; save ;;
b)
  fab tools/dev/heldout40.kd row_threshold,lsh_buckets_gqa 2,16,4096,4096,128
  fab tools/dev/heldout40.kd row_threshold 2,16,4096,4096,64
  fab tools/dev/heldout38.kd doc_temperature,perm_causal 2,16,4096,4096,128
  fab tools/dev/heldout35.kd lsh_local 2,16,4096,4096,128
  fab tools/dev/heldout30.kd event_horizon 2,16,4096,4096,128
  fab tools/dev/heldout18.kd data_positions 2,16,4096,4096,128
  fab samples/document_mask.kd document_mask 2,16,4096,4096,128 ;;
c)
  bench peers tools/dev/heldout25.kd --only causal_mean
  late sweep || { timeout 280 python3 tools/dev/flex_peer_sweep.py --backward > $L/flex-sweep-backward.log 2>&1
    echo "[flex peer sweep fwd+bwd]"; grep -v "warn\|Warning\|SOLUTION\|debug\|This will\|^$\|torch.nn" $L/flex-sweep-backward.log | tail -8; save; } ;;
d)
  for k in query_width batch_stride cosine_distance padded_kv_bias segment_bidir_queries head_clamp landmark_blocks \
      query_temp_softcap; do check tools/dev/heldout41.kd $k; done
  bench h41 tools/dev/heldout41.kd
  bench h41-bwd tools/dev/heldout41.kd --backward ;;
g)
  late qv-test || { timeout 500 python3 -m pytest -q tests/gpu/test_key_values_gpu.py -k query_values \
      > $L/pytest-query-values.log 2>&1
    echo "query values GPU test: $(tail -1 $L/pytest-query-values.log)"; grep "^FAILED\|Error" $L/pytest-query-values.log | head; save; } ;;
e)
  QV="-DKDSL_BWD_QUERY_VALUES=1"
  ab_at $QV tools/dev/heldout40.kd row_threshold 2,16,4096,4096,128
  ab_at $QV samples/document_mask.kd document_mask 2,16,4096,4096,128
  ab_at $QV samples/document_mask.kd document_mask 2,16,4096,4096,64
  ab_at $QV tools/dev/heldout38.kd doc_temperature 2,16,4096,4096,128
  ab_at $QV tools/dev/heldout41.kd segment_bidir_queries 2,16,4096,4096,128
  ab_at $QV tools/dev/heldout40.kd lsh_buckets_gqa 2,16,4096,4096,128,4
  ab_at $QV bench/variants.kd packed_window 2,16,4096,4096,128 ;;
n)
  for spec in tools/dev/heldout40.kd:row_threshold tools/dev/heldout38.kd:perm_causal; do
    nm=${spec##*:}; late ncu-$nm && continue
    timeout 200 ncu --profile-from-start off --set full --import-source no -f -o $L/ncu-$nm \
      python3 tools/dev/ncu_versus_flex.py $spec:2,16,4096,4096,128 > $L/ncu-$nm.log 2>&1
    echo "[ncu $nm] rc $?"
    ncu -i $L/ncu-$nm.ncu-rep --page details > $L/ncu-$nm-details.txt 2>&1
    grep -E "^  [a-z_]+.*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|Issued Warp|No Eligible|Warp Cycles Per Issued" \
      $L/ncu-$nm-details.txt | head -40
    ncu -i $L/ncu-$nm.ncu-rep --page source --csv --print-source sass > $L/ncu-$nm-src.csv 2>/dev/null
    k=$(grep -o '"Kernel Name","kdsl_[a-z_0-9]*_d128"' $L/ncu-$nm-src.csv | head -1 | cut -d, -f2 | tr -d '"')
    python3 tools/dev/ncu_hot_lines.py $L/ncu-$nm-src.csv --kernel "$k" --min 0.7 > $L/ncu-$nm-hot.txt 2>&1
    head -45 $L/ncu-$nm-hot.txt; gzip -f $L/ncu-$nm-src.csv; rm -f $L/ncu-$nm.ncu-rep; save
  done ;;
z)
  CHECK_TIMEOUT=150 check tools/dev/heldout19.kd cosine_attention
  late sweep19 || { timeout 200 python3 tools/dev/flex_peer_sweep.py --backward tools/dev/heldout19.kd \
      > $L/flex-sweep-19.log 2>&1; echo "[sweep 19]"; grep -v "warn\|Warning\|^$\|torch.nn\|This will" $L/flex-sweep-19.log | tail -4; save; } ;;
p)
  late p-test || { timeout 200 python3 -m pytest -q tests/gpu/test_backward_gpu.py -k "magnifies or (matches_reference and softcap)" \
      > $L/pytest-p-cap.log 2>&1; echo "P cap GPU tests: $(tail -1 $L/pytest-p-cap.log)"; grep "^FAILED\|Error" $L/pytest-p-cap.log | head; save; }
  CHECK_TIMEOUT=150 check tools/dev/heldout19.kd cosine_attention
  ab_at -DKDSL_BWD_P_CAP=0 samples/softcap.kd softcap 2,16,4096,4096,128
  ab_at -DKDSL_BWD_P_CAP=0 samples/alibi.kd alibi 2,16,4096,4096,128
  ab_at -DKDSL_BWD_P_CAP=0 samples/relpos.kd relpos 2,16,4096,4096,64 ;;
r)
  late r-test || { timeout 300 python3 -m pytest -q tests/gpu/test_key_values_gpu.py -k "values" \
      > $L/pytest-kv-range.log 2>&1; echo "key values GPU test: $(tail -1 $L/pytest-kv-range.log)"
    grep "^FAILED\|Error" $L/pytest-kv-range.log | head; save; }
  export FAB_VARIANT="KDSL_DEFINES=KDSL_KEY_VALUES_RANGE=0"
  fab tools/dev/heldout40.kd row_threshold,lsh_buckets_gqa 2,16,4096,4096,128
  fab tools/dev/heldout40.kd row_threshold 2,16,4096,4096,64
  fab tools/dev/heldout30.kd event_horizon 2,16,4096,4096,128
  fab samples/document_mask.kd document_mask 2,16,4096,4096,128
  unset FAB_VARIANT ;;
t)
  # the key's value inside a table's index (ir.only_largest now looks into a load's indices): segment_rules and
  # class_table take key values and query values since the eighty-third session's last commits, untimed
  check tools/dev/heldout2.kd segment_rules
  check tools/dev/heldout5.kd class_table
  export FAB_VARIANT="KDSL_DEFINES=KDSL_KEY_VALUES=0"
  fab tools/dev/heldout2.kd segment_rules 2,16,4096,4096,128
  fab tools/dev/heldout5.kd class_table 2,16,4096,4096,128
  unset FAB_VARIANT
  ab_at -DKDSL_BWD_QUERY_VALUES=0 tools/dev/heldout2.kd segment_rules 2,16,4096,4096,128
  ab_at -DKDSL_BWD_QUERY_VALUES=0 tools/dev/heldout5.kd class_table 2,16,4096,4096,128 ;;
h)
  for k in score_band doc_causal_window bucket_or_local key_priority alibi_docs_gqa rank_distance head_softcap \
      class_or_causal; do check tools/dev/heldout42.kd $k; done
  bench h42 tools/dev/heldout42.kd
  bench h42-bwd tools/dev/heldout42.kd --backward ;;
q)
  for spec in "samples/document_mask.kd document_mask 2,16,4096,4096,64" "samples/document_mask.kd document_mask 2,16,4096,4096,128"; do
    set -- $spec; late qp-$2-$3 && continue
    timeout 150 python3 tools/dev/backward_ab.py --file $1 --programs $2 --shape $3 --reps 10 --seed 0 \
      --variants="default;-DKDSL_BWD_QUERY_VALUES=0;-DKDSL_BWD_QV_PARTIAL=1" > $L/qp-$2-${3//,/x}.log 2>&1
    echo "[qp $2 $3]"; grep "^|\|regs" $L/qp-$2-${3//,/x}.log; save
  done ;;
esac
done
