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
// "dequantise" direction): sa [M, K/128] stored M-major (a contiguous [K/128, M] buffer;
// KIND 2: [G, K/128, M]); sb contiguous [ceil(N/128), K/128] (KIND 1, 2: [G, ...]).
//
// Roles. Warpgroup 0 is the producer: setmaxnreg lowers its registers, warp 0 walks the
// CTA's units (fp8_gemm_sched.cuh): per K block one lane issues TMA loads of the A and B
// tiles (128-byte swizzle, K-major: what the wgmma descriptors describe) and two 4-byte
// cp.asyncs of B's scales, all completing on the stage's "full" mbarrier, into a
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
//   tsa: 3-D map over sa (M, K / 128, groups of a), f32, box (BM, 1, 1), no swizzle
//       (unused unless SA_TMA; M % 4 == 0).
//   Out-of-bounds elements load as zeros. kdsl/runtime/tma.py builds the maps.
#pragma once
#include "kdsl/fp8_gemm_epilogue.cuh"
#include "kdsl/fp8_gemm_sched.cuh"
#include "kdsl/hopper.cuh"
#include "kdsl/wgmma_fp8_ops.cuh"

// How the producer's scale cp.asyncs complete on a stage's "full" barrier. 0 (the kernel):
// each producer lane's cp.async.mbarrier.arrive.noinc is one of the phase's expected
// arrivals. 1 and 2 exist for tools/dev/fp8_race_probe.py, which compares the three under
// compute-sanitizer racecheck: 1, the form used until 2026-11 (.noinc absent: net-zero
// tracking arrive-ons, the leader's arrival the only one counted); 2, each lane waits for
// its own copies (cp.async.wait_all) and then arrives.
#ifndef KDSL_FP8_SCALE_COMPLETION
#define KDSL_FP8_SCALE_COMPLETION 0
#endif

// 1 (the kernel): A's scales come by TMA where the host chose it (Fp8Config::SA_TMA).
// 0: by the producer lanes' cp.asyncs everywhere, for tools/dev/fp8_forms.py A/B.
#ifndef KDSL_FP8_SA_TMA
#define KDSL_FP8_SA_TMA 1
#endif

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

// KDSL_FP8_DEV_SCALES (timing probes only: the result is wrong with 1 or 2): 1, the producer
// copies no B scales (the math warpgroups read whatever the stage holds); 2, the math warpgroups
// read no scales either (each is 1). 0: the kernel.
#ifndef KDSL_FP8_DEV_SCALES
#define KDSL_FP8_DEV_SCALES 0
#endif

// KDSL_FP8_TRACE=1 (tools/dev/fp8_trace.py only): in each CTA the producer's leader and the
// first thread of each math warpgroup record (%globaltimer, clock64(), event) at the points of
// a unit's life (kFp8Trace*), into kdsl_fp8_trace: 512 records per (CTA, role) for 256 CTAs
// and 4 roles, the role 0 for the producer. The producer's marks split its way to the first
// load: 1 descriptors prefetched, 2 a unit taken, 3 its first stage free.
#ifndef KDSL_FP8_TRACE
#define KDSL_FP8_TRACE 0
#endif
#if KDSL_FP8_TRACE
__device__ unsigned long long kdsl_fp8_trace[256 * 4 * 512 * 3];
#endif

