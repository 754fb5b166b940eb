// kdsl/attention_bwd_wgmma.cuh — attention backward on Hopper warpgroup MMAs (sm_90a).
//
// The same computation as attention_bwd.cuh (FlashAttention-2's backward for any kdsl score
// and mask; read that header's comment first), laid out for wgmma:
//   - A CTA owns BN = 128 keys of one (batch, k/v head), 64 for each of its two warpgroups,
//     and walks the query tiles of every query head that reads them (GQA): BM = 64 rows a
//     step, 128 where both padded head dims are 64 (KDSL_BWD_BM).
//   - Each warpgroup computes S^T = K Q^T and dP^T = V dO^T for its 64 keys, so that the
//     elementwise P^T and dS^T it derives sit in registers exactly as the A operand of
//     dV += P^T dO and dK += dS^T Q wants them: no shared-memory round trip for either.
//   - dS^T also goes to shared memory ([key][q], 128-byte swizzled, by stmatrix), where both
//     warpgroups read it as dS for dQ = dS K, each computing half of dQ's columns (at BM = 128
//     each one 64-query block's, all columns). The step's dQ tile is
//     staged in shared memory in the order of the accumulator fragments (conflict-free 16-byte
//     stores) and added into dq_acc by one bulk reduction (cp.reduce.async.bulk), issued at the
//     next step's start (at head dim 64, added from registers in that order: KDSL_BWD_DQ_RED):
//     dq_acc holds [B, H, ceil(M / 64)] such tiles, which the host puts back
//     in row order (runtime/attention_backward.py, dq_from_tiles).
//   - Q, dO, lse and delta are double-buffered: the next step's tiles land while this one
//     computes, Q and dO by TMA (attention_bwd_wgmma_tma: one thread, an mbarrier a buffer, the
//     tensor maps the runtime passes first; QdoByTma) or by every thread's cp.async
//     (attention_bwd_wgmma, KDSL_BWD_LOADS=cp_async), lse and delta by cp.async.
// Operand tiles use the 128-byte-swizzled layout TMA writes (64-column blocks of rows of 128
// bytes, 8-row atoms of 1024 bytes), so one copy of K serves as the K-major A of S^T and the
// MN-major B of dQ, and one of Q (dO) as the K-major B of S^T (dP^T) and the MN-major B of
// dK (dV). Head dims are padded to 64 or 128 with zeros; larger ones take attention_bwd_wgmma_wide.cuh.
//
// Launch contract (the generated extern "C" kernel forwards to attention_bwd_wgmma[_tma]; the
// _tma form's first two parameters are tensor maps over q and dout, QdoByTma's):
//   grid  = ceil(N / 128) * Hkv * B * splits CTAs (attention_common.cuh, backward_block)
//   block = 256 threads
//   dynamic shared memory = attention_bwd_wgmma_smem_bytes<D, DV, V>() (1024 of it alignment slack;
//   V's streamed mask tensors' tiles: attention_bwd_stream.cuh)
//   dq_acc: zeroed fp32 [B, H, ceil(M / 64), 64 * DP], in fragment order: element (row r, column c)
//   of a tile at ((((wg * 4 + w) * DP / 16 + j) * 32 + lane) * 4 + 2 hh + e) for r = 16 w + 8 hh
//   + lane / 4 and c = wg * DP / 2 + 8 j + 2 (lane % 4) + e; dQ / scale (dS is summed without
//   the softmax scale; attention_bwd_rows.cuh dq_tiles_to_rows applies it)
#pragma once

#include "kdsl/attention_bwd_stream.cuh"
#include "kdsl/attention_common.cuh"
#include "kdsl/hopper.cuh"
#include "kdsl/wgmma_ops_bwd.cuh"

#ifndef KDSL_BWD_BUFFERS  // attention_bwd.cuh's single-buffer switch; sm_90a always has room for two
#define KDSL_BWD_BUFFERS 2
#endif
// A step's dQ added into dq_acc from registers by red.global.add.v4.f32 (1) or staged in shared
// memory and added by one bulk reduction (0); unset (-1): from registers where the padded head dim
// is 64 (its staging buffers then unused; NVIDIA H200, backward alone in turns: x1.02-1.07 at
// D=64, x0.91-0.96 at D=128).
#ifndef KDSL_BWD_DQ_RED
#define KDSL_BWD_DQ_RED -1
#endif
// Query rows a step, 64 or 128: 128 is taken where both padded head dims are 64 and dQ comes from
// registers (else 64), and the generated source asks for it unless ptxas spilled that build
// (emit.backward_step_rows, compiler.build). NVIDIA H200, backward alone: see bench/NOTES.md,
// forty-sixth session. The buffers hold 128 rows there either way, so the launch is the same.
#ifndef KDSL_BWD_KEY_GUARD  // 0: a loading mask's tiles of class kTileKeys check the mask itself (A/B timing)
#define KDSL_BWD_KEY_GUARD 1
#endif
#ifndef KDSL_BWD_WARP_SKIP  // A/B timing: 0 every step's class one after the other, 2 by warp under any mask
#define KDSL_BWD_WARP_SKIP 1
#endif
#ifndef KDSL_BWD_SCORE_FIRST  // 0: a score that loads waits for a loaded mask's decision (A/B timing: element_grads)
#define KDSL_BWD_SCORE_FIRST 1
#endif
#ifndef KDSL_BWD_MASK_FIRST  // 0: a mask that loads waits for the bounds' decision (A/B timing; element_grads)
#define KDSL_BWD_MASK_FIRST 1
#endif
#ifndef KDSL_BWD_DIVIDING_FIRST  // 0: a mask that divides by a divisor that divides (V::kMaskDivides) but loads
#define KDSL_BWD_DIVIDING_FIRST 1  // nothing waits for the bounds' decision (A/B timing; element_grads)
#endif
#ifndef KDSL_BWD_MASK_BITS  // a mask loading rows at the query, beside a score that loads nothing, evaluated first for
#define KDSL_BWD_MASK_BITS 1  // a thread's 32 elements into one word before their grads (0: A/B timing; elementwise)
#endif
#ifndef KDSL_BWD_KEY_MASK  // a key mask's key part (passes/key_mask.py) once a step for the thread's two keys (0: A/B)
#define KDSL_BWD_KEY_MASK 1
#endif
#ifndef KDSL_BWD_QUERY_VALUES  // a mask's value at the query gathered once a query of a step, shuffled to the elements
#define KDSL_BWD_QUERY_VALUES 1  // (passes/key_values.py; 0: per element, A/B)
#endif
#ifndef KDSL_BWD_QUERY_VALUES2  // 0: a mask with two values at the query (a band's lo and hi) reads them per element
#define KDSL_BWD_QUERY_VALUES2 1  // (A/B)
#endif
#ifndef KDSL_BWD_QV_PARTIAL  // 1: the query values gathered on the steps that read the mask only (trial)
#define KDSL_BWD_QV_PARTIAL 0
#endif
#ifndef KDSL_BWD_SUMMARY_FULL  // 0: beside a score that loads, a tile the summary calls full takes the masked path (trial)
#define KDSL_BWD_SUMMARY_FULL 1
#endif
#ifndef KDSL_BWD_KEEP_ROUND  // 0: the 32-wide search forgets each round's answer (A/B timing; BwdSteps::next)
#define KDSL_BWD_KEEP_ROUND 1
#endif
#ifndef KDSL_BWD_BM
#define KDSL_BWD_BM 64
#endif
// A proxy fence at every step's start (1, for A/B timing), or only where a step's tiles come
// through the generic proxy (0): cp.async loads of Q and dO, and K and V once. With TMA loads
// nothing a step reads by wgmma was written by plain stores before that barrier, and the fence
// (MEMBAR.ALL.CTA in SASS) waited for the last step's dQ reductions (ncu, forty-sixth session:
// 6 % of the wide kernel's warp samples at plain 256, long scoreboard; 4 % at 64). Without it,
// backward alone on an H200: x1.18 plain 64, x1.01 causal 64 and plain 128, x1.02 at 256.
#ifndef KDSL_BWD_STEP_FENCE
#define KDSL_BWD_STEP_FENCE 0
#endif
// The next step's copies are issued once this step's first products are (1), or before them (0,
// for A/B timing): a wgmma.fence waits until every earlier cp.async has read its address
// registers, which held the products back by a long-scoreboard stall a step (x1.02-1.09).
#ifndef KDSL_BWD_LOADS_UNDER_MMA
#define KDSL_BWD_LOADS_UNDER_MMA 1
#endif

