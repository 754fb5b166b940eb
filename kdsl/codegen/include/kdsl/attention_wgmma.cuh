// kdsl/attention_wgmma.cuh — attention forward for Hopper (sm_90a): TMA, wgmma, mbarrier
// pipelines and warp specialisation.
//
// Roles. One producer warpgroup (registers lowered with setmaxnreg) issues every load: one
// thread takes the CTA's work items, walks each item's kv tiles and TMA-copies its Q, then
// K and V tiles into a STAGES-deep ring, each stage guarded by a "full" mbarrier (TMA bytes
// landed) and an "empty" one (every consumer thread is done reading). The producer alone
// evaluates the tile predicates (V::tile(), which may read a runtime tile summary): with
// each stage it writes the tile's index, class and whether another tile follows, and the
// work item it belongs to, into words of shared memory, so the consumers' loop carries no
// predicate and no global load. NCWG consumer warpgroups (registers
// raised) each own 64 query rows: S = Q K^T by wgmma with both operands in shared memory,
// the generated score and mask on the fp32 S registers, online softmax in the log2
// domain, and O += P V by wgmma with P straight from registers (the S accumulator layout
// is the wgmma A-fragment layout once packed to 16 bits). While a warpgroup's QK^T runs,
// it evaluates the tile's per-element mask, so the mask costs no extra latency.
//
// Launch contract (the generated extern "C" kernel forwards here):
//   grid   = (CTAs, 1, 1), any count >= 1: one per work item (ceil(M / BM) * H * B * splits
//            of them, BM = 64 * NCWG query rows each, splits = AttnArgs::splits key ranges),
//            or fewer, persistent, each walking several
//   block  = 128 * (NCWG + 1) threads, __launch_bounds__(threads, 1)
//   dynamic shared memory = attention_wgmma_smem_bytes<Elem, D, DV, BN, NCWG, STAGES>()
//   tq, tk, tv: 3-D tensor maps over q [B*H, M, D], k [B*Hkv, N, D] and v [B*Hkv, N, DV]
//   (16-bit elements, dims listed innermost first: head dim, rows, B*heads), box (64, BM or
//   BN, 1), 128-byte swizzle, out-of-bounds elements filled with zeros. kdsl/runtime/tma.py
//   builds them. out is [B*H, M, DV].
//   ts: when V::kStreamLoads, the map of the captured tensor the score or mask reads at [..., q, kv]
//   (passes/streaming.py), its dims innermost first, box (128 bytes of columns, BM, 1, ...);
//   V::stream_tile() issues its boxes with each K tile, on the K tile's barrier (a tensor only
//   the mask reads: with each K tile of a partial tile, KDSL_STREAM_SKIP_FULL). Else unused.
//   ts2: likewise the mask's second streamed tensor when V::kStream2ElemBytes (V::stream2_tile()).
//
// Head dims. D (q and k) and DV (v and out) are any multiples of 16 up to 256. Tiles are
// stored as ceil(D/64) column blocks of [rows][64] elements, 128 bytes a row, in TMA's
// 128-byte swizzle: exactly the canonical layouts wgmma descriptors describe, K-major for Q
// and K (S = Q K^T) and MN-major for V (O = P V reads V transposed). A head dim that is not
// a multiple of 64 leaves the last column block partly beyond the tensor: TMA fills it with
// zeros (and counts its bytes), and no wgmma reads it: Q K^T takes D/16 k-steps, P V is one
// m64nDVk16 per k-step.
//
// Semantics are attention_mma.cuh's: V::score() in the log2 domain; on tiles V::tile() calls
// partial, elements with !V::mask() are -inf; kv >= N is -inf; empty tiles are never loaded.
// Rows with no finite score give out = 0 and lse = -inf. GQA: h_kv = h / (H / Hkv).
#pragma once

#ifndef KDSL_STREAM_MASK_IN_SOFTMAX  // 0: survivors() turns a streamed mask into bits, as a loaded one (A/B)
#define KDSL_STREAM_MASK_IN_SOFTMAX 1
#endif
#ifndef KDSL_LOADED_MASK_IN_SOFTMAX  // 1: a mask that loads is applied in the softmax too (trial)
#define KDSL_LOADED_MASK_IN_SOFTMAX 0
#endif
#ifndef KDSL_KEY_VALUES_RANGE  // 0: key values drop keys past N per element, not once a ragged tile (A/B)
#define KDSL_KEY_VALUES_RANGE 1
#endif
#ifndef KDSL_TABLE_AHEAD  // 0: an offset or key table's entries are loaded when the softmax fills it (A/B)
#define KDSL_TABLE_AHEAD 1
#endif
#ifndef KDSL_STREAM_SKIP_FULL  // 0: a ring only the mask reads is loaded on full tiles too (A/B)
#define KDSL_STREAM_SKIP_FULL 1
#endif
#ifndef KDSL_ITEM_WARM  // 0: no Variant::item_warm where an item is taken (A/B)
#define KDSL_ITEM_WARM 1
#endif
// 1: k and v by 4-D tensor maps (column, row, head, batch) of their own strides, any layout
// (runtime/tma.py KeyTiles, Program.key_maps); 0: 3-D maps (column, row, batch * head) of
// row-major arrays
#ifndef KDSL_KEY_MAPS_4D
#define KDSL_KEY_MAPS_4D 0
#endif
#include "kdsl/attention_splits.cuh"
#include "kdsl/attention_wgmma_parts.cuh"
#include "kdsl/hopper.cuh"
#include "kdsl/wgmma_ops.cuh"
#include "kdsl/work_counter.cuh"

#ifndef KDSL_RACECHECK_ARRIVALS
#define KDSL_RACECHECK_ARRIVALS 0  // 1: every consumer thread arrives on "empty" (see kArrivers)
#endif
#ifndef KDSL_WARP_RELEASE
#define KDSL_WARP_RELEASE 1  // 0: one consumer warpgroup hands K stages back by thread 0 alone (kWarpRelease)
#endif

