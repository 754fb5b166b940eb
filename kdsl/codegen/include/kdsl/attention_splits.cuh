// kdsl/attention_splits.cuh — merging split-KV partial results: the split of each row's keys
// left a normalised fp32 O and its lse (attention_wgmma.cuh's split epilogue); a row of out is
// their lse-weighted mean. Run by the item that finishes a row's last split, or by
// attention_combine_splits as a kernel of its own.
#pragma once
#include "kdsl/attention_wgmma_parts.cuh"

namespace kdsl {

// Split-KV: each split of the keys left its normalised O (fp32) and lse; row `row` of out
// (of rows = B * H * M) is their lse-weighted mean and of lse their log-sum-exp, computed by
// one warp: lane l holds columns 64 c + 2 l and 64 c + 2 l + 1 of each 64-column block c.
// One pass, online: a running max of the splits' lse rescales the weights and the sum taken
// so far. The loads of kBatch splits (their addresses depend on nothing computed) are all
// issued before the first is used, so a row costs one round of L2 latency per kBatch splits.
// (Two passes, the max first, cost three rounds: 6.7 us for B=1 H=16 against cuDNN's 4.2 us
// reduction, under ncu on an H100.) Loads bypass L1 (ld.global.cg): the attention kernel's
// last CTA of an item merges what other CTAs wrote during the same launch.
template <class Elem, int D>
KDSL_DEVICE void combine_split_row(const float* part_o, const float* part_lse, void* o, float* lse, int rows,
                                   int splits, int row, int lane) {
  constexpr int kBlocks = (D + 63) / 64, kBatch = 8;
  auto in_row = [&](int c) { return 64 * c + 2 * lane < D; };  // false only in a partial last block
  float m = neg_inf(), wsum = 0.f, acc[2 * kBlocks];
#pragma unroll
  for (int c = 0; c < 2 * kBlocks; ++c) acc[c] = 0.f;
  for (int s0 = 0; s0 < splits; s0 += kBatch) {
    float l[kBatch];
    float2 x[kBatch][kBlocks];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int s = imin(s0 + i, splits - 1);  // past the last split: its loads again, weighed 0
      l[i] = __ldcg(part_lse + (i64)s * rows + row);
      const float* po = part_o + ((i64)s * rows + row) * D + 2 * lane;
#pragma unroll
      for (int c = 0; c < kBlocks; ++c)
        x[i][c] = in_row(c) ? __ldcg(reinterpret_cast<const float2*>(po + 64 * c)) : make_float2(0.f, 0.f);
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const float li = s0 + i < splits ? l[i] : neg_inf();  // -inf: a split without keys, or none
      const float m_new = fmax2(m, li);
      if (m_new == neg_inf()) continue;  // no split with keys yet (the same for the whole warp)
      const float r = exp2_approx((m - m_new) * kLog2e);  // m = -inf: 0
      const float w = exp2_approx((li - m_new) * kLog2e);
      wsum = wsum * r + w;
#pragma unroll
      for (int c = 0; c < kBlocks; ++c) {
        acc[2 * c] = acc[2 * c] * r + w * x[i][c].x;
        acc[2 * c + 1] = acc[2 * c + 1] * r + w * x[i][c].y;
      }
      m = m_new;
    }
  }
  const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
  u32* out = reinterpret_cast<u32*>(static_cast<Elem*>(o) + (i64)row * D + 2 * lane);
#pragma unroll
  for (int c = 0; c < kBlocks; ++c)
    if (in_row(c)) out[32 * c] = pack2<Elem>(acc[2 * c] * inv, acc[2 * c + 1] * inv);
  if (lse != nullptr && lane == 0) lse[row] = wsum > 0.f ? m + lg2_approx(wsum) * 0.69314718055994531f : neg_inf();
}

// The merge as a kernel of its own, one warp per row: for split-KV launches whose items do
// not merge themselves (AttnArgs::split_done null). Launched as the attention kernel's
// programmatic dependent: it waits for the splits' results here.
template <class Elem, int D>
KDSL_DEVICE void attention_combine_splits(const float* part_o, const float* part_lse, void* o, float* lse, int rows,
                                          int splits) {
  grid_dependency_wait();
  const int row = (int)((blockIdx.x * (i64)blockDim.x + threadIdx.x) / 32), lane = threadIdx.x & 31;
  if (row < rows) combine_split_row<Elem, D>(part_o, part_lse, o, lse, rows, splits, row, lane);
}

}  // namespace kdsl
