// Streamed mask captures in the wgmma backward (attention_bwd_wgmma.cuh).
//
// A mask that reads a dense captured tensor at [..., q, kv] (torch's boolean attn_mask, a
// per-head keep[b, h, i, j]; passes/streaming.py names it, ring 1 or 2) was read by the
// backward one scalar global load an element: 32-64 loads a thread and step, each warp load
// touching 4 rows (the thread's elements are keys x queries, the tensor's rows are queries).
// Here every thread copies its share of the step's tile [m0, m0 + BM) x [n0, n0 + BN) into
// shared memory by cp.async, beside the step's lse and delta (the same group, waited for with
// them), and the partial tiles' elements read it there (V::mask_at): 2.3-3x on a random bool
// mask's backward (H200, bench/NOTES.md sixty-eighth session).
//
// KDSL_BWD_STREAM (codegen/emit_backward.py backward_plan_for: every ring the mask reads, where they fit
// beside the kernel's other buffers) says which rings: bit 0 the first streamed tensor, bit 1 the second.
// Their room is kept in every program of the source; the copies run where the Variant's mask
// reads the ring (kMaskReads1 / 2: not in the KDSL_STREAM_CAPTURES=0 program, which the runtime
// takes for a tensor whose rows are not 16-byte aligned).
#pragma once

#include "kdsl/attention_wgmma_parts.cuh"

#ifndef KDSL_BWD_STREAM
#define KDSL_BWD_STREAM 0
#endif
#ifndef KDSL_BWD_PREFETCH  // the step tiles of streamed tensors read per element asked into L2: 0 never,
#define KDSL_BWD_PREFETCH 1  // 1 under a mask that loads, head dims above 64 (kBwdPrefetch1), 2 always (A/B)
#endif
#ifndef KDSL_BWD_STREAM_MASK  // 0: the room is kept but the mask reads global memory per element (A/B timing)
#define KDSL_BWD_STREAM_MASK 1
#endif

