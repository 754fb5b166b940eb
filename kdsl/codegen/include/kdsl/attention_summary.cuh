// kdsl/attention_summary.cuh — runtime tile summaries for masks that read data.
//
// Mask analysis bounds an integer expression of the data that depends on the query row only
// (or on the key only), e.g. doc_q[b, q], by its min and max over a tile's rows (columns):
// the (qmin e) / (qmax e) / (kvmin e) / (kvmax e) of the tile predicates. Each distinct e is a
// slot. attention_tile_summary() computes every slot for every tile on the GPU before the
// attention kernel runs; V::tile() then reads an int2 per slot instead of the tile's data.
//
// Layout, slot after slot: slot s is [nb][nh][tiles] int2 (min, max), with nb = B if its
// expression reads b (else 1), nh = H if it reads h (else 1), and tiles = ceil(M / kTileQ)
// for a q slot, ceil(N / kTileKV) for a kv slot. kdsl/runtime/summary.py sizes it the same way.
//
// The generated Variant provides: kSummaries (slot count), bit masks kSummaryOnKV,
// kSummaryPerB, kSummaryPerH (bit s: slot s), kTileQ, kTileKV (the attention kernel's tile),
// and summary_value(a, c, s, b, h, x): slot s's expression at row (or key) x.
#pragma once
#include "kdsl/attention_common.cuh"

namespace kdsl {

template <class V> KDSL_DEVICE int summary_tiles(const AttnArgs& a, int s) {
  return ((V::kSummaryOnKV >> s) & 1) ? (a.N + V::kTileKV - 1) / V::kTileKV : (a.M + V::kTileQ - 1) / V::kTileQ;
}

template <class V> KDSL_DEVICE i64 summary_entries(const AttnArgs& a, int s) {
  return (i64)(((V::kSummaryPerB >> s) & 1) ? a.B : 1) * (((V::kSummaryPerH >> s) & 1) ? a.H : 1) *
         summary_tiles<V>(a, s);
}

// (min, max) of slot S over the tile of (b, h) that starts at row (or key) x0.
template <class V, int S>
KDSL_DEVICE int2 tile_summary(const AttnArgs& a, const int* summary, int b, int h, int x0) {
  i64 off = 0;
#pragma unroll
  for (int s = 0; s < S; ++s) off += summary_entries<V>(a, s);
  constexpr bool on_kv = (V::kSummaryOnKV >> S) & 1, per_b = (V::kSummaryPerB >> S) & 1,
                 per_h = (V::kSummaryPerH >> S) & 1;
  const int tile = x0 / (on_kv ? V::kTileKV : V::kTileQ);
  const i64 row = (i64)(per_b ? b : 0) * (per_h ? a.H : 1) + (per_h ? h : 0);
  return __ldg(reinterpret_cast<const int2*>(summary) + off + row * summary_tiles<V>(a, S) + tile);
}

// One warp per (slot, b, h, tile) entry, in layout order: the min and max of the slot's
// expression over the tile's rows (or keys) that exist (< M or < N).
template <class V>
KDSL_DEVICE void attention_tile_summary(const AttnArgs& a, const typename V::Captures& c, int* summary) {
  const int lane = threadIdx.x & 31;
  i64 e = ((i64)blockIdx.x * blockDim.x + threadIdx.x) / 32, off = 0;
#pragma unroll 1
  for (int s = 0; s < V::kSummaries; ++s) {
    const i64 n = summary_entries<V>(a, s);
    if (e >= n) {
      e -= n;
      off += n;
      continue;
    }
    const bool on_kv = (V::kSummaryOnKV >> s) & 1, per_h = (V::kSummaryPerH >> s) & 1;
    const int tiles = summary_tiles<V>(a, s), tile = (int)(e % tiles), row = (int)(e / tiles);
    const int nh = per_h ? a.H : 1, b = row / nh, h = row % nh;  // b = 0 unless per b
    const int len = on_kv ? a.N : a.M, size = on_kv ? V::kTileKV : V::kTileQ;
    const int x0 = tile * size, x1 = imin(x0 + size, len);
    int lo = 0x7fffffff, hi = -0x7fffffff - 1;
    for (int x = x0 + lane; x < x1; x += 32) {
      const int v = V::summary_value(a, c, s, b, h, x);
      lo = imin(lo, v);
      hi = imax(hi, v);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      lo = imin(lo, __shfl_xor_sync(0xffffffffu, lo, o));
      hi = imax(hi, __shfl_xor_sync(0xffffffffu, hi, o));
    }
    if (lane == 0) reinterpret_cast<int2*>(summary)[off + e] = make_int2(lo, hi);
    return;
  }
}

}  // namespace kdsl
