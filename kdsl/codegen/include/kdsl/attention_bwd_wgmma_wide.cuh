// kdsl/attention_bwd_wgmma_wide.cuh — attention backward on warpgroup MMAs for head dims
// past 128 (sm_90a; padded head dims up to 256).
//
// attention_bwd_wgmma.cuh gives each warpgroup 64 keys and their whole dK and dV rows: at a
// padded head dim of 256 those are 256 registers a thread. Here a CTA owns BN = 64 keys, and
// its two warpgroups split the work of one step (64 queries) instead of its keys:
//   - warpgroup 0 computes S^T = K Q^T, warpgroup 1 dP^T = V dO^T (m64n64, in parallel);
//   - each hands the other the half of its tile the other turns into P and dS (query columns
//     32 wg.. of the step; a thread's fragment slot, through shared memory), so the
//     elementwise work splits evenly; each writes its half of dS^T to shared memory ([key][q],
//     swizzled, for dQ) and its P and dS fragments back through the same slots;
//   - each then holds the whole P^T and dS^T of the 64 keys as A fragments and owns half of
//     the head dim's columns (64-column blocks in turn, then half of an odd one:
//     BwdHalfCols, attention_bwd_rows.cuh): dV[:, half] += P^T dO, dK[:, half] += dS^T Q and
//     dQ[:, half] = dS K, added into dq_acc, 64-row fp32 tiles in the fragment order of
//     attention_bwd_wgmma.cuh (a thread's four values of an n-tile are consecutive, a warp's
//     512 bytes contiguous; as [B, H, M, D] rows of pairs, the reductions held up the step:
//     bench/NOTES.md, forty-fifth session). dQ comes in two pieces of a warpgroup's columns
//     (DqPieces): the first from registers, one red.global.add.v4.f32 an n-tile, while dV's and
//     dK's products run; the second staged in the step's own Q blocks once dK has read them and
//     added by one bulk reduction a warp (x1.10 at 256: fiftieth session), so the loads of the
//     step after next, into that buffer, wait until those reductions have read it;
//   - the next step's S^T / dP^T is issued right after this step's last dQ piece, so that the
//     tensor cores run it while the piece is added and the loop turns.
// As there, dS leaves out the softmax scale: dK takes it at the end, dQ in the host's
// conversion of the tiles to rows. Operand tiles use the 128-byte-swizzled layout of
// attention_bwd_wgmma.cuh, whose helpers this header uses; Q, dO, lse and delta are
// double-buffered, Q and dO loaded as there (attention_bwd_wgmma_wide_tma by TMA). The two
// warpgroups run the same instructions at other addresses (the warpgroup index broadcast from
// lane 0, operands chosen by it): ptxas serializes every wgmma of a kernel with one in a branch
// it cannot prove warp-uniform, and it did so here at every head dim (bench/NOTES.md,
// forty-fifth session; tests/test_backward_cpu.py checks the waits).
//
// Launch contract (the generated extern "C" kernel forwards to attention_bwd_wgmma_wide):
//   grid  = ceil(N / 64) * Hkv * B * splits CTAs (attention_common.cuh, backward_block)
//   block = 256 threads
//   dynamic shared memory = attention_bwd_wgmma_wide_smem_bytes<D, DV>() (1024 of it slack)
//   dq_acc: zeroed fp32 [B, H, ceil(M / 64), 64 * DP], attention_bwd_wgmma.cuh's fragment order,
//   a warpgroup's n-tiles at BwdHalfCols<DP>::col
#pragma once

#include "kdsl/attention_bwd_rows.cuh"
#include "kdsl/attention_bwd_wgmma.cuh"
#include "kdsl/wgmma_ops_more.cuh"