namespace kdsl {

// Rows a warp merges at once where an item merges itself (merge_if_last): 8 (H200, B=1 H=4
// 2048 rows, plain at head dim 128: 39.3 us one at a time, 29.0 four, 28.9 eight; at 64, 35.7,
// 27.2, 25.5; at 256, 55.7, 44.1, 43.9), but 4 with three consumer warpgroups, whose 128
// registers a thread spilled at 8, and over 128 value columns, where a generated score spilled
// at 8 (bench/NOTES.md, fifty-second session: 2 of ~1,080 generated split builds spilled where a
// row at a time did not, this one and one at three warpgroups; 2 would spare that one too, and
// takes as many rounds of L2 latency at 3 or 4 splits, but is not yet timed).
// KDSL_MERGE_ROWS sets it (an A/B switch).
template <int NCWG, int DV>
__host__ __device__ constexpr int merge_rows() {
#ifdef KDSL_MERGE_ROWS
  return KDSL_MERGE_ROWS;
#else
  return NCWG >= 3 || DV > 128 ? 4 : 8;
#endif
}

// Where a K or V box is in its tensor map: (head, batch) of a 4-D map of any strides, or the
// item b * Hkv + h of a 3-D map of a row-major array (KDSL_KEY_MAPS_4D).
struct KvAt {
  int head_or_item, batch;
};
KDSL_DEVICE KvAt kv_coords(int bh_kv, int Hkv) {
#if KDSL_KEY_MAPS_4D
  // Divided here, once a tile, so that the producer's loop keeps bh_kv alone: with the head and
  // the batch kept through it instead, ptxas spilled the producer (sliding_window at head dim 64).
  asm volatile("" : "+r"(bh_kv));
  const int b = bh_kv / Hkv;
  return {bh_kv - b * Hkv, b};
#else
  return {bh_kv, 0};
#endif
}
KDSL_DEVICE void kv_load(u32 dst, const TmaDesc* map, u32 bar, int col, int row, KvAt at) {
#if KDSL_KEY_MAPS_4D
  tma_load_4d(dst, map, bar, col, row, at.head_or_item, at.batch);
#else
  tma_load_3d(dst, map, bar, col, row, at.head_or_item);
#endif
}

template <class Elem, int D, int DV, int BN, int NCWG, int STAGES, int SB = 0, int SLOPE = 0, bool ROWSUM = false,
          bool OTAB = false, int SB2 = 0>
__host__ __device__ constexpr int attention_wgmma_smem_bytes() {
  return attn_wgmma_detail::Cfg<Elem, D, DV, BN, NCWG, STAGES, SB, SLOPE, ROWSUM, OTAB, SB2>::kSmemBytes;
}

// Registers per thread after setmaxnreg: the producer's (true) or the consumers' (false).
template <class Elem, int D, int DV, int BN, int NCWG, int STAGES>
__host__ __device__ constexpr int attention_wgmma_regs(bool producer) {
  typedef attn_wgmma_detail::Cfg<Elem, D, DV, BN, NCWG, STAGES> C;
  return producer ? C::kProducerRegs : C::kConsumerRegs;
}

// kSplitKV: the instantiation split-KV launches run (a.splits > 1: each item writes one key
// range's fp32 partial result, merged by the item's last split (merge_if_last) or by
// attention_combine_splits). The other one, which every
// other call runs, must get a.splits == 1: it has no split epilogue, and its program no
// combine kernel, so NVVM and ptxas work through less (cold builds ~15 % faster). The split
// instantiation keeps the normal epilogue behind a runtime test: compiled without it,
// ptxas spilled the row index across the kv loop of document_mask at D=128.
template <class Elem, int D, int DV, int BN, int NCWG, int STAGES, class V, bool kSplitKV>
KDSL_DEVICE void attention_fwd_wgmma(const AttnArgs& a, const typename V::Captures& cap, const TmaDesc* tq,
                                     const TmaDesc* tk, const TmaDesc* tv, const TmaDesc* ts, const TmaDesc* ts2) {
  using namespace attn_wgmma_detail;
  // P's row sums by P V over a ones column (Cfg ROWSUM), not by FADDs; not in the split-KV
  // program, where it made relpos spill (that program then leaves the ones block unused)
  constexpr bool kRowSum = V::kTensorRowSum && !kSplitKV;
  typedef Cfg<Elem, D, DV, BN, NCWG, STAGES, V::kStreamElemBytes, V::kSlopeStep, kRowSum,
              V::kOffsetTable || V::kKeyTable, V::kStream2ElemBytes> C;
  // The slope step (attention_wgmma_parts.cuh): slope * col of an affine score by one more
  // wgmma k-step. Its operands are reserved whenever the program asks for them (kSlopeStep),
  // and used with kAffine (which KDSL_AFFINE_SCORE=0 turns off).
  constexpr int kSlopeForm = V::kAffine ? V::kSlopeStep : kSlopeNone;
  constexpr bool kSlope = kSlopeForm != kSlopeNone;
  // The streamed capture's tile travels with K (counted on its barrier) and is read by every
  // consumer thread: then each warp hands the K slot back (kEmptyK arrivals), after its reads.
  // A second one (the mask's, kStream2) travels beside it the same way.
  constexpr bool kStream = V::kStreamLoads, kStream2 = kStream && V::kStream2ElemBytes > 0;
  // KDSL_RACECHECK_ARRIVALS=1 (KDSL_DEFINES; sanitizer runs only): every consumer thread
  // arrives on each "empty" barrier. racecheck credits an arrival only with the arriving
  // thread's own reads, not with those a barrier or __syncwarp ordered before it
  // (tools/dev/racecheck_mbarrier_probe.cu), so the default protocol's ring words read a
  // stage before get reported once the ring wraps; with this define racecheck can judge the
  // rest of the kernel at long shapes.
  constexpr int kArrivers = KDSL_RACECHECK_ARRIVALS ? 128 : 1;  // a consumer warpgroup's arrivals
  // One consumer warpgroup has no turns' barrier to order its warps' reads of a K stage's
  // words before thread 0's arrival (only the wgmma they all issue, an execution order the
  // PTX model does not count), so each warp arrives after a __syncwarp, as for a streamed
  // tile. Free where timed (H200, decode and 64-row items: 0.98-1.01 of thread 0 alone;
  // bench/NOTES.md, fifty-fifth session); KDSL_WARP_RELEASE=0 restores the old release (A/B).
  // A streamed mask (passes/streaming.py) is applied where the softmax selects -inf, its
  // tile read from shared memory: a read, a compare and a select per element. Turned into
  // bits by survivors() as a loaded mask is, it cost 1.18-1.26x the time on partial-tile-bound
  // shapes (H200, bench/NOTES.md fifty-sixth session): the bits' shifts and tests per element.
  constexpr bool kMaskInSoftmax = (V::kStreamMask && KDSL_STREAM_MASK_IN_SOFTMAX) ||
                                   (KDSL_LOADED_MASK_IN_SOFTMAX && V::kHasMask && V::kMaskLoads && !V::kKeyBounds);
  // passes/stream_mask.py: on a partial tile where the rest of the mask holds on a warp's rows,
  // a warp whose rows of the streamed byte tile hold no zero keeps every key there
  // (KDSL_STREAM_NONZERO=1 when the program is lowered: off by default, stream_mask.enabled)
  constexpr bool kNonzeroCheck = kMaskInSoftmax && V::kStreamNonzero != 0;
  constexpr bool kWarpRelease = kStream || (KDSL_WARP_RELEASE && NCWG == 1);
  constexpr int kEmptyK = KDSL_RACECHECK_ARRIVALS ? 128 * NCWG : kWarpRelease ? 4 * NCWG : NCWG;
  constexpr int BM = C::kBM;
  extern __shared__ __align__(128) u8 kdsl_attn_smem[];

  // 128-byte swizzled tiles must start on a 1024-byte boundary.
  const u32 base = (smem_addr(kdsl_attn_smem) + 1023u) & ~1023u;
  const u32 sQ = base, sK = base + C::kKOffset, sV = base + C::kVOffset, sS = base + C::kSOffset,
            sS2 = base + C::kS2Offset;
  const u32 full_q = base + C::kBarOffset, empty_q = full_q + 8u;
  auto info_kv = [&](int s) { return base + C::kInfoOffset + 4u * s; };  // tile_info of ring stage s
  auto item_kv = [&](int s) { return base + C::kItemOffset + 4u * s; };  // work item of ring stage s
  auto full_k = [&](int s) { return full_q + 8u * (2 + s); };
  auto full_v = [&](int s) { return full_q + 8u * (2 + STAGES + s); };
  auto empty_k = [&](int s) { return full_q + 8u * (2 + 2 * STAGES + s); };
  auto empty_v = [&](int s) { return full_q + 8u * (2 + 3 * STAGES + s); };

  const int tid = threadIdx.x;
  // Split-KV: the combine kernel, where one follows, may start its launch now (it waits for
  // our results); where the items merge themselves this has nothing to release.
  if (kSplitKV && a.splits > 1) grid_dependents_launch();
  if (tid == 0) {
    mbar_init(full_q, 1);
    mbar_init(empty_q, NCWG * kArrivers);  // kArrivers per consumer warpgroup, as for every "empty"
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full_k(s), 1);
      mbar_init(full_v(s), 1);
      mbar_init(empty_k(s), kEmptyK);
      mbar_init(empty_v(s), NCWG * kArrivers);
    }
    mbar_init_fence();
  }
  if constexpr (kSlope) fill_slope_slab<BN, kSlopeForm>(base + C::kSlopeOffset, tid, C::kThreads);
  if constexpr (kRowSum) fill_ones<Elem>(base + C::kOnesOffset, C::kOnesBytes, tid, C::kThreads);
  __syncthreads();

  // Work items are (b, h, q tile) in groups of a.head_group consecutive heads (the last
  // group takes the remainder), sized on the host so that a group's K and V stay in L2
  // while its CTAs run and it holds at least two waves of items. Within a group the last q
  // tile of every head comes first, then the one before it, ...: under causal-like masks
  // the long items start first and the short ones fill the tail. (Head by head, the tail
  // was the last head's long items: 5 % of causal's time by a schedule simulation.)
  // CTA i starts with item i. The host launches one
  // CTA per item (the hardware's dispatch balances them), or fewer, persistent, each then
  // taking the next unclaimed item from a shared counter (a.work, zeroed before the launch)
  // when its producer has issued the last loads of the one before: a greedy schedule, the
  // Q load and first tiles of the next item overlapping the end of the current one. Without
  // a counter a CTA walks items i, i + gridDim.x, ... The consumers learn their work from the
  // producer: each ring stage carries, beside its tile_info word, the item's index under the
  // same full/empty barriers, and the end of the CTA's work takes a stage of its own that
  // holds no tile. An item whose keys are all masked never reaches the consumers: the
  // producer's warp writes its zeros.
  // (Computed inside each role, after setmaxnreg: a value live across it gets spilled.)
  auto n_items = [&]() { return (a.M + BM - 1) / BM * a.H * a.B * a.splits; };
  auto item = [&](int w, int& b, int& h, int& q0, int& split) {
    split = w % a.splits;
    w /= a.splits;
    // (through opaque(): what derives from the group is computed per item, not hoisted out of
    // the item loop and kept live across it, which made padded_causal at D=64 spill)
    const int group = opaque(a.head_group), heads = opaque(a.B) * a.H;
    const int n_qtiles = (a.M + BM - 1) / BM;
    const int groups = imax2(1, heads / group), span = group * n_qtiles;
    const int g = imin2(w / span, groups - 1), r = w - g * span;
    const int size = g == groups - 1 ? heads - g * group : group;
    const int rank = r / size;  // 0: the group's last q tiles
    const int bh = g * group + (r - rank * size);
    q0 = (n_qtiles - 1 - rank) * BM;
    b = bh / a.H;
    h = bh - b * a.H;
  };
  auto walk_of = [&](int b, int h, int q0, int split) {
    const int tiles = (a.N + BN - 1) / BN, chunk = (tiles + a.splits - 1) / a.splits;
    return TileWalk<BN, V>{a, cap, b, h, q0, imin2(q0 + BM, a.M) - 1, split * chunk, imin2(tiles, split * chunk + chunk)};
  };
  const int wg = tid / 128 - 1;  // consumer warpgroup index; -1 for the producer

  if (wg < 0) {
    // ---------------- producer ----------------
    regs_release<C::kProducerRegs>();
    // One thread issues every load; under a mask its whole warp scans tiles (TileWalk).
    if (tid >= (V::kHasMask ? 32 : 1)) return;
    const bool issuer = tid == 0;
    tma_prefetch_desc(tq);
    tma_prefetch_desc(tk);
    tma_prefetch_desc(tv);
    if constexpr (kStream) tma_prefetch_desc(ts);
    if constexpr (kStream2) tma_prefetch_desc(ts2);
    int it = 0, n_done = 0;  // kv ring position; work items with a Q tile loaded
    int tn = 0;              // KDSL_TRACE: events recorded
    const int items = n_items();
    for (int w = blockIdx.x; w < items;) {
      int b, h, q0, split, cls;
      item(w, b, h, q0, split);
      if (KDSL_ITEM_WARM) V::item_warm(a, cap, b, h);  // for the tile classes of the walk
      if (issuer) trace(0, tn, kTraceClaim, w);
      const TileWalk<BN, V> walk = walk_of(b, h, q0, split);
      int j = walk.start(cls);
      const bool any = j < walk.n_tiles;
      const int bh_q = b * a.H + h, bh_kv = b * a.Hkv + h / (a.H / a.Hkv);
      if (any) {
        mbar_wait(empty_q, (n_done++ & 1) ^ 1);  // the previous item's last Q K^T is done with sQ
        if (issuer) {
          mbar_arrive_expect_tx(full_q, C::kQBytes);
#pragma unroll
          for (int c = 0; c < C::kColBlocks; ++c) tma_load_3d(sQ + c * BM * 128, tq, full_q, c * 64, q0, bh_q);
          trace(0, tn, kTraceQIssued, w);
        }
      } else {
        write_masked_item<Elem, DV, BM>(a, b, h, q0, split, tid, V::kHasMask ? 32 : 1);
      }
      for (bool more = any; more; ++it) {
        int cls_next;
        const int jn = walk.next(j + 1, cls_next);  // evaluated while the stage may still be busy
        more = jn < walk.n_tiles;
        const int s = it % STAGES;
        const u32 parity = ((it / STAGES) & 1) ^ 1;
        if (issuer) {
          mbar_wait(empty_k(s), parity);
          st_shared_u32(info_kv(s), tile_info(j, cls, more));  // published by the arrive below
          st_shared_u32(item_kv(s), (u32)w);  // read at the item's first tile only
          // A full tile evaluates no mask: a ring only the mask reads stays unloaded there (a
          // dense u8 mask whose tiles were nearly all full read its 512 MB once more, each
          // tile's load on the K tile's barrier; the stage's ring slot then holds stale bytes
          // that nothing reads)
          const bool skip = KDSL_STREAM_SKIP_FULL && cls == kTileFull;
          const bool load1 = kStream && !(skip && !V::kScoreReads1), load2 = kStream2 && !skip;
          const KvAt kv_at = kv_coords(bh_kv, a.Hkv);
          mbar_arrive_expect_tx(full_k(s),
                                C::kKBytes + (load1 ? C::kStreamBytes : 0) + (load2 ? C::kStream2Bytes : 0));
#pragma unroll
          for (int c = 0; c < C::kColBlocks; ++c)
            kv_load(sK + s * C::kKBytes + c * BN * 128, tk, full_k(s), c * 64, j * BN, kv_at);
          if constexpr (kStream) {
            if (load1) {
#pragma unroll
              for (int c = 0; c < C::kStreamBlocks; ++c)
                V::stream_tile(a, cap, ts, sS + s * C::kStreamBytes + c * BM * 128, full_k(s),
                               j * BN + c * C::kStreamCols, q0, b, h);
            }
          }
          if constexpr (kStream2) {
            if (load2) {
#pragma unroll
              for (int c = 0; c < C::kStream2Blocks; ++c)
                V::stream2_tile(a, cap, ts2, sS2 + s * C::kStream2Bytes + c * BM * 128, full_k(s),
                                j * BN + c * C::kStream2Cols, q0, b, h);
            }
          }
          mbar_wait(empty_v(s), parity);
          mbar_arrive_expect_tx(full_v(s), C::kVBytes);
#pragma unroll
          for (int c = 0; c < C::kVColBlocks; ++c)
            kv_load(sV + s * C::kVBytes + c * BN * 128, tv, full_v(s), c * 64, j * BN, kv_at);
        }
        j = jn;
        cls = cls_next;
      }
      int next = 0;
      if (issuer) trace(0, tn, kTraceLastIssued, w);
      if (issuer) next = a.work != nullptr ? work_counter_take(a.work) : w + (int)gridDim.x;
      w = V::kHasMask ? __shfl_sync(0xffffffffu, next, 0) : next;  // the walking warp follows lane 0
    }
    // No item follows: a stage with no tile says so (published by the arrive).
    const int s = it % STAGES;
    if (issuer) {
      mbar_wait(empty_k(s), ((it / STAGES) & 1) ^ 1);
      st_shared_u32(item_kv(s), kNoMoreItems);
      mbar_arrive(full_k(s));
      // This CTA takes no more items (the last CTA to get here zeroes the counters).
      if (a.work != nullptr) work_counter_done(a.work);
    }
    return;
  }

  // ---------------- consumers ----------------
  regs_claim<C::kConsumerRegs>();
  const int lane = tid & 31, warp = (tid / 32) & 3;  // warp within the warpgroup
  const int g = lane >> 2, t = lane & 3;
  const int M = a.M, N = a.N;
  const u32 q_rows = sQ + wg * 64 * 128;
  float o[C::kORegs];
  float sc[C::kSRegs];   // S of the tile in flight, then its probabilities
  u32 pa[BN / 16][4];    // P of the previous tile, packed as wgmma A fragments
  u32 slope_word = 0u;   // kSlopeRegisters: the item's A fragment word (slope_word())
  const u32 slope_rows = base + C::kSlopeAOffset + wg * kSlopeRowsBytes;  // kSlopeShared: this warpgroup's A
  float m_run[2], l_run[2];

  // Ring slots are handed back by one thread per warpgroup after its wgmma wait: a wgmma
  // is a warpgroup operation, so once it completed it has finished reading shared memory.
  // The stage's words (tile_info, the item) every thread reads come before the release in
  // the turns' barrier (two or three warpgroups); with one warpgroup each warp hands K
  // stages back itself (kWarpRelease).
  auto release = [&](u32 bar) { if (kArrivers == 128 || tid % 128 == 0) mbar_arrive(bar); };
  // A K slot that also held a streamed tile (or kWarpRelease): every thread read it, so each
  // warp, once its lanes are done, arrives (__syncwarp orders the lanes' reads before lane
  // 0's arrival).
  auto release_k = [&](int s) {
    if constexpr (kWarpRelease && kArrivers == 1) {
      __syncwarp();
      if (lane == 0) mbar_arrive(empty_k(s));
    } else {
      release(empty_k(s));
    }
  };

  // Element i of this thread's S registers in the streamed tile of ring slot `slot`: rows
  // row0 and row0 + 8 of the tile (128 bytes a row in each column block), the pair of
  // columns 8 (i / 4) + 2t; in the 128-byte swizzle 16-byte chunk c of row r sits at chunk
  // c ^ (r % 8), and r % 8 = g, so a warp's 8 rows read 8 distinct chunks: no bank conflict.
  const u8* s_rows = kdsl_attn_smem + (sS - smem_addr(kdsl_attn_smem)) + (wg * 64 + warp * 16 + g) * 128;
  // (1-byte elements: a 128-column block, the pair at byte 2t of chunk jj / 2's half jj % 2)
  typedef typename StreamValueOf<typename V::StreamElem>::T StreamValue;
  auto stream_ptr = [&](int slot, int i) -> const u8* {  // the pair holding element i
    const int jj = i / 4, row = ((i >> 1) & 1) * 8 * 128;
    const int off = V::kStreamElemBytes == 1   ? (jj / 16) * BM * 128 + ((((jj / 2) % 8) ^ g) << 4) + 8 * (jj % 2) + 2 * t
                    : V::kStreamElemBytes == 2 ? (jj / 8) * BM * 128 + (((jj % 8) ^ g) << 4) + 4 * t
                                               : (jj / 4) * BM * 128 + (((2 * (jj % 4) + (t >> 1)) ^ g) << 4) + 8 * (t & 1);
    return s_rows + slot * C::kStreamBytes + row + off;
  };
  // ... and, in each ring the mask reads, as shared-memory addresses for its pair reads
  typedef typename StreamValueOf<typename V::Stream2Elem>::T Stream2Value;
  const StreamPairs<V::kStreamElemBytes, BM, C::kStreamBytes> pairs1(sS, wg * 64 + warp * 16 + g, g, t);
  const StreamPairs<V::kStream2ElemBytes, BM, C::kStream2Bytes> pairs2(sS2, wg * 64 + warp * 16 + g, g, t);
  auto stream_at = [&](int slot, int i) -> StreamValue {
    if constexpr (!kStream) {
      return 0;
    } else {
      return stream_elem<typename V::StreamElem>(stream_ptr(slot, i), i & 1);
    }
  };

  // Turns between the consumer warpgroups (ping-pong for two, round-robin for three): each
  // issues its wgmmas only on its turn and then passes the turn to the next, so one
  // warpgroup's softmax runs while another's matrix products keep the tensor cores busy.
  // Named barrier 4 + w is warpgroup w's turn (1 + w its offset tables', 8 + w its split merges',
  // 12 + w its slope rows' without turns). The turns run on
  // across items: the last warpgroup lets 0 go first once, and passes on its last turn of an
  // item too, so that warpgroup 0 starts the next item while the others still store theirs;
  // after the last item 0 takes that final turn, which nobody passes on. (Turns started anew
  // per item made 0 wait for the last warpgroup's epilogue: H100, 2026-11-24, in turns:
  // sliding_window 2k +2 %, alibi 8k +1.6 %, natten2d +1.2 %, causal D=64 2k +1.4 %.)
  constexpr bool kPingPong = NCWG >= 2;
  // Outside the kv loop the warpgroup index comes from a fresh read of the thread index:
  // kept live across the items it made causal at D=64 (three warpgroups) spill.
  auto fresh_wg = []() { return (int)(fresh_thread_index() / 128) - 1; };
  auto my_turn = [&](int w) { if constexpr (kPingPong) named_barrier(4 + w, 256); };
  auto your_turn = [&](int w) { if constexpr (kPingPong) named_barrier_arrive(4 + (w + 1) % NCWG, 256); };

  // Split-KV without a combine kernel (a.split_done): once this warpgroup has written its
  // rows' partial result for one split of item `pre` (the item before the split), it counts
  // the split; the warpgroup that counts an item's last split merges those rows of it (a warp
  // a row) and zeroes the count for the next launch. Each thread fences its partial stores,
  // and the warpgroup meets (named barrier 8 + w) before its first thread counts, so that
  // the count comes after every row of the warpgroup is stored (the fence alone orders only
  // the counting thread's own stores). The same barrier then tells the threads whether the
  // count was the last; the merge's loads bypass L1. A warpgroup at a time,
  // with no barrier across warpgroups: the turns above go on untouched. Kernels with a mask
  // never get here: an item whose keys are all masked is written by the producer, not counted.
  auto merge_if_last = [&](int pre, int bh, int q0) {
    const int wgi = fresh_wg();
    int* done = a.split_done + pre * NCWG + wgi;
    __threadfence();
    named_barrier(8 + wgi, 128);  // every thread's partial rows are stored and fenced
    const bool mine = (fresh_thread_index() & 127) == 0 && atomicAdd(done, 1) == a.splits - 1;
    if (!named_barrier_or(8 + wgi, 128, mine)) return;
    __threadfence();
    const int lane = fresh_thread_index() & 31, wq = (fresh_thread_index() & 127) >> 5;
    // A warp's rows wq, wq + 4, ...: merge_rows() of them at once, unless the rounds of L2
    // latency that costs are more than a row at a time takes (few rows, many splits: decode).
    const int first = bh * a.M + q0 + wgi * 64, end = bh * a.M + imin2(q0 + wgi * 64 + 64, a.M);
    constexpr int kRows = merge_rows<NCWG, DV>();
    const int rows = (end - first + 3) / 4, splits = a.splits;  // the busiest warp's rows
    const bool batched = (rows + kRows - 1) / kRows * ((splits + merge_batch(kRows) - 1) / merge_batch(kRows)) <
                         rows * ((splits + merge_batch(1) - 1) / merge_batch(1));
    for (int r = first + wq; r < end; r += batched ? 4 * kRows : 4) {
      if (batched)
        combine_split_rows<Elem, DV, kRows>(a.part_o, a.part_lse, a.o, a.lse, a.B * a.H * a.M, splits, r, 4, end, lane);
      else
        combine_split_rows<Elem, DV>(a.part_o, a.part_lse, a.o, a.lse, a.B * a.H * a.M, splits, r, 1, r + 1, lane);
    }
    if (mine) *done = 0;
  };

  // S = Q K^T from ring slot s, and O += P V: each one asynchronous wgmma group, issued as
  // one asm statement (wgmma_ops.cuh). QK^T's first step overwrites S, so that the old S
  // values need no copy.
  // Each k-step's descriptor is the tile's advanced by a constant (desc_advance): 40 fewer
  // instructions a tile than building each from its address.
  auto qk = [&](int s) {
    u64 da[D / 16], db[D / 16];
    kmajor_steps(da, q_rows, BM, db, sK + s * C::kKBytes, BN);
    WgmmaQK<Elem, BN, D / 16>::run(sc, da, db);
    if constexpr (kSlopeForm == kSlopeRegisters) {
      const u32 frag[4] = {slope_word, slope_word, slope_word, slope_word};
      WgmmaSlopeRS<Elem, BN>::run(sc, frag, desc_mnmajor_sw128(base + C::kSlopeOffset, 2048), 1);
    } else if constexpr (kSlopeForm == kSlopeShared) {
      WgmmaSlopeSS<Elem, BN>::run(sc, desc_kmajor_sw128(slope_rows), desc_kmajor_sw128(base + C::kSlopeOffset), 1);
    }
    wgmma_commit();
  };
  // Row hh's sum of P over every key so far: the ones column's (all four lanes of a quad hold
  // it) or the quad's partial sums.
  auto row_sum = [&](int hh) { return kRowSum ? o[DV / 2 + 2 * hh] : quad_sum(l_run[hh]); };
  auto pv = [&](int s) {
    // kRowSum: the next 64-column block is the ones, the same block for every stage
    const u32 v_stage = sV + s * C::kVBytes;
    const u64 v_desc = desc_mnmajor_sw128(v_stage, kRowSum ? base + C::kOnesOffset - v_stage : BN * 128);
    u64 db[BN / 16];
#pragma unroll
    for (int kp = 0; kp < BN / 16; ++kp) db[kp] = desc_advance(v_desc, kp * 16 * 128);
    WgmmaPV<Elem, C::kPVN, BN / 16>::run(o, pa, db);
    wgmma_commit();
  };

  int it = 0, n_done = 0;  // kv ring position; work items whose Q tile was consumed
  int ot_flip = 0;         // V::kOffsetTable: which of the warpgroup's two tables the next tile fills
  // V::kOffsetTable / kKeyTable: the entries a thread stores into the next tile's table
  // (table_ahead()), one per 128 of them
  constexpr int kTableEntries = V::kKeyTable ? BN : 64 + BN - 1;
  float table_next[(kTableEntries + 127) / 128];
  constexpr bool kTableAhead = KDSL_TABLE_AHEAD && V::kTableLoads && (V::kKeyTable || (V::kOffsetTable && D > 64));
  int tn = 0;              // KDSL_TRACE: events recorded (one thread a warpgroup)
  const bool tracer = tid % 128 == 0;
  // The item whose first tile is in ring stage `it` (or kNoMoreItems).
  auto next_item = [&]() {
    const int s = it % STAGES;
    mbar_wait(full_k(s), (it / STAGES) & 1);
    return ld_shared_u32(item_kv(s));
  };
  // The next item's word is read at the end of each pass and tested by the loop condition:
  // with a break on it at the top, ptxas no longer kept the ring position and the wgmma
  // descriptors in uniform registers (37 more instructions a tile, and spills at three
  // warpgroups), and a flag of its own was one more register live across the kv loop.
  if (kPingPong && fresh_wg() == NCWG - 1) named_barrier_arrive(4, 256);
  for (u32 winfo = next_item(); winfo != kNoMoreItems; winfo = next_item()) {
    const int w = (int)winfo;
    int b, h, q0, split;
    item(w, b, h, q0, split);
    if (KDSL_ITEM_WARM) V::item_warm(a, cap, b, h);  // the item's divisions, once (passes/item_divisions.py)
    if (tracer) trace(1 + wg, tn, kTraceItem, w);
    // The item's first row in the head and in [B * H * M]: all the epilogue needs of the item,
    // kept across the kv loop (recomputing (b, h, q0) from w after it took ~700 cycles of
    // divisions; keeping them: causal 2k x1.012, D=64 x1.024 on the H100). Not at head dims
    // over 128: there they made plain and softcap spill at 256's 80-key tile (the 64-key
    // fallback runs ~10 % slower).
    constexpr bool kKeepRow = DV <= 128;
    const int item_q0 = q0, item_row = kKeepRow ? (b * a.H + h) * M + q0 : 0;  // B * H * M < 2^31 (geometry.py)
    const int row0 = q0 + fresh_wg() * 64 + warp * 16 + g;  // this thread's rows: row0, row0 + 8
    const int qr[2] = {imin2(row0, M - 1), imin2(row0 + 8, M - 1)};  // clamped for the Variant
    const float qf[2] = {(float)row0, (float)(row0 + 8)};
    const float slope = V::kAffine ? V::score_slope(a, cap, b, h) : 0.f;  // per item
    if constexpr (kSlopeForm == kSlopeRegisters) slope_word = attn_wgmma_detail::slope_word(slope, t);
    // kSlopeShared: the item's slope rows; this warpgroup's last Q K^T of the item before has
    // completed (waited for before its softmax), and its threads meet before the first one of
    // this item (my_turn's barrier, which they all take part in; else one of their own)
    if constexpr (kSlopeForm == kSlopeShared) {
      write_slope_rows(slope_rows, slope, tid % 128);
      if constexpr (!kPingPong) named_barrier(12 + fresh_wg(), 128);
    }
#pragma unroll
    for (int i = 0; i < C::kORegs; ++i) o[i] = 0.f;
    m_run[0] = m_run[1] = V::kFixedRef ? V::kScoreRef : neg_inf();  // a fixed reference never moves
    l_run[0] = l_run[1] = 0.f;

    // Which elements of tile j survive (mask on partial tiles, kv < N everywhere), worked out
    // while wgmmas are in flight. Kernels without a mask need nothing here: kv < N is one
    // compare of a constant per register in the softmax (kept() there).
    // - Tiles of class kTileKeys (passes/kv_bounds.py), and ragged full tiles of kernels that
    //   have such tiles: the key interval of each of this thread's two rows, as columns
    //   relative to its first, so that keeping an element is two compares of a constant.
    // - Any other tile: bit i of keep.bits is S element i. On partial tiles the mask is
    //   evaluated in a loop of its own, in one block per 8 column groups (the expression's
    //   `and`/`or` evaluate both sides, cexpr.py), so that NVVM sees those elements' loads
    //   together: a row's data (doc_q[b, q]) is loaded once an item, a column's (doc_kv[b, kv])
    //   once a tile, 16 loads in flight at a time (unrolled whole, document_mask spilled at
    //   D=128; by 2, each load waited for in turn: 8 round trips a tile).
    //   A partial tile of a streamed mask has neither (keep.by_stream): the softmax reads the
    //   mask from the tile in shared memory itself (kMaskInSoftmax).
    // Returns whether the tile stays general for this warp (false: a partial tile whose rows
    // here keep every key, kNonzeroCheck, and not ragged: the softmax's full path).
    auto survivors = [&](int j, int slot, int cls, Keep& keep) -> bool {
      const int k0 = j * BN;
      keep.by_keys = V::kKeysOnly || (V::kKeyBounds && cls != kTilePartial);
      if (keep.by_keys) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          int lo = k0, hi = k0 + BN - 1;
          if (cls == kTileKeys) V::key_bounds(a, cap, b, h, qr[r], k0, lo, hi);
          keep.set_keys(r, lo - k0 - 2 * t, imin2(hi, N - 1) - k0 - 2 * t);
        }
        return true;
      }
      bool partial = cls >= kTilePartial;
      keep.by_stream = kMaskInSoftmax && partial;  // (by_keys takes precedence in the softmax)
      if constexpr (kNonzeroCheck) {
        static_assert(BN % 128 == 0, "the warps test whole 128-byte rows of the streamed tile");
        const int wrow = fresh_wg() * 64 + warp * 16, wq0 = q0 + wrow;
        constexpr bool kRing2 = V::kStreamNonzero == 2;
        if (keep.by_stream &&
            V::stream_rest_full(a, cap, b, h, wq0, imin2(wq0 + 15, a.M - 1), k0, imin2(k0 + BN - 1, N - 1)) &&
            warp_rows_nonzero<BM, kRing2 ? C::kStream2Blocks : C::kStreamBlocks>(
                (kRing2 ? sS2 : sS) + slot * (kRing2 ? C::kStream2Bytes : C::kStreamBytes), wrow, lane)) {
          keep.by_stream = partial = false;  // every key the tile holds, as on a full tile
          if (k0 + BN <= N) return false;
        }
      }
      if (keep.by_stream) return true;
      if constexpr (kNonzeroCheck) partial = false;  // (as by_stream was false, or made so above)
      keep.bits[0] = keep.bits[1] = 0;
      // V::kKeyMask (passes/key_mask.py): the mask's key part, one bit a key of the tile, voted
      // by each warp (lane l evaluates keys k0 + l + 32u, clamped to N - 1 as the mask's loads are,
      // and none from N on), where each element gathered its key's flag (an address, a clamp and
      // a load a column, for both rows). The rest of the mask with the bit set and with it clear
      // (its two arms) is each a constant (`flag or window` keeps every flagged key), a key
      // interval a row (two bounds, made bits by word operations) or tested per element; each
      // element keeps the arm its key's bit chooses.
      auto key_mask_bits = [&]() -> u64 {
        if constexpr (!V::kKeyMask) return 0;  // (spread_key_bits takes 128 keys at most)
        else {
          u32 votes[(BN + 31) / 32];
#pragma unroll
          for (int u = 0; u < (BN + 31) / 32; ++u) {
            const int kv = k0 + lane + 32 * u;
            // `&`, not `&&`: the part unconditional (its key clamped), so that NVVM computes a
            // per-head index (kept[b, h // (H // Hkv), j]) once a tile, not once a word behind a
            // branch (divisions are never speculated; evicted_cache D=128 x1.54, H200), and
            // reuses item_warm's, once an item
            votes[u] = __ballot_sync(0xffffffffu, (kv < N) & V::mask_key_part(a, cap, b, h, imin2(kv, N - 1)));
          }
          // the arms as bits (with the bit set the key is below N already): a constant, two bounds
          // a row where the arm is a key interval, else a test per element
          u64 arm[2] = {V::kKeyArms[0] == 1 ? ~0ull : 0ull, 0ull};
          constexpr bool kPer0 = V::kKeyArms[0] < 0 && !V::kKeyArmKeys[0];
          constexpr bool kPer1 = V::kKeyArms[1] != 0 && !V::kKeyArmKeys[1];
#pragma unroll
          for (int v = 0; v < 2; ++v) {
            if (!V::kKeyArmKeys[v]) continue;
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              int lo, hi;
              V::key_arm_bounds(a, cap, v, b, h, qr[r], k0, lo, hi);
              if (v == 1) hi = imin2(hi, N - 1);  // with the bit clear, keys from N on are not
              arm[v] |= interval_bits<BN>(lo - k0 - 2 * t, hi - k0 - 2 * t, r);
            }
          }
          auto arm_group = [&](int jj) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int kv = k0 + 8 * jj + 2 * t + (e & 1);
              const int q = V::kKeyedLoads ? qr[e >> 1] : row0 + 8 * (e >> 1);
              const int kv_read = V::kKeyedLoads ? imin2(kv, N - 1) : kv;
              if constexpr (kPer0)
                arm[0] |= (u64)(V::mask_with(a, cap, b, h, q, kv_read) ? 1u : 0u) << (4 * jj + e);
              if constexpr (kPer1)
                arm[1] |= (u64)((kv < N) & V::mask_without(a, cap, b, h, q, kv_read) ? 1u : 0u) << (4 * jj + e);
            }
          };
          if constexpr ((kPer0 || kPer1) && V::kKeyedLoads) {  // as partial tiles below: 16 loads in flight
#pragma unroll 8
            for (int jj = 0; jj < BN / 8; ++jj) arm_group(jj);
          } else if constexpr (kPer0 || kPer1) {
#pragma unroll
            for (int jj = 0; jj < BN / 8; ++jj) arm_group(jj);
          }
          const u64 keys = spread_key_bits<BN>(votes, t);
          return (keys & arm[0]) | (~keys & arm[1]);
        }
      };
      auto put = [&](int jj, u64 bits) {  // jj may be a register (unroll 8): no indexed array
        if (jj < 16) keep.bits[0] |= bits << (4 * jj);
        else keep.bits[1] |= bits << (4 * jj - 64);
      };
      auto group = [&](int jj) {
        u64 bits = 0;
        StreamValue sv[4] = {};  // kMaskReads1 / 2: the streamed tensors' elements, from the tiles in slot
        Stream2Value sv2[4] = {};
        if constexpr (V::kMaskReads1) {
          stream_pair<typename V::StreamElem>(pairs1.at(slot, 4 * jj), sv[0], sv[1]);
          stream_pair<typename V::StreamElem>(pairs1.at(slot, 4 * jj + 2), sv[2], sv[3]);
        }
        if constexpr (V::kMaskReads2) {
          stream_pair<typename V::Stream2Elem>(pairs2.at(slot, 4 * jj), sv2[0], sv2[1]);
          stream_pair<typename V::Stream2Elem>(pairs2.at(slot, 4 * jj + 2), sv2[2], sv2[3]);
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int kv = k0 + 8 * jj + 2 * t + (e & 1);
          const int q = V::kMaskLoads ? qr[e >> 1] : row0 + 8 * (e >> 1);
          const int kv_read = V::kMaskLoads ? imin2(kv, N - 1) : kv;
          const bool ok = (kv < N) & (V::kStreamMask ? V::mask_at(a, cap, b, h, q, kv_read, sv[e], sv2[e])
                                                     : V::mask(a, cap, b, h, q, kv_read));
          bits |= (u64)(ok ? 1u : 0u) << e;
        }
        put(jj, bits);
      };
      // V::kKeyValues (passes/key_values.py): the mask's value gathered at the key, once a key of
      // the tile: lane l gathers keys k0 + l + 32u (clamped to N - 1 as the mask's loads are), all
      // BN / 32 gathers in flight together where each element's own were 16 at a time; an element
      // takes its key's value from the lane holding it. Chunk u's four column groups use x[0],
      // the chunks moved down a register after each, so that a rolled loop indexes no array.
      // KDSL_KEY_VALUES_RANGE: keys past N dropped from the tile's bits once, where the tile is
      // ragged, instead of a compare an element; a valued mask that loads nothing at the key
      // (kValuedKeyFree: `kx >= thr[b, h, i] or i == j`) takes the key unclamped; a chunk's 16 bits
      // are packed into one word with constant shifts and placed once. row_threshold's loop (H200
      // ncu: its forward issue-bound, 0.44 warps issued a cycle a scheduler, 40 % of its
      // instructions here) 142 -> 83 instructions a chunk of 32 keys at D=128; forward against
      // per-element (H200, 2x16x4096²): row_threshold x1.23 (D=64 x1.21), event_horizon x1.18,
      // document_mask x1.05, lsh_buckets_gqa x1.04. (Testing only the bool part that reads kx per
      // element and its two position arms as interval bits ran x1.00-0.94 of this, and was dropped.)
      auto key_valued_bits = [&]() {
        constexpr bool kRangeOnce = KDSL_KEY_VALUES_RANGE && BN <= 128;
        if constexpr (V::kKeyValues && BN % 32 == 0) {
          typename V::KeyValue x[BN / 32];
#pragma unroll
          for (int u = 0; u < BN / 32; ++u) x[u] = V::mask_key_value(a, cap, b, h, imin2(k0 + lane + 32 * u, N - 1));
          auto chunk = [&](int u, typename V::KeyValue xu) {  // keys k0 + 32 u .. + 31, four column groups
            u32 word = 0;  // kRangeOnce: the chunk's 16 bits, placed once (one 64-bit shift a chunk, not four)
#pragma unroll
            for (int g4 = 0; g4 < 4; ++g4) {
              const int jj = 4 * u + g4;
              typename V::KeyValue kx[2];
              column_pair_values(xu, g4, t, kx);
              u64 bits = 0;
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                const int kv = k0 + 8 * jj + 2 * t + (e & 1);
                const int kv_read = kRangeOnce && V::kValuedKeyFree ? kv : imin2(kv, N - 1);
                const bool ok = (kRangeOnce || kv < N) & V::mask_valued(a, cap, b, h, qr[e >> 1], kv_read, kx[e & 1]);
                if constexpr (kRangeOnce) word |= ok ? 1u << (4 * g4 + e) : 0u;
                else bits |= (u64)(ok ? 1u : 0u) << e;
              }
              if constexpr (!kRangeOnce) put(jj, bits);
            }
            if constexpr (kRangeOnce) keep.bits[0] |= (u64)word << (16 * u);  // (BN <= 128: one word)
          };
          // rolled (unrolled whole spilled 8-16 B at D=128 in four of five kernels)
#pragma unroll 1
          for (int u = 0; u < BN / 32; ++u) {
            chunk(u, x[0]);
#pragma unroll
            for (int i = 0; i + 1 < BN / 32; ++i) x[i] = x[i + 1];
          }
          if constexpr (kRangeOnce) {
            if (k0 + BN > N) keep.bits[0] &= interval_bits<BN>(-2 * t, N - 1 - k0 - 2 * t, 0) |
                                               interval_bits<BN>(-2 * t, N - 1 - k0 - 2 * t, 1);
          }
        }
      };
      if (partial && V::kKeyMask) {
        keep.bits[0] = key_mask_bits();
      } else if (partial && V::kKeyValues) {
        key_valued_bits();
      } else if (partial && V::kKeyBounds) {  // the interval's code beside it: by 8, document_mask spilled
#pragma unroll 4
        for (int jj = 0; jj < BN / 8; ++jj) group(jj);
      } else if (partial) {
#pragma unroll 8
        for (int jj = 0; jj < BN / 8; ++jj) group(jj);
      } else {
#pragma unroll 2
        for (int jj = 0; jj < BN / 8; ++jj) {
          u64 bits = 0;
#pragma unroll
          for (int e = 0; e < 4; ++e) bits |= (u64)(k0 + 8 * jj + 2 * t + (e & 1) < N ? 1u : 0u) << e;
          put(jj, bits);
        }
      }
      return true;
    };

    // The table entries of tile j (its offset part at the warpgroup's 64 + BN - 1 offsets, or
    // its key part at BN keys; see softmax()). A part that gathers captured data at its key or
    // offset is computed while the tile's Q K^T is in flight: loaded where the softmax fills
    // the table, the gather's latency stood between the wgmma's wait and the table's barrier
    // every tile (H200, 2x16x4096², ahead against there: QK-norm scales x1.094 at D=64 and
    // x1.071 at D=128, a key temperature x1.031, tanh of a key bias x1.01-1.02, log of a key
    // weight under padding x0.984 and x1.010 in two runs; learned and T5 buckets x1.054 and
    // x1.010 at D=128). Not an offset part at head dims up to 64, whose Q K^T is short beside its
    // two entries a thread: the buckets ran x0.978 and x0.980 ahead. Nor a part without a
    // gather: ahead ran x0.979-1.022 (a quadratic offset, steps, a periodic bias of the head's
    // frequency). KDSL_TABLE_AHEAD=0 computes every part there (A/B).
    auto table_entries = [&](int j) {
      const int k0 = j * BN, d0 = q0 + fresh_wg() * 64 - k0 - (BN - 1);
#pragma unroll
      for (int u = 0; u < (kTableEntries + 127) / 128; ++u) {
        const int x = tid % 128 + 128 * u;  // past kTableEntries: computed at a clamped index, never stored
        if constexpr (V::kKeyTable) {
          table_next[u] = V::key_part(a, cap, b, h, imin2(k0 + x, N - 1));
        } else if constexpr (V::kOffsetTable) {
          const int d = d0 + x;
          table_next[u] = V::score_offset(a, cap, b, h, d < 1 - N ? 1 - N : imin2(d, M - 1));
        }
      }
    };
    auto table_ahead = [&](int j) {
      if constexpr (kTableAhead) table_entries(j);
    };

    // Scores of tile j in the log2 domain, masked; then the online-softmax update: sc becomes
    // P (relative to the new running max) and alpha[] rescales what O held so far.
    auto softmax = [&](int j, int slot, bool general, const Keep& keep, float (&alpha)[2]) {
      const int k0 = j * BN;
      // kv as a float: one conversion per tile, then a constant per register (exact below
      // 2^24; the runtime bounds N for kernels whose score uses it)
      // (with the slope step, at the tile's column 0: the wgmma added slope * (kv - k0))
      const float kvf0 = (float)(kSlope ? k0 : k0 + 2 * t);
      const float dq0[2] = {qf[0] - kvf0, qf[1] - kvf0};  // q - kv likewise: a base per row
      const float factor = V::kScaledDot ? a.scale_log2
                           : V::kAffine  ? a.scale_log2 * V::kAffineFactor
                           : V::kKeyRaw  ? a.scale_log2 * V::kKeyFactor
                                         : V::kScoreFactor;
      // sc is raw; score = factor * raw (+ base[r] for kAffine: a row's base, at column 0)
      constexpr bool kRaw = ((V::kScaledDot || V::kFactored || V::kAffine) && !V::kOffsetTable && !V::kKeyTable) ||
                            V::kKeyRaw;
      // V::kOffsetTable (passes/offset_score.py): the score's offset part at the warpgroup's
      // 64 + BN - 1 offsets d = q - kv of this tile, from d0 = (first row) - k0 - (BN - 1), one
      // or two a thread, into the table the warpgroup did not read last tile: a thread fills it
      // only after the barrier of that tile, which every thread reaches after its reads of the
      // tile before (so one barrier a tile). d is clamped to the offsets some valid (q, kv) has,
      // so the part's loads read what the score as written would; elements outside them are
      // masked or not stored.
      // V::kKeyTable (passes/key_table.py) fills the same tables, in the same turns, with the
      // score's key part at the tile's BN keys, clamped to N - 1 as the score's loads would be.
      // (Plain C++ accesses, so that NVVM orders them against the barrier's memory clobber and
      // makes the reads LDS at a per-thread base plus an immediate.)
      float* otab = nullptr;
      if constexpr (V::kOffsetTable || V::kKeyTable) {
        const int wgi = fresh_wg();
        otab = reinterpret_cast<float*>(kdsl_attn_smem + (base - smem_addr(kdsl_attn_smem)) + C::kOffsetOffset) +
               (2 * wgi + ot_flip) * C::kOffsetStride;
        ot_flip ^= 1;
        if constexpr (!kTableAhead) table_entries(j);
        const float unit = V::kKeyRaw ? 1.f / factor : 1.f;  // kKeyRaw: the table holds kt / F
#pragma unroll
        for (int u = 0; u < (kTableEntries + 127) / 128; ++u) {
          const int x = tid % 128 + 128 * u;
          if (x < kTableEntries) otab[x] = table_next[u] * unit;
        }
        named_barrier(1 + wgi, 128);
      }
      float base[2] = {0.f, 0.f}, gain[2] = {1.f, 1.f};
      if constexpr (V::kAffine) {
#pragma unroll
        for (int r = 0; r < 2; ++r) base[r] = V::score_base(a, cap, b, h, qr[r], qf[r], kvf0, dq0[r]);
      }
      if constexpr (V::kKeyRaw) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          gain[r] = V::key_gain(a, cap, b, h, qr[r], qf[r]);
          base[r] = V::key_base(a, cap, b, h, qr[r], qf[r]);
        }
      }
      // Whether S element i survives, on general tiles (kv of element i is k0 + 2t + its
      // column offset, a constant)
      const int kv_room = N - k0 - 2 * t;
      auto kept = [&](int i) -> bool {
        if constexpr (V::kHasMask) return ((keep.bits[i / 64] >> (i % 64)) & 1u) != 0;
        return 8 * (i / 4) + (i & 1) < kv_room;
      };
      auto in_keys = [&](int i) -> bool {
        const int col = 8 * (i / 4) + (i & 1), r = (i >> 1) & 1;  // col: a constant once unrolled
        return (col >= keep.lo(r)) & (col <= keep.hi(r));
      };
      // sc[i] = value(i) where element i survives, else -inf: by the key interval or by kept(),
      // one loop or the other per tile (a per-element choice would cost both). value(i) is
      // computed either way: a select, not a branch around its loads.
      auto keep_only = [&](auto&& value) {
        if (V::kKeysOnly || (V::kKeyBounds && keep.by_keys)) {
#pragma unroll
          for (int i = 0; i < C::kSRegs; ++i) {
            const float x = value(i);
            sc[i] = in_keys(i) ? x : neg_inf();
          }
        } else if (kMaskInSoftmax && keep.by_stream) {  // the streamed mask, a pair of keys a read
#pragma unroll
          for (int i = 0; i < C::kSRegs; i += 2) {
            StreamValue sv[2] = {};
            Stream2Value sv2[2] = {};
            if constexpr (V::kMaskReads1) stream_pair<typename V::StreamElem>(pairs1.at(slot, i), sv[0], sv[1]);
            if constexpr (V::kMaskReads2) stream_pair<typename V::Stream2Elem>(pairs2.at(slot, i), sv2[0], sv2[1]);
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int col = 8 * (i / 4) + e, r = (i >> 1) & 1, kv = k0 + 2 * t + col;
              const int q = V::kMaskLoads ? qr[r] : row0 + 8 * r, kv_read = V::kMaskLoads ? imin2(kv, N - 1) : kv;
              const float x = value(i + e);
              const bool ok = (col < kv_room) & (V::kStreamMask ? V::mask_at(a, cap, b, h, q, kv_read, sv[e], sv2[e])
                                                                : V::mask(a, cap, b, h, q, kv_read));
              sc[i + e] = ok ? x : neg_inf();
            }
          }
        } else {
#pragma unroll
          for (int i = 0; i < C::kSRegs; ++i) {
            const float x = value(i);
            sc[i] = kept(i) ? x : neg_inf();
          }
        }
      };
      // The score of every element, then on general tiles (ragged, or partly masked) -inf
      // where the element does not survive: one copy of the score and of the softmax after
      // it serves every tile (NVVM and ptxas then work through one, not two: cold builds
      // 0.03-0.06 s faster). A score that loads captured data at kv reads it at kv clamped to
      // N - 1 on general tiles, so those keep a second copy. kScaledDot: sc stays the raw dot
      // product, and the row max is taken on it.
      // kFactored: sc holds score_unit (score = kScoreFactor * unit), whose row max is taken
      // likewise; the factor goes into the exponent's FFMA below.
      auto score_at = [&](int i, int kv) {
        const float col = (float)(8 * (i / 4) + (i & 1));  // a constant once unrolled
        if constexpr (V::kKeyTable) {  // element i's key is k0 + 2t + col
          const int r = (i >> 1) & 1;
          const float entry = otab[2 * t + 8 * (i / 4) + (i & 1)];
          if constexpr (V::kKeyRaw) return fmaf(gain[r], entry, sc[i]);  // raw: qk + gain * kt / F
          return V::score_keyed(a, cap, sc[i], b, h, qr[r], kv, qf[r], kvf0, dq0[r], col, entry);
        } else if constexpr (V::kOffsetTable) {  // element (row, col) reads offset (row - first row) - 2t + BN - 1 - col
          const int row = warp * 16 + g + 8 * ((i >> 1) & 1);
          return fmaf(sc[i], a.scale_log2 * V::kOffsetFactor, otab[row - 2 * t + (BN - 1) - (8 * (i / 4) + (i & 1))]);
        } else if constexpr (kSlope)  // the wgmma added slope * col already
          return sc[i];
        else if constexpr (V::kAffine)  // one FFMA: col an immediate, the slope a register
          return fmaf(slope, col, sc[i]);
        else if constexpr (V::kFactored)
          return V::score_unit(a, cap, sc[i], b, h, qr[(i >> 1) & 1], kv, qf[(i >> 1) & 1], kvf0, dq0[(i >> 1) & 1], col,
                               stream_at(slot, i));
        else
          return V::score(a, cap, sc[i], b, h, qr[(i >> 1) & 1], kv, qf[(i >> 1) & 1], kvf0, dq0[(i >> 1) & 1], col,
                          stream_at(slot, i));
      };
      if constexpr (!V::kScaledDot && V::kScoreLoadsAtKV) {
        if (general) {
          keep_only([&](int i) { return score_at(i, imin2(k0 + 8 * (i / 4) + 2 * t + (i & 1), N - 1)); });
        } else {
#pragma unroll
          for (int i = 0; i < C::kSRegs; ++i) sc[i] = score_at(i, k0 + 8 * (i / 4) + 2 * t + (i & 1));
        }
      } else {
        if constexpr (!V::kScaledDot) {
#pragma unroll
          for (int i = 0; i < C::kSRegs; ++i) sc[i] = score_at(i, k0 + 8 * (i / 4) + 2 * t + (i & 1));
        }
        if (general) keep_only([&](int i) { return sc[i]; });
      }
      float raw_max[2] = {neg_inf(), neg_inf()};
      if constexpr (kRaw && !V::kFixedRef) {
#pragma unroll
        for (int i = 0; i < C::kSRegs; ++i) raw_max[(i >> 1) & 1] = fmax2(raw_max[(i >> 1) & 1], sc[i]);
      }
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float mx;
        if constexpr (V::kFixedRef) {  // the score's range fixes the reference (passes/score_bounds.py)
          mx = m_run[hh];
        } else if constexpr (kRaw) {  // raw max times a positive factor (-inf stays -inf)
          mx = V::kAffine || V::kKeyRaw ? fmax2(m_run[hh], quad_max(fmaf(raw_max[hh], factor, base[hh])))  // bases differ by thread
                                        : fmax2(m_run[hh], quad_max(raw_max[hh]) * factor);
        } else {
          mx = m_run[hh];
#pragma unroll
          for (int jj = 0; jj < BN / 8; ++jj) mx = fmax2(mx, fmax2(sc[4 * jj + 2 * hh], sc[4 * jj + 2 * hh + 1]));
          mx = quad_max(mx);
        }
        // A row with no finite score so far keeps max = -inf; exponentiate against 0 then,
        // so that -inf - (-inf) never makes a NaN (every p and alpha is 0).
        // Lazy rescaling: the reference stays while the max exceeds it by at most kLazy (log2
        // units): P is then up to 2^kLazy, well inside bf16 / f16 and the fp32 sums, and O
        // needs no rescale (alpha = 1) on most tiles. 0: the reference follows the max.
        constexpr float kLazy = V::kLazyRescale;
        const bool stay = V::kFixedRef || (kLazy > 0.f && mx <= m_run[hh] + kLazy);  // -inf stays -inf
        const float m_new = stay ? m_run[hh] : mx;
        const float ref = m_new == neg_inf() ? 0.f : m_new;
        alpha[hh] = stay ? 1.f : exp2_approx(m_run[hh] - ref);
        m_run[hh] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int jj = 0; jj < BN / 8; ++jj) {
          // Every kPolyExp2-th column group's exponentials on the FMA pipe (exp2_poly), the rest
          // on the MUFU: a choice fixed at compile time once the loop is unrolled.
          constexpr int kEvery = V::kPolyExp2;
          auto ex2 = [&](float x) { return kEvery > 0 && jj % kEvery == kEvery - 1 ? exp2_poly(x) : exp2_approx(x); };
          float p0, p1;
          if constexpr (kRaw) {  // one FFMA: raw * factor - max
            p0 = ex2(fmaf(sc[4 * jj + 2 * hh], factor, base[hh] - ref));
            p1 = ex2(fmaf(sc[4 * jj + 2 * hh + 1], factor, base[hh] - ref));
          } else {
            p0 = ex2(sc[4 * jj + 2 * hh] - ref);
            p1 = ex2(sc[4 * jj + 2 * hh + 1] - ref);
          }
          sc[4 * jj + 2 * hh] = p0;
          sc[4 * jj + 2 * hh + 1] = p1;
          if constexpr (!kRowSum) sum += p0 + p1;
        }
        l_run[hh] = l_run[hh] * alpha[hh] + sum;
      }
    };

    auto rescale_and_pack = [&](const float (&alpha)[2]) {
      // with lazy rescaling, only when some row of the warp moved its reference (a uniform branch)
      // (never with a fixed reference: alpha is 1)
      if (!V::kFixedRef &&
          (V::kLazyRescale == 0.f || __any_sync(0xffffffffu, (alpha[0] != 1.f) | (alpha[1] != 1.f)))) {
#pragma unroll
        for (int jj = 0; jj < C::kPVN / 8; ++jj) {  // the row sums too (kRowSum)
          o[4 * jj + 0] *= alpha[0];
          o[4 * jj + 1] *= alpha[0];
          o[4 * jj + 2] *= alpha[1];
          o[4 * jj + 3] *= alpha[1];
        }
      }
      // Two adjacent n-tiles of the S accumulator are one k16 A fragment once packed.
#pragma unroll
      for (int kp = 0; kp < BN / 16; ++kp) {
        pa[kp][0] = pack2<Elem>(sc[8 * kp + 0], sc[8 * kp + 1]);
        pa[kp][1] = pack2<Elem>(sc[8 * kp + 2], sc[8 * kp + 3]);
        pa[kp][2] = pack2<Elem>(sc[8 * kp + 4], sc[8 * kp + 5]);
        pa[kp][3] = pack2<Elem>(sc[8 * kp + 6], sc[8 * kp + 7]);
      }
    };

    {
      mbar_wait(full_q, n_done++ & 1);
      if (tracer) trace(1 + wg, tn, kTraceQReady, w);
      // Software pipeline within the warpgroup: while tile j's P V runs on the tensor cores,
      // S of the next tile is already computed and goes through the softmax. One loop body
      // serves every tile: a peeled first tile doubles the softmax code that NVVM and ptxas
      // work through (cold builds 10-25 % slower). At its head S of the tile in ring slot `it`
      // is in flight, P V of the tile before (slot sv) behind it, and the tile's survivors are
      // known. The first tile's S is waited for before the loop: ptxas cannot tell that the
      // loop's wgmma_wait<1> would find only it in flight, and would serialise every wgmma.
      u32 info;
      bool partial, general;
      Keep keep{};
      {
        const int s = it % STAGES;  // full: next_item() waited for it
        info = ld_shared_u32(info_kv(s));
        partial = V::kHasMask && (int)((info >> 1) & 3) >= kTilePartial;
        general = partial || (int)(info >> 3) * BN + BN > N;
        my_turn(wg);
        wgmma_fence();
        qk(s);
        your_turn(wg);
        table_ahead(info >> 3);
        if (V::kHasMask && general) {
          if constexpr (kNonzeroCheck) general = survivors(info >> 3, s, (int)((info >> 1) & 3), keep);
          else survivors(info >> 3, s, (int)((info >> 1) & 3), keep);
        }
        wgmma_wait<0>();
        if (tracer) trace(1 + wg, tn, kTraceFirstS, w);
      }
      for (int sv = -1;;) {  // sv: ring slot of the P V in flight (-1: none yet)
        const int j = info >> 3;
        wgmma_wait<1>();  // groups retire in order: S of tile j is ready, P V may still run
        wgmma_pin(sc);
        if (tracer) trace(1 + wg, tn, kTraceTileS, j);
        // The item's last Q K^T has completed: the producer may load the next item's Q now,
        // under this tile's softmax, its P V and the epilogue (which stores from registers).
        if (!(info & 1)) release(empty_q);
        if constexpr (!kStream) release_k(it % STAGES);
        float alpha[2];
        softmax(j, it % STAGES, general, keep, alpha);
        if constexpr (kStream) release_k(it % STAGES);  // after the softmax read the streamed tile
        wgmma_wait<0>();
        wgmma_pin(o);
        if (sv >= 0) release(empty_v(sv));
        rescale_and_pack(alpha);
        if (!(info & 1)) break;  // no tile follows
        const int s = it % STAGES, sn = (it + 1) % STAGES;
        mbar_wait(full_k(sn), ((it + 1) / STAGES) & 1);
        info = ld_shared_u32(info_kv(sn));
        mbar_wait(full_v(s), (it / STAGES) & 1);
        my_turn(wg);
        wgmma_fence();
        qk(sn);
        pv(s);
        your_turn(wg);
        sv = s;
        partial = V::kHasMask && (int)((info >> 1) & 3) >= kTilePartial;
        general = partial || (int)(info >> 3) * BN + BN > N;
        table_ahead(info >> 3);
        if (V::kHasMask && general) {
          if constexpr (kNonzeroCheck) general = survivors(info >> 3, sn, (int)((info >> 1) & 3), keep);
          else survivors(info >> 3, sn, (int)((info >> 1) & 3), keep);
        }
        ++it;
      }
      // the last tile's P V
      const int s = it % STAGES;
      mbar_wait(full_v(s), (it / STAGES) & 1);
      const int wgf = fresh_wg();
      my_turn(wgf);
      wgmma_fence();
      pv(s);
      your_turn(wgf);
      wgmma_wait<0>();
      wgmma_pin(o);
      if (tracer) trace(1 + wg, tn, kTraceLastPV, w);
      release(empty_v(s));
      ++it;
    }

    if (kSplitKV && a.splits > 1) {
      item(opaque(w), b, h, q0, split);  // the split too: recomputed, not kept across the kv loop
      const int out_row0 = q0 + fresh_wg() * 64 + warp * 16 + g;
      const int bh = b * a.H + h;
      // ---- epilogue of one split of the keys: this split's normalised O in fp32 and its lse,
      // for attention_combine_splits (no keys here: O = 0, lse = -inf) ----
      const i64 part_row = ((i64)split * a.B * a.H + bh) * M;
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int r = out_row0 + 8 * hh;
        const float l = row_sum(hh);
        const float inv = l > 0.f ? 1.f / l : 0.f;
        if (r < M) {
          float* po = a.part_o + (part_row + r) * DV;
#pragma unroll
          for (int jj = 0; jj < DV / 8; ++jj)
            *reinterpret_cast<float2*>(po + 8 * jj + 2 * t) =
                make_float2(o[4 * jj + 2 * hh] * inv, o[4 * jj + 2 * hh + 1] * inv);
          if (t == 0) a.part_lse[part_row + r] = l > 0.f ? (m_run[hh] + lg2_approx(l)) * 0.69314718055994531f : neg_inf();
        }
      }
      if constexpr (!V::kHasMask) {
        if (a.split_done != nullptr) merge_if_last(w / a.splits, b * a.H + h, q0);
      }
      continue;
    }

    // ---- epilogue: normalise and store from registers, rows g and g + 8 of this warp. A
    // quad holds two adjacent columns of each 8-column group a thread; a 4 x 4 transpose of
    // its words (four groups at a time) gives each thread one whole group, 16 contiguous
    // bytes, so that a warp's store covers 64 bytes of each of its 8 rows, not 16: a quarter
    // of the L1 wavefronts. Against 4-byte stores, H100 in turns: causal 1k x1.088, 2k x1.049,
    // 8k x1.016; plain 2k x1.033; alibi 2k x1.035; document 2k x1.039 (item_trace.py had put
    // an item's end, last P V to the next first S, at 2.6-2.9 tiles' time); the transposes all
    // issued before the stores, another x1.014 (causal 2k) to x1.017 (alibi 2k). Not staged
    // in shared memory: sQ already belongs to the next item's Q. ----
    const int local_row = fresh_wg() * 64 + warp * 16 + g;  // this thread's first row in the item
    if constexpr (!kKeepRow) item(opaque(w), b, h, q0, split);
    const int head_row = (kKeepRow ? item_q0 : q0) + local_row;                      // in the head
    const int flat_row = (kKeepRow ? item_row : (b * a.H + h) * M + q0) + local_row;  // in [B * H * M]
    if (tracer) trace(1 + wg, tn, kTraceEpilogue, w);
    constexpr int kBlocks = DV / 32;  // of four 8-column groups
    // Rows g and g + 8 together: their words, every transpose (independent of each other:
    // their shuffles overlap), then the stores. Over head dim 128 a row at a time, so that
    // 256's 80-key tile stays unspilled.
    constexpr int kRows = DV <= 128 ? 2 : 1;