namespace kdsl {

namespace attn_bwd_wg_detail {

// S1, S2: element bytes of the streamed mask tensors whose step tiles it keeps (0: none;
// attention_bwd_stream.cuh), double-buffered as Q and dO are.
template <int D, int DV, int S1 = 0, int S2 = 0>
struct BwdWgCfg {
  static constexpr int BN = 128;  // keys per CTA, 64 a warpgroup
  static constexpr int DP = (D + 63) / 64 * 64, DVP = (DV + 63) / 64 * 64;  // padded head dims
  static constexpr bool kDqFromRegs = KDSL_BWD_DQ_RED < 0 ? DP == 64 : KDSL_BWD_DQ_RED != 0;
  // Query rows the buffers hold: 128 where both padded head dims are 64 (a warpgroup's S^T and
  // dP^T then m64n128, 64 registers each, beside 32 each of dK and dV), else 64. BM, the rows a
  // step takes, is that where dQ comes from registers (each warpgroup adds one 64-row tile).
  static constexpr int kRows = DP == 64 && DVP == 64 ? 128 : 64;
  static constexpr int BM = kRows == 128 && kDqFromRegs ? KDSL_BWD_BM : 64;
  static constexpr int QB = BM / 64;  // 64-query blocks a step
  static constexpr int kThreads = 256, NB = 2;  // NB: Q / dO buffers
  static constexpr int kQBuf = kRows * DP * 2, kDOBuf = kRows * DVP * 2;
  // tile offsets from a 1024-byte aligned base (each a multiple of 1024)
  static constexpr int kK = 0, kV = kK + BN * DP * 2, kQ = kV + BN * DVP * 2, kDO = kQ + NB * kQBuf;
  static constexpr int kDQBuf = 64 * DP * 4;  // a step's dQ tile in fp32, two of them (one being added out)
  static constexpr int kDS = kDO + NB * kDOBuf, kDQ = kDS + BN * kRows * 2, kLse = kDQ + 2 * kDQBuf;
  static constexpr int kDelta = kLse + NB * kRows * 4, kBar = kDelta + NB * kRows * 4;  // kBar: QdoByTma's mbarriers
  static constexpr int kStream1Buf = kRows * BN * S1, kStream2Buf = kRows * BN * S2;
  static constexpr int kStream1 = kBar + 16, kStream2 = kStream1 + NB * kStream1Buf;
  static constexpr int kSmemBytes = 1024 + kStream2 + NB * kStream2Buf;
  static_assert(D % 16 == 0 && DV % 16 == 0 && DP <= 128 && DVP <= 128, "head dims: multiples of 16 up to 128");
  static_assert(KDSL_BWD_BUFFERS == 2, "the wgmma backward always double-buffers");
  static_assert(BM == 64 || BM == 128, "KDSL_BWD_BM: 64 or 128 query rows a step");
};

// Rows [0, ROWS) of a row-major [rows, COLS] global matrix into the swizzled layout at dst
// (64-column blocks of ROWS rows x 128 bytes, the 16-byte chunk c of row r at c ^ (r % 8)):
// rows >= rows_valid and columns >= COLS land as zeros. Consecutive threads copy consecutive
// 16 bytes of a row (coalesced reads). A thread's chunk column, and so its swizzled offset
// within a row, is the same on every pass: a pass costs a row test, two adds and the copy.
template <class Elem, int COLS, int WIDTH, int ROWS, int THREADS>
KDSL_DEVICE void load_tile(u32 dst, const Elem* src, int rows_valid, int tid) {
  constexpr int kChunks = WIDTH / 8, kRowsPerPass = THREADS / kChunks;
  static_assert(THREADS % kChunks == 0 && kRowsPerPass % 8 == 0 && ROWS % kRowsPerPass == 0, "whole passes");
  const int r0 = tid / kChunks, cc = tid % kChunks;
  const bool col_ok = cc * 8 < COLS;
  const u32 d0 = dst + (cc / 8) * (ROWS * 128) + r0 * 128 + (((cc % 8) ^ (r0 % 8)) << 4);
  const Elem* s0 = src + (i64)r0 * COLS + cc * 8;
#pragma unroll
  for (int pass = 0; pass < ROWS / kRowsPerPass; ++pass) {
    const bool ok = col_ok && r0 + pass * kRowsPerPass < rows_valid;
    cp_async16(d0 + pass * kRowsPerPass * 128, ok ? s0 + (i64)pass * kRowsPerPass * COLS : src, ok ? 16u : 0u);
  }
}

KDSL_DEVICE void st_shared(u32 addr, u32 v) { asm volatile("st.shared.u32 [%0], %1;\n" :: "r"(addr), "r"(v) : "memory"); }
KDSL_DEVICE void st_shared(u32 addr, float v) { asm volatile("st.shared.f32 [%0], %1;\n" :: "r"(addr), "f"(v) : "memory"); }
KDSL_DEVICE float ld_shared_f32(u32 addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
  return v;
}

// A step's Q and dO tiles by TMA (both wgmma backwards' _tma entries): thread 0 issues boxes of
// 64 columns x 64 rows (BM / 64 of them a column block) from 3-D maps over [B * H, M, D] and
// [B * H, M, DV] (the 128-byte swizzle of load_tile's layout; rows past M and columns past D
// land as zeros) onto the mbarrier of their buffer, and every thread waits on it before the step's products. One
// thread's few instructions replace every thread's copies and their address arithmetic.
template <int BM, int DP, int DVP>
struct QdoByTma {
  const TmaDesc* tq;
  const TmaDesc* tdo;
  u32 bar0;         // buffer buf's mbarrier at bar0 + 8 buf
  u32 parity = 0u;  // bit buf: the phase of buffer buf's next completion (buffers take turns)