namespace kdsl {

namespace attn_bwd_wide_detail {

template <int D, int DV>
struct BwdWideCfg {
  static constexpr int BM = 64, BN = 64;  // query rows per step; keys per CTA
  static constexpr int DP = (D + 63) / 64 * 64, DVP = (DV + 63) / 64 * 64;  // padded head dims
  static constexpr int kThreads = 256, NB = 2;                              // NB: Q / dO buffers
  static constexpr int kQBuf = BM * DP * 2, kDOBuf = BM * DVP * 2;
  // an exchange slot: 4 warps x 4 groups x 32 lanes x 16 bytes (16 floats a thread)
  static constexpr int kXBuf = 4 * 4 * 32 * 16;
  // tile offsets from a 1024-byte aligned base (each a multiple of 1024)
  static constexpr int kK = 0, kV = kK + BN * DP * 2, kQ = kV + BN * DVP * 2, kDO = kQ + NB * kQBuf;
  static constexpr int kDS = kDO + NB * kDOBuf, kX = kDS + BN * BM * 2, kLse = kX + 2 * kXBuf;
  static constexpr int kDelta = kLse + NB * BM * 4, kBar = kDelta + NB * BM * 4;  // kBar: QdoByTma's mbarriers
  static constexpr int kSmemBytes = 1024 + kBar + 16;
  static_assert(D % 16 == 0 && DV % 16 == 0 && DP <= 256 && DVP <= 256, "head dims: multiples of 16 up to 256");
  static_assert(kSmemBytes <= 232448, "more shared memory than an sm_90 block has");
};

// Rows [0, ROWS) of a row-major [rows, COLS] global matrix into 64-column swizzled blocks at
// dst (attention_bwd_wgmma.cuh's layout) for any padded width: a block at a time, 32 rows a
// pass of 256 threads.
template <class Elem, int COLS, int WIDTH, int ROWS>
KDSL_DEVICE void load_blocks(u32 dst, const Elem* src, int rows_valid, int tid) {
  const int r0 = tid / 8, cc = tid % 8;
  const u32 d0 = dst + r0 * 128 + ((cc ^ (r0 % 8)) << 4);
#pragma unroll
  for (int blk = 0; blk < WIDTH / 64; ++blk) {
    const bool col_ok = blk * 64 + cc * 8 < COLS;
#pragma unroll
    for (int pass = 0; pass < ROWS / 32; ++pass) {
      const int r = r0 + 32 * pass;
      const bool ok = col_ok && r < rows_valid;
      cp_async16(d0 + blk * (ROWS * 128) + pass * 32 * 128, ok ? src + (i64)r * COLS + blk * 64 + cc * 8 : src,
                 ok ? 16u : 0u);
    }
  }
}

template <int OFF, int LEN, int R>
KDSL_DEVICE float (&part(float (&d)[R]))[LEN] {
  static_assert(OFF + LEN <= R, "a part inside the array");
  return *reinterpret_cast<float(*)[LEN]>(d + OFF);
}

// d (the warpgroup's columns of the product, BwdHalfCols<WIDTH>) += A B, A from registers (the
// 64 keys x 64 queries of a step), B MN-major: the rows of a [BM][64-column blocks] tile at sb,
// blocks block_bytes apart. A 64-column product a whole block, a 32-column one for the odd
// block's half: the same products for both warpgroups, only their addresses differ.
template <class Elem, int WIDTH>
KDSL_DEVICE void mma_rs_half(float (&d)[WIDTH / 4], const u32 (&a)[4][4], u32 sb, int block_bytes, int wg) {
  typedef BwdHalfCols<WIDTH> H;
#pragma unroll
  for (int i = 0; i < H::kPairs; ++i)
    attn_bwd_wg_detail::mma_rs<Elem, 64>(*reinterpret_cast<float(*)[32]>(d + 32 * i), a, sb + (2 * i + wg) * block_bytes,
                                         block_bytes);
  if constexpr (H::kHalf > 0)
    attn_bwd_wg_detail::mma_rs<Elem, 32>(part<32 * H::kPairs, 16>(d), a, sb + 2 * H::kPairs * block_bytes + wg * 64,
                                         block_bytes);
}

// d = dS^T read MN-major (one 64-query block at sds) times K's rows read MN-major from sk_col
// (a piece of W columns inside one 64-column block), over K_ROWS keys: W columns of dQ = dS K.
template <class Elem, int W, int K_ROWS>
KDSL_DEVICE void mma_dq_piece(float (&d)[W / 2], u32 sds, u32 sk_col, int block_bytes) {
  const u64 da0 = desc_mnmajor_sw128(sds, K_ROWS * 128), db0 = desc_mnmajor_sw128(sk_col, block_bytes);
#pragma unroll
  for (int i = 0; i < W / 2; ++i) d[i] = 0.f;
#pragma unroll
  for (int kk = 0; kk < K_ROWS / 16; ++kk)
    WgmmaSSTT<Elem, W>::run(d, desc_advance(da0, kk * 16 * 128), desc_advance(db0, kk * 16 * 128), 1);
}

KDSL_DEVICE void st_shared_v4(u32 addr, u32 x, u32 y, u32 z, u32 w) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" :: "r"(addr), "r"(x), "r"(y), "r"(z), "r"(w) : "memory");
}
KDSL_DEVICE uint4 ld_shared_v4(u32 addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr) : "memory");
  return v;
}

