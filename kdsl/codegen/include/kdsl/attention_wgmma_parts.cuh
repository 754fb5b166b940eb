// kdsl/attention_wgmma_parts.cuh — the pieces attention_wgmma.cuh's kernel is built from:
// its shared-memory and register layout (Cfg), what survives of a tile (Keep), the kv tiles an
// item visits (TileWalk), the producer's word per ring stage, masked items' output, and the
// KDSL_TRACE hooks of tools/dev/item_trace.py.
#pragma once
#include "kdsl/attention_common.cuh"
#include "kdsl/hopper.cuh"

// KDSL_TRACE=1 (tools/dev/item_trace.py only): the producer and one thread of each consumer
// warpgroup of CTAs 0-3 record clock64() at the points of a work item's life (kTrace*), into
// kdsl_trace: 8192 (clock, event) pairs per (CTA, role), the role 0 for the producer.
#ifndef KDSL_TRACE
#define KDSL_TRACE 0
#endif
#if KDSL_TRACE
__device__ unsigned long long kdsl_trace[4 * 4 * 8192 * 2];
#endif

namespace kdsl {


namespace attn_wgmma_detail {

// The slope step's forms (Variant::kSlopeStep, passes/tiling.py slope_form): none; the slope
// as the A fragment in registers (one word a thread live across the kv loop); the slope in
// shared memory, each warpgroup's 64 rows written per item (no register: at three consumer
// warpgroups' 160 registers the fragment made ptxas serialise the wgmmas, C7512).
enum { kSlopeNone = 0, kSlopeRegisters = 1, kSlopeShared = 2 };
constexpr int kSlopeRowsBytes = 64 * 128;  // a warpgroup's A operand: Q's layout, one k-step used

enum { kTraceClaim, kTraceQIssued, kTraceLastIssued, kTraceItem, kTraceQReady, kTraceFirstS, kTraceTileS,
       kTraceLastPV, kTraceStored, kTraceEpilogue };
KDSL_DEVICE void trace(int role, int& n, int event, int item) {
#if KDSL_TRACE
  if (blockIdx.x < 4 && n < 8192) {
    unsigned long long* slot = kdsl_trace + 2 * ((blockIdx.x * 4 + role) * 8192 + n++);
    slot[0] = clock64();
    slot[1] = ((unsigned long long)item << 8) | (unsigned)event;
  }
#endif
}

// What survives of a general tile (survivors() in attention_fwd_wgmma): a key interval per
// row, as columns, for masks with one (V::kKeyBounds), else a bit per S element.
// The interval shares the bits' registers (both live across the wgmmas: a kernel with both
// kinds of tile spilled at D=128 with them apart).
struct Keep {
  u64 bits[2];   // or row r's interval: lo in the low word of bits[r], hi in the high word
  bool by_keys;  // which of the two the tile's survivors are
  bool by_stream;  // neither: the softmax applies the streamed mask itself (kMaskInSoftmax)
  KDSL_DEVICE void set_keys(int r, int lo, int hi) { bits[r] = (u64)(u32)lo | ((u64)(u32)hi << 32); }
  KDSL_DEVICE int lo(int r) const { return (int)(u32)bits[r]; }
  KDSL_DEVICE int hi(int r) const { return (int)(u32)(bits[r] >> 32); }
};

template <class Elem, int D, int DV, int BN, int NCWG, int STAGES, int SB = 0, int SLOPE = kSlopeNone,
          bool ROWSUM = false, bool OTAB = false, int SB2 = 0>
struct Cfg {
  static constexpr int kBM = 64 * NCWG;
  static constexpr int kThreads = 128 * (NCWG + 1);
  static constexpr int kColBlocks = (D + 63) / 64;   // 64-element (128-byte) column blocks of Q, K
  static constexpr int kVColBlocks = (DV + 63) / 64;  // ... of V
  static constexpr int kQBytes = kBM * 128 * kColBlocks;  // what Q's TMA boxes write
  static constexpr int kKBytes = BN * 128 * kColBlocks;
  static constexpr int kVBytes = BN * 128 * kVColBlocks;
  // A streamed capture's tile (elements of SB bytes; 0: none), stored like Q: BN columns as
  // 128-byte column blocks of BM rows in the 128-byte swizzle. passes/streaming.py.
  static constexpr int kStreamCols = SB ? 128 / SB : 1;  // columns of one column block
  static constexpr int kStreamBlocks = SB ? (BN * SB + 127) / 128 : 0;
  static constexpr int kStreamBytes = kStreamBlocks * kBM * 128;
  // ... and the mask's second streamed capture's (elements of SB2 bytes; 0: none), the same way
  static constexpr int kStream2Cols = SB2 ? 128 / SB2 : 1;
  static constexpr int kStream2Blocks = SB2 ? (BN * SB2 + 127) / 128 : 0;
  static constexpr int kStream2Bytes = kStream2Blocks * kBM * 128;
  // The slope step's operands (SLOPE: V::kSlopeStep; the slope step below), after Q: the
  // column offsets (B), and for kSlopeShared each warpgroup's slope rows (A), 8 KB each.
  static constexpr int kSlopeBBytes = SLOPE == kSlopeRegisters ? (BN + 63) / 64 * 2048 : SLOPE == kSlopeShared ? BN * 128 : 0;
  static constexpr int kSlopeBytes = kSlopeBBytes + (SLOPE == kSlopeShared ? NCWG * kSlopeRowsBytes : 0);
  static constexpr int kSlopeOffset = kQBytes, kSlopeAOffset = kQBytes + kSlopeBBytes;
  static constexpr int kKOffset = kQBytes + kSlopeBytes;
  static constexpr int kVOffset = kKOffset + STAGES * kKBytes;
  // ROWSUM (V::kTensorRowSum): a block of BN rows of ones after the V ring, which P V reads as
  // 8 more columns of every stage's V (its descriptor's next 64-column block): their products
  // are P's row sums, in the O accumulator beside O (kPVN columns in all)
  static constexpr int kOnesOffset = kVOffset + STAGES * kVBytes, kOnesBytes = ROWSUM ? BN * 128 : 0;
  static constexpr int kPVN = DV + (ROWSUM ? 8 : 0);
  static constexpr int kSOffset = kOnesOffset + kOnesBytes;
  // OTAB (V::kOffsetTable, passes/offset_score.py): per consumer warpgroup two tables of the
  // score's offset part at a tile's 64 + BN - 1 offsets q - kv, filled in turn (kOffsetStride
  // floats each, a multiple of 4 so that the barriers after them stay 8-byte aligned)
  static constexpr int kOffsetStride = (64 + BN - 1 + 3) / 4 * 4;
  static constexpr int kS2Offset = kSOffset + STAGES * kStreamBytes;
  static constexpr int kOffsetOffset = kS2Offset + STAGES * kStream2Bytes;
  static constexpr int kOffsetBytes = OTAB ? NCWG * 2 * kOffsetStride * 4 : 0;
  static constexpr int kBarOffset = kOffsetOffset + kOffsetBytes;
  static constexpr int kBars = 2 + 4 * STAGES;       // Q full/empty, then full/empty for K and V
  static constexpr int kInfoOffset = kBarOffset + kBars * 8;  // a tile_info word per stage
  static constexpr int kItemOffset = kInfoOffset + STAGES * 4;  // a work-item word per stage
  static constexpr int kSmemBytes = 1024 + kItemOffset + STAGES * 4;  // + realignment slack
  // Register split between the roles (setmaxnreg): the total must fit 64K registers.
  static constexpr int kProducerRegs = NCWG <= 2 ? 40 : 32;
  static constexpr int kConsumerRegs = NCWG == 1 ? 240 : (NCWG == 2 ? 232 : 160);
  static constexpr int kSRegs = BN / 2;              // S accumulator floats per thread
  static constexpr int kORegs = kPVN / 2;            // O (and row sum) accumulator floats per thread

