#!/usr/bin/env python3
"""The FP8 GEMM's main loop in miniature (fp8_gemm_wgmma.cuh), to find what its block period is
made of: 132 CTAs, each a producer warp and two math warpgroups (setmaxnreg as in the kernel).
The producer refills a STAGES-deep ring of A and B tiles by TMA through full / empty mbarriers
and writes each stage's scales; the math warpgroups run m64n128k32 e4m3 wgmma waves (one a
warpgroup a K block: the 128x128 tile; two: 256x128), wait for each, release the stage and
promote. Shapes (--shapes WAVESxSTAGES) 1x3, 1x6, 2x3, 2x4. Modes, each a set of kRing* flags:

  ring_bare         the ring, no promotion
  ring_none_prom    promotion, no ring (no producer, no barriers: the stages only rotate)
  ring_scales       the kernel's pattern: ring and promotion by the stage's scales
  ring_noload       as ring_scales, no TMA loads (the producer only arrives)
  ring_turns        as ring_scales, the warpgroups issuing their waves in turns (named barriers)
  ring_warp_arrive  as ring_scales, one arrival a warp on "empty" instead of one a thread
  ring_prefetch     as ring_scales, the next block's full wait and scales during the wave (1x)
  ring_lean         as ring_scales, producer lane 0 alone waits, arrives and loads; no scale stores
  ring_lean_warp, ring_lean_bare
                    lean with one arrival a warp; lean without promotion
  ring_one_arrival  all lanes store scales, lane 0 alone arrives
  ring_no_stores    all lanes arrive, none stores scales
  ring_defer, ring_defer_lean
                    deferred promotion (1x): two accumulators, each block's wave issued before
                    the block before it is waited for (wgmma wait 1) and promoted
  ring_none_scales  promotion by the stage's scales (as the producer leaves them), no ring
  ring_const        the ring, promotion by a constant (no scale reads)
  ring_nosync       as ring_noload, with no "empty" (the math warpgroups do not arrive, the
                    producer does not wait) and no "full" wait: the barriers' whole cost. (Without
                    "empty" but with "full" waits the producer runs phases ahead and the waits
                    hang: parity tells only one phase from the next; so do the producer's "empty" waits when the
                    math warpgroups skip only the "full" waits.)
  ring_wg_release, ring_lean_wg_release
                    as ring_scales (ring_lean), each math warpgroup handing the stage back with
                    one arrival after a named barrier over its 128 threads
  ring_pair, ring_lean_pair
                    as ring_scales (ring_lean), each stage holding two K blocks: one "full" wait
                    and one "empty" arrival per two blocks, half the stages
  ring_rescale, ring_lean_rescale
                    as ring_scales (ring_lean) on two-wave rings, each wave accumulating in place:
                    its accumulator is multiplied by the ratio of the last block's scale products
                    to this block's (an FMUL, not the promotion's FFMA) and the wave's wgmmas add
                    into it, so no second set of 64 registers a wave; both waves stay in flight,
                    one rescaled while the other runs (wgmma wait 1), two K blocks an iteration
                    (ring_rescale4: four) ending with none in flight. The products' final multiply
                    is left out. (Exact only for non-zero scales: a kernel would need a fallback.)
  ring_n256, ring_lean_n256
                    the 128x256 tile in the 256x128 ring's stages (A 128 rows, B 256; the same bytes and
                    work a block): each math warpgroup one m64n256k32 wave a block, accumulating in place
                    as ring_rescale does (128 registers: the promotion's second set would not fit), its
                    four factors (two rows, two 128-column halves of B's scales) old / new
  ring_hint, ring_lean_hint, ring_sleep, ring_lean_sleep
                    the producer's "empty" waits sleep in the hardware (try_wait with a
                    suspend-time hint) or back off with __nanosleep instead of polling

It prints cycles a K block (clock64, median over CTAs, the second of two rounds) and the SM clock
over the launch, one column per operand fill and TMA source size (--source-mb: 0.125 stays in L2;
16 spreads the loads over L2 as the kernel's are; 256 comes mostly from HBM). The tensor peak is
512 cycles a block for 128x128 and 1024 for 256x128. --timeline prints CTA 0's per-block clock
marks (issue, wave 0 waited, block end) for the modes named; the marks slow that CTA.

Two traps, each met once. ptxas deletes wgmmas whose accumulators are overwritten unread, so the
modes without promotion add one accumulator a wave into a total. And the modes are compile-time
flags: run-time flags and trace branches in the loop slowed the same ring from ~570 to 744 cycles.
The producer's per-block instructions matter: a 64-bit modulo in its load coordinates added
230-460 cycles a block to every mode with a producer (bench/NOTES.md, thirtieth session).

    python3 tools/dev/wgmma_ring.py [--waves 4000] [--modes ...] [--shapes 2x3 ...]
                                    [--fill normal] [--source-mb 0.125 16] [--timeline ...]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from wgmma_contention import FILLS, compile_module, fill_bytes, tensor_map  # noqa: E402

(RING_PROMOTE, RING_SCALES, RING_NO_LOAD, RING_TURNS, RING_PREFETCH, RING_NONE, RING_TRACE, RING_WARP_ARRIVE, RING_LEAN,
 RING_ONE_ARRIVAL, RING_NO_STORES, RING_DEFER, RING_HINT, RING_SLEEP, RING_NO_FULL, RING_NO_EMPTY, RING_WG_RELEASE,
 RING_PAIR, RING_RESCALE, RING_RESCALE4, RING_N256) = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192,
                                                       16384, 32768, 65536, 131072, 262144, 524288, 1048576)
RING_SHAPES = ((1, 3), (1, 6), (2, 3), (2, 4))  # (waves a warpgroup, stages)
RING_MODES = {  # name: kRing* flags of kdsl_wgmma_ring
    "ring_bare": 0,
    "ring_none_prom": RING_NONE | RING_PROMOTE,
    "ring_scales": RING_PROMOTE | RING_SCALES,
    "ring_noload": RING_PROMOTE | RING_SCALES | RING_NO_LOAD,
    "ring_turns": RING_PROMOTE | RING_SCALES | RING_TURNS,
    "ring_warp_arrive": RING_PROMOTE | RING_SCALES | RING_WARP_ARRIVE,
    "ring_prefetch": RING_PROMOTE | RING_SCALES | RING_PREFETCH,  # one-wave rings only
    "ring_lean": RING_PROMOTE | RING_SCALES | RING_LEAN,
    "ring_lean_warp": RING_PROMOTE | RING_SCALES | RING_LEAN | RING_WARP_ARRIVE,
    "ring_lean_bare": RING_LEAN,
    "ring_one_arrival": RING_PROMOTE | RING_SCALES | RING_ONE_ARRIVAL,
    "ring_no_stores": RING_PROMOTE | RING_SCALES | RING_NO_STORES,
    "ring_defer": RING_PROMOTE | RING_SCALES | RING_DEFER,  # one-wave rings only
    "ring_defer_lean": RING_PROMOTE | RING_SCALES | RING_DEFER | RING_LEAN,  # one-wave rings only
    "ring_hint": RING_PROMOTE | RING_SCALES | RING_HINT,
    "ring_lean_hint": RING_PROMOTE | RING_SCALES | RING_LEAN | RING_HINT,
    "ring_sleep": RING_PROMOTE | RING_SCALES | RING_SLEEP,
    "ring_lean_sleep": RING_PROMOTE | RING_SCALES | RING_LEAN | RING_SLEEP,
    "ring_none_scales": RING_NONE | RING_PROMOTE | RING_SCALES,
    "ring_const": RING_PROMOTE,
    "ring_nosync": RING_PROMOTE | RING_SCALES | RING_NO_LOAD | RING_NO_EMPTY | RING_NO_FULL,
    "ring_wg_release": RING_PROMOTE | RING_SCALES | RING_WG_RELEASE,
    "ring_lean_wg_release": RING_PROMOTE | RING_SCALES | RING_LEAN | RING_WG_RELEASE,
    "ring_pair": RING_PROMOTE | RING_SCALES | RING_PAIR,
    "ring_lean_pair": RING_PROMOTE | RING_SCALES | RING_LEAN | RING_PAIR,
    "ring_rescale": RING_PROMOTE | RING_SCALES | RING_RESCALE,  # two-wave rings only
    "ring_lean_rescale": RING_PROMOTE | RING_SCALES | RING_LEAN | RING_RESCALE,  # two-wave rings only
    "ring_rescale4": RING_PROMOTE | RING_SCALES | RING_RESCALE | RING_RESCALE4,  # two-wave rings only
    "ring_n256": RING_PROMOTE | RING_SCALES | RING_N256,  # two-wave rings only (the 128x256 tile)
    "ring_lean_n256": RING_PROMOTE | RING_SCALES | RING_LEAN | RING_N256,  # two-wave rings only
}

SOURCE = r"""
#include "kdsl/hopper.cuh"
#include "kdsl/wgmma_fp8_ops.cuh"
using namespace kdsl;