namespace kdsl {

namespace attn_bwd_wg_detail {

// how the forward's streamed tiles hand out their elements (attention_wgmma_parts.cuh)
using attn_wgmma_detail::stream_elem;
using attn_wgmma_detail::StreamValueOf;

// Element bytes of ring 1 and ring 2 as the backward keeps them (0: not kept).
template <class V> constexpr int bwd_ring1_bytes() { return (KDSL_BWD_STREAM & 1) ? V::kStreamElemBytes : 0; }
template <class V> constexpr int bwd_ring2_bytes() { return (KDSL_BWD_STREAM & 2) ? V::kStream2ElemBytes : 0; }
// Whether partial tiles take the mask from the copied tiles (mask_at): where every ring the
// mask reads is kept; then a step copies those rings.
template <class V> constexpr bool kBwdStreamMask = KDSL_BWD_STREAM_MASK && V::kStreamMask &&
                                                   (!V::kMaskReads1 || bwd_ring1_bytes<V>() > 0) &&
                                                   (!V::kMaskReads2 || bwd_ring2_bytes<V>() > 0);
template <class V> constexpr bool kBwdCopy1 = kBwdStreamMask<V> && V::kMaskReads1;
template <class V> constexpr bool kBwdCopy2 = kBwdStreamMask<V> && V::kMaskReads2;

// The rings whose elements the backward reads from global memory, one load an element: the
// score's (a bias at [b, h, q, kv]; the backward keeps no ring for a score: a 2-byte tile does
// not fit beside the mask's at head dim 128) and a mask's not copied. Their step tiles are
// asked into L2 when the step before is issued (prefetch_stream_tile), so that those loads wait
// on L2 rather than DRAM: under a mask that loads, where the elements' loads sit behind its
// branches and few are in flight, at (padded q / k) head dims above 64. H200, B=2 H=16
// 4096², backward alone: bias_gate (an f32 bias that the mask tests) x1.162, bias_level and
// bias_under_keep (a bf16 bias beside a byte mask) x1.064 / x1.062 at D=128; bias_under_keep at
// D=64 x0.969 (64-query steps too: its 128-query build spilled), a bias with no mask x0.91-0.97
// (its loads all in flight already; bench/NOTES.md, seventy-first session).
template <class V, int DP> constexpr bool kBwdPrefetchHere =
    KDSL_BWD_PREFETCH == 2 || (KDSL_BWD_PREFETCH == 1 && V::kHasMask && V::kMaskLoads && DP > 64);
template <class V, int DP> constexpr bool kBwdPrefetch1 = kBwdPrefetchHere<V, DP> &&
                                                          (V::kScoreReads1 || V::kMaskReads1) && !kBwdCopy1<V>;
template <class V, int DP> constexpr bool kBwdPrefetch2 = kBwdPrefetchHere<V, DP> && V::kMaskReads2 && !kBwdCopy2<V>;

// A step's tile of a streamed tensor (elements of S bytes; row q at row(q)) into L2: one bulk
// prefetch a row, rows [m0, m0 + ROWS) within M, keys [n0, n0 + BN) within N rounded up to 16
// bytes (the stream programs take rows of whole 16-byte units on 16-byte aligned pointers).
template <int S, int ROWS, int BN, int T, class Row>
KDSL_DEVICE void prefetch_stream_tile(const Row& row, int m0, int M, int n0, int N, int tid) {
  static_assert(ROWS <= T, "a thread a row");
  if (tid < ROWS && m0 + tid < M)
    bulk_prefetch_l2(row(m0 + tid) + (i64)n0 * S, (imin(BN, N - n0) * S + 15) & ~15);
}

// A step's tile of a streamed tensor (elements of S bytes; row q's element kv = 0 at row(q))
// into dst: ROWS rows of BN * S bytes as 128-byte column blocks of ROWS rows, the 16-byte chunk
// c of row r at c ^ (r % 8) (load_tile's layout: the elements a warp reads sit in distinct
// banks). Rows past M and chunks starting at or past key N land as zeros and are never read; a
// chunk starting below N lies inside the row (rows are whole 16-byte chunks).
template <int S, int ROWS, int BN, int T, class Row>
KDSL_DEVICE void copy_stream_tile(u32 dst, const Row& row, int m0, int M, int n0, int N, int tid) {
  constexpr int kChunks = BN * S / 16, kRowsPerPass = T / kChunks;
  static_assert(T % kChunks == 0 && kRowsPerPass % 8 == 0 && ROWS % kRowsPerPass == 0, "whole passes");
  const int r0 = tid / kChunks, cc = tid % kChunks;
  const bool key_ok = n0 + cc * (16 / S) < N;
  const u32 d0 = dst + (cc / 8) * (ROWS * 128) + r0 * 128 + (((cc % 8) ^ (r0 % 8)) << 4);
#pragma unroll
  for (int pass = 0; pass < ROWS / kRowsPerPass; ++pass) {
    const int q = m0 + r0 + pass * kRowsPerPass;
    const bool ok = key_ok && q < M;
    const u8* src = row(ok ? q : m0) + (ok ? (i64)n0 * S + cc * 16 : 0);
    cp_async16(d0 + pass * kRowsPerPass * 128, src, ok ? 16u : 0u);
  }
}

// A thread's elements of a copied tile (elements E, ROWS rows; copy_stream_tile's layout), for
// the wgmma backward's fragment: rows (queries) r = r8 + 2 t + e with r8 a multiple of 8, keys
// kk = 64 wg + 16 warp + g + 8 hh. Within each 8-row group the row's offset and swizzle depend
// on (t, e) alone and the key's chunk and byte on (wg, warp, g, hh) alone, so an element sits
// at the tile + 128 r8 (an immediate once unrolled) + one of two per-thread offsets (four for
// 4-byte elements): ptxas would otherwise hoist an address per element out of the step loop
// (64 registers at 128-query steps, spilled). (codegen/emit_backward.py backward_plan_for takes 1-byte
// elements only: wider tiles do not fit, and their reads here have not run on a GPU.)
template <class E, int ROWS>
struct StreamLanes {
  static constexpr int S = sizeof(E);
  u32 off[2][2];  // [e][hh]; hh = 1's only for 4-byte elements (offset())
  KDSL_DEVICE StreamLanes(int wg, int warp, int g, int t) {
#pragma unroll
    for (int e = 0; e < 2; ++e)
#pragma unroll
      for (int hh = 0; hh < (S == 4 ? 2 : 1); ++hh) {
        const int r = 2 * t + e, x = (64 * wg + 16 * warp + g + 8 * hh) * S;
        off[e][hh] = (x / 128) * (ROWS * 128) + r * 128 + ((((x / 16) % 8) ^ r) << 4) + x % 16;
      }
  }
  // key kk + 8: the byte 8 on (1-byte elements); the next chunk, which the swizzle's bit 0 (= e,
  // the chunk being even before it) puts 16 bytes on or back (2-byte elements); else its own
  KDSL_DEVICE u32 offset(int e, int hh) const {
    if constexpr (S == 1) return off[e][0] + 8 * hh;
    else if constexpr (S == 2) return off[e][0] + (e ? -16 : 16) * hh;
    else return off[e][hh];
  }
  // the element (r8 + 2 t + e, 64 wg + 16 warp + g + 8 hh) of the tile at `tile`, as the
  // Variant's mask_at takes it (passes/streaming.py: a float for a float tensor, an int for an
  // integer or bool one)
  KDSL_DEVICE typename StreamValueOf<E>::T at(const u8* tile, int r8, int e, int hh) const {
    const u32 o = offset(e, hh);
    const u8* p = tile + r8 * 128 + o;
    if constexpr (S == 1) return typename StreamValueOf<E>::T(*reinterpret_cast<const E*>(p));
    // the pair readers take a pair's first element and which one: 16-bit elements pair in 4 bytes
    const int odd = S == 2 ? (o >> 1) & 1 : 0;
    return stream_elem<E>(p - odd * S, odd);
  }
};

}  // namespace attn_bwd_wg_detail

}  // namespace kdsl
