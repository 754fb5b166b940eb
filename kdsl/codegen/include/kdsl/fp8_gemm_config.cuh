// kdsl/fp8_gemm_config.cuh — the FP8 GEMM's compile-time configuration (Fp8Config), its
// shared-memory layout (Fp8Smem), the ring position, the defines the configuration reads, and the
// trace recorder of tools/dev/fp8_trace.py. fp8_gemm_wgmma.cuh describes the kernel.
#pragma once
#include "kdsl/fp8_gemm_sched.cuh"
#include "kdsl/hopper.cuh"

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

// KDSL_FP8_TILE_AHEAD: where tiles come from a counter (Fp8Config::TILE_COUNTER), the
// producer opens the next tile (claims it, reads its rows' group ids) during a tile's last
// pass, after issuing the loads of the K block this many blocks before the pass's last, so
// that the two round trips do not lie between a tile's last loads and the next tile's first.
// H200, in turns (2026-11-28, bench/NOTES.md): against opening it when the next unit is asked
// for (-1), 4 ran x1.065-1.090 at K = 1024, x1.013-1.030 at K = 2048, x1.000-1.012 at K = 7168
// (2 about as well, x1.032-1.060 at K = 1024). On the fixed stride (128-row tiles) reading the
// ids ahead ran 1-3 % slower, so the stride keeps the form before.
#ifndef KDSL_FP8_TILE_AHEAD
#define KDSL_FP8_TILE_AHEAD 4
#endif

// KDSL_FP8_DEV_SCALES (timing probes only: the result is wrong with 1 or 2): 1, the producer
// copies no B scales (b_scale_load "copy": the math warpgroups read whatever the stage holds);
// 2, the math warpgroups read no scales either (each is 1). 0: the kernel.
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
          bool TMA_STORE_, bool STREAM_K_ = false, bool SA_TMA_ = false, int SB_LOAD_ = 0, bool TILE_COUNTER_ = false>
struct Fp8Config {
  static constexpr int BM = BM_, BN = BN_, STAGES = STAGES_, CLUSTER = CLUSTER_, MCAST = MCAST_, KIND = KIND_;
  static constexpr bool OUT_F32 = OUT_F32_, ACCUM = ACCUM_, TMA_STORE = TMA_STORE_;
  // Stream-K compiled in (fp8_gemm_sched.cuh; only KIND 0 without a cluster): kernels without
  // it keep the K loops' constant bounds and the epilogue they had before it.
  static constexpr bool STREAM_K = STREAM_K_;
  // Contiguous tiles taken from a shared counter where the host passes one (fp8_gemm_sched.cuh;
  // the host's choice: passes/gemm_tiles.py, tile_counter).
  static constexpr bool TILE_COUNTER = TILE_COUNTER_;
  // A's scales by TMA (the host's choice where M % 4 == 0; KDSL_FP8_SA_TMA=0 turns it off
  // for an A/B).
  static constexpr bool SA_TMA = SA_TMA_ && KDSL_FP8_SA_TMA;
  // How B's two scales of a K block reach the math warpgroups (attr b_scale_load, chosen by the
  // host): 0 ("copy") two cp.asyncs of the producer's leader into the stage, at floats 0 and 1 of
  // a 16-byte slot; 1 ("tma", K % 512 == 0) a TMA box of the 4 K blocks holding the stage's by
  // the tile's two scale rows, into a 128-byte slot, block kb's at floats kb % 4 and 4 + kb % 4;
  // 2 ("math") the math warpgroups' own warp-uniform global loads, issued before the wave whose
  // promotion uses them (L1 hits after a unit's first: a unit's scales of one block row are
  // 4 * K / 128 contiguous bytes).
  static constexpr int SB_LOAD = SB_LOAD_;
  static constexpr bool kSbTma = SB_LOAD == 1, kSbGlobal = SB_LOAD == 2;
  static constexpr int kSBSlot = kSbTma ? 128 : 16, kSbHi = kSbTma ? 4 : 1;
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
  // B scales (kSBSlot bytes a stage), published units (32 bytes a stage), full and empty barriers.
  static constexpr int kABytes = BM * kBK, kBBytes = BN * kBK, kSABytes = BM * 4;
  static constexpr int kOffB = STAGES * kABytes;
  static constexpr int kOffD = kOffB + STAGES * kBBytes;
  static constexpr int kOffSA = kOffD + (TMA_STORE ? BM * BN * kOutBytes : 0);
  static constexpr int kOffSB = kOffSA + STAGES * kSABytes;
  static constexpr int kOffUnit = kOffSB + STAGES * kSBSlot;
  static constexpr int kOffBar = kOffUnit + STAGES * 32;
  static constexpr int kSmemBytes = 1024 + kOffBar + 2 * STAGES * 8;  // + 1024: realignment slack
  // TMA bytes per stage: the tiles, and A's scales and B's box where they come by TMA
  static constexpr u32 kStageTx = kABytes + kBBytes + (SA_TMA ? kSABytes : 0) + (kSbTma ? 32 : 0);
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
  static_assert(!TILE_COUNTER || (KIND == 1 && CLUSTER == 1),  // a pair must see the same units
                "a tile counter: grouped contiguous GEMMs without a cluster");
  static_assert(KIND >= 0 && KIND <= 2, "KIND: 0 dense, 1 grouped contiguous, 2 grouped masked");
  static_assert(SB_LOAD >= 0 && SB_LOAD <= 2, "SB_LOAD: 0 copy, 1 tma, 2 math");
  static_assert(kSmemBytes <= 227 * 1024, "too many stages for shared memory");
  // setmaxnreg only moves registers the CTA got at launch (at most 65536 / threads a thread,
  // in steps of 8): asking for more spins forever (producer 48 + math 232 hung on the H100).
  static_assert(kProducerRegs * 128 + kMathRegs * 128 * kMathWG <= (65536 / kThreads) / 8 * 8 * kThreads,
                "register split larger than the launch allocation");
};

// Element offsets into p.sb of B's scales at K block 0 for a unit's columns: the scale block
// holding column n0 (lo), and the next one if there is one, else lo again (hi). int: launch.py
// bounds the scale counts by 2**31.
KDSL_DEVICE void b_scale_offsets(const Fp8GemmArgs& p, const Fp8Unit& u, int nk, int& lo, int& hi) {
  const int n_sblk = (p.N + 127) / 128;
  lo = (u.g * n_sblk + (u.n0 >> 7)) * nk;
  hi = (u.n0 >> 7) + 1 < n_sblk ? lo + nk : lo;
}

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
  KDSL_DEVICE u32 sb(int s) const { return base + C::kOffSB + s * C::kSBSlot; }
  KDSL_DEVICE const float* sb_ptr(int s) const {
    return reinterpret_cast<const float*>(generic + C::kOffSB + s * C::kSBSlot);
  }
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

}  // namespace kdsl
