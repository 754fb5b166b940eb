// kdsl/attention_mma.cuh — attention forward on mma.sync tensor cores (sm_80 .. sm_90a).
//
// This is kdsl's first and fallback attention kernel: FlashAttention-2 style tiling with
// Ampere-style warp MMAs (m16n8k16, bf16/fp16 in, fp32 accumulate). A wgmma kernel for
// Hopper replaces it later; this one must keep compiling under NVRTC with no include path
// but kdsl's own, so every conversion and tensor-core/async-copy op is inline PTX.
//
// Launch contract (the generated extern "C" kernel forwards its AttnArgs here):
//   grid   = (ceil(M / BM), H, B)   blockIdx.x = q tile, .y = head, .z = batch
//   block  = NWARPS * 32 threads    (use __launch_bounds__(NWARPS * 32, 1))
//   dynamic shared memory = attention_smem_bytes<Elem, D, BM, BN, NWARPS>()
//                         = 2 * D * (BM + 4 * BN) bytes   (Q tile + double-buffered K and V)
//   (> 48 KB: the host must raise cudaFuncAttributeMaxDynamicSharedMemorySize first.)
//
// Supported tiles (checked by static_assert): Elem in {bf16_t, f16_t}; D in {64, 128, 256};
// each warp owns BM / NWARPS query rows, which must be 16 or 32 (32 only with BN <= 64);
// BN in {32, 64, 128}; BN * D / 8 and BM * D / 8 divisible by the thread count.
// Measured on H100 SXM, relpos bf16, B=2 H=16 M=N=8192 (tools/dev/attention_dev_notes.md):
//   D = 128:  BM=128, BN=64, NWARPS=4   342 TFLOPS  (32 rows/warp, Q re-read from smem, 2 CTAs/SM)
//   D =  64:  BM=128, BN=64, NWARPS=4   260 TFLOPS  (32 rows/warp, Q held in registers)
//   D = 256:  BM=128, BN=64, NWARPS=8   286 TFLOPS  (16 rows/warp, 192 KB smem, 1 CTA/SM)
// Also valid (slower there): (128,64,8), (128,128,8), (64,64,4), (64,128,4), (64,32,4).
//
// Semantics: for every (b, h, q, kv) the score is V::score() (log2 domain); on tiles that
// V::tile() calls partial, elements with !V::mask() become -inf; kv >= N is always -inf.
// Tiles V::tile() calls empty are never loaded. out = softmax2(s) . V, lse = natural-log
// logsumexp. Rows with no finite score give out = 0 and lse = -inf. GQA: h_kv = h / (H / Hkv).
#pragma once

#include "kdsl/async_copy.cuh"
#include "kdsl/attention_common.cuh"

namespace kdsl {

namespace attn_mma_detail {

template <class Elem, int D, int BM, int BN, int NWARPS>
struct Cfg {
  static constexpr int kThreads = NWARPS * 32;
  static constexpr int kRowsPerWarp = BM / NWARPS;
  static constexpr int MT = kRowsPerWarp / 16;  // 16-row mma tiles per warp
  static constexpr int NT = BN / 8;             // n-tiles of S = Q K^T
  static constexpr int KQ = D / 16;             // k-steps of Q K^T
  static constexpr int DT = D / 8;              // n-tiles of O
  static constexpr int KP = BN / 16;            // k-steps of P V
  static constexpr int kChunks = D / 8;         // 16-byte chunks per smem row
  static constexpr int kRowBytes = D * 2;
  static constexpr int kQBytes = BM * kRowBytes;
  static constexpr int kKVBytes = BN * kRowBytes;
  static constexpr int kSmemBytes = kQBytes + 4 * kKVBytes;
  static constexpr int kAccRegs = MT * (DT + NT) * 4;
  // Keeping Q's A-fragments resident saves one ldmatrix per mma pair, but only pays while
  // O + S + Q stay well under the 255-register ceiling; otherwise Q is re-read from smem.
  static constexpr bool kQInRegs = kAccRegs + MT * KQ * 4 <= 160;

