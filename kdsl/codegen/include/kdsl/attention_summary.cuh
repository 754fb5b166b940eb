// kdsl/attention_summary.cuh — runtime tile summaries for masks that read data.
//
// Mask analysis bounds an integer expression of the data by its min and max over a block:
// over a tile's rows when it depends on the query row only (doc_q[b, q]), over its keys when
// it depends on the key only, over the whole block when it depends on both (keep[b, q, kv] as
// 0 / 1): the (qmin e) ... (kvmax e), (tmin e) / (tmax e) of the tile predicates. Each distinct
// e is a slot. attention_tile_summary() computes every slot for every tile on the GPU before
// the attention kernel runs; V::tile() then reads an int2 per slot instead of the tile's data.
//
// Layout, slot after slot: slot s is [nb][nh][tiles] int2 (min, max), with nb = B if its
// expression reads b (else 1), nh = H if it reads h (else 1), and tiles = ceil(M / kTileQ)
// for a q slot, ceil(N / kTileKV) for a kv slot, both multiplied (q tile major) for a whole-
// block slot. kdsl/runtime/summary.py sizes it the same way.
//
// The generated Variant provides: kSummaries (slot count), bit masks kSummaryOnKV,
// kSummaryOnTile, kSummaryPerB, kSummaryPerH (bit s: slot s), kTileQ, kTileKV (the attention
// kernel's tile), and summary_value(a, c, s, b, h, q, kv): slot s's expression at (q, kv) (a
// q slot ignores kv, a kv slot q).
#pragma once
#include "kdsl/attention_common.cuh"

namespace kdsl {

template <class V> KDSL_DEVICE int summary_tiles(const AttnArgs& a, int s) {
  const int tq = (a.M + V::kTileQ - 1) / V::kTileQ, tk = (a.N + V::kTileKV - 1) / V::kTileKV;
  return ((V::kSummaryOnTile >> s) & 1) ? tq * tk : ((V::kSummaryOnKV >> s) & 1) ? tk : tq;
}

template <class V> KDSL_DEVICE i64 summary_entries(const AttnArgs& a, int s) {
  return (i64)(((V::kSummaryPerB >> s) & 1) ? a.B : 1) * (((V::kSummaryPerH >> s) & 1) ? a.H : 1) *
         summary_tiles<V>(a, s);
}

// (min, max) of slot S over the block of (b, h) whose first row is q0 and first key k0.
template <class V, int S>
KDSL_DEVICE int2 tile_summary(const AttnArgs& a, const int* summary, int b, int h, int q0, int k0) {
  i64 off = 0;
#pragma unroll
  for (int s = 0; s < S; ++s) off += summary_entries<V>(a, s);
  constexpr bool on_kv = (V::kSummaryOnKV >> S) & 1, on_tile = (V::kSummaryOnTile >> S) & 1,
                 per_b = (V::kSummaryPerB >> S) & 1, per_h = (V::kSummaryPerH >> S) & 1;
  const int tq = q0 / V::kTileQ, tk = k0 / V::kTileKV;
  const int tile = on_tile ? tq * ((a.N + V::kTileKV - 1) / V::kTileKV) + tk : on_kv ? tk : tq;
  const i64 row = (i64)(per_b ? b : 0) * (per_h ? a.H : 1) + (per_h ? h : 0);
  return __ldg(reinterpret_cast<const int2*>(summary) + off + row * summary_tiles<V>(a, S) + tile);
}

// A warp's (min, max) of slot S over the rows (or keys) [x0, x1) of a 1-D slot.
template <class V, int S>
KDSL_DEVICE void summarize_line(const AttnArgs& a, const typename V::Captures& c, int b, int h, int x0, int x1,
                                int& lo, int& hi) {
  for (int x = x0 + (threadIdx.x & 31); x < x1; x += 32) {
    const int v = V::summary_value(a, c, S, b, h, x, x);
    lo = imin(lo, v);
    hi = imax(hi, v);
  }
}

// A warp's (min, max) of whole-block slot S over rows [q0, q1) and keys [k0, k1): a lane takes
// keys lane, lane + 32, ..., of 8 rows at a time, so that 8 * ceil(kTileKV / 32) independent
// loads are in flight a lane (a bool mask's rows are 32-byte sectors).
template <class V, int S>
KDSL_DEVICE void summarize_block(const AttnArgs& a, const typename V::Captures& c, int b, int h, int q0, int q1,
                                 int k0, int k1, int& lo, int& hi) {
  constexpr int kRows = 8, kGroups = (V::kTileKV + 31) / 32;
  const int lane = threadIdx.x & 31;
#pragma unroll 1
  for (int r0 = q0; r0 < q1; r0 += kRows) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        const int q = r0 + r, kv = k0 + lane + 32 * g;
        if (q < q1 && kv < k1) {
          const int v = V::summary_value(a, c, S, b, h, q, kv);
          lo = imin(lo, v);
          hi = imax(hi, v);
        }
      }
    }
  }
}

// Entry e of slot S (and the slots after it, e counted from slot S's first entry), one warp.
template <class V, int S>
KDSL_DEVICE void summarize_entry(const AttnArgs& a, const typename V::Captures& c, int* summary, i64 e, i64 off) {
  if constexpr (S < V::kSummaries) {
    const i64 n = summary_entries<V>(a, S);
    if (e >= n) {
      summarize_entry<V, S + 1>(a, c, summary, e - n, off + n);
      return;
    }
    constexpr bool on_kv = (V::kSummaryOnKV >> S) & 1, on_tile = (V::kSummaryOnTile >> S) & 1,
                   per_h = (V::kSummaryPerH >> S) & 1;
    const int tiles = summary_tiles<V>(a, S), tile = (int)(e % tiles), row = (int)(e / tiles);
    const int nh = per_h ? a.H : 1, b = row / nh, h = row % nh;  // b = 0 unless per b
    int lo = 0x7fffffff, hi = -0x7fffffff - 1;
    if constexpr (on_tile) {
      const int tk_count = (a.N + V::kTileKV - 1) / V::kTileKV;
      const int q0 = (tile / tk_count) * V::kTileQ, k0 = (tile % tk_count) * V::kTileKV;
      summarize_block<V, S>(a, c, b, h, q0, imin(q0 + V::kTileQ, a.M), k0, imin(k0 + V::kTileKV, a.N), lo, hi);
    } else {
      const int len = on_kv ? a.N : a.M, size = on_kv ? V::kTileKV : V::kTileQ;
      const int x0 = tile * size;
      summarize_line<V, S>(a, c, b, h, x0, imin(x0 + size, len), lo, hi);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      lo = imin(lo, __shfl_xor_sync(0xffffffffu, lo, o));
      hi = imax(hi, __shfl_xor_sync(0xffffffffu, hi, o));
    }
    if ((threadIdx.x & 31) == 0) reinterpret_cast<int2*>(summary)[off + e] = make_int2(lo, hi);
  }
}

// One warp per (slot, b, h, tile) entry, in layout order: the min and max of the slot's
// expression over the tile's rows, keys or block that exist (< M, < N).
template <class V>
KDSL_DEVICE void attention_tile_summary(const AttnArgs& a, const typename V::Captures& c, int* summary) {
  summarize_entry<V, 0>(a, c, summary, ((i64)blockIdx.x * blockDim.x + threadIdx.x) / 32, 0);
}

}  // namespace kdsl