  static_assert(sizeof(Elem) == 2, "Elem must be a 16-bit type (bf16_t or f16_t)");
  static_assert(D % 16 == 0 && D >= 16 && D <= 256, "D must be a multiple of 16 in [16, 256]");
  static_assert(DV % 16 == 0 && DV >= 16 && DV <= 256, "DV must be a multiple of 16 in [16, 256]");
  static_assert(BN % 16 == 0 && BN >= 64 && BN <= 256, "BN must be a multiple of 16 in [64, 256]");
  static_assert(NCWG >= 1 && NCWG <= 3, "1 to 3 consumer warpgroups");
  static_assert(SB == 0 || SB == 1 || SB == 2 || SB == 4, "a streamed capture has 1-, 2- or 4-byte elements");
  static_assert(SB2 == 0 || SB2 == 1 || SB2 == 2 || SB2 == 4, "a streamed capture has 1-, 2- or 4-byte elements");
  static_assert(SB2 == 0 || SB != 0, "a second ring only beside the first");
  static_assert(!ROWSUM || DV == 64, "the ones column follows a single 64-column block of V");
  static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * NCWG <= 65536, "register split too large");
  static_assert(kSmemBytes <= 227 * 1024, "tiles do not fit in shared memory");
};

KDSL_DEVICE int imin2(int x, int y) { return x < y ? x : y; }
KDSL_DEVICE int imax2(int x, int y) { return x > y ? x : y; }

// A tile's key bits as a thread's S elements keep them (Keep::bits): vote m is the bits of
// columns 32m..32m+31 (bit l: column 32m + l); element i of the thread, column 8 (i / 4) + 2t +
// (i & 1) of both its rows, takes bit i. Per vote: the thread's two columns of each 8 (a byte's
// low bits after the shift by 2t), each pair twice (the two rows), four bits a column group.
template <int BN>
KDSL_DEVICE u64 spread_key_bits(const u32 (&votes)[(BN + 31) / 32], int t) {
  static_assert(BN <= 128, "a thread's S elements of one tile take 64 bits");
  u64 out = 0;
#pragma unroll
  for (int m = 0; m < (BN + 31) / 32; ++m) {
    u32 x = (votes[m] >> (2 * t)) & 0x03030303u;  // group 4m + k's pair in byte k
    x = (x | (x << 2)) & 0x0F0F0F0Fu;              // ... and again for the second row
    x = (x | (x >> 4)) & 0x00FF00FFu;              // nibbles together
    x = (x | (x >> 8)) & 0x0000FFFFu;
    out |= (u64)x << (16 * m);
  }
  return out;
}

// The keep bits of a thread's elements whose columns 2t + e + 8g (g = 0..BN/8-1, e its column
// parity) lie in [lo, hi] (columns of the tile, relative to the thread's first, 2t), for one
// row r: bit 4g + 2r + e, as Keep::bits numbers element i = 4 (i / 4) + 2r + e.
template <int BN>
KDSL_DEVICE u64 interval_bits(int lo, int hi, int r) {
  u64 out = 0;
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int g_lo = imax2((lo - e + 7) >> 3, 0), g_hi = imin2((hi - e) >> 3, BN / 8 - 1);  // >> 3 floors
    const u32 m = g_lo <= g_hi ? (2u << g_hi) - (1u << g_lo) : 0u;  // groups g_lo..g_hi
    u64 x = m;  // bit g to bit 4g
    x = (x | (x << 24)) & 0x000000FF000000FFull;
    x = (x | (x << 12)) & 0x000F000F000F000Full;
    x = (x | (x << 6)) & 0x0303030303030303ull;
    x = (x | (x << 3)) & 0x1111111111111111ull;
    out |= x << (2 * r + e);
  }
  return out;
}
// x, which the compiler may no longer assume equal to any value it knows: what is derived
// from it is computed here, not earlier and kept live.
KDSL_DEVICE int opaque(int x) {
  asm volatile("" : "+r"(x));
  return x;
}
// threadIdx.x read anew (volatile: not merged with an earlier read), for values derived from it
// that are cheaper to recompute than to keep live.
KDSL_DEVICE u32 fresh_thread_index() {
  u32 t;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(t));
  return t;
}