  static_assert(sizeof(Elem) == 2, "Elem must be a 16-bit type (bf16_t or f16_t)");
  static_assert(D == 64 || D == 128 || D == 256, "D must be 64, 128 or 256");
  static_assert(BM % NWARPS == 0 && (kRowsPerWarp == 16 || kRowsPerWarp == 32),
                "each warp must own 16 or 32 query rows (BM / NWARPS)");
  static_assert(BN == 32 || BN == 64 || BN == 128, "BN must be 32, 64 or 128");
  static_assert((BN * kChunks) % kThreads == 0 && (BM * kChunks) % kThreads == 0,
                "tile loads must divide evenly among the threads");
  static_assert(kAccRegs <= 192 && (MT == 1 || BN <= 64),
                "O and S accumulators would not fit in registers (32 rows per warp needs BN <= 64)");
  static_assert(kSmemBytes <= 227 * 1024, "tile does not fit in shared memory");
};

// ---- PTX wrappers -----------------------------------------------------------------------

KDSL_DEVICE void ldsm_x4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
KDSL_DEVICE void ldsm_x4_t(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}

KDSL_DEVICE void st_shared_u32(u32 addr, u32 v) {
  asm volatile("st.shared.u32 [%0], %1;\n" :: "r"(addr), "r"(v) : "memory");
}
KDSL_DEVICE void copy16_shared_to_global(void* dst, u32 src) {
  u32 x, y, z, w;
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(x), "=r"(y), "=r"(z), "=r"(w) : "r"(src) : "memory");
  asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};\n"
               :: "l"(dst), "r"(x), "r"(y), "r"(z), "r"(w) : "memory");
}

KDSL_DEVICE int min_i(int x, int y) { return x < y ? x : y; }
// Re-reading the block index (volatile, so it is not CSE'd with the kernel-entry read) lets
// the epilogue rebuild its output offsets instead of keeping them live across the kv loop.
KDSL_DEVICE u32 ctaid_x() { u32 r; asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(r)); return r; }
KDSL_DEVICE u32 ctaid_y() { u32 r; asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(r)); return r; }
KDSL_DEVICE u32 ctaid_z() { u32 r; asm volatile("mov.u32 %0, %%ctaid.z;" : "=r"(r)); return r; }