namespace kdsl {

enum { kFp8TraceStart, kFp8TraceIssue, kFp8TraceReady, kFp8TraceBlock, kFp8TraceEpilogue, kFp8TraceStored,
       kFp8TraceEnd, kFp8TraceMark };
KDSL_DEVICE void fp8_trace(int role, int& n, int event, int arg) {
#if KDSL_FP8_TRACE
  if (blockIdx.x < 256 && n < 512) {
    unsigned long long* slot = kdsl_fp8_trace + 3 * ((blockIdx.x * 4 + role) * 512 + n++);
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    slot[0] = t;
    slot[1] = clock64();
    slot[2] = ((unsigned long long)(unsigned)arg << 8) | (unsigned)event;
  }
#endif
}

template <int BM_, int BN_, int STAGES_, int CLUSTER_, int MCAST_, bool OUT_F32_, int KIND_, bool ACCUM_,
          bool TMA_STORE_, bool STREAM_K_ = false, bool SA_TMA_ = false>
struct Fp8Config {
  static constexpr int BM = BM_, BN = BN_, STAGES = STAGES_, CLUSTER = CLUSTER_, MCAST = MCAST_, KIND = KIND_;
  static constexpr bool OUT_F32 = OUT_F32_, ACCUM = ACCUM_, TMA_STORE = TMA_STORE_;
  // Stream-K compiled in (fp8_gemm_sched.cuh; only KIND 0 without a cluster): kernels without
  // it keep the K loops' constant bounds and the epilogue they had before it.
  static constexpr bool STREAM_K = STREAM_K_;
  // A's scales by TMA (the host's choice where M % 4 == 0; KDSL_FP8_SA_TMA=0 turns it off
  // for an A/B).
  static constexpr bool SA_TMA = SA_TMA_ && KDSL_FP8_SA_TMA;
  static constexpr int kBK = 128;                      // K per scale block == bytes per tile row
  // Math warpgroups: one per 64 rows, but two for 256 rows (two m64 waves each). BM = 192
  // gives three, one wave each, whose promotions hide behind the other two's waves.
  static constexpr int kMathWG = BM == 256 ? 2 : BM / 64;
  static constexpr int kWaves = BM == 256 ? 2 : 1;     // m64 row blocks per math warpgroup
  static constexpr int kThreads = 128 * (kMathWG + 1);
  static constexpr int kFrag = BN / 2;                 // accumulator floats per thread per wave
  static constexpr bool kSplit = 128 % BN != 0;        // a tile may straddle two scale blocks of B
  static constexpr int kOutBytes = OUT_F32 ? 4 : 2;
  static constexpr int kSwD = (BN * kOutBytes) % 128 == 0 ? 128 : ((BN * kOutBytes) % 64 == 0 ? 64 : 32);
  // Shared memory, from a 1024-byte aligned base: A ring, B ring, staging tile, A scales,
  // B scales (16 bytes a stage), published units (32 bytes a stage), full and empty barriers.
  static constexpr int kABytes = BM * kBK, kBBytes = BN * kBK, kSABytes = BM * 4;
  static constexpr int kOffB = STAGES * kABytes;
  static constexpr int kOffD = kOffB + STAGES * kBBytes;
  static constexpr int kOffSA = kOffD + (TMA_STORE ? BM * BN * kOutBytes : 0);
  static constexpr int kOffSB = kOffSA + STAGES * kSABytes;
  static constexpr int kOffUnit = kOffSB + STAGES * 16;
  static constexpr int kOffBar = kOffUnit + STAGES * 32;
  static constexpr int kSmemBytes = 1024 + kOffBar + 2 * STAGES * 8;  // + 1024: realignment slack
  static constexpr u32 kStageTx = kABytes + kBBytes + (SA_TMA ? kSABytes : 0);  // TMA bytes per stage
  // setmaxnreg split of the 64K registers between the producer and the math warpgroups.
  static constexpr int kProducerRegs = kMathWG == 3 ? 32 : 40;
  static constexpr int kMathRegs = kMathWG == 1 ? 240 : (kMathWG == 2 ? 232 : 160);
  // Arrivals that complete a phase of a "full" barrier: the 32 producer lanes' (their scale
  // copies landed; with SA_TMA only the leader copies, B's two scales, and the other lanes
  // arrive at once) and the leader's expect_tx arrival; form 1 counts the leader's alone.
  // (With the leader's copy arrival alone, compute-sanitizer racecheck reported its refills of
  // B's scales as racing the math threads' reads, as it did before form 0: H100, 2026-11-27.)
  static constexpr int kScaleCompletion = KDSL_FP8_SCALE_COMPLETION;
  static constexpr u32 kFullArrivals = kScaleCompletion == 1 ? 1 : 32 + 1;
  // Arrivals that complete a phase of an "empty" barrier: each math thread of this CTA, and
  // each math warpgroup of the peer CTA in a cluster.
  static constexpr u32 kEmptyArrivals = kMathWG * 128 + (CLUSTER - 1) * kMathWG;

  static_assert(BM == 64 || BM == 128 || BM == 192 || BM == 256, "BM must be 64, 128, 192 or 256");
  static_assert(BN % 16 == 0 && BN >= 16 && BN <= 256, "BN must be a multiple of 16 in [16, 256]");
  static_assert(BN - ((BN & -BN) < 128 ? (BN & -BN) : 128) <= 128,  // BN - gcd(BN, 128)
                "a tile may straddle at most two 128-column scale blocks of B");
  static_assert(kFrag * (kWaves + 1) <= (kMathWG == 3 ? 128 : 192), "accumulators and totals must fit in the math registers");
  static_assert(STAGES >= 2, "need at least two pipeline stages");
  static_assert(kScaleCompletion >= 0 && kScaleCompletion <= 2, "KDSL_FP8_SCALE_COMPLETION: 0, 1 or 2");
  static_assert(CLUSTER == 1 || CLUSTER == 2, "clusters of 1 or 2 CTAs");
  static_assert((CLUSTER == 1) == (MCAST == kMcastNone), "a cluster multicasts exactly one operand");
  static_assert(MCAST != kMcastB || KIND == 0, "grouped kinds pair CTAs on one M tile (MCAST_A)");
  static_assert(!ACCUM || OUT_F32, "accumulation is into an f32 out");
  static_assert(!STREAM_K || (KIND == 0 && CLUSTER == 1), "stream-K: dense GEMMs without a cluster");
  static_assert(KIND >= 0 && KIND <= 2, "KIND: 0 dense, 1 grouped contiguous, 2 grouped masked");
  static_assert(kSmemBytes <= 227 * 1024, "too many stages for shared memory");
  // setmaxnreg only moves registers the CTA got at launch (at most 65536 / threads a thread,
  // in steps of 8): asking for more spins forever (producer 48 + math 232 hung on the H100).
  static_assert(kProducerRegs * 128 + kMathRegs * 128 * kMathWG <= (65536 / kThreads) / 8 * 8 * kThreads,
                "register split larger than the launch allocation");
};

// Addresses in the shared-memory layout of Fp8Config.
template <class C>
struct Fp8Smem {
  u32 base;      // shared-window address, 1024-byte aligned
  u8* generic;   // the same byte as a generic pointer

