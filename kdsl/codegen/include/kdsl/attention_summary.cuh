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
// kernel's tile), summary_value(a, c, s, b, h, q, kv): slot s's expression at (q, kv) (a
// q slot ignores kv, a kv slot q), summary_floor / summary_ceiling(s): a min at or below the
// floor and a max at or above the ceiling decide every tile predicate (a whole-block entry is
// done once it has met both), and summary_byte_kind / summary_row for a slot that reads a
// 1-byte tensor's element at [..., q, kv] (summarize_warp_bytes).
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

constexpr int kSummaryWarps = 8;  // warps a block, and per entry of a whole-block slot read element by element

// Warps an entry of slot S takes: kSummaryWarps for a whole-block slot read element by element
// (summarize_block), one for any other (a row or key slot, a 1-byte mask: summarize_warp_bytes).
template <class V, int S> constexpr int entry_warps() {
  return ((V::kSummaryOnTile >> S) & 1) && V::summary_byte_kind(S) == 0 ? kSummaryWarps : 1;
}

// The warps slot S takes, padded to whole blocks. kdsl/runtime/summary.py (Layout.warps) counts
// them the same way.
template <class V, int S> KDSL_DEVICE i64 summary_warps(const AttnArgs& a) {
  const i64 w = summary_entries<V>(a, S) * entry_warps<V, S>();
  return (w + kSummaryWarps - 1) / kSummaryWarps * kSummaryWarps;
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

// A warp's (min, max) of whole-block slot S over row q's keys [k0, k1), key by key through
// V::summary_value. Rows q >= q1 (past the block) add nothing. (Reading a 1-byte mask's rows four
// bytes a lane was measured 4 % slower on an H200: bench/NOTES.md, fifty-ninth session.)
template <class V, int S>
KDSL_DEVICE void summarize_row(const AttnArgs& a, const typename V::Captures& c, int b, int h, int q, int q1, int k0,
                               int k1, int& lo, int& hi) {
  constexpr int kGroups = (V::kTileKV + 31) / 32;
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    const int kv = k0 + (threadIdx.x & 31) + 32 * g;
    if (q < q1 && kv < k1) {
      const int v = V::summary_value(a, c, S, b, h, q, kv);
      lo = imin(lo, v);
      hi = imax(hi, v);
    }
  }
}

// One warp's share of whole-block slot S: rows q0 + part, q0 + part + kWarps, ... of [q0, q1),
// keys [k0, k1) (summarize_row); the kWarps warps of a block share an
// entry (attention_tile_summary). Issued this way a block has 8x the loads in flight that one
// warp's unrolled loop had: ptxas consumed each load a few instructions after it.
// A slot whose values have a floor and a ceiling (a bool element as 0 / 1) stops once the warp
// has met both: a random mask's block is done after one round of rows, a uniform one is read
// whole. The check waits for the round's loads, so it comes once per kRounds rows.
template <class V, int S, int kWarps = kSummaryWarps>
KDSL_DEVICE void summarize_block(const AttnArgs& a, const typename V::Captures& c, int b, int h, int q0, int q1,
                                 int k0, int k1, int part, int& lo, int& hi) {
  constexpr int kRounds = 4, kFloor = V::summary_floor(S), kCeiling = V::summary_ceiling(S);
  constexpr bool kBounded = kFloor != kIntMin && kCeiling != kIntMax;
#pragma unroll 1
  for (int q0w = q0 + part; q0w < q1; q0w += kRounds * kWarps) {
#pragma unroll
    for (int r = 0; r < kRounds; ++r) {  // kRounds rows of loads in flight before the check
      const int q = q0w + r * kWarps;
      summarize_row<V, S>(a, c, b, h, q, q1, k0, k1, lo, hi);
    }
    if constexpr (kBounded) {
      if (__any_sync(0xffffffffu, lo <= kFloor) && __any_sync(0xffffffffu, hi >= kCeiling)) {
        lo = kFloor;  // the warp's min and max: every lane's, as the reduction would give them
        hi = kCeiling;
        break;
      }
    }
  }
}