// Element `odd` (0 or 1) of the pair of a streamed capture's tile at p (kStreamBytes): a
// float element as a float (both halves of a 16-bit pair from one 32-bit load; the compiler
// merges the two calls of a pair into one LDS), an integer or bool one (a streamed mask's,
// passes/streaming.py) as an int.
template <class E> struct StreamValueOf { typedef float T; };
template <> struct StreamValueOf<u8> { typedef int T; };
template <> struct StreamValueOf<signed char> { typedef int T; };
template <> struct StreamValueOf<int> { typedef int T; };
template <class E> KDSL_DEVICE typename StreamValueOf<E>::T stream_elem(const u8* p, int odd);
template <> KDSL_DEVICE float stream_elem<bf16_t>(const u8* p, int odd) {
  const u32 w = *reinterpret_cast<const u32*>(p);
  return __uint_as_float(odd ? (w & 0xffff0000u) : (w << 16));
}
template <> KDSL_DEVICE float stream_elem<f16_t>(const u8* p, int odd) {
  const u32 w = *reinterpret_cast<const u32*>(p);
  return f16_to_float((u16)(odd ? w >> 16 : w & 0xffffu));
}
template <> KDSL_DEVICE float stream_elem<float>(const u8* p, int odd) {
  return reinterpret_cast<const float*>(p)[odd];
}
template <> KDSL_DEVICE int stream_elem<u8>(const u8* p, int odd) {
  const u32 w = *reinterpret_cast<const u16*>(p);  // the pair: one 16-bit read
  return odd ? w >> 8 : w & 0xffu;
}
template <> KDSL_DEVICE int stream_elem<signed char>(const u8* p, int odd) {
  const u32 w = *reinterpret_cast<const u16*>(p);
  return (int)(signed char)(odd ? w >> 8 : w & 0xffu);
}
template <> KDSL_DEVICE int stream_elem<int>(const u8* p, int odd) { return reinterpret_cast<const int*>(p)[odd]; }
// A streamed tile's pair of elements in shared memory, addressed as (lane bits) ^ (chunk bits)
// + a column block's offset: the lane's part of the swizzle (its row's g = r % 8, its t) is
// fixed, a pair's is a constant once unrolled, so an address is one XOR (a row's base has its
// low 7 bits zero: 128-byte rows of a 1024-byte aligned tile). The offsets are those
// attention_wgmma.cuh's stream_ptr computes.
template <int SB> KDSL_DEVICE u32 stream_lane_bits(int g, int t) {
  return SB == 1 ? (g << 4) | (2 * t) : SB == 2 ? (g << 4) | (4 * t) : ((g ^ (t >> 1)) << 4) | (8 * (t & 1));
}
template <int SB> KDSL_DEVICE constexpr u32 stream_chunk_bits(int jj) {  // jj: the 8-column group
  return SB == 1 ? ((jj / 2 % 8) << 4) | (8 * (jj % 2)) : SB == 2 ? (jj % 8) << 4 : (2 * (jj % 4)) << 4;
}
template <int SB> KDSL_DEVICE constexpr int stream_block(int jj) { return jj / (16 / SB); }  // its column block
// A ring of streamed tiles (elements of SB bytes, STAGE_BYTES a stage) as a thread of row `row`
// reads its pairs of elements (stream_pair): the lane's part of the address fixed here, a pair's
// a constant once unrolled.
template <int SB, int BM, int STAGE_BYTES>
struct StreamPairs {
  static constexpr int kSB = SB ? SB : 2;  // (any width for a ring no one reads)
  u32 lane;
  KDSL_DEVICE StreamPairs(u32 ring, int row, int g, int t) : lane((ring + row * 128) | stream_lane_bits<kSB>(g, t)) {}
  KDSL_DEVICE u32 at(int slot, int i) const {  // element i of the thread's S registers, in ring stage slot
    const int jj = i / 4;
    return ((lane + slot * STAGE_BYTES) ^ stream_chunk_bits<kSB>(jj)) + stream_block<kSB>(jj) * BM * 128 +
           ((i >> 1) & 1) * 8 * 128;
  }
};

