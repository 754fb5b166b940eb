#!/usr/bin/env bash
# The eighty-fifth session's device calls, each within one call's 600 s:
#   OUT=... PART="s" [DEADLINE=520] bash tools/dev/s85_next.sh; logs in $OUT/logs.tgz.
#   s: why sinks_window's backward (j < nsink[b] or a causal window of 256) runs at 203 TFLOPS fwd+bwd at D=64
#      where prefix_lm (j <= i or j < plen[b]) and causal run at 380-500: the drawn nsink, the backward alone
#      against query tiles split in 2 and 4 (a host model put its unsplit tail at ~10 %), prefix_lm's backward
#      alone at the same shape, and Nsight Compute's view of both backward launches.
#   p: sinks_window taken apart (tools/dev/sinks_parts.kd): the backward alone of it, the sinks alone, the window
#      alone and the sinks under causal, each head by head and with all 32 heads in one group against the default
#      (9); Nsight Compute's full set and hot lines of sinks_window's backward and of its causal form, with the
#      spread of active cycles over the SMs (a tail, or gaps all through).
#   o: the backward's CTAs longest first where its tiles read data (runtime/backward_order.py): its GPU tests,
#      `check --grad` of sinks_window and document_mask, the backward alone against KDSL_BWD_ORDER=0 on eight
#      data masks, and sinks_window / prefix_lm fwd+bwd against Flex at D 64 and 128.
#   c: the order by half octaves of cost (the default since call 4: document_mask lost x0.88 to no order when
#      sorted by the exact cost) against the exact cost and no order, on sinks_window, document_mask, two_level_docs
#      and prefix_lm; the order's GPU tests again.
#   r: the order for data-dependent tile classes alone (document ids keep their own): its GPU tests, the backward's
#      GPU tests, held-out set 43 fwd+bwd against Flex.
#   h: held-out set 44 (interpreter-checked): `check --grad` of all eight, then fwd+bwd against Flex.
#   d: (next session) the backward's divisions shared among its elements (KDSL_SPECULATED_DIVISION on in the
#      backward's programs, a mask whose divisor divides evaluated for every element: group_dilation's 68 calls of
#      the 64-bit division routine -> 8 at D=128): `check --grad`, the backward alone against both off, set 44.
#   m: (next session) indices bounded where the mask keeps by its comparisons (clamped in the kernel): `check --grad`
#      of tools/dev/masked_index.kd's new three and of held-out set 45 (interpreter-checked), set 45 against Flex.
set -uo pipefail
source tools/dev/device_steps.sh
CHECK_SEED=85 CHECK_TIMEOUT=90
ncu_bwd() {  # name file:kernel shape
  late ncu-$1 && return
  timeout 150 ncu --profile-from-start off --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats --section MemoryWorkloadAnalysis python3 tools/dev/ncu_backward.py --seed=0 $2 $3 \
    > $L/ncu-$1.log 2>&1
  echo "[ncu $1]"; grep -E "^  [a-z_0-9]+.*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Grid Size" $L/ncu-$1.log | head -40
  save
}
for part in ${PART:-s}; do
case $part in
s)
  python3 -c "
import kdsl; from kdsl.testing import attention_inputs
k = kdsl.load('tools/dev/heldout43.kd')
for name in ('sinks_window', 'prefix_lm'):
    kir = getattr(k, name).ir
    print(name, 'seed 0 captures:', {n: c.tolist() for n, c in attention_inputs(kir, 2, 16, 16, 4096, 4096, 64, seed=0)[3].items()})
" 2>&1 | tee $L/captures.log
  for D in 64 128; do
    late ab-$D || { timeout 150 python3 tools/dev/backward_ab.py --file tools/dev/heldout43.kd --programs sinks_window,prefix_lm \
        --shape 2,16,4096,4096,$D --reps 10 --seed 0 --variants="default;KDSL_BWD_QUERY_SPLITS=2;KDSL_BWD_QUERY_SPLITS=4" \
        > $L/ab-splits-$D.log 2>&1; echo "[ab splits D=$D]"; grep "^|\|regs" $L/ab-splits-$D.log; save; }
  done
  ncu_bwd sinks64 tools/dev/heldout43.kd:sinks_window 2,16,4096,64
  ncu_bwd prefix64 tools/dev/heldout43.kd:prefix_lm 2,16,4096,64 ;;
