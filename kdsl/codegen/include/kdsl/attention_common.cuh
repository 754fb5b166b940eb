// kdsl/attention_common.cuh — what every attention kernel passes to the generated Variant,
// and the online-softmax helpers the kernels share.
#pragma once
#include "kdsl/common.cuh"

namespace kdsl {

// v summed over the warp's lanes and added into *dst by its first lane: one atomic a warp for
// a captured tensor's entry that every lane's elements read (every lane calls it, same dst)
KDSL_DEVICE void warp_sum_add(float* dst, float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) atomicAdd(dst, v);
}

struct AttnArgs {
  const void* q; const void* k; const void* v; void* o; float* lse;  // lse may be nullptr
  int B, H, Hkv, M, N;   // q:[B,H,M,D] k,v:[B,Hkv,N,D] o:[B,H,M,D] lse:[B,H,M]; contiguous
  float scale_log2;      // softmax scale * log2(e), for the Variant to use
  // Split-KV (decode): the keys are cut into `splits` ranges, one work item each, whose
  // partial results go to part_o [splits, B, H, M, D] and part_lse [splits, B, H, M].
  int splits = 1;
  float* part_o = nullptr;
  float* part_lse = nullptr;
  // Persistent launches: work[0] counts the items CTAs took after their first, work[1] the
  // CTAs done taking; zero at the launch, and zeroed again by the last CTA done
  // (attention_wgmma.cuh). nullptr: CTA i takes items i, i + gridDim.x, ...
  int* work = nullptr;
  // Persistent and one-CTA-per-item launches: the (b, h) heads whose items are ordered
  // together, longest first across the group (attention_wgmma.cuh). 1: head by head.
  int head_group = 1;
  // Split-KV launches whose items merge themselves: a count per (work item before the split,
  // consumer warpgroup) of the splits done, zero at the launch; the warpgroup that finishes
  // an item's last split merges its rows and zeroes the count. nullptr: the combine kernel
  // merges (attention_wgmma.cuh).
  int* split_done = nullptr;
  // Backward: a (b, k/v head) pair's H / Hkv query heads in head_splits ranges of as many, a CTA
  // each (per key block), so that few k/v heads still fill the GPU (a pair's key blocks alone:
  // 32 CTAs for MQA at 4096 keys). Each range's dK and dV go as fp32 partial sums to part_dkv,
  // [head_splits][dK [B, Hkv, N, D] | dV [B, Hkv, N, DV]], summed by the module's helper
  // (attention_bwd_rows.cuh kv_grads_from_parts). 1: dK and dV straight to their tensors.
  int head_splits = 1;
  // ... and each range's query tiles in query_splits ranges of as many (few k/v heads and
  // keys, many queries: cross-attention), a CTA each, only where a range is one query head
  // (head_splits = H / Hkv) and only in the program built for it (kBackwardQuerySplit); the
  // partial sums number head_splits * query_splits. 1: every query tile.
  int query_splits = 1;
  float* part_dkv = nullptr;
  // Backward, where its tile classes are arithmetic on loaded values (KDSL_BWD_ORDER; not the
  // tile summary's): CTA blockIdx.x runs unit
  // order[blockIdx.x] of backward_block's order, the units sorted longest first on the GPU per
  // call (attention_bwd_order.cuh). nullptr: unit blockIdx.x.
  const int* order = nullptr;
};

