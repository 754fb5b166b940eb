// kdsl/fp8_gemm_wgmma.cuh — FP8 (e4m3) GEMM with DeepSeek-style block scaling on Hopper.
//
//   out[M, N] = sum_kb (A[:, kb] . B[:, kb]^T) * sa[m, kb] * sb[n / 128, kb]
//
// A [M, K] and B [N, K] are float8 e4m3, both K-major (row-major with K innermost), which
// is the only operand order wgmma accepts for 8-bit types. Each 128-deep K block is
// multiplied into a fresh fp32 wgmma accumulator and then "promoted": scaled by the
// 1x128 scale of its A row and the 128x128 scale of its B block and added into a separate
// fp32 total. The tensor core's fp8 accumulation keeps fewer mantissa bits than fp32, so
// promoting every 128 K keeps the long-K error at fp32 level (the DeepSeek-V3 recipe).
//
// Kinds (template int KIND):
//   0 dense               A[M,K]       B[N,K]     out[M,N]
//   1 grouped contiguous  A[M,K]       B[G,N,K]   out[M,N]; row m uses B[group[m]];
//                         group[m] == -1 (or any id outside [0, G)) marks a padding row
//                         that is left untouched.
//                         Any group array is handled: an M tile makes one pass per group
//                         present among its rows (one pass when it is single-group).
//   2 grouped masked      A[G,Mmax,K]  B[G,N,K]   out[G,Mmax,N]; only rows < count[g] are
//                         read or written; tiles wholly beyond count[g] exit at once.
//
// Scales (fp32, the "dequantise" direction: x ~= x_fp8 * scale):
//   sa  [M, K/128] stored M-major, i.e. a contiguous [K/128, M] buffer (elem (m,kb) at
//       kb*M + m); KIND 2: contiguous [G, K/128, Mmax].
//   sb  contiguous [ceil(N/128), K/128]; KIND 1/2: [G, ceil(N/128), K/128].
//
// Launch contract (see fp8_gemm_threads / fp8_gemm_smem_bytes below):
//   grid   = (ceil(N/BN), ceil(M/BM), G)      (G = 1 for dense; M is Mmax for KIND 2).
//            Block (x, y) is remapped to tiles in groups of 8 M tiles for L2 reuse, so the
//            grid must be exactly this shape.
//   block  = fp8_gemm_threads<BM,BN>() = 2*BM threads (BM/64 warpgroups); the kernel is
//            declared __launch_bounds__(threads, 1): one block per SM, up to 255 registers.
//   smem   = fp8_gemm_smem_bytes<BM,BN,STAGES>() dynamic bytes; above 48 KB the launcher
//            must first raise cudaFuncAttributeMaxDynamicSharedMemorySize to that value.
//   Supported: BM in {64, 128}; BN in {64, 128, 160, 192} (192 not with KIND 1);
//   STAGES >= 2 with smem <= 227 KB (128x128: up to 6). Measured on H100 (see
//   tools/dev/fp8_gemm_dev_notes.md): 128x128x4 is the best large-M choice, 64x64x8 (or
//   64x64x4) for small M, where a 128x128 grid leaves most SMs idle.
//   M, N >= 1 any size (partial tiles are zero-filled on load and masked on store);
//   K % 128 == 0, K >= 128. a and b 16-byte aligned; out 4-byte aligned (8 for fp32);
//   odd N falls back to scalar stores.
//
// Design: every thread both loads and computes. A STAGES-deep ring of shared-memory
// tiles (BM x 128 B of A, BN x 128 B of B per stage) is filled by 16-byte cp.async in
// the 128-byte-swizzled K-major layout that the wgmma descriptors describe, so a tile row
// is exactly one swizzle row and one scale block. The K block's scales travel in the same
// cp.async group (4-byte copies), so their latency is hidden like the tiles' (loading them
// from global inside the loop cost a quarter of the throughput). Each warpgroup owns 64
// rows of the M tile and issues four m64nBNk32 wgmmas per K block, waits, and promotes.
// Tiles wider than 128 (160, 192) straddle two B scale blocks; each 8-column fragment
// picks its scale from the column it sits in.
#pragma once
#include "kdsl/hopper.cuh"