  KDSL_DEVICE explicit Fp8Smem(u8* raw) {
    const u32 raw_addr = smem_addr(raw);
    base = (raw_addr + 1023u) & ~1023u;  // the 128-byte swizzle repeats every 1024 bytes
    generic = raw + (base - raw_addr);
  }
  KDSL_DEVICE u32 a(int s) const { return base + s * C::kABytes; }
  KDSL_DEVICE u32 b(int s) const { return base + C::kOffB + s * C::kBBytes; }
  KDSL_DEVICE u32 d() const { return base + C::kOffD; }
  KDSL_DEVICE u32 sa(int s) const { return base + C::kOffSA + s * C::kSABytes; }
  KDSL_DEVICE const float* sa_ptr(int s) const {
    return reinterpret_cast<const float*>(generic + C::kOffSA + s * C::kSABytes);
  }
  KDSL_DEVICE u32 sb(int s) const { return base + C::kOffSB + s * 16; }
  KDSL_DEVICE const float* sb_ptr(int s) const { return reinterpret_cast<const float*>(generic + C::kOffSB + s * 16); }
  KDSL_DEVICE Fp8Unit* unit(int s) const { return reinterpret_cast<Fp8Unit*>(generic + C::kOffUnit + s * 32); }
  // The producer writes a unit by its shared address: a generic pointer would keep 64 bits
  // live in its few registers (the clustered 128-row contiguous kernel spilled for them).
  KDSL_DEVICE void publish(int s, const Fp8Unit& u) const {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n"
                 "st.shared.v4.b32 [%0+16], {%5, %6, %7, %8};\n"
                 :: "r"(base + C::kOffUnit + s * 32), "r"(u.m0), "r"(u.n0), "r"(u.g), "r"(u.full), "r"(u.kb0),
                 "r"(u.kb1), "r"(u.part), "r"(u.peers) : "memory");
  }
  KDSL_DEVICE u32 full(int s) const { return base + C::kOffBar + s * 8; }
  KDSL_DEVICE u32 empty(int s) const { return base + C::kOffBar + (C::STAGES + s) * 8; }
};