#pragma unroll
    for (int h0 = 0; h0 < 2; h0 += kRows) {
      u32 words[kRows][DV / 8];
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const int hh = h0 + i;
        const float l = row_sum(hh);
        const float inv = l > 0.f ? 1.f / l : 0.f;
        if (head_row + 8 * hh < M && a.lse != nullptr && t == 0)
          a.lse[flat_row + 8 * hh] = l > 0.f ? (m_run[hh] + lg2_approx(l)) * 0.69314718055994531f : neg_inf();
#pragma unroll
        for (int jj = 0; jj < DV / 8; ++jj) words[i][jj] = pack2<Elem>(o[4 * jj + 2 * hh] * inv, o[4 * jj + 2 * hh + 1] * inv);
      }
#pragma unroll
      for (int i = 0; i < kRows; ++i)
#pragma unroll
        for (int p = 0; p < kBlocks; ++p) {
          u32 w4[4] = {words[i][4 * p], words[i][4 * p + 1], words[i][4 * p + 2], words[i][4 * p + 3]};
          quad_transpose(w4, t);  // every lane: before the row test
#pragma unroll
          for (int k = 0; k < 4; ++k) words[i][4 * p + k] = w4[k];
        }
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const int hh = h0 + i;
        if (head_row + 8 * hh >= M) continue;
        Elem* orow = static_cast<Elem*>(a.o) + (i64)(flat_row + 8 * hh) * DV;
#pragma unroll
        for (int p = 0; p < kBlocks; ++p)
          *reinterpret_cast<uint4*>(orow + 8 * (4 * p + t)) =
              make_uint4(words[i][4 * p], words[i][4 * p + 1], words[i][4 * p + 2], words[i][4 * p + 3]);
#pragma unroll
        for (int jj = 4 * kBlocks; jj < DV / 8; ++jj)  // the groups left over (DV % 32)
          *reinterpret_cast<u32*>(orow + 8 * jj + 2 * t) = words[i][jj];
      }
    }
    if (tracer) trace(1 + wg, tn, kTraceStored, w);
  }
  if (kPingPong && fresh_wg() == 0) my_turn(0);  // the last item's final turn
}

}  // namespace kdsl