  KDSL_DEVICE void init(int tid) const {
    if (tid == 0) {
      mbar_init(bar0, 1);
      mbar_init(bar0 + 8, 1);
      mbar_init_fence();
      tma_prefetch_desc(tq);
      tma_prefetch_desc(tdo);
    }
  }
  // thread 0: rows m0.. of (batch, head) pair bh into buffer buf (tiles at sq, sdo)
  KDSL_DEVICE void issue(u32 sq, u32 sdo, int buf, int m0, int bh) const {
    const u32 bar = bar0 + 8 * buf;
    mbar_arrive_expect_tx(bar, BM * (DP + DVP) * 2);  // whole boxes, zero-filled parts included
#pragma unroll
    for (int r = 0; r < BM / 64; ++r) {
#pragma unroll
      for (int cb = 0; cb < DP / 64; ++cb)
        tma_load_3d(sq + cb * BM * 128 + r * 64 * 128, tq, bar, cb * 64, m0 + 64 * r, bh);
#pragma unroll
      for (int cb = 0; cb < DVP / 64; ++cb)
        tma_load_3d(sdo + cb * BM * 128 + r * 64 * 128, tdo, bar, cb * 64, m0 + 64 * r, bh);
    }
  }
  KDSL_DEVICE void wait(int buf) {
    mbar_wait(bar0 + 8 * buf, (parity >> buf) & 1u);
    parity ^= 1u << buf;
  }
};
// Both wgmma backwards' fences for what wgmma (the async proxy) reads. Before the step loop:
// K and V, copied by cp.async (the generic proxy), once they land (the first step's lse / delta
// the one group left). At a step's start: its tiles landed (and were fenced where they came by
// cp.async: KDSL_BWD_STEP_FENCE) for every thread, Q and dO's TMA boxes too.
template <bool kTma>
KDSL_DEVICE void fence_kv_before_steps() {
  if constexpr (kTma && !KDSL_BWD_STEP_FENCE) {
    cp_async_wait<1>();
    fence_proxy_async();
  }
}
template <bool kTma, class Tma>
KDSL_DEVICE void wait_step_tiles(Tma& tma, int buf) {
  cp_async_wait<0>();  // this step's lse / delta (Q and dO too without TMA; the first time, K and V)
  if constexpr (!kTma || KDSL_BWD_STEP_FENCE) fence_proxy_async();
  __syncthreads();  // ... for every thread; and the last step's reads of the other buffer are done
  if constexpr (kTma) tma.wait(buf);  // Q and dO, written by TMA (the async proxy, as wgmma)
}
KDSL_DEVICE void red_add_v4(float* p, float x, float y, float z, float w) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" :: "l"(p), "f"(x), "f"(y), "f"(z), "f"(w) : "memory");
}
KDSL_DEVICE void st_shared(u32 addr, float x, float y, float z, float w) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" :: "r"(addr), "f"(x), "f"(y), "f"(z), "f"(w) : "memory");
}

// What a step's elements check (element_grads): nothing (a full tile inside M and N), the
// bounds and the mask, or the bounds and the mask's key interval per query where the tile
// class says the mask is one (kTileKeys, passes/kv_bounds.py) and the mask itself loads data
// (inside one document the interval is the causal part alone: arithmetic, not two loads).
// Both kernels choose the form inline: through a helper taking the elementwise lambda, ptxas
// scheduled the kernels of programs without the key form differently, and a capture-gradient
// build at head dim 64 spilled its 128-query step.
enum ElementGuard : int { kGuardNone = 0, kGuardMask = 1, kGuardKeys = 2 };
template <int G> struct Guard { static constexpr int value = G; };
template <class V> constexpr bool kGuardByKeys = KDSL_BWD_KEY_GUARD && V::kKeyBounds && V::kMaskLoads;

// An m64nNk16 accumulator (rows = 64 keys, columns = N = 16 KP queries) packed as the A
// fragments of KP k16 steps over the queries: n-tiles 2 kp and 2 kp + 1 make step kp.
template <class Elem, int KP>
KDSL_DEVICE void to_a_fragments(const float (&d)[8 * KP], u32 (&a)[KP][4]) {
#pragma unroll
  for (int kp = 0; kp < KP; ++kp)
#pragma unroll
    for (int e = 0; e < 4; ++e) a[kp][e] = pack2<Elem>(d[8 * kp + 2 * e], d[8 * kp + 2 * e + 1]);
}

// D = A B^T over K / 16 steps, both K-major in swizzled tiles of a_rows and b_rows rows
// (64-column blocks a_rows * 128 / b_rows * 128 bytes apart); the first step overwrites D.
template <class Elem, int N, int K>
KDSL_DEVICE void mma_kmajor(float (&d)[N / 2], u32 sa, int a_rows, u32 sb, int b_rows) {
  u64 da[K / 16], db[K / 16];
  kmajor_steps(da, sa, a_rows, db, sb, b_rows);
  WgmmaQK<Elem, N, K / 16>::run(d, da, db);
}

// D += A B with A from registers (KP k16 steps) and B MN-major: rows k of 128 bytes, the
// next 64 columns block_bytes further on.
template <class Elem, int N, int KP>
KDSL_DEVICE void mma_rs(float (&d)[N / 2], const u32 (&a)[KP][4], u32 sb, int block_bytes) {
  const u64 db0 = desc_mnmajor_sw128(sb, block_bytes);
  u64 db[KP];
#pragma unroll
  for (int kp = 0; kp < KP; ++kp) db[kp] = desc_advance(db0, kp * 16 * 128);
  WgmmaPV<Elem, N, KP>::run(d, a, db);
}

#ifndef KDSL_BWD_KEY_PART_ONCE  // 0: the score's key part per element (A/B timing)
#define KDSL_BWD_KEY_PART_ONCE 1
#endif
// Whether a step evaluates the score's key part once per key of a thread (G::kKeyPart,
// codegen/emit.py _backward_key_part) and its elements read it as kt.
template <class G> constexpr bool kKeyPartOnce = KDSL_BWD_KEY_PART_ONCE && G::kKeyPart;

// The key part at this thread's two keys key0 and key0 + 8 of a step of head h (0 where the
// program has none; a key past N reads key N - 1's, for elements that are dropped).
template <class G, class Captures>
KDSL_DEVICE void key_parts(const AttnArgs& a, const Captures& c, int b, int h, int key0, float (&kt)[2]) {
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) kt[hh] = kKeyPartOnce<G> ? G::key_part(a, c, b, h, imin(key0 + 8 * hh, a.N - 1)) : 0.f;
}

// Whether a whole tile the mask keeps (class kTileFull) takes the unguarded elementwise path,
// both kernels'. KDSL_BWD_SUMMARY_FULL=0 (trial): not beside a score that loads under a mask
// that loads, so that one path holds the score's loads (the two paths spilled, and a summary
// beside such a score lost x0.58 on random bits: bench/NOTES.md, seventy-first session) and the
// summary still skips the empty tiles.
template <class V, class G>
constexpr bool kBwdFullPath = KDSL_BWD_SUMMARY_FULL || !(V::kHasMask && V::kMaskLoads && G::kScoreLoads);

// Whether an element of a step guarded by kGuard evaluates its mask before the bounds decide
// (element_grads explains; not a streamed mask, which the narrower kernel reads from the step's
// copied tiles), both kernels'.
template <class V, int kGuard>
constexpr bool kBwdMaskFirst = KDSL_BWD_MASK_FIRST && kGuard == kGuardMask && V::kHasMask &&
                               (V::kMaskLoads || (KDSL_BWD_DIVIDING_FIRST && V::kMaskDivides)) && !kBwdStreamMask<V>;

// Whether a step gathers its queries' mask values once a query and shuffles them (KDSL_BWD_QUERY_VALUES,
// passes/key_values.py; elementwise() takes them where it reads the mask as written).
template <class V>
constexpr bool kQueryValues = KDSL_BWD_QUERY_VALUES && V::kHasMask && V::kQueryValues &&
                              (KDSL_BWD_QUERY_VALUES2 || !V::kQueryValues2);

// An element pair's query values (and second values, V::kQueryValues2) from the lanes that
// gathered them: chunk `group` of a lane's (kOn: else the zeros they hold). Every lane calls it.
template <class V, bool kOn>
KDSL_DEVICE void query_pair_values(typename V::QueryValue chunk, typename V::QueryValue2 chunk2, int group, int t,
                                   typename V::QueryValue (&qx)[2], typename V::QueryValue2 (&qx2)[2]) {
  if constexpr (kOn) column_pair_values(chunk, group, t, qx);
  if constexpr (kOn && V::kQueryValues2) column_pair_values(chunk2, group, t, qx2);
}

// A row's lse as a full tile's guard-free path reads it (kGuardNone): +inf for a row that saw no
// key (lse = -inf), so that P = 2^(score - lse) is 0 there. That path assumes every row it holds
// saw a key, which a mask guarantees but a score does not: -inf scores from data (an additive
// mask `s + am[b, i, j]`) or from the expression leave a row of a full tile with none, and
// 2^(-inf + inf) was NaN (tests/gpu/test_infinite_scores_gpu.py). The guarded paths test the row
// instead; selecting on every path made ptxas serialize the wide backward's wgmmas at D=64, Dv=256.
template <int kGuard>
KDSL_DEVICE float2 backward_lse(float2 lse) {
  if constexpr (kGuard != kGuardNone) return lse;
  return make_float2(lse.x == neg_inf() ? -neg_inf() : lse.x, lse.y == neg_inf() ? -neg_inf() : lse.y);
}

