// kdsl/fp8_gemm_math.cuh — the FP8 GEMM's math warpgroups: per K block their wgmma waves, the
// stage handed back, and the promotion of each wave into fp32 totals; per unit the epilogue.
// fp8_gemm_wgmma.cuh describes the kernel.
#pragma once
#include "kdsl/fp8_gemm_config.cuh"
#include "kdsl/fp8_gemm_epilogue.cuh"
#include "kdsl/wgmma_fp8_ops.cuh"

// 1 (the kernel): a math warpgroup none of whose rows exist (past a masked group's count)
// skips the unit's wgmmas and promotion, handing each stage back as usual. (Dense tiles past
// M are rare, and there the extra path made the clustered 256-row tile spill.)
#ifndef KDSL_FP8_SKIP_EMPTY_WAVES
#define KDSL_FP8_SKIP_EMPTY_WAVES 1
#endif

// 1 (the kernel): on tiles of one m64 wave a warpgroup, the next K block's "full" wait and
// scale reads are made while this block's wave runs, off the path from one block's
// promotion to the next block's first wgmma. H200, in turns (2026-11-27, fp8_forms.py, with
// an A/A control): 128x128 tiles x1.06 (4096x1536x7168), 64x112 x1.03-1.05 (M = 128), the
// rest of the M = 128 shapes and masked groupings within 1-2 %. 256-row tiles keep the reads
// at the top: with them (or with the wait alone) they spilled. 0: the loop as before.
#ifndef KDSL_FP8_PREFETCH_SCALES
#define KDSL_FP8_PREFETCH_SCALES 1
#endif

// 1: 128-row tiles take turns too (see fp8_math). Measured with the scale prefetch on the
// H100 (2026-11-27, tools/dev/fp8_forms.py): within -1 to +0.5 % of without. 0: the kernel.
#ifndef KDSL_FP8_TURNS_128
#define KDSL_FP8_TURNS_128 0
#endif

// 1 (the kernel): the three math warpgroups of 192-row tiles take turns. They ran only ~3 %
// faster per tile than 256-row tiles (H100, 2026-11-27), although each has two other waves to
// hide its promotion behind; in a fixed round a late warpgroup holds the other two at their
// turns. 0: they issue as they are ready, for tools/dev/fp8_forms.py A/B.
#ifndef KDSL_FP8_TURNS_192
#define KDSL_FP8_TURNS_192 1
#endif

// 1 (the kernel): a tile straddling two 128-column scale blocks of B promotes through a
// switch on where the boundary falls, each case with the scales fixed per column at compile
// time. 0: each 8-column fragment selects its scale in every K block, as before (ptxas
// recomputes the fragments' predicates each block, 14 at BN 112: there are 7 predicate
// registers). H100, 2026-11-27: the switch ran 6-11 % faster on 112-, 144- and 96-wide tiles.
#ifndef KDSL_FP8_SPLIT_SWITCH
#define KDSL_FP8_SPLIT_SWITCH 1
#endif

// 1 (the kernel): on 256-row tiles of a masked grouping, a warpgroup whose second wave holds no
// row (the group's count ends within the tile's first 128 + 64 * wg rows) issues and promotes
// its first wave only, taking the second wave's turn empty. H200, in turns against the kernel
// without it and an A/A build (bench/NOTES.md, thirty-sixth session): x1.10-1.24 where groups of
// 20-128 rows sit in 256-row tiles (M = 4096, no expected_rows), x0.995-1.014 elsewhere (A/A
// within 0.8 %). 0: it computes both.
#ifndef KDSL_FP8_MASKED_HALF_TILES
#define KDSL_FP8_MASKED_HALF_TILES 1
#endif

// KDSL_FP8_DEV_SKIP_PROMOTE=1 (timing probes only: the result is wrong): the math warpgroups
// wait for each wave's wgmmas but skip its promotion, so a block's period is what the loads and
// the tensor cores alone allow (bench/NOTES.md, twenty-ninth session).
#ifndef KDSL_FP8_DEV_SKIP_PROMOTE
#define KDSL_FP8_DEV_SKIP_PROMOTE 0
#endif