template <class Elem> struct Mma;
template <> struct Mma<bf16_t> {
  static KDSL_DEVICE void run(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static KDSL_DEVICE u32 pack(float lo, float hi) { return pack_bf16x2(lo, hi); }
};
template <> struct Mma<f16_t> {
  static KDSL_DEVICE void run(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static KDSL_DEVICE u32 pack(float lo, float hi) { return pack_f16x2(lo, hi); }
};

// Shared-memory tiles are row-major with the 16-byte chunk index XORed by (row & 7):
// the 8 row addresses of one ldmatrix 8x8 matrix (same logical chunk, 8 consecutive rows)
// then hit 8 distinct chunk slots = all 32 banks, for both the cp.async writes and the
// ldmatrix / transposed-ldmatrix reads, with no padding.
template <int kRowBytes>
KDSL_DEVICE u32 swz(int row, int chunk) {
  return (u32)(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}

// Copies rows [0, ROWS) of a [rows, D] global tile into swizzled smem; rows >= rows_valid
// are zero-filled and their source address is clamped to row 0 (never read, but kept valid).
// Thread t copies chunk t % kChunks of rows t / kChunks + i * kRowStep. When kRowStep is a
// multiple of 8 the swizzle term is the same in every pass, so all passes are one base
// address plus immediates: hoisting per-pass addresses out of the kv loop would otherwise
// pin ~24 registers for the whole kernel.
template <class Elem, int D, int ROWS, int THREADS>
KDSL_DEVICE void load_tile_async(u32 dst, const Elem* src, int rows_valid, int tid) {
  constexpr int kChunks = D / 8;
  constexpr int kRowStep = THREADS / kChunks;
  constexpr int kIters = ROWS / kRowStep;
  static_assert(THREADS % kChunks == 0 && ROWS % kRowStep == 0, "uneven tile load");
  const int r0 = tid / kChunks, c = tid % kChunks;
  if constexpr (kRowStep % 8 == 0) {
    const u32 d0 = dst + swz<D * 2>(r0, c);
    const Elem* s0 = src + r0 * D + c * 8;
    if (rows_valid >= ROWS) {
#pragma unroll
      for (int i = 0; i < kIters; ++i)
        cp_async16(d0 + i * kRowStep * D * 2, s0 + i * kRowStep * D, 16u);
    } else {
#pragma unroll
      for (int i = 0; i < kIters; ++i) {
        const bool ok = r0 + i * kRowStep < rows_valid;
        cp_async16(d0 + i * kRowStep * D * 2, ok ? s0 + i * kRowStep * D : src, ok ? 16u : 0u);
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      const int r = r0 + i * kRowStep;
      const bool ok = r < rows_valid;
      cp_async16(dst + swz<D * 2>(r, c), src + (ok ? r * D + c * 8 : 0), ok ? 16u : 0u);
    }
  }
}

}  // namespace attn_mma_detail

template <class Elem, int D, int BM, int BN, int NWARPS>
__host__ __device__ constexpr int attention_smem_bytes() {
  return attn_mma_detail::Cfg<Elem, D, BM, BN, NWARPS>::kSmemBytes;
}

template <class Elem, int D, int BM, int BN, int NWARPS, class V>
KDSL_DEVICE void attention_fwd(const AttnArgs& a, const typename V::Captures& cap) {
  using namespace attn_mma_detail;
  typedef Cfg<Elem, D, BM, BN, NWARPS> C;
  constexpr int MT = C::MT, NT = C::NT, KQ = C::KQ, DT = C::DT, KP = C::KP;
  constexpr int RB = C::kRowBytes;
  extern __shared__ __align__(128) u8 kdsl_attn_smem[];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, tig = lane & 3;  // mma fragment: row group, column pair
  const int b = blockIdx.z, h = blockIdx.y;
  const int M = a.M, N = a.N;
  const int q0 = blockIdx.x * BM;
  const int q1 = min_i(q0 + BM, M) - 1;
  const int hkv = h / (a.H / a.Hkv);

  const Elem* gq = static_cast<const Elem*>(a.q) + ((i64)(b * a.H + h) * M + q0) * D;
  const Elem* gk = static_cast<const Elem*>(a.k) + (i64)(b * a.Hkv + hkv) * N * D;
  const Elem* gv = static_cast<const Elem*>(a.v) + (i64)(b * a.Hkv + hkv) * N * D;

  const u32 sQ = smem_addr(kdsl_attn_smem);
  const u32 sK = sQ + C::kQBytes;             // two K buffers, then two V buffers
  const u32 sV = sK + 2 * C::kKVBytes;

  // Every ldmatrix row address has row & 7 == lane & 7 (tiles start at multiples of 8 rows),
  // so each lane's swizzled address for chunk pair 2i (i < 4) is its address for pair 0 with
  // bits 5-6 XORed by i; higher pairs add 128 bytes per 4. All tile bases are 128-byte
  // aligned, so bits 4-6 of a lane address are the swizzle bits alone. A-operand (Q) and
  // transposed-V loads take matrices 2,3 from chunk+1 (lane >> 4); K loads take matrices 1,3
  // from chunk+1 ((lane >> 3) & 1) and matrices 2,3 from rows +8.
  const u32 q_lane = sQ + (u32)((warp * C::kRowsPerWarp + (lane & 15)) * RB) +
                     (u32)(((lane >> 4) ^ (lane & 7)) << 4);
  const u32 k_lane = sK + (u32)(((lane & 7) + ((lane >> 4) << 3)) * RB) +
                     (u32)((((lane >> 3) & 1) ^ (lane & 7)) << 4);
  const u32 v_lane = sV + (u32)((lane & 15) * RB) + (u32)(((lane >> 4) ^ (lane & 7)) << 4);
#define KDSL_ATTN_CHUNK_PAIR(base, i) (((base) ^ (u32)(((i) & 3) << 5)) + (u32)(((i) >> 2) * 128))

  // First query row of this thread's accumulator elements (others: +8, +16, +24). Rows are
  // clamped to M-1 before reaching the Variant so it never indexes captured per-query data
  // past the end (results for rows >= M are discarded anyway).
  const int qrow0 = q0 + warp * C::kRowsPerWarp + g;

  // Range of kv tiles that are not provably empty; with no mask, all of them.
  const int n_tiles = (N + BN - 1) / BN;
  int first = 0, last = n_tiles - 1;
  if constexpr (V::kHasMask) {
    first = n_tiles;
    last = -1;
    for (int j = 0; j < n_tiles; ++j) {
      const int k0 = j * BN;
      if (V::tile(a, cap, b, h, q0, q1, k0, min_i(k0 + BN, N) - 1) != kTileEmpty) {
        if (first == n_tiles) first = j;
        last = j;
      }
    }
  }

  float o[MT][DT][4];
  float m_run[MT][2], l_run[MT][2];  // l_run: this thread's partial row sum (quad-reduced at end)
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][dt][e] = 0.f;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      m_run[mt][hh] = neg_inf();
      l_run[mt][hh] = 0.f;
    }
  }

  if (first <= last) {
    // Group order: {Q, K[first]}, {V[first]}, then per tile {K[next]}, {V[next]} — always
    // committed (possibly empty) so that wait_group<1> means "all but the newest landed".
    load_tile_async<Elem, D, BM, C::kThreads>(sQ, gq, M - q0, tid);
    load_tile_async<Elem, D, BN, C::kThreads>(sK, gk + (i64)first * BN * D, N - first * BN, tid);
    cp_async_commit();
    load_tile_async<Elem, D, BN, C::kThreads>(sV, gv + (i64)first * BN * D, N - first * BN, tid);
    cp_async_commit();

    u32 qf[C::kQInRegs ? MT : 1][C::kQInRegs ? KQ : 1][4];
    int j = first, buf = 0;
    bool q_loaded = false;
    while (true) {
      const int k0 = j * BN;
      int cls = kTileFull;
      int nxt = j + 1;
      if constexpr (V::kHasMask) {
        cls = V::tile(a, cap, b, h, q0, q1, k0, min_i(k0 + BN, N) - 1);
        while (nxt <= last &&
               V::tile(a, cap, b, h, q0, q1, nxt * BN, min_i(nxt * BN + BN, N) - 1) == kTileEmpty)
          ++nxt;
      }
      const bool has_next = nxt <= last;

      cp_async_wait<1>();
      __syncthreads();  // K[j] (and Q) visible to all warps; K[buf^1] no longer read by anyone
      if (has_next)
        load_tile_async<Elem, D, BN, C::kThreads>(sK + (buf ^ 1) * C::kKVBytes,
                                                  gk + (i64)nxt * BN * D, N - nxt * BN, tid);
      cp_async_commit();

      if constexpr (C::kQInRegs) {
        if (!q_loaded) {
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int ks = 0; ks < KQ; ++ks)
              ldsm_x4(KDSL_ATTN_CHUNK_PAIR(q_lane, ks) + mt * 16 * RB,
                      qf[mt][ks][0], qf[mt][ks][1], qf[mt][ks][2], qf[mt][ks][3]);
          q_loaded = true;
        }
      }

      // Per-element keep bits for tiles needing a mask or the kv < N bound, evaluated before
      // the S accumulators are live so that an expensive mask() does not compete with them
      // for registers. Bit (mt * NT + nt) * 4 + e of the accumulator element s[mt][nt][e].
      const bool partial = V::kHasMask && cls == kTilePartial;
      const bool general = partial || k0 + BN > N;
      constexpr int kKeepWords = (MT * NT * 4 + 31) / 32;
      u32 keep[kKeepWords];
      if (general) {
#pragma unroll
        for (int w = 0; w < kKeepWords; ++w) keep[w] = 0u;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int kv = k0 + nt * 8 + 2 * tig + (e & 1);
              bool ok = kv < N;
              if constexpr (V::kHasMask) {
                if (partial)
                  ok = ok & V::mask(a, cap, b, h, min_i(qrow0 + mt * 16 + (e >> 1) * 8, M - 1),
                                    min_i(kv, N - 1));
              }
              const int bit = (mt * NT + nt) * 4 + e;
              keep[bit / 32] |= (ok ? 1u : 0u) << (bit % 32);
            }
      }

      // ---- S = Q K^T (raw fp32 dot products) ----
      float s[MT][NT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;

      const u32 kbase = k_lane + buf * C::kKVBytes;
#pragma unroll
      for (int ks = 0; ks < KQ; ++ks) {
        u32 qa[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          if constexpr (C::kQInRegs) {
#pragma unroll
            for (int e = 0; e < 4; ++e) qa[mt][e] = qf[mt][ks][e];
          } else {
            ldsm_x4(KDSL_ATTN_CHUNK_PAIR(q_lane, ks) + mt * 16 * RB,
                    qa[mt][0], qa[mt][1], qa[mt][2], qa[mt][3]);
          }
        }
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
          u32 b0, b1, b2, b3;  // b0,b1: n-tile 2np; b2,b3: n-tile 2np+1
          ldsm_x4(KDSL_ATTN_CHUNK_PAIR(kbase, ks) + np * 16 * RB, b0, b1, b2, b3);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            Mma<Elem>::run(s[mt][2 * np], qa[mt], b0, b1);
            Mma<Elem>::run(s[mt][2 * np + 1], qa[mt], b2, b3);
          }
        }
      }

      // ---- scores: Variant::score, then -inf where a keep bit is clear ----
      if (general) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int bit = (mt * NT + nt) * 4 + e;
              const float x = V::score(a, cap, s[mt][nt][e], b, h,
                                       min_i(qrow0 + mt * 16 + (e >> 1) * 8, M - 1),
                                       min_i(k0 + nt * 8 + 2 * tig + (e & 1), N - 1),
                                       (float)(qrow0 + mt * 16 + (e >> 1) * 8), (float)(k0 + 2 * tig),
                                       (float)(qrow0 + mt * 16 + (e >> 1) * 8) - (float)(k0 + 2 * tig),
                                       (float)(nt * 8 + (e & 1)));
              s[mt][nt][e] = (keep[bit / 32] >> (bit % 32)) & 1u ? x : neg_inf();
            }
      } else {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
              s[mt][nt][e] = V::score(a, cap, s[mt][nt][e], b, h,
                                      min_i(qrow0 + mt * 16 + (e >> 1) * 8, M - 1),
                                      k0 + nt * 8 + 2 * tig + (e & 1),
                                      (float)(qrow0 + mt * 16 + (e >> 1) * 8), (float)(k0 + 2 * tig),
                                      (float)(qrow0 + mt * 16 + (e >> 1) * 8) - (float)(k0 + 2 * tig),
                                      (float)(nt * 8 + (e & 1)));
      }

      // ---- online softmax (log2 domain) ----
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          float mx = m_run[mt][hh];
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
            mx = fmax2(mx, fmax2(s[mt][nt][2 * hh], s[mt][nt][2 * hh + 1]));
          mx = quad_max(mx);
          // A row with no finite score so far keeps max = -inf; exponentiate against 0
          // instead so that -inf - (-inf) never produces NaN (every p and alpha is then 0).
          const float ref = mx == neg_inf() ? 0.f : mx;
          const float alpha = exp2_approx(m_run[mt][hh] - ref);
          m_run[mt][hh] = mx;
          float sum = 0.f;
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            const float p0 = exp2_approx(s[mt][nt][2 * hh] - ref);
            const float p1 = exp2_approx(s[mt][nt][2 * hh + 1] - ref);
            s[mt][nt][2 * hh] = p0;
            s[mt][nt][2 * hh + 1] = p1;
            sum += p0 + p1;
          }
          l_run[mt][hh] = l_run[mt][hh] * alpha + sum;