// Whether no byte of rows [row, row + 16) of a streamed tile of 1-byte elements is zero: a
// warp's rows (passes/stream_mask.py). The tile at shared address `tile` holds BLOCKS column
// blocks of BM 128-byte rows; a warp's rows of a block are 2 KB, read 16 bytes a lane from each
// quarter (conflict-free), a word holding a zero byte where (w - 0x01010101) & ~w has a top bit set.
// volatile: not moved above the mbarrier wait that makes the tile valid (as stream_pair).
template <int BM, int BLOCKS>
KDSL_DEVICE bool warp_rows_nonzero(u32 tile, int row, int lane) {
  u32 zero = 0;
#pragma unroll
  for (int cb = 0; cb < BLOCKS; ++cb) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      u32 w[4];
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                   : "r"(tile + (u32)((cb * BM + row) * 128 + k * 512 + lane * 16)));
#pragma unroll
      for (int x = 0; x < 4; ++x) zero |= (w[x] - 0x01010101u) & ~w[x];
    }
  }
  return __all_sync(0xffffffffu, (zero & 0x80808080u) == 0u);
}

// Both elements of the pair at shared address s, one read: 16 bits (1-byte elements), 32
// (2-byte), 64 (4-byte). An integer or bool element as an int, a float one as a float.
// volatile: an asm without it is a pure function of the address to the compiler, which could
// move the read above the mbarrier wait that makes the tile valid (the SASS of the streamed
// masks' 20 builds at 64 / 128 is the same either way).
template <class E>
KDSL_DEVICE void stream_pair(u32 s, typename StreamValueOf<E>::T& v0, typename StreamValueOf<E>::T& v1);
template <> KDSL_DEVICE void stream_pair<u8>(u32 s, int& v0, int& v1) {
  unsigned short w;
  asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(w) : "r"(s));
  v0 = w & 0xff, v1 = w >> 8;
}
template <> KDSL_DEVICE void stream_pair<signed char>(u32 s, int& v0, int& v1) {
  unsigned short w;
  asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(w) : "r"(s));
  v0 = (int)(signed char)(w & 0xff), v1 = (int)(signed char)(w >> 8);
}
template <> KDSL_DEVICE void stream_pair<int>(u32 s, int& v0, int& v1) {
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(v0), "=r"(v1) : "r"(s));
}
template <> KDSL_DEVICE void stream_pair<float>(u32 s, float& v0, float& v1) {
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v0), "=f"(v1) : "r"(s));
}
template <> KDSL_DEVICE void stream_pair<bf16_t>(u32 s, float& v0, float& v1) {
  u32 w;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(w) : "r"(s));
  v0 = __uint_as_float(w << 16), v1 = __uint_as_float(w & 0xffff0000u);
}
template <> KDSL_DEVICE void stream_pair<f16_t>(u32 s, float& v0, float& v1) {
  u32 w;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(w) : "r"(s));
  v0 = f16_to_float((u16)(w & 0xffffu)), v1 = f16_to_float((u16)(w >> 16));
}