p)
  late ab-parts || { timeout 240 python3 tools/dev/backward_ab.py --file tools/dev/sinks_parts.kd \
      --programs sinks_window,sinks_only,window_only,causal_sinks_window --shape 2,16,4096,4096,64 --reps 10 --seed 0 \
      --variants="default;-DKDSL_BWD_HEAD_GROUP=1;-DKDSL_BWD_HEAD_GROUP=32" > $L/ab-parts.log 2>&1
    echo "[ab parts D=64]"; grep "^|\|regs" $L/ab-parts.log; save; }
  for nm in sinks_window causal_sinks_window; do
    late ncu-$nm && continue
    timeout 150 ncu --profile-from-start off --kernel-name regex:_bwd$ --set full --import-source no \
      --metrics sm__cycles_active.max,sm__cycles_active.min,sm__cycles_active.avg -f -o $L/ncu-$nm \
      python3 tools/dev/ncu_backward.py --seed=0 tools/dev/sinks_parts.kd:$nm 2,16,4096,64 > $L/ncu-$nm.log 2>&1
    echo "[ncu $nm] rc $?"
    ncu -i $L/ncu-$nm.ncu-rep --page details > $L/ncu-$nm-details.txt 2>&1
    ncu -i $L/ncu-$nm.ncu-rep --page raw --csv > $L/ncu-$nm-raw.csv 2>&1
    grep -E "^  [a-z_]+.*\(|Duration|Elapsed Cycles|SM Active|Compute \(SM\) Throughput|Issued Warp|No Eligible|Warp Cycles Per Issued|sm__cycles_active" \
      $L/ncu-$nm-details.txt | head -20
    python3 -c "
import csv,sys; r=list(csv.reader(open('$L/ncu-$nm-raw.csv'))); h=r[0]
for i,n in enumerate(h):
    if n.startswith('sm__cycles_active') or n=='gpc__cycles_elapsed.max': print(n, r[2][i])" 2>&1 | head
    ncu -i $L/ncu-$nm.ncu-rep --page source --csv --print-source sass > $L/ncu-$nm-src.csv 2>/dev/null
    python3 tools/dev/ncu_hot_lines.py $L/ncu-$nm-src.csv --min 0.7 > $L/ncu-$nm-hot.txt 2>&1
    head -30 $L/ncu-$nm-hot.txt; gzip -f $L/ncu-$nm-src.csv; rm -f $L/ncu-$nm.ncu-rep; save
  done ;;
