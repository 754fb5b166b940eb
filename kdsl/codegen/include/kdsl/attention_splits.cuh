// kdsl/attention_splits.cuh — merging split-KV partial results: the split of each row's keys
// left a normalised fp32 O and its lse (attention_wgmma.cuh's split epilogue); a row of out is
// their lse-weighted mean. Run by the item that finishes a row's last split, or by
// attention_combine_splits as a kernel of its own.
#pragma once
#include "kdsl/attention_wgmma_parts.cuh"

namespace kdsl {

// Splits whose loads a round of combine_split_rows<.., R> issues for each of its R rows.
__host__ __device__ constexpr int merge_batch(int R) { return R >= 8 ? 1 : 8 / R; }

// Split-KV: each split of the keys left its normalised O (fp32) and lse; row `row` of out
// (of rows = B * H * M) is their lse-weighted mean and of lse their log-sum-exp, computed by
// one warp: lane l holds columns 64 c + 2 l and 64 c + 2 l + 1 of each 64-column block c.
// One pass, online: a running max of the splits' lse rescales the weights and the sum taken
// so far. A warp merges R rows at once (row, row + stride, ... : those below `end`): the
// loads of kBatch splits of each (their addresses depend on nothing computed) are all issued
// before the first is used, so R rows cost one round of L2 latency per kBatch splits.
// (Two passes, the max first, cost three rounds: 6.7 us for B=1 H=16 against cuDNN's 4.2 us
// reduction, under ncu on an H100.) R > 1 is for a warp with many rows to merge (the item
// that merges itself: 16 rows a warp), where rows one after another were 16 rounds.
// Loads bypass L1 (ld.global.cg): the attention kernel's last CTA of an item merges what
// other CTAs wrote during the same launch.
template <class Elem, int D, int R = 1>
KDSL_DEVICE void combine_split_rows(const float* part_o, const float* part_lse, void* o, float* lse, int rows,
                                    int splits, int row, int stride, int end, int lane) {
  constexpr int kBlocks = (D + 63) / 64, kBatch = merge_batch(R);
  auto in_row = [&](int c) { return 64 * c + 2 * lane < D; };  // false only in a partial last block
  int rr[R];
  float m[R], wsum[R], acc[R][2 * kBlocks];
#pragma unroll
  for (int k = 0; k < R; ++k) {
    rr[k] = imin(row + k * stride, end - 1);  // past the last row: its loads again, not stored
    m[k] = neg_inf();
    wsum[k] = 0.f;
#pragma unroll
    for (int c = 0; c < 2 * kBlocks; ++c) acc[k][c] = 0.f;
  }
  for (int s0 = 0; s0 < splits; s0 += kBatch) {
    float l[kBatch][R];
    float2 x[kBatch][R][kBlocks];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int s = imin(s0 + i, splits - 1);  // past the last split: its loads again, weighed 0
#pragma unroll
      for (int k = 0; k < R; ++k) {
        l[i][k] = __ldcg(part_lse + (i64)s * rows + rr[k]);
        const float* po = part_o + ((i64)s * rows + rr[k]) * D + 2 * lane;
#pragma unroll
        for (int c = 0; c < kBlocks; ++c)
          x[i][k][c] = in_row(c) ? __ldcg(reinterpret_cast<const float2*>(po + 64 * c)) : make_float2(0.f, 0.f);
      }
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const float li = s0 + i < splits ? l[i][k] : neg_inf();  // -inf: a split without keys, or none
        const float m_new = fmax2(m[k], li);
        if (m_new == neg_inf()) continue;  // no split with keys yet (the same for the whole warp)
        const float r = exp2_approx((m[k] - m_new) * kLog2e);  // m = -inf: 0
        const float w = exp2_approx((li - m_new) * kLog2e);
        wsum[k] = wsum[k] * r + w;
#pragma unroll
        for (int c = 0; c < kBlocks; ++c) {
          acc[k][2 * c] = acc[k][2 * c] * r + w * x[i][k][c].x;
          acc[k][2 * c + 1] = acc[k][2 * c + 1] * r + w * x[i][k][c].y;
        }
        m[k] = m_new;
      }
    }
  }
#pragma unroll
  for (int k = 0; k < R; ++k) {
    if (row + k * stride >= end) break;
    const float inv = wsum[k] > 0.f ? 1.f / wsum[k] : 0.f;
    u32* out = reinterpret_cast<u32*>(static_cast<Elem*>(o) + (i64)rr[k] * D + 2 * lane);
#pragma unroll
    for (int c = 0; c < kBlocks; ++c)
      if (in_row(c)) out[32 * c] = pack2<Elem>(acc[k][2 * c] * inv, acc[k][2 * c + 1] * inv);
    if (lse != nullptr && lane == 0)
      lse[rr[k]] = wsum[k] > 0.f ? m[k] + lg2_approx(wsum[k]) * 0.69314718055994531f : neg_inf();
  }
}

// The merge as a kernel of its own, one warp per row: for split-KV launches whose items do
// not merge themselves (AttnArgs::split_done null). Launched as the attention kernel's
// programmatic dependent: it waits for the splits' results here.
template <class Elem, int D>
KDSL_DEVICE void attention_combine_splits(const float* part_o, const float* part_lse, void* o, float* lse, int rows,
                                          int splits) {
  grid_dependency_wait();
  const int row = (int)((blockIdx.x * (i64)blockDim.x + threadIdx.x) / 32), lane = threadIdx.x & 31;
  if (row < rows) combine_split_rows<Elem, D>(part_o, part_lse, o, lse, rows, splits, row, 1, row + 1, lane);
}

}  // namespace kdsl
