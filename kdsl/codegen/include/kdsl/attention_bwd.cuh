// kdsl/attention_bwd.cuh — attention backward on mma.sync tensor cores (sm_80 .. sm_90a).
//
// FlashAttention-2's backward, for any kdsl score and mask: each CTA owns BN = 64 keys of
// one (batch, k/v head), keeps their dK and dV in registers, and walks every query tile of
// every query head that reads them (GQA: H / Hkv heads), recomputing
//   S = Q K^T,  P = exp(g(scale S) - lse),  dP = dO V^T,
//   dS = P (dP - delta) g'(scale S) scale,  delta = rowsum(dO * O)  (the host computes it),
// then dV += P^T dO, dK += dS^T Q, and dQ += dS K by fp32 atomics into dq_acc [B, H, M, D],
// which the host zeroes before and converts after. g is the program's score (Grad::score, in
// natural units) and g' its derivative in s (passes/score_grad.py, Grad::dscore); lse is the
// forward's natural-log logsumexp (-inf on rows that see no key: P = 0 there).
// Tiles V::tile() calls empty are skipped; partial ones evaluate V::mask() per element (so do
// all tiles of a mask whose tile class needs the runtime tile summary, which this kernel
// does not build). Operands go through shared memory in 128-byte-swizzled rows, padded to a
// multiple of 64 columns (zero-filled: padding adds nothing to any product).
//
// Launch contract (the generated extern "C" kernel forwards to attention_bwd):
//   grid  = ceil(N / 64) * Hkv * B * splits CTAs (attention_common.cuh, backward_block)
//   block = attention_bwd_threads<D, DV>()
//   dynamic shared memory = attention_bwd_smem_bytes<D, DV>()
// Warps: 4 row groups of 16 (query rows for S, dP and dQ; key rows for dK and dV) times 1 or
// 2 column slices (2 once a padded head dim exceeds 64, halving each warp's accumulators).
// Not yet Hopper-native (no wgmma, TMA or pipelining): correct first, fast later.
#pragma once

#include "kdsl/async_copy.cuh"
#include "kdsl/attention_common.cuh"
#include "kdsl/attention_mma.cuh"

#ifndef KDSL_BWD_BUFFERS  // 1: Q, dO, lse and delta single-buffered, for targets whose shared memory
#define KDSL_BWD_BUFFERS 2  // cannot hold two (sm_89 from head dim 128, sm_80 at 256: emit.backward_buffers)
#endif
#ifndef KDSL_BWD_MIN_BLOCKS  // > 0: CTAs per SM to fit registers for instead of BwdCfg's choice (an A/B switch)
#define KDSL_BWD_MIN_BLOCKS 0
#endif