o)
  late o-test || { timeout 300 python3 -m pytest -q tests/gpu/test_backward_order_gpu.py > $L/pytest-order.log 2>&1
    echo "order GPU tests: $(tail -1 $L/pytest-order.log)"; grep "^FAILED\|Error" $L/pytest-order.log | head; save; }
  check tools/dev/heldout43.kd sinks_window
  check samples/document_mask.kd document_mask
  O=KDSL_BWD_ORDER=0
  ab_at $O tools/dev/sinks_parts.kd sinks_window 2,16,4096,4096,64
  ab_at $O tools/dev/sinks_parts.kd sinks_window 2,16,4096,4096,128
  ab_at $O tools/dev/sinks_parts.kd causal_sinks_window 2,16,4096,4096,64
  ab_at $O tools/dev/heldout43.kd prefix_lm 2,16,4096,4096,64
  ab_at $O samples/document_mask.kd document_mask 2,16,4096,4096,128
  ab_at $O samples/document_mask.kd document_mask 4,16,4096,4096,64
  ab_at $O tools/dev/heldout40.kd row_threshold 2,16,4096,4096,128
  ab_at $O tools/dev/heldout42.kd score_band 2,16,4096,4096,128
  late o-bench || { timeout 200 kdsl bench tools/dev/heldout43.kd --only sinks_window,prefix_lm --backward --vs flex \
      --reps 10 --seed 0 --shapes B=2,H=16,M=4096,N=4096,D=64 B=2,H=16,M=4096,N=4096,D=128 -o $L/bench-o > $L/bench-o.log 2>&1
    echo "[o]"; grep -h "|" $L/bench-o/*.md | cut -d'|' -f2-11 | tail -5; save; } ;;
c)
  late c-test || { timeout 200 python3 -m pytest -q tests/gpu/test_backward_order_gpu.py > $L/pytest-order-c.log 2>&1
    echo "order GPU tests: $(tail -1 $L/pytest-order-c.log)"; grep "^FAILED\|Error" $L/pytest-order-c.log | head; save; }
  V="default;-DKDSL_BWD_ORDER_CLASSES=0;KDSL_BWD_ORDER=0"
  for spec in tools/dev/sinks_parts.kd:sinks_window:2,16,4096,4096,64 samples/document_mask.kd:document_mask:2,16,4096,4096,128 \
      samples/document_mask.kd:document_mask:4,16,4096,4096,64 tools/dev/heldout27.kd:two_level_docs:2,16,4096,4096,128 \
      tools/dev/heldout43.kd:prefix_lm:2,16,4096,4096,64; do
    IFS=: read f nm shape <<< "$spec"
    late c-$nm-$shape && continue
    timeout 150 python3 tools/dev/backward_ab.py --file $f --programs $nm --shape $shape --reps 10 --seed 0 \
      --variants="$V" > $L/ab-c-$nm-${shape//,/x}.log 2>&1
    echo "[ab $nm $shape]"; grep "^|" $L/ab-c-$nm-${shape//,/x}.log; save
  done ;;
r)
  late r-test || { timeout 120 python3 -m pytest -q tests/gpu/test_backward_order_gpu.py > $L/pytest-order-r.log 2>&1
    echo "order GPU tests: $(tail -1 $L/pytest-order-r.log)"; grep "^FAILED\|Error" $L/pytest-order-r.log | head; save; }
  late r-bwd || { timeout 200 python3 -m pytest -q tests/gpu/test_backward_gpu.py > $L/pytest-backward.log 2>&1
    echo "backward GPU tests: $(tail -1 $L/pytest-backward.log)"; grep "^FAILED\|Error" $L/pytest-backward.log | head; save; }
  bench h43-bwd tools/dev/heldout43.kd --backward ;;
h)
  for k in t5_buckets frame_local_causal cache_window alibi_offset prefix_window_softcap group_dilation padded_relbias \
      gated_cross_lengths; do check tools/dev/heldout44.kd $k; done
  bench h44-bwd tools/dev/heldout44.kd --backward ;;
d)
  # (next session) divisions the backward's elements share (KDSL_SPECULATED_DIVISION, Variant::kMaskDivides):
  # correctness, then the backward alone against the per-element form
  for spec in heldout44:group_dilation heldout37:kv_group_parity heldout33:gqa_block_phase heldout40:aligned_chunks; do
    check tools/dev/${spec%%:*}.kd ${spec##*:}
  done
  late d-test || { timeout 200 python3 -m pytest -q tests/gpu/test_shared_divisions_gpu.py > $L/pytest-divisions.log 2>&1
    echo "shared divisions GPU tests: $(tail -1 $L/pytest-divisions.log)"; grep "^FAILED\|Error" $L/pytest-divisions.log | head; save; }
  OFF="-DKDSL_SPECULATED_DIVISION=0 -DKDSL_BWD_DIVIDING_FIRST=0"
  ab_at "$OFF" tools/dev/heldout44.kd group_dilation 2,16,4096,4096,128
  ab_at "$OFF" tools/dev/heldout37.kd kv_group_parity 2,16,4096,4096,128,4
  ab_at "$OFF" tools/dev/heldout33.kd gqa_block_phase 2,16,4096,4096,128,4
  ab_at "$OFF" tools/dev/heldout40.kd aligned_chunks 2,16,4096,4096,128
  ab_at "$OFF" tools/dev/heldout40.kd lsh_buckets_gqa 2,16,4096,4096,128,4
  ab_at "$OFF" tools/dev/heldout31.kd head_dilation 2,16,4096,4096,128
  ab_at "$OFF" tools/dev/heldout43.kd head_key_keep 2,16,4096,4096,128,4
  bench h44-bwd-d tools/dev/heldout44.kd --backward ;;
m)
  # (next session) score indices the mask's comparisons bound where it keeps (masked_index, where() branches):
  # tools/dev/masked_index.kd's three new kernels and held-out set 45, `check --grad`, then set 45 against Flex
  for k in rel_bias_causal block_distance window_table; do check tools/dev/masked_index.kd $k; done
  for k in side_buckets block_distance_bias alibi_window_gqa doc_relbias neighbour_blocks softcap_keybias_padded \
      causal_cross_lengths head_key_table; do check tools/dev/heldout45.kd $k; done
  bench h45-bwd tools/dev/heldout45.kd --backward ;;
esac
done