// The kernel's loop in miniature (fp8_gemm_wgmma.cuh's 128x128 tile, WAVES = 1, and 256x128,
// WAVES = 2): a STAGES-deep ring of A (128 WAVES rows) and B (128 rows) tiles refilled by TMA
// from an L2-resident buffer by warp 8, whose lanes also write the stage's scales (A's rows, one
// of B's) before its lane 0 arrives with the bytes expected; two math warpgroups of WAVES waves
// each (wave v: A rows 128 v + 64 wg ..) wait on the stage's full barrier, run their waves,
// arrive on its empty barrier (every thread, after the last wave) and promote each wave after its
// wait. setmaxnreg moves registers as the kernel does (producer 40, math 232). flags (kRing*):
// promote (by a constant, or with SCALES by the stage's scales), no TMA loads (the producer only
// arrives), turns (named barriers 5, 6: the warpgroups issue their waves in a fixed round, as the
// unclustered 256-row kernel does), no ring at all (no producer; the math warpgroups
// neither wait nor arrive, only rotate through the stages), prefetch (WAVES = 1: the next block's
// full wait and scale reads are made while this block's wave runs, as the kernel does), one
// arrival a warp on "empty" (after __syncwarp) instead of one a thread, a lean producer (its
// lane 0 alone waits, arrives and loads; no scales are written, so the stage keeps old ones), the
// producer's lanes writing the scales but lane 0 alone arriving, or all 32 arriving but none
// writing scales, or deferred promotion (WAVES = 1: two accumulators; each block's wave is issued
// before the previous block's is waited for (wgmma wait 1) and promoted, so that a warpgroup's
// promotion never leaves the tensor cores without its next wave), a producer whose "empty" waits
// sleep in the hardware until the phase completes (try_wait with a suspend-time hint) or back off
// with __nanosleep between polls, instead of polling in a loop. Without promotion each wave
// still adds one accumulator into a total: ptxas drops wgmmas whose results are never read. CTA 0's first thread of each math
// warpgroup records clock64() at each block's issue, its wave-0 wait's end and its end, for
// blocks 64 .. 95, into timeline[wg][block][3].
// try_wait that may suspend the thread until the phase completes, for up to ~1 ms.
KDSL_DEVICE bool mbar_try_wait_hint(u32 bar, u32 parity) {
  u32 done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done) : "r"(bar), "r"(parity), "r"(1000000u) : "memory");
  return done != 0;
}