#ifndef KDSL_SUMMARY_BYTES  // 0: 1-byte masks element by element too (an A/B switch, bench/NOTES.md)
#define KDSL_SUMMARY_BYTES 1
#endif

// Bit 7 of some byte set where v has a zero byte (and, with one, maybe of bytes above it).
KDSL_DEVICE unsigned zero_bytes(unsigned v) { return (v - 0x01010101u) & ~v & 0x80808080u; }

// (min, max) of 16 bool bytes into lo / hi (a nonzero byte is 1): the zero test takes ~12
// instructions for all 16 bytes.
KDSL_DEVICE void bool16_min_max(const uint4 w, int& lo, int& hi) {
  const unsigned zero = zero_bytes(w.x) | zero_bytes(w.y) | zero_bytes(w.z) | zero_bytes(w.w);
  lo = imin(lo, zero != 0u ? 0 : 1);
  hi = imax(hi, (w.x | w.y | w.z | w.w) != 0u ? 1 : 0);
}

// The (min, max) of unsigned (kKind 2) or signed (3) bytes as two u16x2 words, each byte in a
// 16-bit half: min and max of u16x2 are one instruction each on sm_90 (VIMNMX.U16x2, and
// VIMNMX3 of three), where the byte SIMD ones (__vminu4) take ~6. Signed bytes are biased
// by 0x80, which makes their order the unsigned one. A lane that added nothing reads as the
// empty range (lo the largest byte, hi the smallest), which min / max folds leave unchanged.
template <int kKind>
struct ByteRange {
  static constexpr unsigned kHalves = 0x00ff00ffu, kBias = kKind == 3 ? 0x80808080u : 0u;
  unsigned m = kHalves, M = 0u;
  KDSL_DEVICE void add(uint4 w) {
    w.x ^= kBias, w.y ^= kBias, w.z ^= kBias, w.w ^= kBias;
    // bytes 0 and 2 (1 and 3) of a word into its 16-bit halves: one PRMT each
    const unsigned e0 = __byte_perm(w.x, 0u, 0x4240u), e1 = __byte_perm(w.y, 0u, 0x4240u),
                   e2 = __byte_perm(w.z, 0u, 0x4240u), e3 = __byte_perm(w.w, 0u, 0x4240u);
    const unsigned o0 = __byte_perm(w.x, 0u, 0x4341u), o1 = __byte_perm(w.y, 0u, 0x4341u),
                   o2 = __byte_perm(w.z, 0u, 0x4341u), o3 = __byte_perm(w.w, 0u, 0x4341u);
    m = __vminu2(m, __vminu2(__vminu2(__vminu2(e0, e1), __vminu2(e2, e3)), __vminu2(__vminu2(o0, o1), __vminu2(o2, o3))));
    M = __vmaxu2(M, __vmaxu2(__vmaxu2(__vmaxu2(e0, e1), __vmaxu2(e2, e3)), __vmaxu2(__vmaxu2(o0, o1), __vmaxu2(o2, o3))));
  }
  KDSL_DEVICE int lo() const { return imin((int)(m & 0xffffu), (int)(m >> 16)) - (kKind == 3 ? 128 : 0); }
  KDSL_DEVICE int hi() const { return imax((int)(M & 0xffffu), (int)(M >> 16)) - (kKind == 3 ? 128 : 0); }
};