// The kv tiles a work item visits: from the first not-provably-empty tile to the last,
// skipping empty ones in between. The producer walks them with a whole warp: the 32 lanes
// classify 32 tiles at once, so a run of empty tiles (those before a document's start, or
// after the diagonal) costs one round of predicate loads, not one dependent load per tile;
// the consumers learn each tile from the ring (tile_info). Call next() from all 32 lanes of
// a warp (the result is uniform).
template <int BN, class V>
struct TileWalk {
  const AttnArgs& a;
  const typename V::Captures& cap;
  int b, h, q0, q1, first, n_tiles;  // kv tiles [first, n_tiles): this item's split of the keys

  KDSL_DEVICE int cls(int j) const {
    if constexpr (!V::kHasMask) return kTileFull;
    return V::tile(a, cap, b, h, q0, q1, j * BN, imin2(j * BN + BN, a.N) - 1);
  }
  // First visited tile at or after j (n_tiles when none), and its class.
  KDSL_DEVICE int start(int& c) const { return next(first, c); }
  KDSL_DEVICE int next(int j, int& c) const {
    c = kTileFull;
    if constexpr (V::kHasMask) {
      const int lane = threadIdx.x & 31;
      for (; j < n_tiles; j += 32) {
        const int mine = j + lane < n_tiles ? cls(j + lane) : kTileEmpty;
        const u32 visited = __ballot_sync(0xffffffffu, mine != kTileEmpty);
        if (visited) {
          const int f = __ffs(visited) - 1;
          c = __shfl_sync(0xffffffffu, mine, f);
          return j + f;
        }
      }
      return n_tiles;
    }
    return j;
  }
};

