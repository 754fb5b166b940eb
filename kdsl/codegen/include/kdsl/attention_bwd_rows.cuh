// kdsl/attention_bwd_rows.cuh — the attention backward's memory-bound helpers, around the
// backward kernel, launched a warp per work item (runtime/driver.py WarpKernel: 256 threads a
// block). One pass over their data each, where torch ops took four (delta) or a strided
// gather (dQ's reorder) at about a third of the bandwidth.
//
//   backward_delta: delta[r] = sum over c of dout[r][c] * out[r][c], in fp32, less dlse[r]
//     where the lse's own gradient is given (nullptr: none), for r < rows = B * H * M.
//   dq_tiles_to_rows: attention_bwd_wgmma.cuh's dq_acc (fp32 64-row tiles in the order of its
//     accumulator fragments; that header's launch contract) as dq [B, H, M, D] rows of Elem.
//   kv_grads_from_parts: dK and dV as the sums of a split backward's partials (AttnArgs::
//     head_splits, part_dkv), in Elem.
#pragma once

#include "kdsl/common.cuh"

namespace kdsl {

// One warp a row; each lane reads 16 bytes (8 elements) of both rows a step (DV is a
// multiple of 16, so rows start 32-byte aligned).
template <class Elem, int DV>
KDSL_DEVICE void backward_delta(const Elem* dout, const Elem* out, const float* dlse, float* delta, i64 rows) {
  const i64 r = ((i64)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const uint4* a = reinterpret_cast<const uint4*>(dout + r * DV);
  const uint4* b = reinterpret_cast<const uint4*>(out + r * DV);
  float sum = 0.f;
#pragma unroll
  for (int c = lane; c < DV / 8; c += 32) {
    const uint4 x = __ldg(a + c), y = __ldg(b + c);
    const u32 xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 x2 = unpack2<Elem>(xs[i]), y2 = unpack2<Elem>(ys[i]);
      sum += x2.x * y2.x + x2.y * y2.y;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) delta[r] = dlse != nullptr ? sum - dlse[r] : sum;
}

// The columns of a padded head dim WIDTH (a multiple of 64) that each of the wgmma backwards'
// two warpgroups owns, in n-tiles of 8: the 64-column blocks in turn (block 2 i + wg), then
// half of a last odd block (32 columns at wg * 32). Up to 128 that is columns wg * WIDTH / 2
// on; past it, both warpgroups' products then have the same shapes and differ in address only
// (attention_bwd_wgmma_wide.cuh).
template <int WIDTH>
struct BwdHalfCols {
  static constexpr int kPairs = WIDTH / 128;          // whole 64-column blocks a warpgroup
  static constexpr int kHalf = WIDTH % 128 / 2;       // 32 or 0: its half of the odd block
  static constexpr int kTiles = WIDTH / 16;           // n-tiles a warpgroup
  static_assert(WIDTH % 64 == 0, "64-column blocks");
  // the first column of the warpgroup's n-tile j
  static KDSL_DEVICE int col(int wg, int j) {
    return j < 8 * kPairs ? (2 * (j / 8) + wg) * 64 + 8 * (j % 8) : 128 * kPairs + wg * kHalf + 8 * (j - 8 * kPairs);
  }
};

// One warp per 128 consecutive floats of dq_acc: a 64-row tile's (warpgroup, warp, n-tile j)
// block, lane l holding rows 16 warp + l / 4 and + 8, columns BwdHalfCols<DP>::col(wg, j) + 2
// (l % 4) and + 1 (attention_bwd_wgmma.cuh), each dQ / scale. Rows past M and columns past D
// are padding.
template <class Elem, int D, int DP>
KDSL_DEVICE void dq_tiles_to_rows(const float* acc, Elem* dq, int M, i64 items, float scale) {
  const i64 w = ((i64)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (w >= items) return;
  constexpr int J = DP / 16, PER_TILE = 2 * 4 * J;  // warp blocks a tile
  const i64 tile = w / PER_TILE;                     // over [B, H, tiles]
  const int k = (int)(w - tile * PER_TILE), wg = k / (4 * J), warp = k / J % 4, j = k % J;
  const int tiles = (M + 63) / 64;
  const i64 bh = tile / tiles;
  const int row0 = (int)(tile - bh * tiles) * 64 + 16 * warp + lane / 4;
  const int col = BwdHalfCols<DP>::col(wg, j) + 2 * (lane % 4);
  const float4 v = __ldg(reinterpret_cast<const float4*>(acc) + w * 32 + lane);
  if (col >= D) return;
  if (row0 < M) *reinterpret_cast<u32*>(dq + (bh * M + row0) * D + col) = pack2<Elem>(v.x * scale, v.y * scale);
  if (row0 + 8 < M) *reinterpret_cast<u32*>(dq + (bh * M + row0 + 8) * D + col) = pack2<Elem>(v.z * scale, v.w * scale);
}

// Thread i sums pair i (floats 2 i, 2 i + 1) of the `splits` partials [dK | dV], nk + nv floats
// each (attention_common.cuh AttnArgs::part_dkv), into dk (pairs before nk / 2) or dv, in a
// fixed order: dK and dV stay deterministic.
template <class Elem>
KDSL_DEVICE void kv_grads_from_parts(const float* part, Elem* dk, Elem* dv, i64 nk, i64 nv, int splits) {
  const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x, e = 2 * i;
  if (e >= nk + nv) return;
  float2 sum = __ldg(reinterpret_cast<const float2*>(part + e));
  for (int s = 1; s < splits; ++s) {
    const float2 x = __ldg(reinterpret_cast<const float2*>(part + s * (nk + nv) + e));
    sum.x += x.x, sum.y += x.y;
  }
  *reinterpret_cast<u32*>(e < nk ? dk + e : dv + (e - nk)) = pack2<Elem>(sum.x, sum.y);
}

}  // namespace kdsl