// The backward's CTA for blockIdx.x (every backward kernel; grid = key_blocks * Hkv * B *
// head_splits * query_splits CTAs): units of a (b, k/v head) pair, a range of its query heads
// (heads h0 .. h0 + heads - 1; all of the pair's where a.head_splits is 1) and a range of their
// query tiles (qsplit: backward_query_tiles), in groups of a.head_group
// consecutive units, the remainder joining the last
// group (with kBackwardTailGroups > 1, the last that many groups run as one), and within a group
// key block 0 of every pair first, then key block 1, ... Under causal-like masks the first key
// blocks see the most query tiles, so the long CTAs start first and short ones fill the tail.
// Head by head, the last head's key block 0 started near the end (13 % of causal's time by a
// schedule simulation); a remainder group of its own did the same (one pair of 64 in groups of 9:
// joining it to the last group made causal's backward 1.095x faster at B=4 H=16 4096^2 D=64).
// The host sizes a group to two waves of CTAs whose q and dO stay in L2
// (geometry.attention_head_group).
#ifndef KDSL_BWD_TAIL_GROUPS  // an A/B switch for tools/dev/backward_ab.py: 2 and 4 lost to 1 under
#define KDSL_BWD_TAIL_GROUPS 1  // causal masks, won under document masks (bench/NOTES.md, 48th session)
#endif
constexpr int kBackwardTailGroups = KDSL_BWD_TAIL_GROUPS;
// The backward program whose CTAs may split their query tiles (AttnArgs::query_splits; built
// only for calls that do, runtime/programs.py): every other call's kernel keeps none of it.
#ifndef KDSL_BWD_QUERY_SPLIT
#define KDSL_BWD_QUERY_SPLIT 0
#endif
constexpr bool kBackwardQuerySplit = KDSL_BWD_QUERY_SPLIT;
// The backward program of a mask whose tile classes are arithmetic on loaded values, whose CTAs
// take their unit from AttnArgs::order (emit_backward.backward_orders): every other kernel keeps
// none of it.
#ifndef KDSL_BWD_ORDER
#define KDSL_BWD_ORDER 0
#endif
constexpr bool kBackwardOrder = KDSL_BWD_ORDER;
// split: which partial sums the CTA's dK and dV go to (head range * query_splits + qsplit)
struct BackwardBlock { int n0, hkv, b, h0, heads, split, qsplit; };
template <int BN>
KDSL_DEVICE BackwardBlock backward_block_at(const AttnArgs& a, int w);
template <int BN>
KDSL_DEVICE BackwardBlock backward_block(const AttnArgs& a) {
  if constexpr (kBackwardOrder) {
    if (a.order != nullptr) return backward_block_at<BN>(a, __ldg(a.order + blockIdx.x));
  }
  return backward_block_at<BN>(a, blockIdx.x);
}
// Unit w of the order above (w = blockIdx.x unless ordered).
template <int BN>
KDSL_DEVICE BackwardBlock backward_block_at(const AttnArgs& a, int w) {
#ifdef KDSL_BWD_HEAD_GROUP  // an A/B switch for tools/dev/backward_ab.py (1: head by head)
  const int group = KDSL_BWD_HEAD_GROUP;
#else
  const int group = a.head_group;
#endif
  // (the query split's arithmetic only in its program: in every call's, qs is 1 at compile time)
  const unsigned qs = kBackwardQuerySplit ? unsigned(a.query_splits) : 1u;
  const int key_blocks = (a.N + BN - 1) / BN, heads = a.B * a.Hkv * a.head_splits * int(qs);
  const int span = group * key_blocks;
  // (unsigned: in int the same arithmetic made causal's 128-query build at head dim 64 spill)
  const unsigned uw = w, ugroup = group, uspan = span, last = imax(1, heads / group - (kBackwardTailGroups - 1)) - 1;
  const unsigned g = uw / uspan < last ? uw / uspan : last, r = uw - g * uspan;
  const unsigned size = g == last ? heads - g * ugroup : ugroup;
  const unsigned kb = r / size, bh = g * ugroup + (r - kb * size);
  const unsigned splits = a.head_splits * qs, pair = bh / splits, split = bh - pair * splits;
  const unsigned range = split / qs, qsplit = split - range * qs;
  const unsigned b = pair / unsigned(a.Hkv), hkv = pair - b * a.Hkv, hs = a.head_splits, per = unsigned(a.H / a.Hkv) / hs;
  return {int(kb) * BN, int(hkv), int(b), int(hkv * (per * hs) + range * per), int(per), int(split), int(qsplit)};
}

// The query tiles of BM rows [first, end) a backward CTA walks for each of its query heads:
// all of them, or its range's (a.query_splits ranges of as many tiles, the last shorter)
struct QueryTiles { int first, end; };
template <int BM>
KDSL_DEVICE QueryTiles backward_query_tiles(const AttnArgs& a, const BackwardBlock& blk) {
  const int m_tiles = (a.M + BM - 1) / BM;
  if constexpr (!kBackwardQuerySplit) return {0, m_tiles};
  const int per = (m_tiles + a.query_splits - 1) / a.query_splits;
  const int first = imin(m_tiles, blk.qsplit * per);
  return {first, imin(m_tiles, first + per)};
}