// What the producer tells the consumers about the tile in a ring stage (one shared word).
KDSL_DEVICE u32 tile_info(int j, int cls, bool more) { return ((u32)j << 3) | ((u32)cls << 1) | (more ? 1u : 0u); }
// ... and which work item the tile belongs to (read at the item's first tile), or
// kNoMoreItems in a stage that holds no tile when the CTA's work is done.
constexpr u32 kNoMoreItems = 0xffffffffu;
// A work item whose keys are all masked: its rows of O are zeros and their lse -inf (or, for
// one split of the keys, the split's O and lse, attention_combine_splits). Written by the
// producer's `lanes` live threads, so that the consumers only ever see items with tiles;
// such items are rare (rows whose every key a mask removes), and cost the producer a pass of
// plain stores.
template <class Elem, int DV, int BM>
KDSL_DEVICE void write_masked_item(const AttnArgs& a, int b, int h, int q0, int split, int lane, int lanes) {
  const int rows = imin2(q0 + BM, a.M) - q0;
  const i64 row0 = (i64)(b * a.H + h) * a.M + q0;
  if (a.splits > 1) {
    const i64 part_row = (i64)split * a.B * a.H * a.M + row0;
    for (int i = lane; i < rows * DV; i += lanes) a.part_o[part_row * DV + i] = 0.f;
    for (int r = lane; r < rows; r += lanes) a.part_lse[part_row + r] = neg_inf();
    return;
  }
  u32* o = reinterpret_cast<u32*>(static_cast<Elem*>(a.o) + row0 * DV);  // DV is even
  for (int i = lane; i < rows * DV / 2; i += lanes) o[i] = 0u;
  if (a.lse != nullptr)
    for (int r = lane; r < rows; r += lanes) a.lse[row0 + r] = neg_inf();
}
// The slope step (V::kSlopeStep, passes/affine_score.py, tiling.py SLOPE_STEP): a score
// F * (qk + slope * col) + base takes slope * col from one more k16 wgmma of Q K^T's group,
// so that the softmax gets it with qk at no cost per element. A holds the slope as three bf16
// terms hi + mid + lo (exact for a normal fp32 slope: 3 x 8 significant bits) in columns 0-2
// of every row, B the tile's column offsets 0..BN-1 in rows 0-2 (k = 0-2): the products are
// exact (offsets below 256 have 8 significant bits) and accumulate in fp32 as the FFMA did.
KDSL_DEVICE void slope_terms(float slope, float& hi, float& mid, float& lo) {
  hi = __uint_as_float(pack_bf16x2(slope, 0.f) << 16);
  mid = __uint_as_float(pack_bf16x2(slope - hi, 0.f) << 16);
  lo = (slope - hi) - mid;
}
// kSlopeRegisters: thread (lane 4g + t)'s A fragment word. a[0] / a[1] hold columns 2t, 2t + 1
// of rows g / g + 8 (low half first), a[2] / a[3] columns 2t + 8, 2t + 9, which meet B's zero
// rows 8-11: the fragment is {w, w, w, w} (no register of zeros live across the kv loop: with
// one, relpos spilled at D=128).
KDSL_DEVICE u32 slope_word(float slope, int t) {
  float hi, mid, lo;
  slope_terms(slope, hi, mid, lo);
  return t == 0 ? pack_bf16x2(hi, mid) : t == 1 ? pack_bf16x2(lo, 0.f) : 0u;
}
// kSlopeShared: thread i of a warpgroup writes 16-byte chunk i % 2 (columns 0-7 or 8-15) of row
// i / 2 of the warpgroup's slope rows at `rows`, stored as Q is (K-major, 128 bytes a row in
// the 128-byte swizzle: chunk c of row r at chunk c ^ (r % 8)), then fences for wgmma; a
// barrier among the warpgroup's threads must follow before its first use.
KDSL_DEVICE void write_slope_rows(u32 rows, float slope, int i) {
  float hi, mid, lo;
  slope_terms(slope, hi, mid, lo);
  const int r = i / 2, c = i % 2;
  const u32 w0 = c == 0 ? pack_bf16x2(hi, mid) : 0u, w1 = c == 0 ? pack_bf16x2(lo, 0.f) : 0u;
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %3};\n" ::"r"(rows + r * 128 + ((c ^ (r % 8)) << 4)), "r"(w0),
               "r"(w1), "r"(0u)
               : "memory");
  fence_proxy_async();
}
// The slope step's B operand at `slab` (1024-aligned), element (k, n) = n for k < 3, else 0,
// written once per CTA by `threads` threads from `first` before the barrier that starts the
// roles (the writers' fence makes it visible to wgmma, the async proxy). kSlopeRegisters:
// MN-major as V is (rows k of 64 columns, 128 bytes a row, 8 rows an atom, blocks of 64
// columns 2048 bytes apart); kSlopeShared: K-major as K is (row n of 128 bytes, k along it).
// Either way in the 128-byte swizzle: chunk c of row r at chunk c ^ (r % 8).
template <int BN, int FORM>
KDSL_DEVICE void fill_slope_slab(u32 slab, int first, int threads) {
  constexpr int kChunks = FORM == kSlopeRegisters ? (BN + 63) / 64 * 128 : BN * 8;  // 16 bytes each
  for (int ci = first; ci < kChunks; ci += threads) {
    const int row = ci / 8, logical = (ci % 8) ^ (row % 8);
    u32 w[4];
    if (FORM == kSlopeRegisters) {  // row % 16 is k; columns n0 .. n0 + 7
      const float n0 = (float)((row / 16) * 64 + logical * 8);
#pragma unroll
      for (int e = 0; e < 4; ++e) w[e] = row % 16 < 3 ? pack_bf16x2(n0 + 2 * e, n0 + 2 * e + 1) : 0u;
    } else {  // row is n; k 0-7 in logical chunk 0
      const float n = (float)row;
      w[0] = logical == 0 ? pack_bf16x2(n, n) : 0u;
      w[1] = logical == 0 ? pack_bf16x2(n, 0.f) : 0u;
      w[2] = w[3] = 0u;
    }
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(slab + 16u * ci), "r"(w[0]), "r"(w[1]), "r"(w[2]),
                 "r"(w[3])
                 : "memory");
  }
  fence_proxy_async();
}

// The ones block of attr tensor_row_sum (Cfg::kOnesOffset): every element 1, so no swizzle to
// mind; written once per CTA like the slope slab.
template <class Elem>
KDSL_DEVICE void fill_ones(u32 block, int bytes, int first, int threads) {
  const u32 w = pack2<Elem>(1.f, 1.f);
  for (int i = first; i < bytes / 16; i += threads)
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(block + 16u * i), "r"(w) : "memory");
  fence_proxy_async();
}

KDSL_DEVICE u32 ld_shared_u32(u32 addr) {
  u32 v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
KDSL_DEVICE void st_shared_u32(u32 addr, u32 v) { asm volatile("st.shared.u32 [%0], %1;\n" :: "r"(addr), "r"(v) : "memory"); }

}  // namespace attn_wgmma_detail

}  // namespace kdsl