namespace kdsl {

struct Fp8GemmArgs {
  const void* a; const float* sa; const void* b; const float* sb; void* out;
  const int* group;   // KIND 1 only, else nullptr
  const int* count;   // KIND 2 only, else nullptr
  int M, N, K, G;     // KIND 2: M is Mmax (rows per group); G = 1 for dense
};

template <int BM, int BN, int STAGES>
__host__ __device__ constexpr int fp8_gemm_smem_bytes() {
  // Per stage: the A and B tiles (128 B per row) plus that K block's scales (BM floats
  // of sa, two of sb). + 1024: the ring is re-aligned to the 1024-byte swizzle period at
  // run time; + 16: the group-scan scratch word.
  return STAGES * ((BM + BN) * 128 + (BM + 4) * 4) + 1024 + 16;
}

template <int BM, int BN>
__host__ __device__ constexpr int fp8_gemm_threads() { return BM * 2; }

namespace fp8_detail {

constexpr int kBK = 128;            // K per scale block == bytes per tile row
constexpr int kIntMax = 0x7fffffff;

// 4-byte copies (scales) must go through L1 (.ca); .cg only takes 16 bytes.
KDSL_DEVICE void cp_async4(u32 dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
               :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

// D (64 x N, fp32) = A (64 x 32, e4m3, smem) * B (N x 32, e4m3, smem)^T + (scale_d ? D : 0).
// Fragment of D per thread (warp w of the warpgroup, lane l): d[4j + 2h + e] is row
// 16w + l/4 + 8h, column 8j + 2(l%4) + e.
template <int N> struct Wgmma;  // m64nNk32 for the supported tile widths

KDSL_DEVICE void wgmma_m64n64k32(float (&d)[32], u64 da, u64 db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "r"(scale_d));
}
template <> struct Wgmma<64> {
  static KDSL_DEVICE void run(float (&d)[32], u64 da, u64 db, int s) { wgmma_m64n64k32(d, da, db, s); }
};

KDSL_DEVICE void wgmma_m64n128k32(float (&d)[64], u64 da, u64 db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(scale_d));
}
template <> struct Wgmma<128> {
  static KDSL_DEVICE void run(float (&d)[64], u64 da, u64 db, int s) { wgmma_m64n128k32(d, da, db, s); }
};

KDSL_DEVICE void wgmma_m64n160k32(float (&d)[80], u64 da, u64 db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %82, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n160k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79}, "
      "%80, %81, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
      : "l"(da), "l"(db), "r"(scale_d));
}
template <> struct Wgmma<160> {
  static KDSL_DEVICE void run(float (&d)[80], u64 da, u64 db, int s) { wgmma_m64n160k32(d, da, db, s); }
};

KDSL_DEVICE void wgmma_m64n192k32(float (&d)[96], u64 da, u64 db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, "
      "%96, %97, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
      : "l"(da), "l"(db), "r"(scale_d));
}
template <> struct Wgmma<192> {
  static KDSL_DEVICE void run(float (&d)[96], u64 da, u64 db, int s) { wgmma_m64n192k32(d, da, db, s); }
};


KDSL_DEVICE int warp_min(int v) {
  int r;
  asm volatile("redux.sync.min.s32 %0, %1, 0xffffffff;\n" : "=r"(r) : "r"(v));
  return r;
}

// Smallest group id > prev among the tile's rows (kIntMax when none); ids outside [0, G)
// are never chosen, so such rows are treated as padding, never read past B. Every thread of
// the block must call it; the slot is reset by thread 0 at entry, which is safe because
// callers run at least one __syncthreads between two calls.
template <int BM>
KDSL_DEVICE int next_group(const int* group, int m0, int M, int G, int prev, int* slot) {
  const int tid = threadIdx.x;
  if (tid == 0) *slot = kIntMax;
  __syncthreads();
  int cand = kIntMax;
  if (tid < BM && m0 + tid < M) {
    const int g = __ldg(group + m0 + tid);
    if (g > prev && g < G) cand = g;
  }
  cand = warp_min(cand);
  if ((tid & 31) == 0 && cand != kIntMax)
    asm volatile("red.shared.min.s32 [%0], %1;\n" :: "r"(smem_addr(slot)), "r"(cand) : "memory");
  __syncthreads();
  return *slot;
}