enum { kRingPromote = 1, kRingScales = 2, kRingNoLoad = 4, kRingTurns = 8, kRingPrefetch = 16, kRingNone = 32,
       kRingTrace = 64, kRingWarpArrive = 128, kRingLean = 256, kRingOneArrival = 512, kRingNoStores = 1024,
       kRingDefer = 2048, kRingHint = 4096, kRingSleep = 8192, kRingNoFull = 16384, kRingNoEmpty = 32768,
       kRingWgRelease = 65536, kRingPair = 131072, kRingRescale = 262144, kRingRescale4 = 524288,
       kRingN256 = 1048576 };
template <int WAVES, int STAGES, int FLAGS>
KDSL_DEVICE void wgmma_ring(int blocks, long long* cycles, long long* timeline, const TmaDesc* tmap, int tiles) {
  // STAGE: one K block's A and B; a ring stage holds KPS of them (kRingPair: two)
  constexpr int A_BYTES = WAVES * 128 * 128, STAGE = A_BYTES + 16384, KPS = FLAGS & kRingPair ? 2 : 1;
  constexpr int SCALES = WAVES * 128 + 4;  // floats a stage: A's rows, B's, padding
  extern __shared__ __align__(1024) u8 ring_raw[];
  const u32 raw_addr = smem_addr(ring_raw);
  const u32 base = (raw_addr + 1023u) & ~1023u;
  float* scales = reinterpret_cast<float*>(ring_raw + (base - raw_addr) + STAGES * KPS * STAGE);
  const u32 bars = base + STAGES * KPS * STAGE + STAGES * SCALES * 4;  // full[s]: bars + 8 s; empty[s]: + 64
  if (threadIdx.x == 0) {
    for (int st = 0; st < STAGES; ++st) {
      mbar_init(bars + 8 * st, FLAGS & (kRingLean | kRingOneArrival) ? 1 : 32);  // warp 8's lanes (31 after their scale stores), lane 0 with the bytes
      mbar_init(bars + 64 + 8 * st, FLAGS & kRingWgRelease ? 2 : FLAGS & kRingWarpArrive ? 8 : 256);  // every math thread (warp, warpgroup)
    }
    mbar_init_fence();
  }
  for (int i = threadIdx.x; i < STAGES * SCALES; i += blockDim.x) scales[i] = 1.0f + i * 1e-7f;  // (modes without a producer)
  __syncthreads();
  const int wg = threadIdx.x >> 7, lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
  // (flags at compile time, so that the loop has no branches the kernel's has not)
  constexpr bool turns = FLAGS & kRingTurns, ring = !(FLAGS & kRingNone), full_wait = ring && !(FLAGS & kRingNoFull);
  constexpr bool promote_on = FLAGS & kRingPromote, by_scales = FLAGS & kRingScales, trace = FLAGS & kRingTrace;
  constexpr bool prefetch = (FLAGS & kRingPrefetch) && ring, warp_arrive = FLAGS & kRingWarpArrive;
  static_assert(!prefetch || WAVES == 1, "prefetch: one wave a warpgroup");
  static_assert(!(prefetch && KPS > 1), "prefetch: one K block a stage");
  // Each role keeps its registers to its own branch: values live across the branches would have
  // to fit the producer's 40 registers (ptxas spilled the totals so).
  if (wg == 2) {
    regs_release<40>();
    const long long t0 = clock64();
    if (threadIdx.x < ((FLAGS & kRingLean) ? 257 : 288) && ring) {  // the producer warp (its lane 0)
      for (int b = 0; b < blocks / KPS; ++b) {  // b: the stage's fill (KPS K blocks)
        const int st = b % STAGES;
        const u32 parity = ((b / STAGES) & 1) ^ 1u;  // a fresh barrier's phase 0 counts as "empty"
        if (FLAGS & kRingNoEmpty) {
        } else if (FLAGS & kRingHint) {
          while (!mbar_try_wait_hint(bars + 64 + 8 * st, parity)) {}
        } else if (FLAGS & kRingSleep) {
          while (!mbar_try_wait(bars + 64 + 8 * st, parity)) __nanosleep(128);
        } else {
          mbar_wait(bars + 64 + 8 * st, parity);
        }
        float* sc = scales + st * SCALES;
        if (!(FLAGS & (kRingLean | kRingNoStores)))
          for (int r = lane; r <= WAVES * 128; r += 32) sc[r] = 1.0f + (b * 131 + r) * 1e-7f;
        if (lane == 0 && !(FLAGS & kRingNoLoad)) {
          mbar_arrive_expect_tx(bars + 8 * st, KPS * STAGE);
          for (int h = 0; h < KPS * STAGE / 16384; ++h)
            tma_load_2d(base + st * KPS * STAGE + 16384 * h, tmap, bars + 8 * st, 0,
                        128 * (((blockIdx.x * 977 + b) * 3 + h) & (tiles - 1)));  // (tiles: a power of two)
        } else if (lane == 0 || !(FLAGS & kRingOneArrival)) {
          mbar_arrive(bars + 8 * st);
        }
      }
    }
    if (threadIdx.x == 256) cycles[blockIdx.x * 3 + 2] = clock64() - t0;
  } else {
    regs_claim<232>();
    float acc[64], total[WAVES][64];
#pragma unroll
    for (int v = 0; v < WAVES; ++v)
#pragma unroll
      for (int i = 0; i < 64; ++i) total[v][i] = 0.f;
    const float c = 1.0f + threadIdx.x * 1e-7f;
    const bool tracer = trace && blockIdx.x == 0 && (threadIdx.x & 127) == 0;
    long long* tl = timeline + wg * 32 * 3;
    const long long t0 = clock64();
    if constexpr ((FLAGS & kRingDefer) != 0) {
      static_assert(WAVES == 1 && !turns && !trace, "deferred promotion: one wave, no turns, no trace");
      const int row0 = wg * 64 + warp * 16 + (lane >> 2);
      float acc1[64], p0 = c, p1 = c;  // the scale products of the block in flight before this one
      // One block: wait for its stage and issue its wave into `cur`; then (with `prev`) finish the
      // block before it: wait until one wave group is left, release its stage, promote it.
      auto issue = [&](float (&cur)[64], int b) {
        const int st = b % STAGES;
        mbar_wait(bars + 8 * st, (b / STAGES) & 1);
        const float* sc = scales + st * SCALES;
        const float n0 = sc[row0] * sc[128], n1 = sc[row0 + 8] * sc[128];
        const u64 da = desc_kmajor_sw128(base + st * STAGE + wg * 64 * 128), db = desc_kmajor_sw128(base + st * STAGE + A_BYTES);
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < 4; ++k) WgmmaFp8<128>::run(cur, da + 2 * k, db + 2 * k, k);
        wgmma_commit();
        return make_float2(n0, n1);
      };
      auto promote_prev = [&](float (&prev)[64], int b) {  // block b - 1
        wgmma_pin(prev);
        mbar_arrive(bars + 64 + 8 * ((b - 1) % STAGES));
#pragma unroll
        for (int i = 0; i < 64; i += 4) {
          total[0][i] = fmaf(prev[i], p0, total[0][i]);
          total[0][i + 1] = fmaf(prev[i + 1], p0, total[0][i + 1]);
          total[0][i + 2] = fmaf(prev[i + 2], p1, total[0][i + 2]);
          total[0][i + 3] = fmaf(prev[i + 3], p1, total[0][i + 3]);
        }
      };
      auto step = [&](float (&cur)[64], float (&prev)[64], int b) {
        const float2 n = issue(cur, b);
        wgmma_wait<1>();
        promote_prev(prev, b);
        p0 = n.x, p1 = n.y;
      };
      const float2 n = issue(acc, 0);
      p0 = n.x, p1 = n.y;
      int b = 1;
      for (; b + 1 < blocks; b += 2) {
        step(acc1, acc, b);
        step(acc, acc1, b + 1);
      }
      if (b < blocks) {
        step(acc1, acc, b);
        wgmma_wait<0>();
        promote_prev(acc1, b + 1);
      } else {
        wgmma_wait<0>();
        promote_prev(acc, b);
      }
    } else if constexpr ((FLAGS & kRingN256) != 0) {
      static_assert(WAVES == 2 && !turns && !trace && !prefetch && KPS == 1, "n256: the 256x128 ring's stages");
      // A: rows 0..127 of the stage (this warpgroup's 64 at wg * 64), B: its 256 rows after them.
      float (&d)[128] = reinterpret_cast<float (&)[128]>(total);
      const int row0 = wg * 64 + warp * 16 + (lane >> 2);
      float f[2][2] = {{1.f, 1.f}, {1.f, 1.f}};  // [row half][column half]: the last block's products
      constexpr int A128 = 128 * 128;
      for (int b = 0; b < blocks; ++b) {
        const int st = b % STAGES;
        mbar_wait(bars + 8 * st, (b / STAGES) & 1);
        const float* sc = scales + st * SCALES;
        const float a0 = sc[row0], a1 = sc[row0 + 8], blo = sc[256], bhi = sc[257];
        const float n[2][2] = {{a0 * blo, a0 * bhi}, {a1 * blo, a1 * bhi}};
        float q[2][2];
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int c = 0; c < 2; ++c) q[h][c] = __fdividef(f[h][c], n[h][c]), f[h][c] = n[h][c];
        // (at the top, where the back edge joins: see ring_rescale)
        wgmma_wait<0>();
        wgmma_pin(d);
        if (b > 0) mbar_arrive(bars + 64 + 8 * ((b - 1) % STAGES));
#pragma unroll
        for (int i = 0; i < 128; ++i) d[i] *= q[(i >> 1) & 1][i >> 6];
        wgmma_pin(d);
        const u64 da = desc_kmajor_sw128(base + st * STAGE + wg * 64 * 128);
        const u64 db = desc_kmajor_sw128(base + st * STAGE + A128);
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < 4; ++k) WgmmaFp8<256>::run(d, da + 2 * k, db + 2 * k, 1);
        wgmma_commit();
      }
      wgmma_wait<0>();
      wgmma_pin(d);
      mbar_arrive(bars + 64 + 8 * ((blocks - 1) % STAGES));