// Warpgroup 0's S^T = K Q^T over KA (its padded head dim) or warpgroup 1's dP^T = V dO^T over
// KB, into x (64 keys x the step's 64 queries): the k16 steps both have in one code path with
// the operands chosen by warpgroup, the wider one's remaining steps in a branch. (The two
// products in the two arms of a branch on the warpgroup made ptxas serialize every wgmma of
// the kernel where the head dims differ: mla's 192 / 128, C7511.)
template <class Elem, int KA, int KB>
KDSL_DEVICE void scores_t(float (&x)[32], int wg, u32 sk, u32 sv, u32 sq, u32 sdo, int bn, int bm) {
  constexpr int KC = KA < KB ? KA : KB, KM = KA < KB ? KB : KA;
  u64 da[KM / 16], db[KM / 16];
  kmajor_steps(da, wg == 0 ? sk : sv, bn, db, wg == 0 ? sq : sdo, bm);
  WgmmaSS0<Elem, 64>::run(x, da[0], db[0]);
#pragma unroll
  for (int k = 1; k < KC / 16; ++k) WgmmaSS<Elem, 64>::run(x, da[k], db[k], 1);
  if constexpr (KA != KB) {
    if (wg == (KA > KB ? 0 : 1)) {
#pragma unroll
      for (int k = KC / 16; k < KM / 16; ++k) WgmmaSS<Elem, 64>::run(x, da[k], db[k], 1);
    }
  }
}

// dQ's fragment d[4 jj + 2 hh + e] (query row 16 warp + g + 8 hh, the column of the
// warpgroup's n-tile jj, + 2 t + e) into a step's dQ tile as it lies in registers, a thread's
// n-tile jj at dst + 128 jj: rows past M and columns past D are the tile's padding, zeros here,
// which the conversion to rows skips.
template <int N_TILES>
KDSL_DEVICE void add_dq(float* dst, const float (&d)[4 * N_TILES]) {
#pragma unroll
  for (int jj = 0; jj < N_TILES; ++jj)
    attn_bwd_wg_detail::red_add_v4(dst + jj * 32 * 4, d[4 * jj], d[4 * jj + 1], d[4 * jj + 2], d[4 * jj + 3]);
}

// dQ's two pieces of a warpgroup's half of the columns (BwdHalfCols<DP>): the first whole
// block, or the odd block's half where there is none; the second the rest (none at DP = 128).
template <int DP>
struct DqPieces {
  typedef BwdHalfCols<DP> H;
  static constexpr int W1 = H::kPairs > 0 ? 64 : H::kHalf, W2 = DP / 2 - W1;
  static_assert(W2 <= 64, "the second piece inside one block");
  // the first column (in K's tile at sk) of each piece
  static KDSL_DEVICE u32 first(u32 sk, int bn, int wg) { return H::kPairs > 0 ? sk + wg * bn * 128 : sk + wg * 64; }
  static KDSL_DEVICE u32 second(u32 sk, int bn, int wg) {
    return H::kPairs > 1 ? sk + (2 + wg) * bn * 128 : sk + 2 * bn * 128 + wg * 64;
  }
};

