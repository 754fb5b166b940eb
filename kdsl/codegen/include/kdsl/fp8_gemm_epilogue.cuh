// kdsl/fp8_gemm_epilogue.cuh — writing a unit's promoted fp32 totals to `out` (bf16 or f32;
// with ACCUM, out += totals). Run by each math warpgroup on its own rows, with no barrier
// across warpgroups.
//
// TMA path (a tile whose existing rows may all be written): the warpgroup stages its rows in
// its own rows of a BM x BN shared tile, laid out as column blocks of SW bytes a row in the
// SW-byte TMA swizzle (conflict-free for the fragment layout), and one thread issues a
// store (or a reduce-add) per 64-row x SW-byte box. The store runs while the next unit's
// K loop does; the tile is rewritten only after that thread saw the previous stores finish
// reading it. Staged path (a tile holding rows to leave untouched: a masked group's last
// rows, another group's rows): the same staging, then the warpgroup's threads copy the rows
// that may be written from the tile to `out`, 16 bytes a thread, consecutive threads along a
// row (a TMA box cannot stop at an arbitrary row). Row-by-row path (an out whose row pitch
// TMA cannot describe, hence no staging tile): each thread writes its fragment with
// predicated stores.
#pragma once
#include "kdsl/fp8_gemm_sched.cuh"

// 1 (the kernel): partial tiles go through the staging tile when there is one; 0: row by row
// (the form before 2026-11-25, kept for tools/dev A/B timing).
#ifndef KDSL_FP8_STAGED_PARTIAL
#define KDSL_FP8_STAGED_PARTIAL 1
#endif

// 1 (tools/dev timing only, wrong results): every unit's store is skipped at run time (the
// code stays compiled in, so the totals and the main loop are the kernel's), to time the main
// loop at stage counts the staging tile leaves no room for (with store = "rows"). 0: the kernel.
#ifndef KDSL_FP8_DEV_SKIP_STORE
#define KDSL_FP8_DEV_SKIP_STORE 0
#endif

// 1 (tools/dev timing only, wrong results): full tiles are staged but never stored, to size
// what the TMA stores cost the main loop. 0: the kernel.
#ifndef KDSL_FP8_DEV_SKIP_TMA_STORE
#define KDSL_FP8_DEV_SKIP_TMA_STORE 0
#endif

// 1 (the kernel): bf16 totals are staged with stmatrix, one instruction a 16 x 16 block, four
// times fewer than 32-bit shared stores. H100, in turns with an A/A row (2026-11-27): x1.010
// (4096x24576x1536, 192x128), x1.028 (4096x7168x2048, 256x128), x1.007 (4096x4096x7168),
// x1.007-1.013 (128x7168x2048, 64x112), grouped contiguous flat. 0: st.shared.u32 a bf16 pair.
#ifndef KDSL_FP8_STAGE_STMATRIX
#define KDSL_FP8_STAGE_STMATRIX 1
#endif