#pragma unroll
      for (int i = 0; i < 64; ++i) acc[i] = 0.f;
    } else if constexpr ((FLAGS & kRingRescale) != 0) {
      static_assert(WAVES == 2 && !turns && !trace && !prefetch && KPS == 1, "rescale: two waves, plain ring");
      const int row0 = wg * 64 + warp * 16 + (lane >> 2);
      float f[2][2] = {{1.f, 1.f}, {1.f, 1.f}};  // each wave's two rows' scale products, the last block's
      // Wave v of block b: its products, the accumulator rescaled by old / new, its wgmmas added in.
      auto issue = [&](int v, int b) {
        const int st = b % STAGES;
        const float* sc = scales + st * SCALES;
        const int r = v * 128 + row0;
        const float n0 = sc[r] * sc[256], n1 = sc[r + 8] * sc[256];
        // (unconditional: the accumulators start at zero, so the first block's factor is
        // harmless. A branch on b > 0 here made ptxas wait for wave 0 before wave 1's multiplies
        // while the loop's wait was at the iteration's end; with it at the top, it does not.)
        const float q0 = __fdividef(f[v][0], n0), q1 = __fdividef(f[v][1], n1);
#pragma unroll
        for (int i = 0; i < 64; i += 4) {
          total[v][i] *= q0;
          total[v][i + 1] *= q0;
          total[v][i + 2] *= q1;
          total[v][i + 3] *= q1;
        }
        wgmma_pin(total[v]);  // the multiplies before the fence (moved after it: C7514)
        f[v][0] = n0, f[v][1] = n1;
        const u64 da = desc_kmajor_sw128(base + st * STAGE + (v * 128 + wg * 64) * 128);
        const u64 db = desc_kmajor_sw128(base + st * STAGE + A_BYTES);
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < 4; ++k) WgmmaFp8<128>::run(total[v], da + 2 * k, db + 2 * k, 1);
        wgmma_commit();
      };
      // U K blocks an iteration, straight-line: each wave's wgmmas are issued while the other
      // wave's run, and the iteration ends with nothing in flight (wgmma wait 0). ptxas keeps the
      // wgmmas asynchronous only so: an accumulator written after a wait that retires a group
      // committed in the previous iteration serialised every wgmma (C7514), whichever group was
      // left in flight across the back edge.
      constexpr int U = FLAGS & kRingRescale4 ? 4 : 2;
      for (int b0 = 0; b0 < blocks; b0 += U) {
        // The wait for the last iteration's last wave at the top, where the back edge joins: ptxas
        // keeps track of what a wait retired only below it on the same path (with the wait at
        // the iteration's end it waited again, for wave 0 too, before wave 1's multiplies, C7517).
        wgmma_wait<0>();
        wgmma_pin(total[0]);
        wgmma_pin(total[1]);
        if (b0 > 0) mbar_arrive(bars + 64 + 8 * ((b0 - 1) % STAGES));
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int b = b0 + u;
          mbar_wait(bars + 8 * (b % STAGES), (b / STAGES) & 1);
          if (u > 0) {
            wgmma_wait<1>();  // wave 0 of block b - 1
            wgmma_pin(total[0]);
          }
          issue(0, b);
          if (u > 0) {
            wgmma_wait<1>();  // wave 1 of block b - 1: its stage is read
            wgmma_pin(total[1]);
            mbar_arrive(bars + 64 + 8 * ((b - 1) % STAGES));
          }
          issue(1, b);
        }
      }
      wgmma_wait<0>();
      wgmma_pin(total[0]);
      wgmma_pin(total[1]);
      mbar_arrive(bars + 64 + 8 * ((blocks - 1) % STAGES));