// A warpgroup's products of a step over its columns (BwdHalfCols: of DP for dK and dQ, of DVP
// for dV): dV += P^T dO and dK += dS^T Q (B read MN-major), and dQ = dS K added into the
// step's tile at dst (the thread's first n-tile). Both warpgroups run the same products at
// other addresses: a product in a branch on the warpgroup made ptxas serialize every wgmma of
// the kernel (its C7520 remark), and accumulators split differently in the two branches (32 + 64
// columns, 64 + 32) ran it out of registers for the pipeline (C7511).
// dQ comes in two pieces (DqPieces): the first a wgmma group ahead of dV's and dK's, its
// reductions issued while those run (dq1 is the caller's S^T / dP^T registers, free by then:
// in registers of its own, causal spilled 152 B at 256 and plain ran x0.98); the second
// issued here after them into dq2, a group of its own that the caller waits for under the
// next step's S^T / dP^T, then stages for a bulk reduction (stage_dq). At most one piece's accumulators are live beside dK's,
// dV's, P^T's and dS^T's (at 256: 32 + 64 + 64 + 32 registers; the whole half at once spilled
// alibi's and natten2d's builds).
template <class Elem, int DP, int DVP, int BM, int BN>
KDSL_DEVICE void step_products(float (&acc_dk)[DP / 4], float (&acc_dv)[DVP / 4], const u32 (&pa)[4][4],
                               const u32 (&dsa)[4][4], u32 sds, u32 sk, u32 sq, u32 sdo, float* dst, int wg,
                               float (&dq1)[DqPieces<DP>::W1 / 2],
                               float (&dq2)[DqPieces<DP>::W2 > 0 ? DqPieces<DP>::W2 / 2 : 1]) {
  using namespace attn_bwd_wg_detail;
  typedef DqPieces<DP> P;
  wgmma_fence();
  mma_dq_piece<Elem, P::W1, BN>(dq1, sds, P::first(sk, BN, wg), BN * 128);
  wgmma_commit();
  mma_rs_half<Elem, DVP>(acc_dv, pa, sdo, BM * 128, wg);
  mma_rs_half<Elem, DP>(acc_dk, dsa, sq, BM * 128, wg);
  wgmma_commit();
  wgmma_wait<1>();
  wgmma_pin(dq1);
  add_dq<P::W1 / 8>(dst, dq1);
  wgmma_wait<0>();  // dV's and dK's products: P^T's and dS^T's registers are free
  if constexpr (P::W2 > 0) {
    wgmma_fence();
    mma_dq_piece<Elem, P::W2, BN>(dq2, sds, P::second(sk, BN, wg), BN * 128);
    wgmma_commit();
  }
}

// A warp's N_TILES n-tiles of a dQ piece (registers d) staged at part0 in the fragment order of
// dq_acc (512 bytes an n-tile, lane l's 16 at 16 l) and added at dst (the warp's first float of
// the piece) by one bulk reduction of lane 0.
template <int N_TILES>
KDSL_DEVICE void stage_dq(u32 part0, float* dst, const float (&d)[4 * N_TILES], int lane) {
#pragma unroll
  for (int jj = 0; jj < N_TILES; ++jj)
    attn_bwd_wg_detail::st_shared(part0 + jj * 512 + lane * 16, d[4 * jj], d[4 * jj + 1], d[4 * jj + 2], d[4 * jj + 3]);
  fence_proxy_async();  // read by the bulk reduction (the async proxy)
  __syncwarp();
  if (lane == 0) {
    bulk_reduce_add_f32(dst, part0, N_TILES * 512);
    bulk_commit();
  }
}

}  // namespace attn_bwd_wide_detail

template <int D, int DV, class V = void>  // (V: the wgmma kernel's streamed tiles; none here)
__host__ __device__ constexpr int attention_bwd_wgmma_wide_smem_bytes() {
  return attn_bwd_wide_detail::BwdWideCfg<D, DV>::kSmemBytes;
}
template <int D, int DV>
__host__ __device__ constexpr int attention_bwd_wgmma_wide_threads() { return 256; }
template <int D, int DV>
__host__ __device__ constexpr int attention_bwd_wgmma_wide_min_blocks() { return 1; }