KDSL_DEVICE void store_pair(float* p, float x, float y, bool pair_ok, bool second_ok) {
  if (pair_ok) {
    asm volatile("st.global.v2.f32 [%0], {%1, %2};\n" :: "l"(p), "f"(x), "f"(y) : "memory");
  } else {
    p[0] = x;
    if (second_ok) p[1] = y;
  }
}
KDSL_DEVICE void store_pair(bf16_t* p, float x, float y, bool pair_ok, bool second_ok) {
  if (pair_ok) {
    *reinterpret_cast<u32*>(p) = pack_bf16x2(x, y);
  } else {
    const u32 v = pack_bf16x2(x, y);
    p[0].bits = (u16)(v & 0xFFFF);
    if (second_ok) p[1].bits = (u16)(v >> 16);
  }
}

template <bool F32> struct Select { typedef bf16_t type; };
template <> struct Select<true> { typedef float type; };

}  // namespace fp8_detail

template <int BM, int BN, int STAGES, bool OUT_F32, int KIND>
KDSL_DEVICE void fp8_gemm(const Fp8GemmArgs& p) {
  using namespace fp8_detail;
  static_assert(BM == 64 || BM == 128, "BM must be 64 or 128 (one m64 wgmma per warpgroup)");
  static_assert(BN == 64 || BN == 128 || BN == 160 || BN == 192,
                "BN must be 64, 128, 160 or 192 (accumulator + promoted total must fit in registers)");
  static_assert(STAGES >= 2, "need at least two pipeline stages");
  static_assert(!(KIND == 1 && BN == 192), "BN = 192 spills registers with the group-pass state of KIND 1");
  static_assert(KIND >= 0 && KIND <= 2, "KIND: 0 dense, 1 grouped contiguous, 2 grouped masked");
  static_assert(fp8_gemm_smem_bytes<BM, BN, STAGES>() <= 227 * 1024, "too many stages for shared memory");

  constexpr int THREADS = BM * 2;
  constexpr int ROW_STEP = THREADS / 8;            // tile rows covered by one sweep of the block
  constexpr int A_ITERS = BM / ROW_STEP;           // 16-byte chunks per thread per stage
  constexpr int B_ITERS = BN / ROW_STEP;
  static_assert(A_ITERS * ROW_STEP == BM && B_ITERS * ROW_STEP == BN, "tile rows must be a multiple of 2*BM/8");
  constexpr int A_BYTES = BM * kBK;
  constexpr int TILE_BYTES = (BM + BN) * kBK;
  constexpr int SCL_BYTES = (BM + 4) * 4;           // sa[BM], sb_lo, sb_hi, pad
  constexpr int FRAG = BN / 2;                      // fp32 accumulator registers per thread
  // A 160- or 192-wide tile straddles two 128-wide scale blocks of B.
  constexpr bool SPLIT = (128 % BN) != 0;

  extern __shared__ u8 kdsl_fp8_gemm_smem[];
  const u32 smem_raw = smem_addr(kdsl_fp8_gemm_smem);
  const u32 ring = (smem_raw + 1023u) & ~1023u;   // swizzle pattern repeats every 1024 B
  const u32 scl_ring = ring + STAGES * TILE_BYTES;
  const u8* scl_gen = kdsl_fp8_gemm_smem + (ring - smem_raw) + STAGES * TILE_BYTES;
  int* scratch = reinterpret_cast<int*>(const_cast<u8*>(scl_gen) + STAGES * SCL_BYTES);

  const int tid = threadIdx.x;
  const int M = p.M, N = p.N, K = p.K;
  const int nk = K / kBK;
  const int n_sblk = (N + 127) / 128;

  // Grouped rasterisation: walk 8 M tiles at a time across N so that a wave of blocks
  // shares A and B tiles in L2 (the grid shape is fixed by the launch contract).
  int mt, nt;
  {
    const int gx = gridDim.x, gy = gridDim.y;
    const int pid = blockIdx.y * gx + blockIdx.x;
    constexpr int GROUP_M = 8;
    const int width = GROUP_M * gx;
    const int first_m = (pid / width) * GROUP_M;
    const int gsz = (gy - first_m) < GROUP_M ? (gy - first_m) : GROUP_M;
    mt = first_m + (pid % width) % gsz;
    nt = (pid % width) / gsz;
  }
  const int z = blockIdx.z;
  const int m0 = mt * BM, n0 = nt * BN;
  const int nb_lo = n0 >> 7;                       // B scale block of the tile's first column
  const int bnd = 128 - (n0 & 127);                // tile columns < bnd use nb_lo, the rest nb_lo + 1

  // Rows of this tile that exist (A reads and output writes stop at m_end).
  int m_end = M;
  if (KIND == 2) {
    const int c = __ldg(p.count + z);
    m_end = c < M ? c : M;
    if (m0 >= m_end) return;
  }

  // Loader geometry: thread handles chunk (tid % 8) of rows tid/8 + i*ROW_STEP. The
  // swizzle XOR term (row % 8) is the same for all of them since ROW_STEP % 8 == 0.
  const int ld_row = tid >> 3;
  const int ld_chunk = tid & 7;
  const u32 ld_soff = (u32)(ld_row * kBK + ((ld_chunk ^ (ld_row & 7)) << 4));

  // Promotion / epilogue geometry (accumulator fragment layout of wgmma m64nNk32).
  const int wg = tid >> 7;
  const int warp = (tid >> 5) & 3;
  const int lane = tid & 31;
  const int r_loc = wg * 64 + warp * 16 + (lane >> 2);   // tile rows r_loc and r_loc + 8
  const int r_lo = m0 + r_loc;
  const int c_base = n0 + 2 * (lane & 3);

  int g = 0;
  if (KIND == 1) {
    g = next_group<BM>(p.group, m0, M, p.G, -1, scratch);
    if (g == kIntMax) return;                 // tile holds only padding rows
  } else if (KIND == 2) {
    g = z;
  }

  const u8* a_base = static_cast<const u8*>(p.a) + (KIND == 2 ? (i64)z * M * K : (i64)0);
  const float* sa_base = p.sa + (KIND == 2 ? (i64)z * nk * M : (i64)0);
  const i64 row_step_bytes = (i64)ROW_STEP * K;

  // Scale loads ride in the same cp.async groups as the tiles: thread t < BM fetches
  // sa of tile row t, threads BM and BM+1 the one or two sb values of the tile.
  const float* scl_src = sa_base;
  i64 scl_stride = 0;
  bool scl_ok = false;
  u32 scl_doff = 0;
  if (tid < BM) {
    scl_ok = m0 + tid < m_end;
    scl_src = sa_base + (scl_ok ? m0 + tid : 0);
    scl_stride = M;
    scl_doff = tid * 4;
  }

  for (;;) {   // one pass per group present in the tile (KIND 1); a single pass otherwise
    const u8* b_base = static_cast<const u8*>(p.b) + (i64)g * N * K;
    if (tid == BM || tid == BM + 1) {
      const int nb = nb_lo + (tid - BM);
      scl_ok = nb < n_sblk && (tid == BM || SPLIT);
      scl_src = p.sb + ((i64)g * n_sblk + (scl_ok ? nb : nb_lo)) * nk;
      scl_stride = 1;
      scl_doff = tid * 4;
    }

    // Out-of-range rows copy 0 bytes (zero fill): cp.async then reads nothing from the
    // (out-of-range) address, so no select to a safe address is spent on them.
    u32 a_ok = 0, b_ok = 0;
#pragma unroll
    for (int i = 0; i < A_ITERS; ++i) a_ok |= (u32)(m0 + ld_row + i * ROW_STEP < m_end) << i;
#pragma unroll
    for (int i = 0; i < B_ITERS; ++i) b_ok |= (u32)(n0 + ld_row + i * ROW_STEP < N) << i;
    const u8* a_ld = a_base + (i64)(m0 + ld_row) * K + ld_chunk * 16;
    const u8* b_ld = b_base + (i64)(n0 + ld_row) * K + ld_chunk * 16;

    auto load_stage = [&](int kb, int slot) {
      const u32 st = ring + slot * TILE_BYTES + ld_soff;
      const i64 koff = (i64)kb * kBK;
#pragma unroll
      for (int i = 0; i < A_ITERS; ++i) {
        const bool ok = (a_ok >> i) & 1;
        cp_async16(st + i * ROW_STEP * kBK, a_ld + i * row_step_bytes + koff, ok ? 16 : 0);
      }
#pragma unroll
      for (int i = 0; i < B_ITERS; ++i) {
        const bool ok = (b_ok >> i) & 1;
        cp_async16(st + A_BYTES + i * ROW_STEP * kBK, b_ld + i * row_step_bytes + koff, ok ? 16 : 0);
      }
      if (tid < BM + 2)
        cp_async4(scl_ring + slot * SCL_BYTES + scl_doff, scl_ok ? scl_src + kb * scl_stride : scl_src,
                  scl_ok ? 4 : 0);
    };

    // The previous pass's last wgmmas read the ring; nobody may refill it before they end.
    __syncthreads();

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < nk) load_stage(s, s);
      cp_async_commit();   // empty groups keep the wait_group count uniform
    }

    float total[FRAG];
    float acc[FRAG];   // no init needed: the first wgmma of each K block runs with scale-d = 0
