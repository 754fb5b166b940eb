// kdsl/attention_bwd_order.cuh — the order of the backward's CTAs where its tile classes are
// arithmetic on data it loads (KDSL_BWD_ORDER, emit_backward.backward_orders), longest first,
// made on the GPU per call.
//
// The hardware starts a grid's CTAs in blockIdx order, so a long CTA late in the order runs on
// after the rest have finished. backward_block orders units for masks of positions (key block 0
// of every pair in a group first: under causal-like masks the longest); under a mask of data no
// order is known on the host. Attention sinks beside a window (j < nsink[b] or a causal window of
// 256, held-out set 43): the key blocks below nsink[b] walk every query tile, the rest a few, and
// the block holding nsink[b] walks them all through partial tiles; its CTAs, late in the order,
// kept a few SMs running 43 % past the mean (sm__cycles_active max 1.56M, mean 1.09M cycles, H200,
// B=2 H=16 4096^2 D=64; bench/NOTES.md, eighty-fifth session).
//
//   backward_order_costs: a warp per unit w of backward_block_at's order, its cost in half
//     steps (a full tile 2, a partial one 3: mask and bounds per element; the CTA's K / V in
//     and dK / dV out 1), in classes (KDSL_BWD_ORDER_CLASSES a factor of 2 in cost), as a sort
//     key: the longest class first, and within a class backward_block's order (w ascending),
//     whose CTAs running together share the q and dO they read in L2.
//   backward_order_sort: one CTA sorts the keys (kOrderMostUnits at most) into AttnArgs::order.
#pragma once

#include "kdsl/attention_common.cuh"

namespace kdsl {

// The most units ordered (the sort's shared array): past it the grid is ~31 waves of CTAs on
// 132 SMs, whose last wave is a small part of the time (runtime/attention_backward.py asks no
// order there).
constexpr int kOrderMostUnits = 4096;

#ifndef KDSL_BWD_ORDER_CLASSES  // an A/B switch: 2 (half octaves of cost), 1 (octaves), 0 (the cost itself)
#define KDSL_BWD_ORDER_CLASSES 2
#endif

// The class of a cost (> 0) the order sorts by.
KDSL_DEVICE u32 order_class(u32 cost) {
  if constexpr (KDSL_BWD_ORDER_CLASSES == 0) return cost;
  const u32 octave = 31 - __clz(cost);
  if constexpr (KDSL_BWD_ORDER_CLASSES == 1) return octave;
  return 2 * octave + ((u64)cost * cost >= 2ull << (2 * octave));  // past sqrt(2) * 2^octave
}

template <class V, int BM, int BN>
KDSL_DEVICE void backward_order_costs(const AttnArgs& a, const typename V::Captures& c, u64* keys, int units) {
  const int w = (int)((blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
  if (w >= units) return;
  const BackwardBlock blk = backward_block_at<BN>(a, w);
  const QueryTiles tiles = backward_query_tiles<BM>(a, blk);
  const int per = tiles.end - tiles.first, steps = blk.heads * per;
  unsigned cost = 0;
  for (int it = lane; it < steps; it += 32) {
    const int hq = it / per, mt = tiles.first + (it - hq * per);
    const int cls = backward_tile_class<V, BM, BN>(a, c, blk.b, blk.h0 + hq, mt * BM, blk.n0);
    cost += cls == kTileEmpty ? 0u : cls == kTileFull ? 2u : 3u;
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) cost += __shfl_xor_sync(0xffffffffu, cost, o);
  if (lane == 0) keys[w] = (u64)(0xffffffffu - order_class(cost + 1u)) << 32 | (u32)w;
}

// A bitonic sort of the keys in shared memory, padded to a power of two with keys past every
// real one; order[i] = the unit of the i-th smallest key. Launched as one CTA (of any size).
KDSL_DEVICE void backward_order_sort(const u64* keys, int* order, int units) {
  __shared__ u64 s[kOrderMostUnits];
  int n = 1;
  while (n < units) n *= 2;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = i < units ? keys[i] : ~0ull;
  __syncthreads();
  for (int k = 2; k <= n; k *= 2)
    for (int j = k / 2; j > 0; j /= 2) {
      for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int p = i ^ j;
        if (p > i) {
          const u64 x = s[i], y = s[p];
          if ((x > y) == ((i & k) == 0)) {
            s[i] = y;
            s[p] = x;
          }
        }
      }
      __syncthreads();
    }
  for (int i = threadIdx.x; i < units; i += blockDim.x) order[i] = (int)(u32)s[i];
}

}  // namespace kdsl