namespace attn_bwd_wide_detail {

// The kernel; with kTma, Q and dO tiles come by TMA from the maps tq / tdo
// (attention_bwd_wgmma.cuh, QdoByTma), else by every thread's cp.async.
template <bool kTma, class Elem, int D, int DV, class V, class G>
KDSL_DEVICE void attention_bwd_wgmma_wide_impl(const TmaDesc* tq, const TmaDesc* tdo, const AttnArgs& a,
                                               const typename V::Captures& c, const Elem* dout, const float* lse,
                                               const float* delta, float* dq_acc, Elem* dk, Elem* dv,
                                               const typename G::CaptureGrads& cg) {
  using namespace attn_bwd_wg_detail;
  using namespace attn_bwd_wide_detail;
  typedef BwdWideCfg<D, DV> C;
  constexpr int BM = C::BM, BN = C::BN, DP = C::DP, DVP = C::DVP, T = C::kThreads;
  extern __shared__ __align__(128) u8 kdsl_bwd_smem[];
  const u32 raw = smem_addr(kdsl_bwd_smem), base = (raw + 1023u) & ~1023u;  // the swizzle repeats every 1024 bytes
  u8* const smem = kdsl_bwd_smem + (base - raw);
  const u32 sK = base + C::kK, sV = base + C::kV, sQ = base + C::kQ, sDO = base + C::kDO, sDS = base + C::kDS;
  const float* sLse = reinterpret_cast<const float*>(smem + C::kLse);
  const float* sDelta = reinterpret_cast<const float*>(smem + C::kDelta);

  const int tid = threadIdx.x, warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4, t = lane % 4;
  // the warpgroup, broadcast from lane 0 so that ptxas sees it warp-uniform: the products sit in
  // branches on it, and a wgmma in a path it takes for divergent serializes every wgmma
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  const BackwardBlock blk = backward_block<BN>(a);
  const int n0 = blk.n0, hkv = blk.hkv, b = blk.b;
  const int M = a.M, N = a.N, group = blk.heads, h0 = blk.h0;  // the query heads walked
  const float scale = c.scale;

  const i64 kv_head = (i64)b * a.Hkv + hkv;
  load_blocks<Elem, D, DP, BN>(sK, static_cast<const Elem*>(a.k) + (kv_head * N + n0) * D, N - n0, tid);
  load_blocks<Elem, DV, DVP, BN>(sV, static_cast<const Elem*>(a.v) + (kv_head * N + n0) * DV, N - n0, tid);
  cp_async_commit();

  // this warpgroup's half of the head dims' columns (BwdHalfCols<DP> for dK and dQ, <DVP> for dV)
  constexpr int KH = DP / 2, VH = DVP / 2;
  float acc_dk[KH / 2], acc_dv[VH / 2];
#pragma unroll
  for (int i = 0; i < KH / 2; ++i) acc_dk[i] = 0.f;
#pragma unroll
  for (int i = 0; i < VH / 2; ++i) acc_dv[i] = 0.f;

  // Steps as in attention_bwd_wgmma.cuh; step cur's tiles sit in buffer buf while the next
  // step's land in the other.
  typedef BwdSteps<V, BM, BN> Steps;
  typedef typename Steps::Step Step;
  Steps steps(blk, backward_query_tiles<BM>(a, blk));
  QdoByTma<BM, DP, DVP> tma{tq, tdo, base + C::kBar};
  if constexpr (kTma) tma.init(tid);
  auto issue = [&](Step st, int buf) {
    const int m0 = st.mt * BM;
    const i64 row0 = ((i64)b * a.H + h0 + st.hq) * M + m0;
    if constexpr (kTma) {
      if (tid == 0) tma.issue(sQ + buf * C::kQBuf, sDO + buf * C::kDOBuf, buf, m0, b * a.H + h0 + st.hq);
    } else {
      load_blocks<Elem, D, DP, BM>(sQ + buf * C::kQBuf, static_cast<const Elem*>(a.q) + row0 * D, M - m0, tid);
      load_blocks<Elem, DV, DVP, BM>(sDO + buf * C::kDOBuf, dout + row0 * DV, M - m0, tid);
    }
    copy_row_stats<BM>(base + C::kLse, base + C::kDelta, buf, lse, delta, row0, m0, M, tid);
    cp_async_commit();
  };
  // A thread's exchange slot: 16 words at (warp, group k4, lane) of slot x, conflict-free v4s.
  auto xslot = [&](int x, int k4) { return base + C::kX + x * C::kXBuf + ((warp * 4 + k4) * 32 + lane) * 16; };

  // warpgroup 0: S^T = K Q^T; warpgroup 1: dP^T = V dO^T (64 keys x a step's 64 queries)
  float x[32];
  // A step's start: its tiles (buffer sb) waited for, the next step's loads issued into the
  // other buffer, and its S^T / dP^T issued into x, not yet committed; returns the next step.
  typedef DqPieces<DP> Pieces;
  constexpr bool kStaged = Pieces::W2 > 0;  // dQ's second piece staged and added by bulk reductions
  auto start_step = [&](Step st, int sb, bool load_next) {
    const Step nx = steps.next(a, c, steps.advance(st));
    wait_step_tiles<kTma>(tma, sb);
    // before the products: issued after the first ones, as the <= 128 kernel does, it measured x0.98-1.0 here
    if ((!kStaged || load_next) && nx.hq < group) issue(nx, sb ^ 1);
    wgmma_fence();
    scores_t<Elem, DP, DVP>(x, wg, sK, sV, sQ + sb * C::kQBuf, sDO + sb * C::kDOBuf, BN, BM);
    return nx;
  };
  // A step's S^T / dP^T is issued at the end of the step before, after its last dQ piece, so
  // the tensor cores run it while that piece is added and the next step's loads go out (x1.03
  // -1.25 at head dims 192 / 256 on an H200: bench/NOTES.md, forty-ninth session).
  Step cur = steps.next(a, c, steps.start()), nxt = cur;
  int buf = 0;
  if (cur.hq < group) issue(cur, 0);
  fence_kv_before_steps<kTma>();
  if (cur.hq < group) {
    nxt = start_step(cur, 0, true);
    wgmma_commit();
  }
  bool next_loaded = true;  // whether step nxt's loads are issued (a staged dQ piece defers them)
  for (; cur.hq < group; buf ^= 1) {
    const int cls = steps.tile_class(a, c, cur), h = h0 + cur.hq, m0 = cur.mt * BM;
    float kt[2];  // the score's key part at the thread's keys (key0 below), loaded before the wgmmas wait
    key_parts<G>(a, c, b, h, n0 + 16 * warp + g, kt);
    // kQueryValues<V> (attention_bwd_wgmma.cuh): the mask's value at the queries this warpgroup's
    // n-tiles hold (4 wg .. 4 wg + 3: queries m0 + 32 wg ..), lane l query m0 + 32 wg + l, gathered
    // before the wgmmas are waited for; each element shuffles its own
    typename V::QueryValue qv{};
    typename V::QueryValue2 qv2{};  // the second (V::kQueryValues2)
    if constexpr (kQueryValues<V>) qv = V::mask_query_value(a, c, b, h, imin(m0 + 32 * wg + lane, M - 1));
    if constexpr (kQueryValues<V> && V::kQueryValues2)
      qv2 = V::mask_query_value2(a, c, b, h, imin(m0 + 32 * wg + lane, M - 1));
    const u32 sQb = sQ + buf * C::kQBuf, sDOb = sDO + buf * C::kDOBuf;
    const float* sLseb = sLse + buf * BM;
    const float* sDeltab = sDelta + buf * BM;
    wgmma_wait<0>();
    wgmma_pin(x);

    // Hand the other warpgroup the n-tiles j it works on (warpgroup w: j in [4 w, 4 w + 4)):
    // slot 1 - wg, which the other reads. Fragment i = 4 j + 2 hh + e. (Selects, not an index
    // by wg: a register array indexed at run time would live in local memory.)
    float mine[16], other[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) mine[i] = wg == 0 ? x[i] : x[16 + i], other[i] = wg == 0 ? x[16 + i] : x[i];
#pragma unroll
    for (int k4 = 0; k4 < 4; ++k4)
      st_shared(xslot(1 - wg, k4), other[4 * k4], other[4 * k4 + 1], other[4 * k4 + 2], other[4 * k4 + 3]);
    named_barrier(1, T);
#pragma unroll
    for (int k4 = 0; k4 < 4; ++k4) {
      const uint4 v = ld_shared_v4(xslot(wg, k4));
      other[4 * k4] = __uint_as_float(v.x), other[4 * k4 + 1] = __uint_as_float(v.y);
      other[4 * k4 + 2] = __uint_as_float(v.z), other[4 * k4 + 3] = __uint_as_float(v.w);
    }

    // P^T and dS^T (dS without the softmax scale) of this warpgroup's n-tiles, as in
    // attention_bwd_wgmma.cuh: no predicate on full tiles inside M and N.
    const int key0 = n0 + 16 * warp + g;  // the thread's row hh is key key0 + 8 hh
    float ug[G::kUniformGrads > 0 ? G::kUniformGrads : 1] = {};  // step-uniform capture gradients
    u32 pk[4][2], dk2[4][2];  // this warpgroup's P and dS, packed: [local n-tile][row half]
    auto elementwise = [&](auto guarded) {
      constexpr int kGuard = decltype(guarded)::value;
#pragma unroll
      for (int jl = 0; jl < 4; ++jl) {
        const int j = 4 * wg + jl, col = 8 * j + 2 * t;
        typename V::QueryValue qx[2] = {};  // query col + e is lane 8 jl + 2 t + e's (unconditional: the whole warp)
        typename V::QueryValue2 qx2[2] = {};
        query_pair_values<V, kQueryValues<V>>(qv, qv2, jl, t, qx, qx2);
        const float2 lse2 = backward_lse<kGuard>(*reinterpret_cast<const float2*>(sLseb + col));
        const float2 delta2 = *reinterpret_cast<const float2*>(sDeltab + col);
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          float pv[2], dv2[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int il = 4 * jl + 2 * hh + e, q = m0 + col + e, kv = key0 + 8 * hh;
            const float sv = wg == 0 ? mine[il] : other[il], dpv = wg == 0 ? other[il] : mine[il];
            const float row_lse = e ? lse2.y : lse2.x, row_delta = e ? delta2.y : delta2.x;
            float p, ds;
            element_grads<V, G, kGuard>(a, c, cg, cls, b, h, q, kv, kt[hh], sv, dpv, row_lse, row_delta, ug, p, ds,
                                        [&](int mq, int mkv) {
                                          if constexpr (kQueryValues<V>)
                                            return V::mask_qvalued(a, c, b, h, mq, mkv, qx[e], qx2[e]);
                                          else
                                            return V::mask(a, c, b, h, mq, mkv);
                                        },
                                        [&](float share) { G::add_offset_grad(a, c, cg, b, h, q - kv, share); });
            pv[e] = p;
            dv2[e] = ds;
          }
          pk[jl][hh] = pack2<Elem>(pv[0], pv[1]);
          dk2[jl][hh] = pack2<Elem>(dv2[0], dv2[1]);
        }
      }
    };
    if (m0 + BM <= M && n0 + BN <= N && (!V::kHasMask || (kBwdFullPath<V, G> && cls == kTileFull)))
      elementwise(Guard<kGuardNone>{});
    else if constexpr (kGuardByKeys<V>) {
      if (cls == kTileKeys) elementwise(Guard<kGuardKeys>{});
      else elementwise(Guard<kGuardMask>{});
    } else elementwise(Guard<kGuardMask>{});
    if constexpr (G::kCaptureGrads && G::kUniformGrads > 0) G::flush_uniform_grads(a, c, cg, b, h, ug);

    // dS^T to shared memory as [key][q] rows of 128 bytes, swizzled (n-tile j is chunk j)
#pragma unroll
    for (int jl = 0; jl < 4; ++jl)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int row = 16 * warp + g + 8 * hh, chunk = 4 * wg + jl;
        st_shared(sDS + row * 128 + ((chunk ^ (row % 8)) << 4) + 4 * t, dk2[jl][hh]);
      }
    // P and dS back to the other warpgroup, through the slot this thread has just read
#pragma unroll
    for (int k4 = 0; k4 < 2; ++k4) {
      st_shared_v4(xslot(wg, k4), pk[2 * k4][0], pk[2 * k4][1], pk[2 * k4 + 1][0], pk[2 * k4 + 1][1]);
      st_shared_v4(xslot(wg, 2 + k4), dk2[2 * k4][0], dk2[2 * k4][1], dk2[2 * k4 + 1][0], dk2[2 * k4 + 1][1]);
    }
    fence_proxy_async();  // dS^T's stores, read next by the wgmma of both warpgroups
    if (kStaged && lane == 0) bulk_wait_read<0>();  // the last step's staged dQ, in the buffer loaded next
    named_barrier(1, T);
    if (kStaged && !next_loaded && nxt.hq < group) issue(nxt, buf ^ 1);
    next_loaded = true;