#pragma unroll
      for (int i = 0; i < 64; ++i) acc[i] = 0.f;
    } else {
    if (turns && wg == 1) named_barrier_arrive(5, 256);
    const int row0 = wg * 64 + warp * 16 + (lane >> 2);  // this thread's rows in wave 0: row0, row0 + 8
    float n0 = c, n1 = c;  // prefetch: the scale products of the block about to run
    for (int b0 = 0; b0 < blocks; b0 += KPS) {  // a stage's K blocks b0 .. b0 + KPS - 1
    const int st = b0 / KPS % STAGES;
    if (full_wait && !(prefetch && b0 > 0)) mbar_wait(bars + 8 * st, (b0 / KPS / STAGES) & 1);
#pragma unroll
    for (int kb = 0; kb < KPS; ++kb) {
      const int b = b0 + kb;
      const u32 blk = base + st * KPS * STAGE + kb * STAGE;  // this K block's A, then B
      if (prefetch && b == 0) n0 = scales[row0] * scales[128], n1 = scales[row0 + 8] * scales[128];
      const bool mark = tracer && b >= 64 && b < 96;
      if (mark) tl[(b - 64) * 3] = clock64();
      const float* sc = scales + st * SCALES;
      const u64 db = desc_kmajor_sw128(blk + A_BYTES);
#pragma unroll
      for (int v = 0; v < WAVES; ++v) {
        const int r = v * 128 + row0;  // this thread's rows: r and r + 8
        float s0 = by_scales ? sc[r] * sc[WAVES * 128] : c, s1 = by_scales ? sc[r + 8] * sc[WAVES * 128] : c;
        if (prefetch) s0 = n0, s1 = n1;
        const u64 da = desc_kmajor_sw128(blk + (v * 128 + wg * 64) * 128);
        if (turns) named_barrier(5 + wg, 256);
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < 4; ++k) WgmmaFp8<128>::run(acc, da + 2 * k, db + 2 * k, k);
        wgmma_commit();
        if (turns) named_barrier_arrive(5 + (wg ^ 1), 256);
        if (prefetch && b + 1 < blocks) {
          const int nst = (b + 1) % STAGES;
          mbar_wait(bars + 8 * nst, ((b + 1) / STAGES) & 1);
          const float* nsc = scales + nst * SCALES;
          n0 = nsc[row0] * nsc[128], n1 = nsc[row0 + 8] * nsc[128];
        }
        wgmma_wait<0>();
        wgmma_pin(acc);
        if (mark && v == 0) tl[(b - 64) * 3 + 1] = clock64();
        if (v == WAVES - 1 && kb == KPS - 1 && ring && !(FLAGS & kRingNoEmpty)) {
          if (FLAGS & kRingWgRelease) {
            named_barrier(1 + wg, 128);
            if ((threadIdx.x & 127) == 0) mbar_arrive(bars + 64 + 8 * st);
          } else {
            if (warp_arrive) __syncwarp();
            if (!warp_arrive || lane == 0) mbar_arrive(bars + 64 + 8 * st);
          }
        }
        if (promote_on) {
#pragma unroll
          for (int i = 0; i < 64; i += 4) {
            total[v][i] = fmaf(acc[i], s0, total[v][i]);
            total[v][i + 1] = fmaf(acc[i + 1], s0, total[v][i + 1]);
            total[v][i + 2] = fmaf(acc[i + 2], s1, total[v][i + 2]);
            total[v][i + 3] = fmaf(acc[i + 3], s1, total[v][i + 3]);
          }
        } else {
          total[v][0] += acc[0];
        }
      }
      if (mark) tl[(b - 64) * 3 + 2] = clock64();
    }
    }
    if (turns && wg == 0) named_barrier(5, 256);  // the turn warpgroup 1 passed after its last wave
    }
    if ((threadIdx.x & 127) == 0) cycles[blockIdx.x * 3 + wg] = clock64() - t0;
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < 64; ++i) {
      sum += acc[i];
#pragma unroll
      for (int v = 0; v < WAVES; ++v) sum += total[v][i];
    }
    if (sum == 1234.5f) timeline[192] = (long long)sum;  // keeps the work live
  }
}