#pragma unroll
    for (int i = 0; i < FRAG; ++i) total[i] = 0.f;

    int slot = 0;                   // ring slot of K block kb
    int fill = STAGES - 1;          // ring slot that K block kb + STAGES - 1 goes to
    for (int kb = 0; kb < nk; ++kb) {
      cp_async_wait<STAGES - 2>();  // this thread's copies for block kb have landed
      fence_proxy_async();
      __syncthreads();              // everyone's copies landed; slot `fill` is free
      if (kb + STAGES - 1 < nk) load_stage(kb + STAGES - 1, fill);
      cp_async_commit();

      const float* scl = reinterpret_cast<const float*>(scl_gen + slot * SCL_BYTES);
      const float s_a0 = scl[r_loc], s_a1 = scl[r_loc + 8];
      const float s_b_lo = scl[BM], s_b_hi = scl[BM + 1];

      const u32 tile = ring + slot * TILE_BYTES;
      const u64 da = desc_kmajor_sw128(tile + wg * 64 * kBK);
      const u64 db = desc_kmajor_sw128(tile + A_BYTES);
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < kBK / 32; ++k)    // +32 B along K == +2 in the descriptor's address field
        Wgmma<BN>::run(acc, da + 2 * k, db + 2 * k, k);   // k == 0 starts a fresh accumulator
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_pin(acc);

      const float lo0 = s_a0 * s_b_lo, lo1 = s_a1 * s_b_lo;
      const float hi0 = s_a0 * s_b_hi, hi1 = s_a1 * s_b_hi;