    // The whole P^T and dS^T as A fragments: k-step kp (queries 16 kp..) holds n-tiles 2 kp and
    // 2 kp + 1, word e = n-tile 2 kp + e / 2, row half e % 2. Own n-tiles from registers, the
    // other's from its slot 1 - wg.
    u32 pa[4][4], dsa[4][4];
#pragma unroll
    for (int k4 = 0; k4 < 2; ++k4) {
      const uint4 po = ld_shared_v4(xslot(1 - wg, k4)), dso = ld_shared_v4(xslot(1 - wg, 2 + k4));
      const u32 pt[4] = {po.x, po.y, po.z, po.w}, dt[4] = {dso.x, dso.y, dso.z, dso.w};
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // k-step 2 half + k4: own where half == wg
        const int kp = 2 * half + k4;
        const bool own_step = half == wg;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          pa[kp][e] = own_step ? pk[2 * k4 + e / 2][e % 2] : pt[e];
          dsa[kp][e] = own_step ? dk2[2 * k4 + e / 2][e % 2] : dt[e];
        }
      }
    }

    // dV[:, half] += P^T dO, dK[:, half] += dS^T Q and dQ[:, half] = dS K, added into the
    // step's dQ tile (the warpgroup's columns as compile-time ranges: a branch a warpgroup)
    const int dq_tiles = kBackwardQuerySplit ? (M + BM - 1) / BM : steps.end;  // dq_acc's tiles a head
    float* const dq_dst = dq_acc + (((i64)b * a.H + h) * dq_tiles + m0 / BM) * (BM * DP) +
                          ((wg * 4 + warp) * (KH / 8) * 32 + lane) * 4;
    float dq2[Pieces::W2 > 0 ? Pieces::W2 / 2 : 1];
    // Where a warp stages dQ's second piece (W2 columns): its part of the warpgroup's own 64-column
    // blocks of the step's Q buffer (wg, then wg + 2), which the warpgroup's dK product alone reads;
    // one bulk reduction a warp instead of W2 / 8 REDG.128 a thread: x1.10 at head dim 256, x1.00
    // -1.03 at 192 (H200, bench/NOTES.md, fiftieth session)
    constexpr int kPart = Pieces::W2 / 8 * 512, kPerBlock = BM * 128 / (kPart > 0 ? kPart : 1);  // bytes; warps a block
    static_assert(!kStaged || (kPerBlock >= 2 && (4 / kPerBlock) * 2 <= DP / 64), "the parts in the own blocks");
    const u32 own_part = (wg + 2 * (warp / kPerBlock)) * (BM * 128) + (warp % kPerBlock) * kPart;
    step_products<Elem, DP, DVP, BM, BN>(acc_dk, acc_dv, pa, dsa, sDS, sK, sQb, sDOb, dq_dst, wg,
                                         part<0, Pieces::W1 / 2>(x), dq2);
    // the next step's start, then this step's last dQ piece added while its S^T / dP^T runs
    Step after = nxt;
    if (nxt.hq < group) {
      after = start_step(nxt, buf ^ 1, false);
      next_loaded = !kStaged;
      wgmma_commit();
    } else {
      wgmma_commit();  // an empty group (a dummy HGMMA), so that the wait is for dq2's
    }
    wgmma_wait<1>();
    cur = nxt, nxt = after;
    if constexpr (kStaged) {  // into the own Q blocks (dK read no others)
      wgmma_pin(dq2);
      stage_dq<Pieces::W2 / 8>(sQb + own_part, dq_dst - lane * 4 + Pieces::W1 / 8 * 32 * 4, dq2, lane);
    }
  }
  if (kStaged && lane == 0) bulk_wait<0>();  // before the CTA's shared memory goes away
  cp_async_wait<0>();  // K and V's copies, when every step was empty
  wgmma_pin(acc_dk);
  wgmma_pin(acc_dv);

  // dK and dV of the CTA's keys, this warpgroup's columns (every query head of the CTA's added in)
  const KvGradStore<Elem> out(a, blk, dk, dv, D, DV);
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int kv = n0 + 16 * warp + g + 8 * hh;
    if (kv >= N) continue;