// One element (query q, key kv) of a wgmma backward's step, both kernels': P = 2^(score log2 e
// - lse log2 e) and dS = P (dP - delta) d score / d s without the softmax scale (which dK and dQ
// take once at the end), in p and ds; both 0 where the element is not kept. kGuard (an
// ElementGuard) checks the bounds, a row that saw no key (lse = -inf) and the mask where the
// tile (class cls) is not full, or its key interval; kGuardNone keeps every element. kt: the
// score's key part at kv (key_parts); mask_of(q, kv) the mask there (V::mask, or V::mask_at on
// the step's streamed tiles: attention_bwd_stream.cuh). Captured tensors' gradient shares go to ug
// (step-uniform) and, for an offset-indexed load, to offset_share(share).
template <class V, class G, int kGuard, class MaskOf, class OffsetShare>
KDSL_DEVICE void element_grads(const AttnArgs& a, const typename V::Captures& c, const typename G::CaptureGrads& cg,
                               int cls, int b, int h, int q, int kv, float kt, float s, float dp, float row_lse,
                               float row_delta, float* ug, float& p, float& ds, const MaskOf& mask_of,
                               OffsetShare offset_share) {
  // KDSL_BWD_SCORE_FIRST: under a mask that loads, a score that loads data (a bias at [b, h, q,
  // kv]) is evaluated for every element, kept or not, at indices clamped inside M and N (a
  // dropped element's value is never used), so that NVVM puts the score's and the mask's loads
  // in flight together; behind the mask's branch each waited its own round trip. An H200 ran
  // held-out 22's bias_under_keep backward x1.63 (D=128) / x1.70 (D=64) faster so, and a score
  // that loads under no mask 3 % slower (learned_relpos: more registers for the edge tiles'
  // path): bench/results/h200-2026-12-02-s70/call2. So only under a loaded mask, the case timed.
  constexpr bool kFirst = KDSL_BWD_SCORE_FIRST && kGuard != kGuardNone && V::kHasMask && V::kMaskLoads &&
                          G::kScoreLoads && !G::kScoreIsS;
  const float sn = s * c.scale;  // (the score's s: one FFMA on raw q.k where the score is s itself)
  const int qc = imin(q, a.M - 1), kc = imin(kv, a.N - 1);  // a kept element's own q and kv
  float first = 0.f;
  if constexpr (kFirst) {
    first = kKeyPartOnce<G> ? G::score_kt(a, c, sn, b, h, qc, kc, kt) : G::score(a, c, sn, b, h, qc, kc);
  }
  // A mask that loads (not from copied tiles) is evaluated for every element at indices clamped
  // inside M and N, before the bounds decide, so that its loads go out unconditionally: NVVM then
  // merges those of one address (a query's or a key's row of data, read by many of the thread's
  // elements) and keeps more in flight. An H200 ran the backward of nine such kernels x1.015
  // (key_importance) to x1.27 (held-out 25's bias_gate) faster so, document_mask x1.07 (D=128) /
  // x1.18 (D=64): bench/results/h200-2026-12-02-s72/call2. KDSL_BWD_MASK_FIRST=0 for A/B timing.
  constexpr bool kMaskFirst = kBwdMaskFirst<V, kGuard>;
  bool mask_first = true;
  if constexpr (kMaskFirst) mask_first = mask_of(qc, kc);
  bool keep = true;
  if constexpr (kGuard) {
    keep = q < a.M && kv < a.N && row_lse != neg_inf();
    if constexpr (kGuard == kGuardKeys) {  // key_bounds clamps to the tile that holds kv
      static_assert((V::kTileKV & (V::kTileKV - 1)) == 0, "key tiles of a power of two");
      int lo, hi;
      V::key_bounds(a, c, b, h, q, kv & -V::kTileKV, lo, hi);
      keep = keep && kv >= lo && kv <= hi;
    } else if (kMaskFirst) {
      keep = keep && (cls == kTileFull || mask_first);
    } else if (V::kHasMask && cls != kTileFull && keep) {
      keep = mask_of(q, kv);
    }
  }
  p = ds = 0.f;
  if (!keep) return;
  const float lse_log2 = row_lse * kLog2e;
  // (the score's key part from kt where kKeyPartOnce: key_parts)
  p = math_exp2(G::kScoreIsS ? s * a.scale_log2 - lse_log2
                : (kFirst ? first : kKeyPartOnce<G> ? G::score_kt(a, c, sn, b, h, q, kv, kt) : G::score(a, c, sn, b, h, q, kv))
                          * kLog2e - lse_log2);
  const float dg = p * (dp - row_delta);  // d loss / d score
  const float d = dg * (kKeyPartOnce<G> ? G::dscore_kt(a, c, sn, b, h, q, kv, kt) : G::dscore(a, c, sn, b, h, q, kv));
  // a derivative undefined where P underflowed adds nothing (a finite constant one gives 0
  // there by itself)
  ds = G::kDscoreConst || p != 0.f ? d : 0.f;
  if constexpr (G::kCaptureGrads)
    if (p != 0.f) {
      float o[1];
      G::add_capture_grads(a, c, cg, sn, b, h, q, kv, dg, ug, o);
      if constexpr (G::kOffsetGrads > 0) offset_share(o[0]);
    }
}

// The captured-tensor gradient of a load indexed by (b, h, q - kv) alone (Grad::kOffsetGrads),
// summed per offset instead of one atomic an element. A thread's elements (j, hh, e) sit at
// q - kv = d0 + 8 (j - hh) + 2 t + e - g, d0 = m0 - (the warp's first key); its shares are
// summed per diagonal u = j - hh in registers, two diagonals open at a time (the elementwise
// loop completes diagonal j - 1 at j). A completed diagonal goes to slot (x, t), x = d - d0 +
// 15 in [0, 79), of `scratch` (the warp's 16 rows of the dS^T tile, free until the step stores
// dS^T): its e = 1 share sits at the offset of lane g - 1's e = 0 share (lane 7's at the next
// diagonal, carried), so each slot has exactly one writer and no shared atomics are needed.
constexpr int kOffsetSlots = 79;  // 64 queries + 16 keys - 1

// Diagonal u's sums (sums[e], zeroed after) into its slot; carry: lane 7's share from lane 0,
// for its next diagonal. Every lane calls it.
KDSL_DEVICE void flush_diagonal(float (&sums)[2], float& carry, u32 scratch, int u, int lane) {
  const int g = lane / 4, t = lane % 4;
  const float r = __shfl_sync(0xffffffffu, sums[1], g < 7 ? lane + 4 : lane - 28);
  const float v = sums[0] + (g < 7 ? r : carry);
  if (g == 7) carry = r;
  st_shared(scratch + ((8 * u + 2 * t - g + 15) * 4 + t) * 4, v);
  sums[0] = sums[1] = 0.f;
}