#pragma unroll
      for (int j = 0; j < FRAG / 4; ++j) {
        const bool lo = !SPLIT || 8 * j < bnd;
        const float sc0 = lo ? lo0 : hi0, sc1 = lo ? lo1 : hi1;
        total[4 * j + 0] = fmaf(acc[4 * j + 0], sc0, total[4 * j + 0]);
        total[4 * j + 1] = fmaf(acc[4 * j + 1], sc0, total[4 * j + 1]);
        total[4 * j + 2] = fmaf(acc[4 * j + 2], sc1, total[4 * j + 2]);
        total[4 * j + 3] = fmaf(acc[4 * j + 3], sc1, total[4 * j + 3]);
      }
      slot = (slot + 1 == STAGES) ? 0 : slot + 1;
      fill = (fill + 1 == STAGES) ? 0 : fill + 1;
    }

    // Epilogue: straight from the fragment; each quad of lanes writes 8 contiguous columns.
    typedef typename Select<OUT_F32>::type out_t;
    out_t* out = static_cast<out_t*>(p.out) + (KIND == 2 ? (i64)z * M * N : (i64)0);
    const bool even_n = (N & 1) == 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = r_lo + 8 * h;
      bool row_ok = r < m_end;
      // Re-read rather than keep in registers across the main loop (BN = 192 is tight).
      if (KIND == 1) row_ok = row_ok && __ldg(p.group + r) == g;
      if (!row_ok) continue;
      out_t* orow = out + (i64)r * N;
#pragma unroll
      for (int j = 0; j < FRAG / 4; ++j) {
        const int c = c_base + 8 * j;
        if (c < N)
          store_pair(orow + c, total[4 * j + 2 * h], total[4 * j + 2 * h + 1], even_n, c + 1 < N);
      }
    }

    if (KIND != 1) break;
    g = next_group<BM>(p.group, m0, M, p.G, g, scratch);
    if (g == kIntMax) break;
  }
}

}  // namespace kdsl