namespace kdsl {

namespace attn_bwd_detail {

template <int D, int DV>
struct BwdCfg {
  static constexpr int BM = 64, BN = 64;  // query rows per step, keys per CTA
  static constexpr int DP = (D + 63) / 64 * 64, DVP = (DV + 63) / 64 * 64;  // padded head dims
  static constexpr int CS = 2;                                                // column slices
  static constexpr int kWarps = 4 * CS, kThreads = 32 * kWarps;
  // CTAs an SM should hold (__launch_bounds__' second argument, so a register cap): two up to
  // head dims 128, so that one CTA's loads overlap the other's math
  static constexpr int kMinBlocks = KDSL_BWD_MIN_BLOCKS > 0 ? KDSL_BWD_MIN_BLOCKS : DP + DVP > 256 ? 1 : 2;
  // Q, dO, lse and delta come in NB buffers (two: one step's tiles land while the last one's
  // are read); K, V, P and dS in one.
  static constexpr int NB = KDSL_BWD_BUFFERS;
  static constexpr int kQBuf = BM * DP * 2, kDOBuf = BM * DVP * 2;
  static constexpr int kQ = 0, kDO = kQ + NB * kQBuf, kK = kDO + NB * kDOBuf, kV = kK + BN * DP * 2;
  static constexpr int kP = kV + BN * DVP * 2, kDS = kP + BM * BN * 2, kLse = kDS + BM * BN * 2;
  static constexpr int kDelta = kLse + NB * BM * 4, kSmemBytes = kDelta + NB * BM * 4;
  static_assert(NB == 1 || NB == 2, "KDSL_BWD_BUFFERS: 1 or 2");
  static_assert(D % 16 == 0 && DV % 16 == 0 && DP <= 256 && DVP <= 256, "head dims: multiples of 16 up to 256");
};

// Rows [0, ROWS) of a row-major [rows, COLS] global matrix into swizzled shared rows of WIDTH
// columns: rows >= rows_valid and columns >= COLS land as zeros.
template <class Elem, int COLS, int WIDTH, int ROWS, int THREADS>
KDSL_DEVICE void load_rows(u32 dst, const Elem* src, int rows_valid, int tid) {
  constexpr int kChunks = WIDTH / 8;
#pragma unroll 4
  for (int i = tid; i < ROWS * kChunks; i += THREADS) {
    const int r = i / kChunks, ch = i % kChunks;
    const bool ok = r < rows_valid && ch * 8 < COLS;
    cp_async16(dst + attn_mma_detail::swz<WIDTH * 2>(r, ch), ok ? src + (i64)r * COLS + ch * 8 : src, ok ? 16u : 0u);
  }
}

// 4-byte global -> shared copy; src_bytes = 0 zero-fills without reading
KDSL_DEVICE void cp_async4(u32 dst, const void* src, u32 src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

// ldmatrix addresses of one lane (row-major tiles of WIDTH columns, swizzled):
// the A fragment of rows r0..r0+15, k columns 8 kc..8 kc+15
template <int WIDTH>
KDSL_DEVICE u32 a_frag_addr(u32 base, int r0, int kc, int lane) {
  return base + attn_mma_detail::swz<WIDTH * 2>(r0 + (lane & 7) + 8 * ((lane >> 3) & 1), kc + (lane >> 4));
}
// B fragments of two n-tiles (rows n0..n0+15 of a [n][k] tile), k columns 8 kc..8 kc+15
template <int WIDTH>
KDSL_DEVICE u32 b_frag_addr(u32 base, int n0, int kc, int lane) {
  return base + attn_mma_detail::swz<WIDTH * 2>(n0 + (lane & 7) + 8 * (lane >> 4), kc + ((lane >> 3) & 1));
}
// B fragments (transposed load) of two n-tiles, chunks nc and nc + 1, of a [k][n] tile's rows
// k0..k0+15; the same address gives the A fragment of a transposed [k][m] tile, with m
// chunks mc, mc + 1 in place of n, by b_t / a_t below
template <int WIDTH>
KDSL_DEVICE u32 bt_frag_addr(u32 base, int k0, int nc, int lane) {
  return base + attn_mma_detail::swz<WIDTH * 2>(k0 + (lane & 7) + 8 * ((lane >> 3) & 1), nc + (lane >> 4));
}
template <int WIDTH>
KDSL_DEVICE u32 at_frag_addr(u32 base, int k0, int mc, int lane) {
  return base + attn_mma_detail::swz<WIDTH * 2>(k0 + (lane & 7) + 8 * (lane >> 4), mc + ((lane >> 3) & 1));
}

// acc[j] += A(rows r0.., k = 0..K) * B(n-tile j) over NT n-tiles from a [n][k] tile (n0 first)
template <class Elem, int K, int WA, int WB, int NT>
KDSL_DEVICE void mma_abt(float (&acc)[NT][4], u32 sa, int r0, u32 sb, int n0, int lane) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    u32 af[4];
    attn_mma_detail::ldsm_x4(a_frag_addr<WA>(sa, r0, 2 * kk, lane), af[0], af[1], af[2], af[3]);
#pragma unroll
    for (int j = 0; j < NT; j += 2) {
      u32 b0, b1, b2, b3;
      attn_mma_detail::ldsm_x4(b_frag_addr<WB>(sb, n0 + 8 * j, 2 * kk, lane), b0, b1, b2, b3);
      attn_mma_detail::Mma<Elem>::run(acc[j], af, b0, b1);
      attn_mma_detail::Mma<Elem>::run(acc[j + 1], af, b2, b3);
    }
  }
}

// acc[j] += A^T(rows m0.. of A^T, k = 0..K) * B(n-tile j), A stored [k][m] (width WA),
// B stored [k][n] (width WB) from column c0
template <class Elem, int K, int WA, int WB, int NT>
KDSL_DEVICE void mma_atb(float (&acc)[NT][4], u32 sa, int m0, u32 sb, int c0, int lane) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    u32 af[4];
    attn_mma_detail::ldsm_x4_t(at_frag_addr<WA>(sa, 16 * kk, m0 / 8, lane), af[0], af[1], af[2], af[3]);
#pragma unroll
    for (int j = 0; j < NT; j += 2) {
      u32 b0, b1, b2, b3;
      attn_mma_detail::ldsm_x4_t(bt_frag_addr<WB>(sb, 16 * kk, c0 / 8 + j, lane), b0, b1, b2, b3);
      attn_mma_detail::Mma<Elem>::run(acc[j], af, b0, b1);
      attn_mma_detail::Mma<Elem>::run(acc[j + 1], af, b2, b3);
    }
  }
}

}  // namespace attn_bwd_detail