// After the step's last diagonal: lane 7's carry into its slot, then each lane sums offsets
// x = lane, lane + 32, lane + 64 over the slots that have a writer (x - 15 - 2 t = 8 u - g with
// u in [-1, 7], or u = 8 for g = 7) and adds each with one atomic. An offset no kept element
// has sums to 0 and is skipped, so entries are read only at offsets the bounds check covered.
template <class V, class G>
KDSL_DEVICE void add_offset_sums(const AttnArgs& a, const typename V::Captures& c, const typename G::CaptureGrads& cg,
                                 float carry, u32 scratch, int b, int h, int d0, int lane) {
  const int g = lane / 4, t = lane % 4;
  if (g == 7) st_shared(scratch + ((64 + 2 * t - 7 + 15) * 4 + t) * 4, carry);
  __syncwarp();
#pragma unroll
  for (int r = 0; r < 3; ++r) {
    const int x = lane + 32 * r;
    float sum = 0.f;
#pragma unroll
    for (int tt = 0; tt < 4; ++tt) {
      const int X = x - 15 - 2 * tt, gg = (-X) & 7, uu = (X + gg) >> 3;
      if (x < kOffsetSlots && ((uu >= -1 && uu <= 7) || (uu == 8 && gg == 7)))
        sum += ld_shared_f32(scratch + (x * 4 + tt) * 4);
    }
    if (sum != 0.f) G::add_offset_grad(a, c, cg, b, h, d0 + x - 15, sum);
  }
  __syncwarp();  // the scratch rows are the warp's dS^T rows, stored next
}

// The steps of a backward CTA: query tile mt of each query head h0 + hq of its range of its k/v
// head's group (GQA; all of the group's unless split over CTAs: BackwardBlock), tiles first ..
// end - 1 of each (all of them unless the query tiles are split too: backward_query_tiles),
// those backward_tile_class calls empty skipped (as in attention_bwd.cuh), walked as (head,
// tile) pairs so that a step costs no division. Query tiles are split only where a CTA has one
// query head (AttnArgs::query_splits), so a walk wraps to tile 0 of the next head: first is
// 0 wherever there is one, and only the start reads it.
template <class V, int BM, int BN>
struct BwdSteps {
  struct Step { int hq, mt; };
  int b, h0, n0, group, end;  // the CTA's query heads h0 .. h0 + group - 1 (BackwardBlock)
  int first;
  KDSL_DEVICE BwdSteps(const BackwardBlock& blk, const QueryTiles& tiles)
      : b(blk.b), h0(blk.h0), n0(blk.n0), group(blk.heads), end(tiles.end), first(tiles.first) {}
  KDSL_DEVICE Step start() const {  // (a range of split query tiles may be empty)
    return !kBackwardQuerySplit || first < end ? Step{0, first} : Step{group, 0};
  }
  KDSL_DEVICE int tile_class(const AttnArgs& a, const typename V::Captures& c, Step st) const {
    return backward_tile_class<V, BM, BN>(a, c, b, h0 + st.hq, st.mt * BM, n0);
  }
  KDSL_DEVICE Step advance(Step st) const { return st.mt + 1 < end ? Step{st.hq, st.mt + 1} : Step{st.hq + 1, 0}; }
  // The first step from st whose tile is not empty ({group, 0} past the last). A tile class
  // read from the tile summary (a mask that reads data) is a load: a warp then checks 32 steps
  // at a time, one a lane, so that a run of empty tiles (the rows of other documents) costs a
  // round per 32 tiles, not a dependent load per tile, before the next step's loads can go out.
  // The round's answer is kept (window, live: the steps window .. window + 31 that are not
  // empty), so a CTA whose tiles are all live (random bits) waits on one load per 32 steps,
  // not on one at every step's start (its backward took 15 % longer than one that read no
  // summary). Called by whole warps; every lane keeps the same window.
  KDSL_DEVICE Step next(const AttnArgs& a, const typename V::Captures& c, Step st) {
    constexpr bool kByWarp = KDSL_BWD_WARP_SKIP == 2 ? V::kHasMask : KDSL_BWD_WARP_SKIP == 1 && V::kSummaries > 0;
    if constexpr (!kByWarp) {  // classes by arithmetic: one after the other
      while (st.hq < group && tile_class(a, c, st) == kTileEmpty) st = advance(st);
      return st;
    }
    const int lane = threadIdx.x & 31, steps = group * end;
    int it = st.hq * end + st.mt;
    while (it < steps) {
      if (!KDSL_BWD_KEEP_ROUND || it < window || it >= window + 32) {  // a round: steps it .. it + 31, one a lane
        const int mine = it + lane, hq = mine / end;
        window = it;
        live = __ballot_sync(0xffffffffu, mine < steps && tile_class(a, c, Step{hq, mine - hq * end}) != kTileEmpty);
      }
      const unsigned ahead = live >> (it - window);
      if (ahead) {
        it += __ffs(ahead) - 1;
        break;
      }
      it = window + 32;
    }
    return it < steps ? Step{it / end, it % end} : Step{group, 0};
  }

 private:
  int window = -32;
  unsigned live = 0;
};

// A step's lse and delta (BM rows from row0, query m0 of M) into buffer buf of the shared
// arrays at slse and sdelta; rows past M get zeros, never read (their q >= M).
template <int BM>
KDSL_DEVICE void copy_row_stats(u32 slse, u32 sdelta, int buf, const float* lse, const float* delta, i64 row0, int m0,
                                int M, int tid) {
  if (tid < BM) {
    const bool in = m0 + tid < M;
    cp_async4_or_zero(slse + (buf * BM + tid) * 4, in ? lse + row0 + tid : lse, in);
    cp_async4_or_zero(sdelta + (buf * BM + tid) * 4, in ? delta + row0 + tid : delta, in);
  }
}

}  // namespace attn_bwd_wg_detail

template <int D, int DV, class V>
__host__ __device__ constexpr int attention_bwd_wgmma_smem_bytes() {
  return attn_bwd_wg_detail::BwdWgCfg<D, DV, attn_bwd_wg_detail::bwd_ring1_bytes<V>(),
                                      attn_bwd_wg_detail::bwd_ring2_bytes<V>()>::kSmemBytes;
}
template <int D, int DV>
__host__ __device__ constexpr int attention_bwd_wgmma_threads() { return attn_bwd_wg_detail::BwdWgCfg<D, DV>::kThreads; }
template <int D, int DV>
__host__ __device__ constexpr int attention_bwd_wgmma_min_blocks() { return 1; }