// Ring position: stage and the parity of its current use.
template <int STAGES>
struct RingPos {
  int s = 0;
  u32 phase = 0;
  KDSL_DEVICE void advance() {
    if (++s == STAGES) {
      s = 0;
      phase ^= 1u;
    }
  }
};

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
                              const Fp8Smem<C>& sm) {
  constexpr int BM = C::BM, BN = C::BN;
  const int lane = threadIdx.x & 31;
  const bool leader = lane == 0;
  int tn = 0;  // KDSL_FP8_TRACE: records made
  if (leader) {
    fp8_trace(0, tn, kFp8TraceStart, 0);
    tma_prefetch_desc(ta);
    tma_prefetch_desc(tb);
    if (C::SA_TMA) tma_prefetch_desc(tsa);
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
    // Element offsets (int: launch.py bounds the scale counts by 2**31): B's scale blocks of
    // this tile's columns, the second one only if the tile reaches it; sa[ag][kb = 0][m0].
    const int sb_lo = (u.g * n_sblk + (u.n0 >> 7)) * nk;
    const int sb_hi = (u.n0 >> 7) + 1 < n_sblk ? sb_lo + nk : sb_lo;
    const int sa_unit = ag * nk * p.M + u.m0, rows_left = p.M - u.m0;
    const int kb_begin = C::STREAM_K ? u.kb0 : 0, kb_end = C::STREAM_K ? u.kb1 : nk;
    for (int kb = kb_begin; kb < kb_end; ++kb, pos.advance()) {
      const int s = pos.s;
      const u32 full = sm.full(s);
      mbar_wait(sm.empty(s), pos.phase ^ 1u);
      if (leader && kb == kb_begin) fp8_trace(0, tn, kFp8TraceMark, 3);
      // A's scales: one box among the leader's TMA loads below (SA_TMA), or BM / 32 rows
      // copied by each lane, zeros past M; B's two: the leader. Each lane's arrival below is
      // made when its copies (if any) have landed, and is one of the phase's expected
      // arrivals, so the phase cannot complete before every copy is in.
      if (!C::SA_TMA) {
        const float* sa_kb = p.sa + (sa_unit + kb * p.M);
#pragma unroll
        for (int r = lane; r < BM; r += 32) cp_async4_or_zero(sm.sa(s) + 4 * r, sa_kb + r, r < rows_left);
      }
      if (leader && C::kScaleCompletion != 1 && !KDSL_FP8_DEV_SCALES) {
        cp_async4(sm.sb(s), p.sb + (sb_lo + kb));
        cp_async4(sm.sb(s) + 4, p.sb + (sb_hi + kb));
      }
      scale_copies_arrive<C>(full);
      __syncwarp();
      if (leader) {
        if (kb == kb_begin) sm.publish(s, u);  // published by the release arrival below
        fp8_trace(0, tn, kFp8TraceIssue, kb);
        if (C::kScaleCompletion == 1) {  // the earlier form, kept as it was for the probe
          cp_async4(sm.sb(s), p.sb + (sb_lo + kb));
          cp_async4(sm.sb(s) + 4, p.sb + (sb_hi + kb));
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
      }
      __syncwarp();
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
    // A stage's scales, read before the stage is handed back.
    float s_a[kWaves][2], s_b_lo, s_b_hi;
    auto read_scales = [&](int s) {
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
      s_b_lo = sm.sb_ptr(s)[0];
      s_b_hi = sm.sb_ptr(s)[1];
    };
    constexpr bool kPrefetch = kWaves == 1 && KDSL_FP8_PREFETCH_SCALES;
    if (kPrefetch) read_scales(pos.s);  // the unit's first block (its "full" wait was the unit's)
    constexpr int kUnrollKb = kWaves == 2 && C::CLUSTER > 1 ? KDSL_FP8_UNROLL_KB_256 : 1;
#pragma unroll kUnrollKb
    for (int kb = kb_begin; kb < kb_end; ++kb, pos.advance()) {
      const int s = pos.s;
      if (!kPrefetch) {
        if (kb > kb_begin) mbar_wait(sm.full(s), pos.phase);
        read_scales(s);
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
          read_scales(next.s);
        }
        wgmma_wait<0>();
        wgmma_pin(acc);
        if (v == kWaves - 1) release();
        const float lo0 = sa_now[v][0] * sb_lo, lo1 = sa_now[v][1] * sb_lo;
        const float hi0 = sa_now[v][0] * sb_hi, hi1 = sa_now[v][1] * sb_hi;
        if (KDSL_FP8_DEV_SKIP_PROMOTE) {  // (a timing probe: the wave is left unpromoted)
        } else if (!C::kSplit) {
          promote<kFrag>(kFrag / 4, acc, total[v], lo0, lo1, hi0, hi1);
        } else if (KDSL_FP8_SPLIT_SWITCH) {
          promote_split<kFrag>(j0, acc, total[v], lo0, lo1, hi0, hi1);
        } else {
          promote<kFrag>(j0, acc, total[v], lo0, lo1, hi0, hi1);
        }
      }
      if (tracer) fp8_trace(1 + wg, tn, kFp8TraceBlock, kb);
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
    epilogue.store(u, total);
    if (tracer) fp8_trace(1 + wg, tn, kFp8TraceStored, u.n0);
    if (epilogue.kDeferStores && u.full) {  // staged: its boxes go out during the next unit
      staged = u;
      boxes_left = epilogue.kBoxes;
    }
  }
  if (epilogue.kDeferStores) flush_boxes();
  epilogue.finish();
  if (tracer) fp8_trace(1 + wg, tn, kFp8TraceEnd, 0);
}

template <class C>
KDSL_DEVICE void fp8_gemm(const Fp8GemmArgs& p, const TmaDesc* ta, const TmaDesc* tb, const TmaDesc* td,
                          const TmaDesc* tsa) {
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
    if (threadIdx.x < 32) fp8_producer<C>(p, ta, tb, tsa, sm);
  } else {
    regs_claim<C::kMathRegs>();
    fp8_math<C>(p, td, Fp8Smem<C>(kdsl_fp8_smem));
  }
  if (C::CLUSTER > 1) cluster_sync();  // no CTA leaves while its peer may still reach it
}

}  // namespace kdsl
