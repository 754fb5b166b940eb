// kdsl/fp8_gemm_wgmma.cuh — FP8 (e4m3) GEMM with DeepSeek-style block scaling on Hopper
// (sm_90a): TMA loads into an mbarrier ring, a producer warp, one or two math warpgroups,
// persistent CTAs, TMA stores.
//
//   out[M, N] (+)= sum_kb (A[:, kb] . B[:, kb]^T) * sa[m, kb] * sb[n / 128, kb]
//
// A [M, K] and B [N, K] are e4m3, K-major (the only operand order wgmma takes for 8-bit
// types). Each 128-deep K block is multiplied into a fresh fp32 wgmma accumulator and then
// promoted: scaled by its A row's 1x128 scale and its B block's 128x128 scale and added into
// a separate fp32 total in registers. The tensor core's fp8 accumulation keeps fewer mantissa
// bits than fp32, so promoting every 128 of K keeps long-K error at fp32 level.
//
// Kinds (C::KIND): 0 dense; 1 grouped contiguous, B [G, N, K], row m uses B[group[m]], ids
// outside [0, G) mark padding rows that are left untouched; 2 grouped masked, A [G, M, K],
// B [G, N, K], out [G, M, N], only rows < count[g] are computed or written. Scales (fp32,
// "dequantise" direction): sa [M, K/128] stored M-major (a [K/128, sa_pitch] buffer whose rows
// hold M floats each, sa_pitch >= M: DeepGEMM pads them to 4; KIND 2: [G, K/128, sa_pitch]);
// sb contiguous [ceil(N/128), K/128] (KIND 1, 2: [G, ...]).
//
// Roles. Warpgroup 0 is the producer: setmaxnreg lowers its registers, warp 0 walks the
// CTA's units (fp8_gemm_sched.cuh): per K block one lane issues TMA loads of the A and B
// tiles (128-byte swizzle, K-major: what the wgmma descriptors describe) and B's scales of the
// block (by two 4-byte cp.asyncs or a TMA box, unless the math warpgroups read them: SB_LOAD),
// all completing on the stage's "full" mbarrier, into a
// STAGES-deep ring. A's BM scales of the block come by TMA too where M % 4 == 0 (SA_TMA: a
// map over sa, whose rows of M floats must be whole 16-byte units; zeros past M), else
// by the 32 lanes' 4-byte cp.asyncs (zeros past M), each lane's copies counted on "full" by
// its own cp.async.mbarrier.arrive.noinc. (A 1-D TMA map over sa raised "illegal
// instruction" on the H100 wherever kb * M + m0 was not a multiple of 4 floats; this map's
// boxes start at m0, a multiple of BM, in rows of M floats.) It publishes each unit in the ring
// beside its first K block, and a unit with m0 < 0 ends the work. The other warpgroups raise
// their registers and each owns 64 rows (BM = 256: two warpgroups, 64 of every 128 rows, two
// m64 waves each): per K block four m64nBNk32 wgmmas, wait, hand the stage back (one arrival
// per thread on "empty"), promote; with BM = 256, and the three warpgroups of BM = 192, the
// warpgroups take turns issuing their waves.
// A tile whose width does not divide 128 can straddle two of B's 128-column scale blocks; each
// 8-column fragment takes the scale of the block it sits in. Where the boundary falls is fixed
// per tile, so each promotion branches on it to code with the scales placed at compile time.
//
// Clusters (CLUSTER = 2). The two CTAs work on tiles that share A (MCAST_A) or B (MCAST_B);
// each loads half of that tile and multicasts it to both, and a stage is refilled only when
// the math warpgroups of both CTAs have released it (every math thread on its own CTA's
// "empty", and one thread per warpgroup on the peer's).
//
// Launch contract (the generated extern "C" kernel forwards here):
//   grid  = (CTAs, 1, 1), a multiple of CLUSTER, any count >= CLUSTER (persistent: the
//           host launches min(tiles, SMs)); cluster dims (CLUSTER, 1, 1) at compile time
//   block = C::kThreads = 128 * (math warpgroups + 1), __launch_bounds__(threads, 1)
//   dynamic shared memory = C::kSmemBytes
//   ta: 3-D map over a (K, rows, groups), u8, box (128, BM / (MCAST_A ? 2 : 1), 1), 128-byte
//       swizzle; tb: over b (K, N, groups), box (128, BN / (MCAST_B ? 2 : 1), 1), same;
//   td: 3-D map over out (N, rows, groups), box
//       (kSwD / element bytes, 64, 1), kSwD-byte swizzle (unused unless TMA_STORE);
//   tsa: 3-D map over sa (M, K / 128, groups of a; rows sa_pitch floats apart), f32, box
//       (BM, 1, 1), no swizzle (unused unless SA_TMA; M % 4 == 0 and sa_pitch % 4 == 0);
//   tsb: 3-D map over sb (K / 128, ceil(N / 128), groups of b), f32, box (4, 2, 1), no swizzle,
//       boxes at K blocks that are multiples of 4 (unused unless SB_LOAD is 1, "tma"; K % 512 == 0).
//   Out-of-bounds elements load as zeros. kdsl/runtime/tma.py builds the maps.
//
// Files: fp8_gemm_config.cuh (Fp8Config, the shared-memory layout, the defines it reads),
// fp8_gemm_producer.cuh, fp8_gemm_math.cuh, fp8_gemm_epilogue.cuh, fp8_gemm_sched.cuh (the
// units a CTA walks); this file, the entry that splits the CTA into its roles.
#pragma once
#include "kdsl/fp8_gemm_config.cuh"
#include "kdsl/fp8_gemm_math.cuh"
#include "kdsl/fp8_gemm_producer.cuh"

namespace kdsl {

template <class C>
KDSL_DEVICE void fp8_gemm(const Fp8GemmArgs& p, const TmaDesc* ta, const TmaDesc* tb, const TmaDesc* td,
                          const TmaDesc* tsa, const TmaDesc* tsb) {
  extern __shared__ __align__(1024) u8 kdsl_fp8_smem[];
  const Fp8Smem<C> sm(kdsl_fp8_smem);
  if (threadIdx.x == 0) {
    for (int s = 0; s < C::STAGES; ++s) {
      mbar_init(sm.full(s), C::kFullArrivals);           // the producer warp's (+ TMA bytes)
      mbar_init(sm.empty(s), C::kEmptyArrivals);
    }
    mbar_init_fence();
  }
  if (C::CLUSTER > 1) {
    cluster_sync();  // the peer's barriers are initialised before any remote arrival
  } else {
    __syncthreads();
  }
  if (threadIdx.x < 128) {
    regs_release<C::kProducerRegs>();
    if (threadIdx.x < 32) fp8_producer<C>(p, ta, tb, tsa, tsb, sm);
  } else {
    regs_claim<C::kMathRegs>();
    fp8_math<C>(p, td, Fp8Smem<C>(kdsl_fp8_smem));
  }
  if (C::CLUSTER > 1) cluster_sync();  // no CTA leaves while its peer may still reach it
}

}  // namespace kdsl