// Whole-block slot S where it is a 1-byte tensor's element at [..., q, kv] (V::summary_byte_kind):
// one warp reads the block 16 bytes a lane, a first round of one chunk a lane (four rows of a
// 128-key tile: a random mask's block is decided there), then kBatch chunks a lane at once, the
// early stop checked after each. A lane keeps one column of 16 bytes and moves 32 / chunks rows a
// round (lanes past a whole number of rows idle: 2 of 32 at 176 keys), so no chunk's row is an
// integer division (~40 instructions a chunk, which held a u8 summary to 44 % of DRAM bandwidth
// at 77 % of its issue slots on an H200: bench/results/h200-2026-12-02-s69/call5; the stepped
// scan ran label_not_three's summary x1.53 faster, s70/call1). A warp an entry and no barrier, so
// a multiprocessor holds many blocks' loads in flight. False, having read nothing, where a row or
// the stride between rows is not 16-byte aligned or a row is wider than 32 chunks:
// summarize_block then.
template <class V, int S>
KDSL_DEVICE bool summarize_warp_bytes(const AttnArgs& a, const typename V::Captures& c, int b, int h, int q0, int q1,
                                      int k0, int k1, int& lo, int& hi) {
  constexpr int kKind = V::summary_byte_kind(S), kFloor = V::summary_floor(S), kCeiling = V::summary_ceiling(S);
  constexpr bool kBounded = kFloor != kIntMin && kCeiling != kIntMax;
  constexpr int kBatch = 8;
  const unsigned char* row0 = V::summary_row(a, c, S, b, h, q0);
  const i64 stride = V::summary_row(a, c, S, b, h, q0 + 1) - row0;
  row0 += k0;
  if (((reinterpret_cast<unsigned long long>(row0) | (unsigned long long)stride | (unsigned)(k1 - k0)) & 15u) != 0 ||
      k1 - k0 > 32 * 16) {
    return false;
  }
  const int chunks = (k1 - k0) >> 4, lane = (int)(threadIdx.x & 31);
  const auto decided = [&] {
    return kBounded && __any_sync(0xffffffffu, lo <= kFloor) && __any_sync(0xffffffffu, hi >= kCeiling);
  };
  const int per_round = 32 / chunks, mine = lane / chunks;  // rows a round; the lane's first row
  const int count = mine < per_round ? (q1 - q0 - mine + per_round - 1) / per_round : 0;  // chunks it reads
  const i64 round = (i64)per_round * stride;  // bytes from one of its chunks to the next
  const unsigned char* at = row0 + (i64)mine * stride + (lane - mine * chunks) * 16;  // its next chunk
  const auto reads = [&](int n) { return n < count; };  // its n-th chunk
  const auto chunk = [&] {
    const uint4 w = __ldg(reinterpret_cast<const uint4*>(at));
    at += round;
    return w;
  };
  ByteRange<kKind> range;  // kKind 2, 3: folded into lo / hi before each check
  const auto add = [&](uint4 w) {
    if constexpr (kKind == 1) bool16_min_max(w, lo, hi);
    else range.add(w);
  };
  const auto fold_decided = [&] {
    if (kKind != 1 && reads(0)) {
      lo = imin(lo, range.lo());
      hi = imax(hi, range.hi());
    }
    return decided();
  };
  if (reads(0)) add(chunk());
#pragma unroll 1
  for (int n0 = 1; n0 * per_round < q1 - q0 && !fold_decided(); n0 += kBatch) {
    uint4 w[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      if (reads(n0 + j)) w[j] = chunk();
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      if (reads(n0 + j)) add(w[j]);
    }
  }
  if (kKind != 1 && reads(0)) {  // the last batch's
    lo = imin(lo, range.lo());
    hi = imax(hi, range.hi());
  }
  if (decided()) {  // the warp's min and max: every lane's, as the reduction would give them
    lo = kFloor;
    hi = kCeiling;
  }
  return true;
}

KDSL_DEVICE void warp_min_max(int& lo, int& hi) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    lo = imin(lo, __shfl_xor_sync(0xffffffffu, lo, o));
    hi = imax(hi, __shfl_xor_sync(0xffffffffu, hi, o));
  }
}