template <int D, int DV, class V = void>  // (V: the wgmma kernel's streamed tiles; none here)
__host__ __device__ constexpr int attention_bwd_smem_bytes() { return attn_bwd_detail::BwdCfg<D, DV>::kSmemBytes; }
template <int D, int DV>
__host__ __device__ constexpr int attention_bwd_threads() { return attn_bwd_detail::BwdCfg<D, DV>::kThreads; }
template <int D, int DV>
__host__ __device__ constexpr int attention_bwd_min_blocks() { return attn_bwd_detail::BwdCfg<D, DV>::kMinBlocks; }

template <class Elem, int D, int DV, class V, class G>
KDSL_DEVICE void attention_bwd(const AttnArgs& a, const typename V::Captures& c, const Elem* dout, const float* lse,
                               const float* delta, float* dq_acc, Elem* dk, Elem* dv,
                               const typename G::CaptureGrads& cg) {
  using namespace attn_bwd_detail;
  typedef BwdCfg<D, DV> C;
  constexpr int BM = C::BM, BN = C::BN, DP = C::DP, DVP = C::DVP, CS = C::CS, T = C::kThreads;
  constexpr int NT = BN / CS / 8;            // n-tiles of S and dP per warp
  constexpr int KT = DP / CS / 8, VT = DVP / CS / 8;  // n-tiles of dK (and dQ), of dV per warp
  static_assert(NT % 2 == 0 && KT % 2 == 0 && VT % 2 == 0, "fragments go in pairs of n-tiles");
  extern __shared__ __align__(128) u8 kdsl_bwd_smem[];
  const u32 base = smem_addr(kdsl_bwd_smem);
  const u32 sQ = base + C::kQ, sDO = base + C::kDO, sK = base + C::kK, sV = base + C::kV;
  const u32 sP = base + C::kP, sDS = base + C::kDS;
  float* sLse = reinterpret_cast<float*>(kdsl_bwd_smem + C::kLse);
  float* sDelta = reinterpret_cast<float*>(kdsl_bwd_smem + C::kDelta);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int rg = warp & 3, cs = warp >> 2;   // row group, column slice
  const BackwardBlock blk = backward_block<BN>(a);
  const int n0 = blk.n0, hkv = blk.hkv, b = blk.b;
  const int M = a.M, N = a.N, group = blk.heads, h0 = blk.h0;  // the query heads walked
  const float scale = c.scale;

  const i64 kv_head = (i64)b * a.Hkv + hkv;
  load_rows<Elem, D, DP, BN, T>(sK, static_cast<const Elem*>(a.k) + (kv_head * N + n0) * D, N - n0, tid);
  load_rows<Elem, DV, DVP, BN, T>(sV, static_cast<const Elem*>(a.v) + (kv_head * N + n0) * DV, N - n0, tid);
  cp_async_commit();

  float acc_dk[KT][4], acc_dv[VT][4];
#pragma unroll
  for (int j = 0; j < KT; ++j) acc_dk[j][0] = acc_dk[j][1] = acc_dk[j][2] = acc_dk[j][3] = 0.f;
#pragma unroll
  for (int j = 0; j < VT; ++j) acc_dv[j][0] = acc_dv[j][1] = acc_dv[j][2] = acc_dv[j][3] = 0.f;

  // Steps: the query tiles of each query head of the group, empty ones skipped: it = head *
  // m_tiles + tile, from the CTA's first tile (0 unless its query tiles are split, which
  // happens only with one query head a CTA: AttnArgs::query_splits) to its last. Step cur's
  // tiles sit in buffer buf while the next step's land in the other (single-buffered: after
  // this step's last read).
  const QueryTiles range = backward_query_tiles<BM>(a, blk);
  const int m_tiles = range.end, steps = group * m_tiles;
  auto tile_class = [&](int it) -> int {
    return backward_tile_class<V, BM, BN>(a, c, b, h0 + it / m_tiles, it % m_tiles * BM, n0);
  };
  auto next_step = [&](int it) {
    while (it < steps && tile_class(it) == kTileEmpty) ++it;
    return it;
  };
  auto issue = [&](int it, int buf) {
    const int m0 = it % m_tiles * BM;
    const i64 row0 = ((i64)b * a.H + h0 + it / m_tiles) * M + m0;
    load_rows<Elem, D, DP, BM, T>(sQ + buf * C::kQBuf, static_cast<const Elem*>(a.q) + row0 * D, M - m0, tid);
    load_rows<Elem, DV, DVP, BM, T>(sDO + buf * C::kDOBuf, dout + row0 * DV, M - m0, tid);
    for (int i = tid; i < BM; i += T) {  // rows past M: zeros, never read (their q >= M)
      const bool in = m0 + i < M;
      cp_async4(smem_addr(sLse + buf * BM + i), in ? lse + row0 + i : lse, in ? 4u : 0u);
      cp_async4(smem_addr(sDelta + buf * BM + i), in ? delta + row0 + i : delta, in ? 4u : 0u);
    }
    cp_async_commit();
  };
  int cur = next_step(range.first), buf = 0;
  if (cur < steps) issue(cur, 0);
  for (; cur < steps; buf = (buf + 1) % C::NB) {
    const int nxt = next_step(cur + 1);
    cp_async_wait<0>();  // this step's tiles (and, the first time, K and V)
    __syncthreads();     // ... for every thread; and the last step's reads of the other buffer, sP, sDS are done
    if (C::NB == 2 && nxt < steps) issue(nxt, buf ^ 1);
    const int cls = tile_class(cur), h = h0 + cur / m_tiles, m0 = cur % m_tiles * BM;
    const i64 q_head = (i64)b * a.H + h;
    const u32 sQb = sQ + buf * C::kQBuf, sDOb = sDO + buf * C::kDOBuf;
    const float* sLseb = sLse + buf * BM;
    const float* sDeltab = sDelta + buf * BM;
    cur = nxt;
    {
      // S = Q K^T and dP = dO V^T: query rows 16 rg.., keys BN / CS cs..
      float s[NT][4], dp[NT][4];
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[j][e] = dp[j][e] = 0.f;
      const int key0 = cs * (BN / CS);
      mma_abt<Elem, DP, DP, DP, NT>(s, sQb, 16 * rg, sK, key0, lane);
      mma_abt<Elem, DVP, DVP, DVP, NT>(dp, sDOb, 16 * rg, sV, key0, lane);

      // P and dS, elementwise; to shared memory as Elem for the products below
      float ug[G::kUniformGrads > 0 ? G::kUniformGrads : 1] = {};  // step-uniform capture gradients
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int row = 16 * rg + g + 8 * hh, q = m0 + row;
          float pv[2], dsv[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int col = key0 + 8 * j + 2 * t + e, kv = n0 + col;
            bool keep = q < M && kv < N;
            if (V::kHasMask && cls != kTileFull && keep) keep = V::mask(a, c, b, h, q, kv);
            float p = 0.f, ds = 0.f;
            const float row_lse = sLseb[row];
            if (keep && row_lse != neg_inf()) {
              const float sn = s[j][2 * hh + e] * scale;
              p = math_exp(G::score(a, c, sn, b, h, q, kv) - row_lse);
              if (p != 0.f) {
                const float dg = p * (dp[j][2 * hh + e] - sDeltab[row]);  // d loss / d score
                ds = dg * G::dscore(a, c, sn, b, h, q, kv) * scale;
                if constexpr (G::kCaptureGrads) {
                  float o[1];
                  G::add_capture_grads(a, c, cg, sn, b, h, q, kv, dg, ug, o);
                  if constexpr (G::kOffsetGrads > 0) G::add_offset_grad(a, c, cg, b, h, q - kv, o[0]);
                }
              }
            }
            pv[e] = p;
            dsv[e] = ds;
          }
          const u32 off = attn_mma_detail::swz<BN * 2>(row, (key0 + 8 * j) / 8) + 4 * t;
          attn_mma_detail::st_shared_u32(sP + off, attn_mma_detail::Mma<Elem>::pack(pv[0], pv[1]));
          attn_mma_detail::st_shared_u32(sDS + off, attn_mma_detail::Mma<Elem>::pack(dsv[0], dsv[1]));
        }
      if constexpr (G::kCaptureGrads && G::kUniformGrads > 0) G::flush_uniform_grads(a, c, cg, b, h, ug);
      __syncthreads();

      // dV += P^T dO and dK += dS^T Q: key rows 16 rg.., head-dim columns of slice cs
      mma_atb<Elem, BM, BN, DVP, VT>(acc_dv, sP, 16 * rg, sDOb, cs * (DVP / CS), lane);
      mma_atb<Elem, BM, BN, DP, KT>(acc_dk, sDS, 16 * rg, sQb, cs * (DP / CS), lane);

      // dQ += dS K: query rows 16 rg.., head-dim columns of slice cs, two n-tiles at a time
#pragma unroll
      for (int j = 0; j < KT; j += 2) {
        float dq[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
        const int c0 = cs * (DP / CS) + 8 * j;
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
          u32 af[4], b0, b1, b2, b3;
          attn_mma_detail::ldsm_x4(a_frag_addr<BN>(sDS, 16 * rg, 2 * kk, lane), af[0], af[1], af[2], af[3]);
          attn_mma_detail::ldsm_x4_t(bt_frag_addr<DP>(sK, 16 * kk, c0 / 8, lane), b0, b1, b2, b3);
          attn_mma_detail::Mma<Elem>::run(dq[0], af, b0, b1);
          attn_mma_detail::Mma<Elem>::run(dq[1], af, b2, b3);
        }
#pragma unroll
        for (int jj = 0; jj < 2; ++jj)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int q = m0 + 16 * rg + g + 8 * hh, col = c0 + 8 * jj + 2 * t;
            if (q < M && col < D) {
              float* dst = dq_acc + (q_head * M + q) * D + col;
              atomicAdd(dst, dq[jj][2 * hh]);
              atomicAdd(dst + 1, dq[jj][2 * hh + 1]);
            }
          }
      }
    }
    if (C::NB == 1 && nxt < steps) {
      __syncthreads();  // this step's reads of the one buffer are done
      issue(nxt, 0);
    }
  }

  cp_async_wait<0>();  // K and V's copies, when every step was empty

  // dK and dV of this CTA's keys (every query head of the CTA's added in)
  const KvGradStore<Elem> out(a, blk, dk, dv, D, DV);
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int kv = n0 + 16 * rg + g + 8 * hh;
    if (kv >= N) continue;
#pragma unroll
    for (int j = 0; j < KT; ++j) {
      const int col = cs * (DP / CS) + 8 * j + 2 * t;
      if (col < D) out.k_pair((kv_head * N + kv) * D + col, acc_dk[j][2 * hh], acc_dk[j][2 * hh + 1]);
    }
#pragma unroll
    for (int j = 0; j < VT; ++j) {
      const int col = cs * (DVP / CS) + 8 * j + 2 * t;
      if (col < DV) out.v_pair((kv_head * N + kv) * DV + col, acc_dv[j][2 * hh], acc_dv[j][2 * hh + 1]);
    }
  }
}

}  // namespace kdsl
