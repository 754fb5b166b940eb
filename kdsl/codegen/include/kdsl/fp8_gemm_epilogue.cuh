// kdsl/fp8_gemm_epilogue.cuh — writing a unit's promoted fp32 totals to `out` (bf16 or f32;
// with ACCUM, out += totals). Run by each math warpgroup on its own rows, with no barrier
// across warpgroups.
//
// TMA path (a tile whose existing rows may all be written): the warpgroup stages its rows in
// its own rows of a BM x BN shared tile, laid out as column blocks of SW bytes a row in the
// SW-byte TMA swizzle (conflict-free for the fragment layout), and one thread issues a
// store (or a reduce-add) per 64-row x SW-byte box. The store runs while the next unit's
// K loop does; the tile is rewritten only after that thread saw the previous stores finish
// reading it. Row-by-row path (tiles holding rows to leave untouched, or an out whose row
// pitch TMA cannot describe): each thread writes its fragment with predicated stores.
#pragma once
#include "kdsl/fp8_gemm_sched.cuh"

namespace kdsl {

namespace fp8_detail {

template <bool F32> struct OutType { typedef bf16_t type; };
template <> struct OutType<true> { typedef float type; };

// Two adjacent columns (c, c + 1) of one row; `second` says whether c + 1 exists and
// `pair` whether both may go as one aligned store.
template <bool ACCUM>
KDSL_DEVICE void store_pair(float* p, float x, float y, bool pair, bool second) {
  if (pair) {
    if (ACCUM) {
      float ox, oy;
      asm volatile("ld.global.v2.f32 {%0, %1}, [%2];\n" : "=f"(ox), "=f"(oy) : "l"(p) : "memory");
      x += ox;
      y += oy;
    }
    asm volatile("st.global.v2.f32 [%0], {%1, %2};\n" :: "l"(p), "f"(x), "f"(y) : "memory");
  } else {
    p[0] = ACCUM ? p[0] + x : x;
    if (second) p[1] = ACCUM ? p[1] + y : y;
  }
}
template <bool ACCUM>
KDSL_DEVICE void store_pair(bf16_t* p, float x, float y, bool pair, bool second) {
  const u32 v = pack_bf16x2(x, y);  // ACCUM is f32-only (type checker)
  if (pair) {
    *reinterpret_cast<u32*>(p) = v;
  } else {
    p[0].bits = (u16)(v & 0xFFFF);
    if (second) p[1].bits = (u16)(v >> 16);
  }
}

}  // namespace fp8_detail

template <class C>
struct Fp8Epilogue {
  static constexpr int BM = C::BM, BN = C::BN, kWaves = C::kWaves, kFrag = C::kFrag;
  static constexpr int kElem = C::kOutBytes, kSw = C::kSwD;
  typedef typename fp8_detail::OutType<C::OUT_F32>::type out_t;

  const Fp8GemmArgs& p;
  const TmaDesc* td;
  u32 d_tile;          // shared address of the staging tile (1024-byte aligned)
  int wg, warp, lane;  // math warpgroup, warp in it, lane

  // First row of wave v of this warpgroup within the tile (each wave is 64 rows per warpgroup).
  KDSL_DEVICE int wave_row(int v) const { return v * 128 + wg * 64; }

  KDSL_DEVICE void store(const Fp8Unit& u, const float (&total)[kWaves][kFrag]) const {
    if (C::TMA_STORE && u.full) {
      store_tma(u, total);
    } else {
      store_rows(u, total);
      // The warps of a warpgroup meet once per unit on both paths. Without this the
      // row-by-row kernels had no named barrier at all: their cubins declared one hardware
      // barrier (EIATTR_NUM_BARRIERS 1, the TMA-store kernels 16), and every such kernel
      // raised "illegal instruction" on the H100 while the TMA-store ones ran clean.
      named_barrier(1 + wg, 128);
    }
  }

  KDSL_DEVICE void store_tma(const Fp8Unit& u, const float (&total)[kWaves][kFrag]) const {
    const bool leader = warp == 0 && lane == 0;
    if (leader) bulk_wait_read<0>();  // the previous unit's stores have read the tile
    named_barrier(1 + wg, 128);
#pragma unroll
    for (int v = 0; v < kWaves; ++v) {
#pragma unroll
      for (int j = 0; j < kFrag / 4; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = wave_row(v) + warp * 16 + (lane >> 2) + 8 * h;
          const int byte = (8 * j + 2 * (lane & 3)) * kElem;  // column byte in the tile row
          u32 off = (u32)((byte / kSw) * BM * kSw + row * kSw + byte % kSw);
          off ^= ((off >> 7) & (kSw / 16 - 1)) << 4;  // TMA's swizzle: 16-byte chunk ^= 128-byte line
          const float x = total[v][4 * j + 2 * h], y = total[v][4 * j + 2 * h + 1];
          if (C::OUT_F32) {
            asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" :: "r"(d_tile + off), "f"(x), "f"(y) : "memory");
          } else {
            asm volatile("st.shared.u32 [%0], %1;\n" :: "r"(d_tile + off), "r"(pack_bf16x2(x, y)) : "memory");
          }
        }
      }
    }
    fence_proxy_async();  // the TMA engine reads what these generic stores wrote
    named_barrier(1 + wg, 128);
    if (leader) {
      const int g = C::KIND == 2 ? u.g : 0;
#pragma unroll
      for (int v = 0; v < kWaves; ++v) {
#pragma unroll
        for (int cb = 0; cb < BN * kElem / kSw; ++cb) {
          const u32 src = d_tile + (u32)(cb * BM * kSw + wave_row(v) * kSw);
          const int c0 = u.n0 + cb * (kSw / kElem), c1 = u.m0 + wave_row(v);
          if (C::ACCUM) {
            tma_reduce_add_3d(td, src, c0, c1, g);
          } else {
            tma_store_3d(td, src, c0, c1, g);
          }
        }
      }
      bulk_commit();
    }
  }

  KDSL_DEVICE void store_rows(const Fp8Unit& u, const float (&total)[kWaves][kFrag]) const {
    out_t* out = static_cast<out_t*>(p.out) + (C::KIND == 2 ? (i64)u.g * p.M * p.N : (i64)0);
    const int m_end = C::KIND == 2 ? fp8_detail::masked_rows(p, u.g) : p.M;
    const bool even_n = (p.N & 1) == 0;
    const int c_base = u.n0 + 2 * (lane & 3);
#pragma unroll
    for (int v = 0; v < kWaves; ++v) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = u.m0 + wave_row(v) + warp * 16 + (lane >> 2) + 8 * h;
        bool row_ok = r < m_end;
        if (C::KIND == 1) row_ok = row_ok && __ldg(p.group + r) == u.g;  // other groups' rows, padding
        if (!row_ok) continue;
        out_t* orow = out + (i64)r * p.N;
#pragma unroll
        for (int j = 0; j < kFrag / 4; ++j) {
          const int c = c_base + 8 * j;
          if (c < p.N)
            fp8_detail::store_pair<C::ACCUM>(orow + c, total[v][4 * j + 2 * h], total[v][4 * j + 2 * h + 1],
                                             even_n, c + 1 < p.N);
        }
      }
    }
  }

  // Before the CTA exits: its last TMA stores have finished with the staging tile.
  KDSL_DEVICE void finish() const {
    if (C::TMA_STORE && warp == 0 && lane == 0) bulk_wait<0>();
  }
};

}  // namespace kdsl
