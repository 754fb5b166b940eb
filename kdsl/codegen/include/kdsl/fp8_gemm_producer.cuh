// kdsl/fp8_gemm_producer.cuh — the FP8 GEMM's producer warp: walks the CTA's units and, per K
// block, waits for a free stage and loads it (TMA for A, B and, where chosen, the scales;
// cp.async for the others). fp8_gemm_wgmma.cuh describes the kernel.
#pragma once
#include "kdsl/fp8_gemm_config.cuh"

namespace kdsl {

// This producer lane's scale copies so far count on `full` (see KDSL_FP8_SCALE_COMPLETION).
template <class C>
KDSL_DEVICE void scale_copies_arrive(u32 full) {
  if (C::kScaleCompletion == 0) {
    cp_async_mbar_arrive_noinc(full);
  } else if (C::kScaleCompletion == 1) {
    cp_async_mbar_arrive(full);
  } else {
    cp_async_wait_all();
    mbar_arrive(full);
  }
}

template <class C>
KDSL_DEVICE void fp8_producer(const Fp8GemmArgs& p, const TmaDesc* ta, const TmaDesc* tb, const TmaDesc* tsa,
                              const TmaDesc* tsb, const Fp8Smem<C>& sm) {
  constexpr int BM = C::BM, BN = C::BN;
  const int lane = threadIdx.x & 31;
  const bool leader = lane == 0;
  int tn = 0;  // KDSL_FP8_TRACE: records made
  if (leader) {
    fp8_trace(0, tn, kFp8TraceStart, 0);
    tma_prefetch_desc(ta);
    tma_prefetch_desc(tb);
    if (C::SA_TMA) tma_prefetch_desc(tsa);
    if (C::kSbTma) tma_prefetch_desc(tsb);
    fp8_trace(0, tn, kFp8TraceMark, 1);
  }
  const int nk = p.K / C::kBK, n_sblk = (p.N + 127) / 128;
  const int rank = C::CLUSTER > 1 ? (int)cluster_ctarank() : 0;
  Fp8Scheduler<C> sched(p);
  RingPos<C::STAGES> pos;
  Fp8Unit u;
  // With A's scales by TMA the leader does all of a K block's work, but the other lanes still
  // walk the loop beside it: the scheduler's KIND 1 steps are warp-wide, and lanes sent ahead
  // (the leader's loop in a divergent branch) made ptxas spill in the math warpgroups of the
  // grouped 192- and 256-row tiles.
  while (sched.next(u)) {
    if (leader) fp8_trace(0, tn, kFp8TraceMark, 2);
    const int ag = C::KIND == 2 ? u.g : 0;  // group of A (and of sa)
    // Element offsets (int: launch.py bounds the scale counts by 2**31): B's two scale blocks
    // (copied where C::SB_LOAD is 0); sa[ag][kb = 0][m0].
    // (b_scale_offsets, as the math warpgroups get them: through that call ptxas scheduled
    // every kernel's producer differently, a change not timed.)
    const int sb_lo = (u.g * n_sblk + (u.n0 >> 7)) * nk;
    const int sb_hi = (u.n0 >> 7) + 1 < n_sblk ? sb_lo + nk : sb_lo;
    const int sa_unit = ag * nk * p.sa_pitch + u.m0, rows_left = p.M - u.m0;
    const int kb_begin = C::STREAM_K ? u.kb0 : 0, kb_end = C::STREAM_K ? u.kb1 : nk;
    for (int kb = kb_begin; kb < kb_end; ++kb, pos.advance()) {
      const int s = pos.s;
      const u32 full = sm.full(s);
      mbar_wait(sm.empty(s), pos.phase ^ 1u);
      if (leader && kb == kb_begin) fp8_trace(0, tn, kFp8TraceMark, 3);
      // A's scales: one box among the leader's TMA loads below (SA_TMA), or BM / 32 rows
      // copied by each lane, zeros past M; B's two: the leader's copies or TMA box, unless the
      // math warpgroups read them (C::SB_LOAD). Each lane's arrival below is made when its
      // copies (if any) have landed, and is one of the phase's expected arrivals, so the phase
      // cannot complete before every copy is in.
      if (!C::SA_TMA) {
        const float* sa_kb = p.sa + (sa_unit + kb * p.sa_pitch);
#pragma unroll
        for (int r = lane; r < BM; r += 32) cp_async4_or_zero(sm.sa(s) + 4 * r, sa_kb + r, r < rows_left);
      }
      if (leader && C::kScaleCompletion != 1 && !C::kSbGlobal && !C::kSbTma && !KDSL_FP8_DEV_SCALES) {
        cp_async4(sm.sb(s), p.sb + (sb_lo + kb));
        cp_async4(sm.sb(s) + 4, p.sb + (sb_hi + kb));
      }
      scale_copies_arrive<C>(full);
      __syncwarp();
      if (leader) {
        if (kb == kb_begin) sm.publish(s, u);  // published by the release arrival below
        fp8_trace(0, tn, kFp8TraceIssue, kb);
        if (C::kScaleCompletion == 1) {  // the earlier form, kept as it was for the probe
          if (!C::kSbGlobal && !C::kSbTma) {
            cp_async4(sm.sb(s), p.sb + (sb_lo + kb));
            cp_async4(sm.sb(s) + 4, p.sb + (sb_hi + kb));
          }
          cp_async_mbar_arrive(full);
        }
        mbar_arrive_expect_tx(full, C::kStageTx);
        const int k0 = kb * C::kBK;
        if (C::MCAST == kMcastA) {
          const int half = rank * (BM / 2);
          tma_load_3d_multicast(sm.a(s) + half * C::kBK, ta, full, k0, u.m0 + half, ag, 0x3);
        } else {
          tma_load_3d(sm.a(s), ta, full, k0, u.m0, ag);
        }
        if (C::MCAST == kMcastB) {
          const int half = rank * (BN / 2);
          tma_load_3d_multicast(sm.b(s) + half * C::kBK, tb, full, k0, u.n0 + half, u.g, 0x3);
        } else {
          tma_load_3d(sm.b(s), tb, full, k0, u.n0, u.g);
        }
        if (C::SA_TMA) tma_load_3d(sm.sa(s), tsa, full, u.m0, kb, ag);  // each CTA its own: BM floats
        // B's scales: the 4 K blocks holding kb of the tile's two scale rows (a box starting at a K
        // block not a multiple of 4, off 16 bytes in global memory, raised "illegal instruction")
        if (C::kSbTma) tma_load_3d(sm.sb(s), tsb, full, kb & ~3, u.n0 >> 7, u.g);
      }
      __syncwarp();
      // Where tiles come from a counter, a tile's last pass opens the next tile after the loads of
      // the block KDSL_FP8_TILE_AHEAD before its last (its first, if it has fewer). (Written out
      // here: the same test in a helper, or hoisted out of the loop, changed the SASS.)
      if (C::TILE_COUNTER && KDSL_FP8_TILE_AHEAD >= 0 && sched.last_pass &&
          kb == (kb_end - 1 - KDSL_FP8_TILE_AHEAD > kb_begin ? kb_end - 1 - KDSL_FP8_TILE_AHEAD : kb_begin))
        sched.fetch_ahead();
    }
  }
  if (leader) {
    // End of work: a unit with m0 < 0, with no loads.
    mbar_wait(sm.empty(pos.s), pos.phase ^ 1u);
    sm.publish(pos.s, Fp8Unit{-1, 0, 0, 0, 0, 0, kWhole, 0});
    mbar_arrive(sm.full(pos.s), C::kFullArrivals);
    pos.advance();
    // With a cluster, the peer's math warpgroups arrive on our "empty" barriers: wait until
    // the last STAGES stages were released by both CTAs, so none is still on its way.
    if (C::CLUSTER > 1)
      for (int i = 0; i < C::STAGES; ++i, pos.advance()) mbar_wait(sm.empty(pos.s), pos.phase ^ 1u);
  }
  __syncwarp();
}

}  // namespace kdsl