// Slot S's warps from warp w on (w counted from slot S's first warp), then the next slot's.
template <class V, int S>
KDSL_DEVICE void summarize_entry(const AttnArgs& a, const typename V::Captures& c, int* summary, i64 w, i64 off) {
  if constexpr (S < V::kSummaries) {
    const i64 n = summary_entries<V>(a, S), warps = summary_warps<V, S>(a);
    if (w >= warps) {
      summarize_entry<V, S + 1>(a, c, summary, w - warps, off + n);
      return;
    }
    constexpr bool on_kv = (V::kSummaryOnKV >> S) & 1, on_tile = (V::kSummaryOnTile >> S) & 1,
                   per_h = (V::kSummaryPerH >> S) & 1;
    constexpr int kWarps = entry_warps<V, S>();
    const i64 e = w / kWarps;
    if (e >= n) return;  // a slot's warps are padded to whole blocks (uniform in a block of kWarps > 1)
    const int tiles = summary_tiles<V>(a, S), tile = (int)(e % tiles), row = (int)(e / tiles);
    const int nh = per_h ? a.H : 1, b = row / nh, h = row % nh;  // b = 0 unless per b
    int lo = kIntMax, hi = kIntMin;
    if constexpr (on_tile) {
      const int tk_count = (a.N + V::kTileKV - 1) / V::kTileKV, part = (int)(w % kWarps);
      const int q0 = (tile / tk_count) * V::kTileQ, k0 = (tile % tk_count) * V::kTileKV;
      const int q1 = imin(q0 + V::kTileQ, a.M), k1 = imin(k0 + V::kTileKV, a.N);
      // a block empty by position is never read: it gets the unknown range, not a read of its data
      if (V::summary_skip(a, c, q0, q1 - 1, k0, k1 - 1)) {
        lo = kIntMin, hi = kIntMax;
      } else {
        bool read = false;
        if constexpr (KDSL_SUMMARY_BYTES && V::summary_byte_kind(S) != 0) {
          read = summarize_warp_bytes<V, S>(a, c, b, h, q0, q1, k0, k1, lo, hi);
        }
        if (!read) summarize_block<V, S, kWarps>(a, c, b, h, q0, q1, k0, k1, part, lo, hi);
      }
      warp_min_max(lo, hi);
      if constexpr (kWarps > 1) {  // this block's kWarps warps: one entry
        __shared__ int2 part_min_max[kWarps];
        if ((threadIdx.x & 31) == 0) part_min_max[part] = make_int2(lo, hi);
        __syncthreads();  // uniform: every warp of the block summarises this entry
        if (threadIdx.x == 0) {
#pragma unroll
          for (int p = 1; p < kWarps; ++p) {
            lo = imin(lo, part_min_max[p].x);
            hi = imax(hi, part_min_max[p].y);
          }
          reinterpret_cast<int2*>(summary)[off + e] = make_int2(lo, hi);
        }
      } else if ((threadIdx.x & 31) == 0) {
        reinterpret_cast<int2*>(summary)[off + e] = make_int2(lo, hi);
      }
    } else {
      const int len = on_kv ? a.N : a.M, size = on_kv ? V::kTileKV : V::kTileQ;
      const int x0 = tile * size;
      summarize_line<V, S>(a, c, b, h, x0, imin(x0 + size, len), lo, hi);
      warp_min_max(lo, hi);
      if ((threadIdx.x & 31) == 0) reinterpret_cast<int2*>(summary)[off + e] = make_int2(lo, hi);
    }
  }
}

// Warps in layout order: entry_warps an entry, each slot's warps padded to whole blocks (so that
// the entries of a slot read by a block of warps start on a block). Blocks of kSummaryWarps
// warps (runtime/driver.py WarpKernel).
template <class V>
KDSL_DEVICE void attention_tile_summary(const AttnArgs& a, const typename V::Captures& c, int* summary) {
  summarize_entry<V, 0>(a, c, summary, ((i64)blockIdx.x * blockDim.x + threadIdx.x) / 32, 0);
}

}  // namespace kdsl