#pragma unroll
    for (int j = 0; j < KH / 8; ++j) {
      const int col = BwdHalfCols<DP>::col(wg, j) + 2 * t;
      if (col < D)
        out.k_pair((kv_head * N + kv) * D + col, acc_dk[4 * j + 2 * hh] * scale, acc_dk[4 * j + 2 * hh + 1] * scale);
    }
#pragma unroll
    for (int j = 0; j < VH / 8; ++j) {
      const int col = BwdHalfCols<DVP>::col(wg, j) + 2 * t;
      if (col < DV)
        out.v_pair((kv_head * N + kv) * DV + col, acc_dv[4 * j + 2 * hh], acc_dv[4 * j + 2 * hh + 1]);
    }
  }
}

}  // namespace attn_bwd_wide_detail

template <class Elem, int D, int DV, class V, class G>
KDSL_DEVICE void attention_bwd_wgmma_wide(const AttnArgs& a, const typename V::Captures& c, const Elem* dout,
                                          const float* lse, const float* delta, float* dq_acc, Elem* dk, Elem* dv,
                                          const typename G::CaptureGrads& cg) {
  attn_bwd_wide_detail::attention_bwd_wgmma_wide_impl<false, Elem, D, DV, V, G>(nullptr, nullptr, a, c, dout, lse,
                                                                               delta, dq_acc, dk, dv, cg);
}

template <class Elem, int D, int DV, class V, class G>
KDSL_DEVICE void attention_bwd_wgmma_wide_tma(const TmaDesc* tq, const TmaDesc* tdo, const AttnArgs& a,
                                              const typename V::Captures& c, const Elem* dout, const float* lse,
                                              const float* delta, float* dq_acc, Elem* dk, Elem* dv,
                                              const typename G::CaptureGrads& cg) {
  attn_bwd_wide_detail::attention_bwd_wgmma_wide_impl<true, Elem, D, DV, V, G>(tq, tdo, a, c, dout, lse, delta,
                                                                              dq_acc, dk, dv, cg);
}

}  // namespace kdsl