#pragma unroll
          for (int dt = 0; dt < DT; ++dt) {
            o[mt][dt][2 * hh] *= alpha;
            o[mt][dt][2 * hh + 1] *= alpha;
          }
        }

      // P stays in registers: the m16n8 accumulator layout of two adjacent n-tiles is exactly
      // the m16k16 A-fragment layout, so packing pairs gives P's operand with no shuffles.
      u32 pa[MT][KP][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int kp = 0; kp < KP; ++kp) {
          pa[mt][kp][0] = Mma<Elem>::pack(s[mt][2 * kp][0], s[mt][2 * kp][1]);
          pa[mt][kp][1] = Mma<Elem>::pack(s[mt][2 * kp][2], s[mt][2 * kp][3]);
          pa[mt][kp][2] = Mma<Elem>::pack(s[mt][2 * kp + 1][0], s[mt][2 * kp + 1][1]);
          pa[mt][kp][3] = Mma<Elem>::pack(s[mt][2 * kp + 1][2], s[mt][2 * kp + 1][3]);
        }

      cp_async_wait<1>();
      __syncthreads();  // V[j] visible; V[buf^1] no longer read by anyone
      if (has_next)
        load_tile_async<Elem, D, BN, C::kThreads>(sV + (buf ^ 1) * C::kKVBytes,
                                                  gv + (i64)nxt * BN * D, N - nxt * BN, tid);
      cp_async_commit();

      // ---- O += P V ----  (V is [kv][d] in smem; ldmatrix.trans yields the k-major B operand)
      const u32 vbase = v_lane + buf * C::kKVBytes;