// A full tile's TMA stores, issued one box per K block of the warpgroup's next unit (fp8_math)
// instead of all at the tile's end, where they queue in the SM's TMA unit ahead of the next
// unit's first loads (without them, KDSL_FP8_DEV_SKIP_TMA_STORE, 192-row tiles ran 4.6-7 %
// faster at K = 1536-2048). H100, in turns (2026-11-27): 256-row tiles x1.010 (4096x4096x7168)
// and x1.027 (4096x7168x16384), within 0.3 % elsewhere, masked x0.994; one-wave tiles (192, 128
// rows) x0.94-0.98, the leader's store sitting between its only wave's issue and wait.
// 1 (the kernel): 256-row tiles defer; 2: every tile; 0: none.
#ifndef KDSL_FP8_DEFER_STORES
#define KDSL_FP8_DEFER_STORES 1
#endif

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
  // TMA store boxes of a full tile per warpgroup: a box is 64 rows x kSw bytes.
  static constexpr int kColBlocks = BN * kElem / kSw, kBoxes = kWaves * kColBlocks;
  static constexpr bool kStmatrix = KDSL_FP8_STAGE_STMATRIX && !C::OUT_F32;  // (BN % 16 == 0: j pairs)
  static constexpr bool kDeferStores = (KDSL_FP8_DEFER_STORES == 2 || (KDSL_FP8_DEFER_STORES == 1 && kWaves == 2)) &&
                                        C::TMA_STORE && !C::ACCUM && !KDSL_FP8_DEV_SKIP_STORE && !KDSL_FP8_DEV_SKIP_TMA_STORE;
  typedef typename fp8_detail::OutType<C::OUT_F32>::type out_t;

  const Fp8GemmArgs& p;
  const TmaDesc* td;
  u32 d_tile;          // shared address of the staging tile (1024-byte aligned)
  int wg, warp, lane;  // math warpgroup, warp in it, lane

  // First row of wave v of this warpgroup within the tile (each wave is 64 rows per warpgroup).
  KDSL_DEVICE int wave_row(int v) const { return v * 128 + wg * 64; }

  // Writes the unit's totals; a full tile with kDeferStores is only staged, its boxes left to
  // the caller (store_box, one at a time).
  KDSL_DEVICE void store(const Fp8Unit& u, const float (&total)[kWaves][kFrag]) const {
    if (KDSL_FP8_DEV_SKIP_STORE && p.M > 0) return;  // (M > 0 always: not folded away)
    if (C::TMA_STORE && u.full) {  // dense: TMA clips rows >= M, every unit is full
      stage(total, true);
      if (!kDeferStores && (!KDSL_FP8_DEV_SKIP_TMA_STORE || p.M <= 0)) store_tma(u);
    } else if (C::TMA_STORE && KDSL_FP8_STAGED_PARTIAL && C::KIND != 0) {
      // (Dense units are all full: TMA clips rows >= M. Their kernels keep the row-by-row
      // path compiled in as before; the staged one made the clustered 256-row tile spill.)
      stage(total, false);
      copy_rows(u);
    } else {
      store_rows(u, total);
      // The warps of a warpgroup meet once per unit on both paths. Without this the
      // row-by-row kernels had no named barrier at all: their cubins declared one hardware
      // barrier (EIATTR_NUM_BARRIERS 1, the TMA-store kernels 16), and every such kernel
      // raised "illegal instruction" on the H100 while the TMA-store ones ran clean.
      named_barrier(1 + wg, 128);
    }
  }

  // Byte offset in the staging tile of (tile row, column byte): column blocks of kSw bytes a
  // row, TMA's swizzle (16-byte chunk ^= 128-byte line within the block).
  KDSL_DEVICE static u32 tile_offset(int row, int byte) {
    u32 off = (u32)((byte / kSw) * BM * kSw + row * kSw + byte % kSw);
    return off ^ (((off >> 7) & (kSw / 16 - 1)) << 4);
  }

  // The warpgroup's totals into its rows of the staging tile. On entry the tile may still be
  // read: by the previous unit's TMA stores (the leader waits for them) or by the previous
  // unit's staged copy (every thread of the warpgroup is past it at the barrier). `for_tma`:
  // the TMA engine reads the tile next, so the generic stores are fenced for its proxy.
  KDSL_DEVICE void stage(const float (&total)[kWaves][kFrag], bool for_tma) const {
    const bool leader = warp == 0 && lane == 0;
    if (leader) bulk_wait_read<0>();
    named_barrier(1 + wg, 128);
    // Under stream-K and with three math warpgroups (160 registers) the fragment's offsets are
    // computed here, per unit: left to itself the compiler hoists them out of the persistent
    // loop, and with the K loop's registers all taken it keeps them in local memory (the
    // 256x128 tile spilled 80 bytes so, 2026-11-25; 192x128 72 bytes).
    int t = (warp << 5) | lane;
    if (C::STREAM_K || C::kMathWG == 3) asm volatile("" : "+r"(t));
    if (kStmatrix) {
      stage_by_matrices(total, t);
    } else {
      stage_by_words(total, t);
    }
    if (for_tma) fence_proxy_async();
    named_barrier(1 + wg, 128);
  }

  // bf16 by stmatrix: matrices (rows +0 / +8) x (column groups j / j + 1); lane t addresses
  // row t % 8 of matrix t / 8, i.e. row + 8 ((t >> 3) & 1), columns 8 (j + (t >> 4)).
  KDSL_DEVICE void stage_by_matrices(const float (&total)[kWaves][kFrag], int t) const {
#pragma unroll
    for (int v = 0; v < kWaves; ++v) {
      const int row = wave_row(v) + (t >> 5) * 16 + (t & 7) + 8 * ((t >> 3) & 1);
#pragma unroll
      for (int j = 0; j < kFrag / 4; j += 2) {
        const int byte = 8 * (j + ((t & 31) >> 4)) * kElem;
        const float* f = &total[v][4 * j];
        stmatrix_x4(d_tile + tile_offset(row, byte), pack_bf16x2(f[0], f[1]), pack_bf16x2(f[2], f[3]),
                    pack_bf16x2(f[4], f[5]), pack_bf16x2(f[6], f[7]));
      }
    }
  }

  // A bf16 pair (st.shared.u32) or an f32 pair (st.shared.v2.f32) per store.
  KDSL_DEVICE void stage_by_words(const float (&total)[kWaves][kFrag], int t) const {
#pragma unroll
    for (int v = 0; v < kWaves; ++v) {
#pragma unroll
      for (int j = 0; j < kFrag / 4; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = wave_row(v) + (t >> 5) * 16 + ((t & 31) >> 2) + 8 * h;
          const int byte = (8 * j + 2 * (t & 3)) * kElem;  // column byte in the tile row
          const u32 off = tile_offset(row, byte);
          const float x = total[v][4 * j + 2 * h], y = total[v][4 * j + 2 * h + 1];
          if (C::OUT_F32) {
            asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" :: "r"(d_tile + off), "f"(x), "f"(y) : "memory");
          } else {
            asm volatile("st.shared.u32 [%0], %1;\n" :: "r"(d_tile + off), "r"(pack_bf16x2(x, y)) : "memory");
          }
        }
      }
    }
  }

  // One thread issues the tile's boxes (after stage(total, true)).
  KDSL_DEVICE void store_tma(const Fp8Unit& u) const {
    if (warp == 0 && lane == 0) {
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

  // Box `box` of a staged full tile (kDeferStores: fp8_math issues them through the next unit).
  KDSL_DEVICE void store_box(const Fp8Unit& u, int box) const {
    if (warp == 0 && lane == 0) {
      const int v = box / kColBlocks, cb = box % kColBlocks;
      const u32 src = d_tile + (u32)(cb * BM * kSw + wave_row(v) * kSw);
      tma_store_3d(td, src, u.n0 + cb * (kSw / kElem), u.m0 + wave_row(v), C::KIND == 2 ? u.g : 0);
      bulk_commit();
    }
  }

  // The staged rows of this warpgroup that may be written, 16 bytes a thread: rows below the
  // group's count (KIND 2) or of group u.g (KIND 1), below M, columns below N (N * element
  // bytes is a multiple of 16 wherever there is a staging tile, and out is 16-byte aligned).
  KDSL_DEVICE void copy_rows(const Fp8Unit& u) const {
    constexpr int kChunks = BN * kElem / 16;  // 16-byte chunks a tile row
    constexpr int kPerWave = 64 * kChunks;    // chunks of one warpgroup's 64 rows
    const int tid = warp * 32 + lane;
    char* out = static_cast<char*>(p.out) + (C::KIND == 2 ? (i64)u.g * p.M * p.N * kElem : (i64)0);
    const int m_end = C::KIND == 2 ? fp8_detail::masked_rows(p, u.g) : p.M;
    const int c_end = (p.N - u.n0) * kElem;  // column bytes of the tile inside out
    const u32 base = d_tile;
#pragma unroll
    for (int v = 0; v < kWaves; ++v) {
#pragma unroll 4
      for (int i = tid; i < kPerWave; i += 128) {
        const int row = wave_row(v) + i / kChunks, byte = (i % kChunks) * 16;
        const int r = u.m0 + row;
        bool ok = r < m_end && byte < c_end;
        if (C::KIND == 1) ok = ok && __ldg(p.group + r) == u.g;  // r < M checked first
        if (!ok) continue;
        u32 w0, w1, w2, w3;
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(w0), "=r"(w1), "=r"(w2), "=r"(w3) : "r"(base + tile_offset(row, byte)) : "memory");
        char* dst = out + ((i64)r * p.N + u.n0) * kElem + byte;
        if (C::ACCUM) {  // f32 out: out += totals
          float o0, o1, o2, o3;
          asm volatile("ld.global.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                       : "=f"(o0), "=f"(o1), "=f"(o2), "=f"(o3) : "l"(dst) : "memory");
          w0 = __float_as_uint(__uint_as_float(w0) + o0);
          w1 = __float_as_uint(__uint_as_float(w1) + o1);
          w2 = __float_as_uint(__uint_as_float(w2) + o2);
          w3 = __float_as_uint(__uint_as_float(w3) + o3);
        }
        asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};\n" :: "l"(dst), "r"(w0), "r"(w1), "r"(w2), "r"(w3)
                     : "memory");
      }
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

  // Stream-K. A piece of a tile that is not its K block 0's leaves this warpgroup's totals in
  // its CTA's slot, 16 bytes a thread in thread-major order (each warp store is 512
  // contiguous bytes), and raises its flag; the finaliser, the CTA holding K block 0, adds the
  // slots of the CTAs after it that hold pieces, lowering their flags for the next launch.
  KDSL_DEVICE float4* sk_slot(int cta) const {
    return reinterpret_cast<float4*>(p.sk_partials + (i64)cta * BM * BN) + wg * (kWaves * kFrag / 4) * 128;
  }
  KDSL_DEVICE int* sk_flag(int cta) const { return p.sk_flags + cta * C::kMathWG + wg; }

  KDSL_DEVICE void leave_partial(const float (&total)[kWaves][kFrag]) const {
    const int tid = warp * 32 + lane;
    float4* slot = sk_slot(blockIdx.x);
#pragma unroll
    for (int v = 0; v < kWaves; ++v)
#pragma unroll
      for (int q = 0; q < kFrag / 4; ++q)
        slot[(v * kFrag / 4 + q) * 128 + tid] =
            make_float4(total[v][4 * q], total[v][4 * q + 1], total[v][4 * q + 2], total[v][4 * q + 3]);
    __threadfence();  // each thread's slot writes before the flag, seen from any SM
    named_barrier(1 + wg, 128);
    if (tid == 0) st_release_gpu(sk_flag(blockIdx.x), 1);
  }

  KDSL_DEVICE void add_partials(const Fp8Unit& u, float (&total)[kWaves][kFrag]) const {
    const int tid = warp * 32 + lane;
    for (int c = blockIdx.x + 1; c <= (int)blockIdx.x + u.peers; ++c) {
      if (tid == 0) {
        while (ld_acquire_gpu(sk_flag(c)) == 0) {
        }
        st_relaxed_gpu(sk_flag(c), 0);  // CTA c leaves no other partial in this launch
      }
      named_barrier(1 + wg, 128);
      const float4* slot = sk_slot(c);
#pragma unroll
      for (int v = 0; v < kWaves; ++v)
#pragma unroll
        for (int q = 0; q < kFrag / 4; ++q) {
          const float4 x = __ldcg(slot + (v * kFrag / 4 + q) * 128 + tid);  // from L2: written by another SM
          total[v][4 * q] += x.x;
          total[v][4 * q + 1] += x.y;
          total[v][4 * q + 2] += x.z;
          total[v][4 * q + 3] += x.w;
        }
    }
  }

  // Before the CTA exits: its last TMA stores have finished with the staging tile.
  KDSL_DEVICE void finish() const {
    if (C::TMA_STORE && warp == 0 && lane == 0) bulk_wait<0>();
  }
};

}  // namespace kdsl