namespace attn_bwd_wg_detail {

// The kernel; with kTma, Q and dO tiles come by TMA from the maps tq / tdo (QdoByTma), else by
// every thread's cp.async.
template <bool kTma, class Elem, int D, int DV, class V, class G>
KDSL_DEVICE void attention_bwd_wgmma_impl(const TmaDesc* tq, const TmaDesc* tdo, const AttnArgs& a,
                                          const typename V::Captures& c, const Elem* dout, const float* lse,
                                          const float* delta, float* dq_acc, Elem* dk, Elem* dv,
                                          const typename G::CaptureGrads& cg) {
  using namespace attn_bwd_wg_detail;
  typedef BwdWgCfg<D, DV, bwd_ring1_bytes<V>(), bwd_ring2_bytes<V>()> C;
  constexpr int BM = C::BM, BN = C::BN, DP = C::DP, DVP = C::DVP, T = C::kThreads, QB = C::QB;
  // dQ's split: a 64-query step gives each warpgroup half of the columns, a 128-query one each
  // warpgroup one 64-query block (64-row tile of dq_acc) of all DP columns
  constexpr int DQN = QB == 1 ? DP / 2 : DP;
  extern __shared__ __align__(128) u8 kdsl_bwd_smem[];
  const u32 raw = smem_addr(kdsl_bwd_smem), base = (raw + 1023u) & ~1023u;  // the swizzle repeats every 1024 bytes
  u8* const smem = kdsl_bwd_smem + (base - raw);
  const u32 sK = base + C::kK, sV = base + C::kV, sQ = base + C::kQ, sDO = base + C::kDO, sDS = base + C::kDS;
  const float* sLse = reinterpret_cast<const float*>(smem + C::kLse);
  const float* sDelta = reinterpret_cast<const float*>(smem + C::kDelta);

  const int tid = threadIdx.x, wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4, t = lane % 4;
  const BackwardBlock blk = backward_block<BN>(a);
  const int n0 = blk.n0, hkv = blk.hkv, b = blk.b;
  const int M = a.M, N = a.N, group = blk.heads, h0 = blk.h0;  // the query heads walked
  const float scale = c.scale;

  const i64 kv_head = (i64)b * a.Hkv + hkv;
  load_tile<Elem, D, DP, BN, T>(sK, static_cast<const Elem*>(a.k) + (kv_head * N + n0) * D, N - n0, tid);
  load_tile<Elem, DV, DVP, BN, T>(sV, static_cast<const Elem*>(a.v) + (kv_head * N + n0) * DV, N - n0, tid);
  cp_async_commit();

  float acc_dk[DP / 2], acc_dv[DVP / 2];
#pragma unroll
  for (int i = 0; i < DP / 2; ++i) acc_dk[i] = 0.f;
#pragma unroll
  for (int i = 0; i < DVP / 2; ++i) acc_dv[i] = 0.f;

  // Step cur's tiles sit in buffer buf while the next step's land in the other.
  typedef BwdSteps<V, BM, BN> Steps;
  typedef typename Steps::Step Step;
  Steps steps(blk, backward_query_tiles<BM>(a, blk));
  const int dq_tiles = (M + 63) / 64;  // dq_acc's 64-row tiles a (batch, head)
  QdoByTma<BM, DP, DVP> tma{tq, tdo, base + C::kBar};
  if constexpr (kTma) tma.init(tid);
  auto issue = [&](Step st, int buf) {
    const int m0 = st.mt * BM;
    const i64 row0 = ((i64)b * a.H + h0 + st.hq) * M + m0;
    if constexpr (kTma) {
      if (tid == 0) tma.issue(sQ + buf * C::kQBuf, sDO + buf * C::kDOBuf, buf, m0, b * a.H + h0 + st.hq);
    } else {
      load_tile<Elem, D, DP, BM, T>(sQ + buf * C::kQBuf, static_cast<const Elem*>(a.q) + row0 * D, M - m0, tid);
      load_tile<Elem, DV, DVP, BM, T>(sDO + buf * C::kDOBuf, dout + row0 * DV, M - m0, tid);
    }
    copy_row_stats<BM>(base + C::kLse, base + C::kDelta, buf, lse, delta, row0, m0, M, tid);
    const int hq = h0 + st.hq;  // the mask's streamed tiles (attention_bwd_stream.cuh)
    if constexpr (kBwdCopy1<V>)
      copy_stream_tile<bwd_ring1_bytes<V>(), BM, BN, T>(
          base + C::kStream1 + buf * C::kStream1Buf, [&](int q) { return V::stream_row(a, c, b, hq, q); }, m0, M, n0,
          N, tid);
    if constexpr (kBwdCopy2<V>)
      copy_stream_tile<bwd_ring2_bytes<V>(), BM, BN, T>(
          base + C::kStream2 + buf * C::kStream2Buf, [&](int q) { return V::stream2_row(a, c, b, hq, q); }, m0, M, n0,
          N, tid);
    if constexpr (kBwdPrefetch1<V, DP>)  // and those it reads per element, into L2
      prefetch_stream_tile<V::kStreamElemBytes, BM, BN, T>([&](int q) { return V::stream_row(a, c, b, hq, q); }, m0, M,
                                                           n0, N, tid);
    if constexpr (kBwdPrefetch2<V, DP>)
      prefetch_stream_tile<V::kStream2ElemBytes, BM, BN, T>([&](int q) { return V::stream2_row(a, c, b, hq, q); }, m0,
                                                            M, n0, N, tid);
    cp_async_commit();
  };

  // Where this thread's elements sit in the mask's copied tiles (attention_bwd_stream.cuh)
  const StreamLanes<typename V::StreamElem, BM> lanes1(wg, warp, g, t);
  const StreamLanes<typename V::Stream2Elem, BM> lanes2(wg, warp, g, t);

  // This warpgroup's 64 keys: rows 64 wg.. of every 64-column block of K and V.
  const u32 sKw = sK + wg * 64 * 128, sVw = sV + wg * 64 * 128;
  // dQ's B: columns dq_col0.. of K read MN-major (a 64-column block, or half of one at DP = 64
  // in 64-query steps; the swizzle applies to absolute addresses, so a descriptor may start
  // mid-row); its A: this warpgroup's 64-query block of dS^T
  const int dq_col0 = QB == 1 ? wg * DQN : 0;
  const u32 sKq = sK + (dq_col0 / 64) * (BN * 128) + (dq_col0 % 64) * 2;
  const u32 sDSq = sDS + (QB == 1 ? 0 : wg) * (BN * 128);

  // The dQ tile staged last step, added out at this step's start (one thread's bulk reduction,
  // after the barrier that makes every thread's stores visible to it)
  float* dq_pending = nullptr;
  int dq_buf = 0;
  auto add_out_dq = [&]() {
    if (tid == 0 && dq_pending != nullptr) {
      bulk_reduce_add_f32(dq_pending, base + C::kDQ + (dq_buf ^ 1) * C::kDQBuf, C::kDQBuf);
      bulk_commit();
      bulk_wait_read<1>();  // the tile added two steps ago has been read: its buffer is free
    }
  };

  Step cur = steps.next(a, c, steps.start());
  int buf = 0;
  if (cur.hq < group) issue(cur, 0);
  fence_kv_before_steps<kTma>();
  for (; cur.hq < group; buf ^= 1) {
    const Step nxt = steps.next(a, c, steps.advance(cur));
    wait_step_tiles<kTma>(tma, buf);
    add_out_dq();
    if (!KDSL_BWD_LOADS_UNDER_MMA && nxt.hq < group) issue(nxt, buf ^ 1);
    const int cls = steps.tile_class(a, c, cur), h = h0 + cur.hq, m0 = cur.mt * BM;
    float kt[2];  // the score's key part at the thread's keys (key0 below), loaded before the wgmmas wait
    key_parts<G>(a, c, b, h, n0 + 64 * wg + 16 * warp + g, kt);
    const u32 sQb = sQ + buf * C::kQBuf, sDOb = sDO + buf * C::kDOBuf;
    const float* sLseb = sLse + buf * BM;
    const float* sDeltab = sDelta + buf * BM;
    const u8* const sS1 = smem + C::kStream1 + buf * C::kStream1Buf;
    const u8* const sS2 = smem + C::kStream2 + buf * C::kStream2Buf;
    cur = nxt;

    // S^T = K Q^T and dP^T = V dO^T: this warpgroup's 64 keys x the step's BM queries
    float s[BM / 2], dp[BM / 2];
    wgmma_fence();
    mma_kmajor<Elem, BM, DP>(s, sKw, BN, sQb, BM);
    wgmma_commit();  // S^T a group of its own: a wait<1> can take it before dP^T (branch backward-overlap)
    mma_kmajor<Elem, BM, DVP>(dp, sVw, BN, sDOb, BM);
    wgmma_commit();
    if (KDSL_BWD_LOADS_UNDER_MMA && nxt.hq < group) issue(nxt, buf ^ 1);
    // V::kQueryValues (passes/key_values.py, KDSL_BWD_QUERY_VALUES): the mask's value at the
    // step's queries, lane l of each warp query m0 + 64 qb + l + 32 u (clamped to M - 1 as the
    // mask's loads are), gathered while the wgmmas run; each element shuffles its own (elementwise).
    // Per element, a thread's 16 queries a block were gathered after the wait, a round trip a step.
    // A full tile inside M and N takes the unguarded elementwise path below, which reads no mask.
    const bool unguarded = m0 + BM <= M && n0 + BN <= N && (!V::kHasMask || (kBwdFullPath<V, G> && cls == kTileFull));
    typename V::QueryValue qv[QB][2] = {};
    typename V::QueryValue2 qv2[QB][2] = {};  // the second (V::kQueryValues2)
    if constexpr (kQueryValues<V>) {
      if (!KDSL_BWD_QV_PARTIAL || !unguarded) {
#pragma unroll
        for (int qb = 0; qb < QB; ++qb)
#pragma unroll
          for (int u = 0; u < 2; ++u) {
            const int mq = imin(m0 + 64 * qb + lane + 32 * u, M - 1);
            qv[qb][u] = V::mask_query_value(a, c, b, h, mq);
            if constexpr (V::kQueryValues2) qv2[qb][u] = V::mask_query_value2(a, c, b, h, mq);
          }
      }
    }
    wgmma_wait<0>();
    wgmma_pin(s);
    wgmma_pin(dp);

    // P^T and dS^T elementwise, in place: s[i] becomes P, dp[i] dS (rows are keys, columns
    // queries; 64-query block qb in elements 32 qb..). A full tile inside M and N keeps every
    // element, and every row it holds sees a key (its lse is finite): that path evaluates no
    // predicate. Otherwise an element is kept inside the bounds, where the mask keeps it and
    // its row saw some key (lse > -inf).
    const int key0 = n0 + 64 * wg + 16 * warp + g;  // the thread's row hh is key key0 + 8 hh
    float ug[G::kUniformGrads > 0 ? G::kUniformGrads : 1] = {};  // step-uniform capture gradients
    // the offset-indexed one (flush_diagonal): diagonal u's shares in od[u & 1][e]
    constexpr bool kOffsetGrad = G::kCaptureGrads && G::kOffsetGrads > 0;
    float od[2][2] = {}, carry = 0.f;
    const u32 scratch = sDS + (64 * wg + 16 * warp) * 128;
    auto elementwise = [&](auto guarded) {
      constexpr int kGuard = decltype(guarded)::value;
      // KDSL_BWD_MASK_BITS: the mask-first values of a 64-query block, bit 4 j + 2 hh + e,
      // for a mask that loads rows' values at the query (16 rows a thread; kMaskLoadsRows) beside a
      // score that loads nothing. The runtime's D=128 builds at 2x16x4096^2: local memory 64 -> 32 B
      // (document_mask), 72 -> 48 (two_level_docs), 56 -> 32 (u8_documents), but 0 -> 64
      // (span_per_query) and 48 -> 80 (segment_causal); a mask reading at the key alone spilled
      // more so (head_label 72 -> 88 B), one reading a (query, key) pair too (token_tree 32 -> 72:
      // 32 loads live), and beside a score that loads the same tensor its loads no longer merged
      // with the score's (bias_gate LDG 55 -> 83, 0 -> 16 B). H200 backward x0.98-x1.17 on twelve
      // kernels it takes, but x0.90 for held-out 5's bool_logic, whose bool classes compared with a
      // key parity (tools/dev/bits_probe.kd) cost (bench/NOTES.md, seventy-third session).
      constexpr bool kBits = KDSL_BWD_MASK_BITS && kBwdMaskFirst<V, kGuard> && V::kMaskLoadsRows &&
                             !G::kScoreLoads;
      // KDSL_BWD_KEY_MASK: the key part of a key mask (V::kKeyMask) at the thread's two
      // keys, once a step; an element then takes the arm it picks (where the bits hold no mask).
      // H200 backward: head_label x1.10, not_stale x1.04 (local memory 80 -> 0 B in head_label)
      constexpr bool kKeyPart = KDSL_BWD_KEY_MASK && !kBits && kGuard == kGuardMask && V::kHasMask && V::kKeyMask &&
                                !kBwdStreamMask<V>;
      // kQueryValues<V>: an element's query value from the lane that gathered it (query 8 j + 2 t + e
      // of a 64-query block is lane 8 (j % 4) + 2 t + e's chunk j / 4), where the mask is read as written
      // (and in the bits above)
      constexpr bool kQV = kQueryValues<V> && !kBits && !kKeyPart && !kBwdStreamMask<V>;
      bool kp[2] = {true, true};
      if constexpr (kKeyPart) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) kp[hh] = V::mask_key_part(a, c, b, h, imin(key0 + 8 * hh, N - 1));
      }
      const auto arm = [&](int which, int mq, int mkv) {
        const int form = V::kKeyArms[which];
        return form == 1 || (form != 0 && (which == 0 ? V::mask_with(a, c, b, h, mq, mkv)
                                                      : V::mask_without(a, c, b, h, mq, mkv)));
      };
#pragma unroll
      for (int qb = 0; qb < QB; ++qb) {
        u32 bits = 0u;
        if constexpr (kBits) {
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            typename V::QueryValue qx[2] = {};  // the query values (kQueryValues<V>), as elementwise below
            typename V::QueryValue2 qx2[2] = {};
            query_pair_values<V, kQueryValues<V>>(qv[qb][j / 4], qv2[qb][j / 4], j % 4, t, qx, qx2);
#pragma unroll
            for (int hh = 0; hh < 2; ++hh)
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int mq = imin(m0 + 64 * qb + 8 * j + 2 * t + e, M - 1), mkv = imin(key0 + 8 * hh, N - 1);
                bits |= (u32)(kQueryValues<V> ? V::mask_qvalued(a, c, b, h, mq, mkv, qx[e], qx2[e])
                                              : V::mask(a, c, b, h, mq, mkv))
                        << (4 * j + 2 * hh + e);
              }
          }
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int col = 64 * qb + 8 * j + 2 * t;
          typename V::QueryValue qx[2] = {};  // (unconditional: every lane takes part in the shuffles)
          typename V::QueryValue2 qx2[2] = {};
          query_pair_values<V, kQV>(qv[qb][j / 4], qv2[qb][j / 4], j % 4, t, qx, qx2);
          const float2 lse2 = backward_lse<kGuard>(*reinterpret_cast<const float2*>(sLseb + col));
          const float2 delta2 = *reinterpret_cast<const float2*>(sDeltab + col);
#pragma unroll
          for (int hh = 0; hh < 2; ++hh)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int i = 32 * qb + 4 * j + 2 * hh + e, q = m0 + col + e, kv = key0 + 8 * hh;
              const float row_lse = e ? lse2.y : lse2.x, row_delta = e ? delta2.y : delta2.x;
              float p, ds;
              // the mask at (q, kv): from the step's copied tiles where it reads streamed tensors
              const auto mask_of = [&](int mq, int mkv) {
                if constexpr (kBits) {
                  return ((bits >> (4 * j + 2 * hh + e)) & 1u) != 0u;
                } else if constexpr (kKeyPart) {
                  return kp[hh] ? arm(0, mq, mkv) : arm(1, mq, mkv);
                } else if constexpr (kBwdStreamMask<V>) {
                  typename StreamValueOf<typename V::StreamElem>::T sv1{};
                  typename StreamValueOf<typename V::Stream2Elem>::T sv2{};
                  if constexpr (kBwdCopy1<V>) sv1 = lanes1.at(sS1, 64 * qb + 8 * j, e, hh);
                  if constexpr (kBwdCopy2<V>) sv2 = lanes2.at(sS2, 64 * qb + 8 * j, e, hh);
                  return V::mask_at(a, c, b, h, mq, mkv, sv1, sv2);
                } else if constexpr (kQV) {
                  return V::mask_qvalued(a, c, b, h, mq, mkv, qx[e], qx2[e]);
                } else {
                  return V::mask(a, c, b, h, mq, mkv);
                }
              };
              element_grads<V, G, kGuard>(a, c, cg, cls, b, h, q, kv, kt[hh], s[i], dp[i], row_lse, row_delta, ug, p, ds,
                                          mask_of, [&](float share) { od[(j - hh) & 1][e] += share; });
              s[i] = p;
              dp[i] = ds;
            }
          if constexpr (kOffsetGrad) flush_diagonal(od[(j - 1) & 1], carry, scratch, j - 1, lane);  // now complete
        }
        if constexpr (kOffsetGrad) {  // the block's last diagonal, then its offsets' sums
          flush_diagonal(od[1], carry, scratch, 7, lane);
          add_offset_sums<V, G>(a, c, cg, carry, scratch, b, h, m0 + 64 * qb - (key0 - g), lane);
          carry = 0.f;
        }
      }
    };
    if (unguarded)
      elementwise(Guard<kGuardNone>{});
    else if constexpr (kGuardByKeys<V>) {
      if (cls == kTileKeys) elementwise(Guard<kGuardKeys>{});
      else elementwise(Guard<kGuardMask>{});
    } else elementwise(Guard<kGuardMask>{});
    if constexpr (G::kCaptureGrads && G::kUniformGrads > 0) G::flush_uniform_grads(a, c, cg, b, h, ug);
    constexpr int KP = BM / 16;  // k16 steps over the step's queries
    u32 pa[KP][4], dsa[KP][4];
    to_a_fragments<Elem, KP>(s, pa);
    to_a_fragments<Elem, KP>(dp, dsa);
    // dS^T to shared memory as [key][q] rows of 128 bytes, swizzled, a 64-query block BN rows
    // on from the last: one stmatrix a k16 step, its fragment word e the 8 x 8 matrix of rows
    // + 8 (e % 2) and chunk 2 kp + e / 2, whose row lane % 8 lane 8 e + lane % 8 addresses.
    // With chunk 2 kp ^ (lane / 16) and row % 8 = lane % 8, a step's address is one xor away
    // from ds_row's, which holds the swizzle of kp = 0 (fewer live registers than an address a
    // store: at 128 queries a step ptxas spilled those).
    {
      const int row = 64 * wg + 16 * warp + 8 * ((lane / 8) % 2) + lane % 8;
      const u32 ds_row = sDS + row * 128 + (((lane / 16) ^ (lane % 8)) << 4);
#pragma unroll
      for (int kp = 0; kp < KP; ++kp)
        stmatrix_x4((ds_row ^ ((2 * (kp % 4)) << 4)) + (kp / 4) * (BN * 128), dsa[kp][0], dsa[kp][1], dsa[kp][2],
                    dsa[kp][3]);
    }

    // dV += P^T dO and dK += dS^T Q (B: dO and Q read MN-major, the next 64 columns BM rows on)
    wgmma_fence();
    mma_rs<Elem, DVP, KP>(acc_dv, pa, sDOb, BM * 128);
    mma_rs<Elem, DP, KP>(acc_dk, dsa, sQb, BM * 128);
    wgmma_commit();

    fence_proxy_async();  // dS^T's stores, read next by the wgmma of both warpgroups

    // dQ = dS K: this warpgroup's 64 queries x DQN columns, over all BN keys; A is dS^T read
    // MN-major (one 64-query block), B K's rows read MN-major. (Issuing the k-steps over the
    // warpgroup's own keys before the barrier gained nothing: bench/NOTES.md, 48th session.)
    float dq[DQN / 2];