#pragma unroll
      for (int kp = 0; kp < KP; ++kp)
#pragma unroll
        for (int nd = 0; nd < DT / 2; ++nd) {
          u32 b0, b1, b2, b3;  // b0,b1: d-tile 2nd; b2,b3: d-tile 2nd+1
          ldsm_x4_t(KDSL_ATTN_CHUNK_PAIR(vbase, nd) + kp * 16 * RB, b0, b1, b2, b3);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            Mma<Elem>::run(o[mt][2 * nd], pa[mt][kp], b0, b1);
            Mma<Elem>::run(o[mt][2 * nd + 1], pa[mt][kp], b2, b3);
          }
        }

      if (!has_next) break;
      j = nxt;
      buf ^= 1;
    }
  }

  // ---- epilogue: normalise, stage the warp's rows in its own slice of the Q tile (only
  // this warp ever read those rows), then write whole 16-byte chunks to global ----
  __syncwarp();
  const int qe0 = (int)ctaid_x() * BM;
  const int orow0 = ((int)ctaid_z() * a.H + (int)ctaid_y()) * M + qe0;
  const int wrow0 = warp * C::kRowsPerWarp;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float l = quad_sum(l_run[mt][hh]);
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const int r = wrow0 + mt * 16 + g + 8 * hh;
#pragma unroll
      for (int dt = 0; dt < DT; ++dt)
        st_shared_u32(sQ + swz<RB>(r, dt) + tig * 4,
                      Mma<Elem>::pack(o[mt][dt][2 * hh] * inv, o[mt][dt][2 * hh + 1] * inv));
      if (a.lse != nullptr && tig == 0 && qe0 + r < M) {
        const float lse = l > 0.f ? (m_run[mt][hh] + lg2_approx(l)) * 0.69314718055994531f
                                  : neg_inf();
        a.lse[orow0 + r] = lse;
      }
    }
  __syncwarp();
  Elem* go = static_cast<Elem*>(a.o) + (i64)orow0 * D;
  constexpr int kOutIters = C::kRowsPerWarp * C::kChunks / 32;
#pragma unroll
  for (int i = 0; i < kOutIters; ++i) {
    const int id = lane + i * 32;
    const int r = wrow0 + id / C::kChunks, c = id % C::kChunks;
    if (qe0 + r < M) copy16_shared_to_global(go + (i64)r * D + c * 8, sQ + swz<RB>(r, c));
  }
}

#undef KDSL_ATTN_CHUNK_PAIR

}  // namespace kdsl