// Where a backward CTA's dK and dV rows go: Elem pairs into dk and dv, or with a pair's query
// heads or query tiles split (a.head_splits * a.query_splits > 1) fp32 pairs into its range's
// partial sums (AttnArgs::part_dkv).
// e: the pair's first element in [B, Hkv, N, D] (dk) or [B, Hkv, N, DV] (dv).
template <class Elem>
struct KvGradStore {
  Elem* dk;
  Elem* dv;
  float* part_k;  // nullptr: no split
  float* part_v;
  KDSL_DEVICE KvGradStore(const AttnArgs& a, const BackwardBlock& blk, Elem* dk_, Elem* dv_, int D, int DV)
      : dk(dk_), dv(dv_), part_k(nullptr), part_v(nullptr) {
    if (a.head_splits > 1 || (kBackwardQuerySplit && a.query_splits > 1)) {
      const i64 nk = (i64)a.B * a.Hkv * a.N * D, nv = (i64)a.B * a.Hkv * a.N * DV;
      part_k = a.part_dkv + blk.split * (nk + nv);
      part_v = part_k + nk;
    }
  }
  KDSL_DEVICE void k_pair(i64 e, float lo, float hi) const { pair(dk, part_k, e, lo, hi); }
  KDSL_DEVICE void v_pair(i64 e, float lo, float hi) const { pair(dv, part_v, e, lo, hi); }
  static KDSL_DEVICE void pair(Elem* out, float* part, i64 e, float lo, float hi) {
    if (part != nullptr) *reinterpret_cast<float2*>(part + e) = make_float2(lo, hi);
    else *reinterpret_cast<u32*>(out + e) = pack2<Elem>(lo, hi);
  }
};

// The class of a backward step's tile, queries [m0, m0 + BM) of head h and the CTA's keys
// [n0, n0 + BN), clipped to M and N (Variant::tile). A mask that reads data classifies tiles
// from the runtime tile summary (attention_summary.cuh), made for the backward at 64-query,
// BN-key tiles (codegen/emit_backward.py generate_backward): a 128-query step is the union of its 64-row
// tiles, empty where each is, full where each is.
template <class V, int BM, int BN>
KDSL_DEVICE int backward_tile_class(const AttnArgs& a, const typename V::Captures& c, int b, int h, int m0, int n0) {
  const int n1 = imin(n0 + BN, a.N) - 1;
  if constexpr (V::kSummaries == 0 || BM == V::kTileQ) {
    static_assert(V::kSummaries == 0 || BN == V::kTileKV, "the backward's tile summary is made on its key blocks");
    return V::tile(a, c, b, h, m0, imin(m0 + BM, a.M) - 1, n0, n1);
  } else {
    static_assert(BM % V::kTileQ == 0 && BN == V::kTileKV, "the backward's tile summary is made on its tiles");
    bool live = false, full = true;
#pragma unroll
    for (int r0 = m0; r0 < m0 + BM; r0 += V::kTileQ) {
      if (r0 >= a.M) break;
      const int t = V::tile(a, c, b, h, r0, imin(r0 + V::kTileQ, a.M) - 1, n0, n1);
      live |= t != kTileEmpty;
      full &= t == kTileFull;
    }
    return !live ? kTileEmpty : full ? kTileFull : kTilePartial;
  }
}

KDSL_DEVICE float fmax2(float x, float y) {
  float r;
  asm("max.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(y));
  return r;
}
KDSL_DEVICE float lg2_approx(float x) {
  float r;
  asm("lg2.approx.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
// Row statistics over the 4 threads (a quad) that hold one accumulator row.
KDSL_DEVICE float quad_max(float x) {
  x = fmax2(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmax2(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
KDSL_DEVICE float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
// A 4 x 4 transpose of 32-bit words across a quad: thread t holds w[k] = X[k][t] and ends
// with w[c] = X[t][c]. Two butterfly rounds (partners t ^ 1, then t ^ 2), two shuffles each.
KDSL_DEVICE void quad_transpose(u32 (&w)[4], int t) {
  const bool odd = t & 1, high = t & 2;
#pragma unroll
  for (int k = 0; k < 4; k += 2) {
    const u32 got = __shfl_xor_sync(0xffffffffu, odd ? w[k] : w[k + 1], 1);
    if (odd) w[k] = got; else w[k + 1] = got;
  }
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const u32 got = __shfl_xor_sync(0xffffffffu, high ? w[k] : w[k + 2], 2);
    if (high) w[k] = got; else w[k + 2] = got;
  }
}

// The values of a thread's two columns of 8-column group `group` (0-3) of a 32-column chunk whose
// column l lane l of the warp holds (chunk): columns 8 group + 2 t and + 1, t = lane % 4, as the
// wgmma accumulator lays a row's elements out. A mask's value gathered once a key (the forward's
// partial tiles) or a query (the backward's steps) by the lanes, taken by each element this way
// (passes/key_values.py). Every lane of the warp must call it.
template <class T>
KDSL_DEVICE void column_pair_values(T chunk, int group, int t, T (&out)[2]) {
  out[0] = __shfl_sync(0xffffffffu, chunk, 8 * group + 2 * t);
  out[1] = __shfl_sync(0xffffffffu, chunk, 8 * group + 2 * t + 1);
}

}  // namespace kdsl