// How many K blocks the math loop of clustered 256-row tiles (two waves a warpgroup) is unrolled
// by; other tiles keep it rolled. H100, in turns (bench/NOTES.md, thirtieth session): 256x128
// with A multicast x1.022-1.055 unrolled by 4 (x1.021-1.042 by 2); unclustered 256x128 x0.98-0.99
// (M = 4096 K = 512; masked), 128x128 x0.95-0.98 and 192x128 x0.95 unrolled by 2 or 4, 64x128
// unchanged.
#ifndef KDSL_FP8_UNROLL_KB_256
#define KDSL_FP8_UNROLL_KB_256 4
#endif

namespace kdsl {

// One wave's promotion: total += acc * scale, fragment group j (the tile's columns 8j .. 8j + 7,
// rows r and r + 8) scaled by its row's A scale times B's first block scale (lo) when j < j0,
// else the second's (hi). Given a constant j0 (inlined), each choice is made at compile time.
template <int kFrag>
KDSL_DEVICE void promote(int j0, const float (&acc)[kFrag], float (&total)[kFrag], float lo0, float lo1, float hi0,
                         float hi1) {
#pragma unroll
  for (int j = 0; j < kFrag / 4; ++j) {
    const bool lo = j < j0;
    const float sc0 = lo ? lo0 : hi0, sc1 = lo ? lo1 : hi1;
    total[4 * j + 0] = fmaf(acc[4 * j + 0], sc0, total[4 * j + 0]);
    total[4 * j + 1] = fmaf(acc[4 * j + 1], sc0, total[4 * j + 1]);
    total[4 * j + 2] = fmaf(acc[4 * j + 2], sc1, total[4 * j + 2]);
    total[4 * j + 3] = fmaf(acc[4 * j + 3], sc1, total[4 * j + 3]);
  }
}

// The same with j0 known only at run time (uniform over the tile): a case with a constant j0
// for each even value up to 24 (BN 192; tiles start at multiples of 16 columns, so j0 is
// even). Any other value selects per fragment.
template <int kFrag>
KDSL_DEVICE void promote_split(int j0, const float (&acc)[kFrag], float (&total)[kFrag], float lo0, float lo1,
                               float hi0, float hi1) {
#define KDSL_FP8_PROMOTE_CASE(J)                      \
  case J:                                             \
    promote<kFrag>(J, acc, total, lo0, lo1, hi0, hi1); \
    return;
  switch (j0) {
    KDSL_FP8_PROMOTE_CASE(2) KDSL_FP8_PROMOTE_CASE(4) KDSL_FP8_PROMOTE_CASE(6) KDSL_FP8_PROMOTE_CASE(8)
    KDSL_FP8_PROMOTE_CASE(10) KDSL_FP8_PROMOTE_CASE(12) KDSL_FP8_PROMOTE_CASE(14) KDSL_FP8_PROMOTE_CASE(16)
    KDSL_FP8_PROMOTE_CASE(18) KDSL_FP8_PROMOTE_CASE(20) KDSL_FP8_PROMOTE_CASE(22) KDSL_FP8_PROMOTE_CASE(24)
    default:
      break;
  }
#undef KDSL_FP8_PROMOTE_CASE
  promote<kFrag>(j0, acc, total, lo0, lo1, hi0, hi1);
}

template <class C>
KDSL_DEVICE void fp8_math(const Fp8GemmArgs& p, const TmaDesc* td, const Fp8Smem<C>& sm) {
  constexpr int BN = C::BN, kFrag = C::kFrag, kWaves = C::kWaves;
  const int tid = threadIdx.x - 128;  // among the math threads
  const int wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const Fp8Epilogue<C> epilogue{p, td, sm.d(), wg, warp, lane};
  const int nk = p.K / C::kBK;
  RingPos<C::STAGES> pos;
  int tn = 0;  // KDSL_FP8_TRACE: records made (by the warpgroup's first thread)
  const bool tracer = (tid & 127) == 0;
  if (tracer) fp8_trace(1 + wg, tn, kFp8TraceStart, 0);

  // Every math thread hands a stage back to its own producer once it is done reading the
  // stage's scales, so each read is ordered before the refill by its own arrival. One arrival
  // per warpgroup (leaning on wgmma being a warpgroup operation) and one per warp after
  // __syncwarp both drew racecheck hazards against the producer's cp.async refill. The peer
  // of a cluster refills only the A or B tile (its multicast half), which this CTA read by
  // wgmma alone: one arrival per warpgroup on the peer's barrier, after the wgmma wait.
  auto release = [&]() {
    mbar_arrive(sm.empty(pos.s));
    if (C::CLUSTER > 1 && (tid & 127) == 0) mbar_arrive_cluster(sm.empty(pos.s), cluster_ctarank() ^ 1u);
  };

  // Turns (BM = 256, and the three warpgroups of BM = 192): the math warpgroups issue their
  // wgmma waves in a fixed round (named barriers 5, 6, 7), so that one's promotion runs while
  // another's wave keeps the tensor cores busy; left alone they drift into step, and all
  // promote while the tensor cores idle. The last warpgroup lets 0 go first, and each passes
  // the turn after each wave, so 0 takes one turn more at the end of the work than it has
  // waves. Measured on the H100 (2026-11-24, tools/dev/fp8_forms.py, in turns): +2-4 % on
  // every 256-row tile; on 128-row tiles neutral or worse (128x192, M = 128: -7 %), so they
  // run without it; so do clustered kernels, where it made the 256-row tile spill (176 bytes).
  constexpr bool kPingPong = (C::kWaves == 2 || (KDSL_FP8_TURNS_192 && C::kMathWG == 3) ||
                              (KDSL_FP8_TURNS_128 && C::kMathWG == 2)) && C::CLUSTER == 1;
  auto my_turn = [&]() { if (kPingPong) named_barrier(5 + wg, 256); };
  auto your_turn = [&]() {  // (wg ^ 1 for two: the 256-row loop's SASS as it was measured)
    if (kPingPong) named_barrier_arrive(5 + (C::kMathWG == 2 ? wg ^ 1 : (wg + 1) % C::kMathWG), 256);
  };
  if (kPingPong && wg == C::kMathWG - 1) named_barrier_arrive(5, 256);

  // KDSL_FP8_MASKED_HALF_TILES's one-wave path: masked 256-row tiles without a cluster whose B
  // scales come through the ring (with a cluster, or read from global memory, the tile spilled).
  constexpr bool kHalfTiles = KDSL_FP8_MASKED_HALF_TILES && C::KIND == 2 && kWaves == 2 && C::CLUSTER == 1 &&
                              !C::kSbGlobal;
  float acc[kFrag];  // no init: each K block's first wgmma runs with scale-d = 0
  float total[kWaves][kFrag];
  // Deferred stores (Fp8Epilogue::kDeferStores): the staged unit and its boxes not yet issued.
  Fp8Unit staged{};
  int boxes_left = 0;
  auto flush_boxes = [&]() {
    for (; boxes_left > 0; --boxes_left) epilogue.store_box(staged, epilogue.kBoxes - boxes_left);
  };
  for (;;) {
    mbar_wait(sm.full(pos.s), pos.phase);
    const Fp8Unit u = *sm.unit(pos.s);
    if (tracer) fp8_trace(1 + wg, tn, kFp8TraceReady, u.m0);
    if (u.m0 < 0) {
      release();
      pos.advance();
      if (kPingPong && wg == 0) my_turn();  // the turn the last warpgroup passed after its last wave
      break;
    }
#pragma unroll
    for (int v = 0; v < kWaves; ++v)
#pragma unroll
      for (int i = 0; i < kFrag; ++i) total[v][i] = 0.f;
    const int bnd = 128 - (u.n0 & 127);  // tile columns < bnd are in B's first scale block
    const int j0 = (bnd < BN ? bnd : BN) / 8;  // fragment groups in it
    // A warpgroup none of whose rows exist (in a masked group's last tile) only hands the
    // stages back. A separate loop, not a branch around the wgmmas: ptxas
    // serialises every wgmma of the kernel when one sits in a divergent path (C7518), and
    // even a uniform branch there cost 7-12 % on 256-row tiles (2026-11-25).
    if (KDSL_FP8_SKIP_EMPTY_WAVES && C::KIND == 2 && fp8_detail::masked_rows(p, u.g) - u.m0 <= epilogue.wave_row(0)) {
      for (int kb = 0; kb < nk; ++kb, pos.advance()) {
        if (kb > 0) mbar_wait(sm.full(pos.s), pos.phase);
        for (int v = 0; v < kWaves; ++v) {
          my_turn();
          your_turn();
        }
        release();
      }
      continue;  // nothing of this warpgroup's to store
    }
    const int kb_begin = C::STREAM_K ? u.kb0 : 0, kb_end = C::STREAM_K ? u.kb1 : nk;
    // A stage's scales, read before the stage is handed back; B's from global memory where
    // C::kSbGlobal (block kb of the unit's one or two scale rows; Fp8Config::SB_LOAD).
    float s_a[kWaves][2], s_b_lo, s_b_hi;
    int sb_lo, sb_hi;
    b_scale_offsets(p, u, nk, sb_lo, sb_hi);
    const float* const sb_lo_row = p.sb + sb_lo;
    const float* const sb_hi_row = p.sb + (C::kSplit ? sb_hi : sb_lo);
    auto read_b_scales = [&](int s, int kb, float& lo, float& hi) {
      if (C::kSbGlobal) {
        lo = __ldg(sb_lo_row + kb);
        hi = C::kSplit ? __ldg(sb_hi_row + kb) : lo;
      } else {
        const int j = C::kSbTma ? kb & 3 : 0;  // block kb's place in its box of 4 (B's scales by TMA)
        lo = sm.sb_ptr(s)[j];
        hi = sm.sb_ptr(s)[C::kSbHi + j];
      }
    };
    auto read_scales = [&](int s, int kb) {
      if (KDSL_FP8_DEV_SCALES == 2) {  // (a timing probe)
#pragma unroll
        for (int v = 0; v < kWaves; ++v) s_a[v][0] = s_a[v][1] = 1.f;
        s_b_lo = s_b_hi = 1.f;
        return;
      }
      const float* sa = sm.sa_ptr(s);
#pragma unroll
      for (int v = 0; v < kWaves; ++v) {
        const int r = epilogue.wave_row(v) + warp * 16 + (lane >> 2);
        s_a[v][0] = sa[r];
        s_a[v][1] = sa[r + 8];
      }
      read_b_scales(s, kb, s_b_lo, s_b_hi);
    };
    // Wave v's promotion of acc into total[v], with its row's A scales and the block's B scales.
    auto promote_wave = [&](int v, float sa0, float sa1, float sb_lo, float sb_hi) {
      const float lo0 = sa0 * sb_lo, lo1 = sa1 * sb_lo, hi0 = sa0 * sb_hi, hi1 = sa1 * sb_hi;
      if (KDSL_FP8_DEV_SKIP_PROMOTE) {  // (a timing probe: the wave is left unpromoted)
      } else if (!C::kSplit) {
        promote<kFrag>(kFrag / 4, acc, total[v], lo0, lo1, hi0, hi1);
      } else if (KDSL_FP8_SPLIT_SWITCH) {
        promote_split<kFrag>(j0, acc, total[v], lo0, lo1, hi0, hi1);
      } else {
        promote<kFrag>(j0, acc, total[v], lo0, lo1, hi0, hi1);
      }
    };
    if (kHalfTiles && fp8_detail::masked_rows(p, u.g) - u.m0 <= epilogue.wave_row(1)) {
      // The first wave alone (a separate loop, as the empty warpgroup's above), the second
      // wave's turn kept so that the other warpgroup's turns go on as they would.
      for (int kb = 0; kb < nk; ++kb, pos.advance()) {
        const int s = pos.s;
        if (kb > 0) mbar_wait(sm.full(s), pos.phase);
        const int r = epilogue.wave_row(0) + warp * 16 + (lane >> 2);  // (the first wave's rows only)
        const float sa0 = sm.sa_ptr(s)[r], sa1 = sm.sa_ptr(s)[r + 8];
        float sb_lo, sb_hi;
        read_b_scales(s, kb, sb_lo, sb_hi);
        const u64 db = desc_kmajor_sw128(sm.b(s));
        const u64 da = desc_kmajor_sw128(sm.a(s) + epilogue.wave_row(0) * C::kBK);
        my_turn();
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < C::kBK / 32; ++k) WgmmaFp8<BN>::run(acc, da + 2 * k, db + 2 * k, k);
        wgmma_commit();
        your_turn();
        my_turn();  // the second wave's turn: nothing to issue
        your_turn();
        wgmma_wait<0>();
        wgmma_pin(acc);
        release();
        promote_wave(0, sa0, sa1, sb_lo, sb_hi);
      }
    } else {
      constexpr bool kPrefetch = kWaves == 1 && KDSL_FP8_PREFETCH_SCALES;
      if (kPrefetch) read_scales(pos.s, kb_begin);  // the unit's first block (its "full" wait was the unit's)
      constexpr int kUnrollKb = kWaves == 2 && C::CLUSTER > 1 ? KDSL_FP8_UNROLL_KB_256 : 1;
#pragma unroll kUnrollKb
      for (int kb = kb_begin; kb < kb_end; ++kb, pos.advance()) {
        const int s = pos.s;
        if (!kPrefetch) {
          if (kb > kb_begin) mbar_wait(sm.full(s), pos.phase);
          read_scales(s, kb);
        }
        float sa_now[kWaves][2];
#pragma unroll
        for (int v = 0; v < kWaves; ++v) sa_now[v][0] = s_a[v][0], sa_now[v][1] = s_a[v][1];
        const float sb_lo = s_b_lo, sb_hi = s_b_hi;
        const u64 db = desc_kmajor_sw128(sm.b(s));
#pragma unroll
        for (int v = 0; v < kWaves; ++v) {
          const u64 da = desc_kmajor_sw128(sm.a(s) + epilogue.wave_row(v) * C::kBK);
          my_turn();
          wgmma_fence();
#pragma unroll
          for (int k = 0; k < C::kBK / 32; ++k)  // +32 bytes along K == +2 in the descriptor's address
            WgmmaFp8<BN>::run(acc, da + 2 * k, db + 2 * k, k);  // k == 0 starts a fresh accumulator
          wgmma_commit();
          your_turn();
          if (epilogue.kDeferStores && v == 0 && boxes_left > 0) {  // one box of the last unit a K block
            epilogue.store_box(staged, epilogue.kBoxes - boxes_left);
            --boxes_left;
          }
          if (kPrefetch && kb + 1 < kb_end) {
            // The next stage's scales; not past the unit's last block, whose epilogue would
            // then wait for the next unit's first loads (masked groupings lost 4 % so).
            RingPos<C::STAGES> next = pos;
            next.advance();
            mbar_wait(sm.full(next.s), next.phase);
            read_scales(next.s, kb + 1);
          }
          wgmma_wait<0>();
          wgmma_pin(acc);
          if (v == kWaves - 1) release();
          promote_wave(v, sa_now[v][0], sa_now[v][1], sb_lo, sb_hi);
        }
        if (tracer) fp8_trace(1 + wg, tn, kFp8TraceBlock, kb);
      }
    }
    if (C::STREAM_K && u.part != kWhole) {
      if (u.part == kPartial) {
        epilogue.leave_partial(total);
        continue;
      }
      epilogue.add_partials(u, total);
    }
    if (epilogue.kDeferStores) flush_boxes();  // before the staging tile is rewritten
    if (tracer) fp8_trace(1 + wg, tn, kFp8TraceEpilogue, u.n0);
    Fp8Unit done = u;
    // (With the one-wave path, whether a masked tile is full is read again rather than kept
    // through the K loop: one register fewer there, which the 256-row tile needed not to spill.)
    if (kHalfTiles) done.full = u.m0 + C::BM <= fp8_detail::masked_rows(p, u.g);
    epilogue.store(done, total);
    if (tracer) fp8_trace(1 + wg, tn, kFp8TraceStored, u.n0);
    if (epilogue.kDeferStores && done.full) {  // staged: its boxes go out during the next unit
      staged = done;
      boxes_left = epilogue.kBoxes;
    }
  }
  if (epilogue.kDeferStores) flush_boxes();
  epilogue.finish();
  if (tracer) fp8_trace(1 + wg, tn, kFp8TraceEnd, 0);
}

}  // namespace kdsl