#pragma unroll
    for (int i = 0; i < DQN / 2; ++i) dq[i] = 0.f;
    {
      const u64 da0 = desc_mnmajor_sw128(sDSq, BN * 128), db0 = desc_mnmajor_sw128(sKq, BN * 128);
      named_barrier(1, T);  // the other warpgroup's rows, and (add_out_dq's wait) the dQ buffer written below is free
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < BN / 16; ++k)
        WgmmaSSTT<Elem, DQN>::run(dq, desc_advance(da0, k * 16 * 128), desc_advance(db0, k * 16 * 128), 1);
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_pin(dq);
    if constexpr (C::kDqFromRegs) {  // fragment order, from registers
      // the tile of this warpgroup's queries; its n-tile j is the contract's n-tile j' of warpgroup wg'
      const int tile = m0 / 64 + (QB == 1 ? 0 : wg);
      if (QB == 1 || tile < dq_tiles) {
        float* const dst = dq_acc + (((i64)b * a.H + h) * dq_tiles + tile) * (64 * DP);
#pragma unroll
        for (int j = 0; j < DQN / 8; ++j) {
          const int jj = dq_col0 / 8 + j, wgc = jj / (DP / 16), jc = jj % (DP / 16);
          red_add_v4(dst + (((wgc * 4 + warp) * (DP / 16) + jc) * 32 + lane) * 4, dq[4 * j], dq[4 * j + 1], dq[4 * j + 2],
                     dq[4 * j + 3]);
        }
      }
    } else {  // staged in fragment order (the launch contract's layout), added out next step
      static_assert(QB == 1, "the staged dQ takes 64-query steps");
      const u32 dq_stage = base + C::kDQ + dq_buf * C::kDQBuf + ((wg * 4 + warp) * (DQN / 8) * 32 + lane) * 16;
#pragma unroll
      for (int j = 0; j < DQN / 8; ++j)
        st_shared(dq_stage + j * 32 * 16, dq[4 * j], dq[4 * j + 1], dq[4 * j + 2], dq[4 * j + 3]);
      fence_proxy_async();  // ... read by the bulk reduction, the async proxy
      dq_pending = dq_acc + (((i64)b * a.H + h) * dq_tiles + m0 / 64) * (64 * DP);
      dq_buf ^= 1;
    }
  }
  __syncthreads();  // the last dQ tile's stores
  add_out_dq();
  if (tid == 0) bulk_wait<0>();  // before the CTA's shared memory goes away

  cp_async_wait<0>();  // K and V's copies, when every step was empty
  wgmma_pin(acc_dk);
  wgmma_pin(acc_dv);

  // dK and dV of this warpgroup's keys (every query head of the CTA's added in)
  const KvGradStore<Elem> out(a, blk, dk, dv, D, DV);
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int kv = n0 + 64 * wg + 16 * warp + g + 8 * hh;
    if (kv >= N) continue;