#define KDSL_RING_KERNEL(WAVES, STAGES, FLAGS)                                                         \
  extern "C" __global__ void __launch_bounds__(384, 1)                                                \
  kdsl_wgmma_ring##WAVES##_s##STAGES##_f##FLAGS(int blocks, long long* cycles, long long* timeline,   \
                                                const TmaDesc* tmap, int tiles) {                     \
    wgmma_ring<WAVES, STAGES, FLAGS>(blocks, cycles, timeline, tmap, tiles);                          \
  }
"""


SMEM_LIMIT = 227 * 1024  # an H100 block's dynamic shared memory at most


def smem_bytes(waves: int, stages: int, flags: int) -> int:
    """The ring's stages (A and B of one K block each, two with RING_PAIR), their scales, the
    barriers and the 1024-byte alignment slack."""
    kps = 2 if flags & RING_PAIR else 1
    return stages * kps * (waves * 16384 + 16384) + stages * (waves * 128 + 4) * 4 + 128 + 1024


def _print_timeline(t) -> None:
    """Blocks 64 .. 79 of CTA 0: each math warpgroup's issue, wave-0 wait end and block end,
    in cycles from warpgroup 0's first issue there."""
    t = t[:192].reshape(2, 32, 3) - t[0]
    print("              warpgroup 0: issue  waited     end   warpgroup 1: issue  waited     end")
    for b in range(16):
        print(f"    block {64 + b:3d}  " + "   ".join(" ".join(f"{x:7d}" for x in t[w, b]) for w in range(2)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--waves", type=int, default=4000, help="K blocks a CTA")
    ap.add_argument("--fill", nargs="+", default=["normal"], choices=FILLS, help="operand bytes, one column each")
    ap.add_argument("--source-mb", nargs="+", type=float, default=[0.125],
                    help="sizes of the buffer the rings load from, one column each (0.125: L2-resident; "
                         "hundreds: mostly from HBM, as the kernel's loads)")
    ap.add_argument("--modes", nargs="*", default=list(RING_MODES), help="ring modes to run")
    ap.add_argument("--shapes", nargs="*", default=[f"{w}x{st}" for w, st in RING_SHAPES],
                    help="ring shapes WAVESxSTAGES (1: 128x128 tiles, 2: 256x128)")
    ap.add_argument("--timeline", nargs="*", default=["ring_scales", "ring_none_prom"],
                    help="ring modes whose CTA-0 timeline to print (with the first column)")
    args = ap.parse_args()
    import cupy
    import numpy
    shapes = [tuple(int(x) for x in sh.split("x")) for sh in args.shapes]
    one_wave, two_waves = RING_PREFETCH | RING_DEFER, RING_RESCALE | RING_N256

    def fits(w: int, flags: int) -> bool:
        return (w == 1 or not flags & one_wave) and (w == 2 or not flags & two_waves)
    rings = [(w, st, RING_MODES[m]) for w, st in shapes for m in args.modes if fits(w, RING_MODES[m])]
    rings = [r for r in rings if smem_bytes(*r) <= SMEM_LIMIT]  # (two K blocks a stage: half the stages fit)
    rings += [(w, st, RING_MODES[m] | RING_TRACE) for w, st in shapes for m in args.timeline
              if m in args.modes and fits(w, RING_MODES[m])]
    module = compile_module(SOURCE + "".join(f"KDSL_RING_KERNEL({w}, {st}, {f})\n" for w, st, f in rings), "wgmma_ring")
    sms = cupy.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    cycles = cupy.zeros(sms * 3, dtype=cupy.int64)
    timeline = cupy.zeros(193, dtype=cupy.int64)
    rng = numpy.random.default_rng(0)
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    print(cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(), f"{sms} CTAs, {args.waves} waves a CTA;",
          "cycles a K block, median over CTAs, and the SM clock "
          "(cycles over the launch's time), by operand fill and source size", flush=True)
    columns = [(f, mb) for f in args.fill for mb in args.source_mb]
    header = f"  {'mode':22s}" + "".join(f"{f + ' ' + format(mb, 'g') + ' MB':>18s}" for f, mb in columns)
    rows: dict[str, list[str]] = {}
    timelines = []
    for fill, mb in columns:
        small = cupy.asarray(fill_bytes(fill, rng))
        tiles = max(8, 1 << (int(mb * 2 ** 20) // 16384).bit_length() - 1)  # 16 KB boxes, a power of two
        src_rows = 128 * tiles
        src = cupy.tile(small, (src_rows // 1024, 1))
        tmap = cupy.asarray(numpy.frombuffer(tensor_map(int(src.data.ptr), src_rows), dtype=numpy.uint8))
        for trial in range(2):  # the first round warms the clocks up and is not kept
            for w, st, flags in rings:
                ring = module.get_function(f"kdsl_wgmma_ring{w}_s{st}_f{flags}")
                ring_smem = smem_bytes(w, st, flags)
                ring.max_dynamic_shared_size_bytes = ring_smem
                start.record()
                ring((sms,), (384,), (cupy.int32(args.waves), cycles, timeline, tmap, cupy.int32(src_rows // 128)),
                     shared_mem=ring_smem)
                stop.record()
                stop.synchronize()
                c = cycles.get().reshape(sms, 3)
                if not trial:
                    continue
                mode = next(n for n, f in RING_MODES.items() if f == flags & ~RING_TRACE)
                if flags & RING_TRACE:
                    if (fill, mb) == columns[0]:
                        timelines.append((f"{128 * w}x128, {st} stages, {mode}", timeline.get()))
                    continue
                mhz = statistics.median(c[:, 0]) / (cupy.cuda.get_elapsed_time(start, stop) * 1e3)
                rows.setdefault(f"{128 * w}x128 s{st} {mode}", []).append(
                    f"{statistics.median(c[:, 0]) / args.waves:7.1f} @{mhz:4.0f}")
        print(f"  ({fill}, {mb:g} MB done)", flush=True)
    print(header)
    for name, cells in rows.items():
        print(f"  {name:22s}" + "".join(f"{c:>18s}" for c in cells))
    print("(tensor peak: two warpgroups' waves 512, a 128x128 K block 512, 256x128 1024)")
    for title, t in timelines:
        print(title)
        _print_timeline(t)


if __name__ == "__main__":
    main()