#pragma unroll
    for (int j = 0; j < DP / 8; ++j) {
      const int col = 8 * j + 2 * t;
      if (col < D)  // the softmax scale dS left out
        out.k_pair((kv_head * N + kv) * D + col, acc_dk[4 * j + 2 * hh] * scale, acc_dk[4 * j + 2 * hh + 1] * scale);
    }
#pragma unroll
    for (int j = 0; j < DVP / 8; ++j) {
      const int col = 8 * j + 2 * t;
      if (col < DV)
        out.v_pair((kv_head * N + kv) * DV + col, acc_dv[4 * j + 2 * hh], acc_dv[4 * j + 2 * hh + 1]);
    }
  }
}

}  // namespace attn_bwd_wg_detail

template <class Elem, int D, int DV, class V, class G>
KDSL_DEVICE void attention_bwd_wgmma(const AttnArgs& a, const typename V::Captures& c, const Elem* dout,
                                     const float* lse, const float* delta, float* dq_acc, Elem* dk, Elem* dv,
                                     const typename G::CaptureGrads& cg) {
  attn_bwd_wg_detail::attention_bwd_wgmma_impl<false, Elem, D, DV, V, G>(nullptr, nullptr, a, c, dout, lse, delta,
                                                                         dq_acc, dk, dv, cg);
}

template <class Elem, int D, int DV, class V, class G>
KDSL_DEVICE void attention_bwd_wgmma_tma(const TmaDesc* tq, const TmaDesc* tdo, const AttnArgs& a,
                                         const typename V::Captures& c, const Elem* dout, const float* lse,
                                         const float* delta, float* dq_acc, Elem* dk, Elem* dv,
                                         const typename G::CaptureGrads& cg) {
  attn_bwd_wg_detail::attention_bwd_wgmma_impl<true, Elem, D, DV, V, G>(tq, tdo, a, c, dout, lse, delta, dq_acc, dk,
                                                                        dv, cg);
}

}  // namespace kdsl
