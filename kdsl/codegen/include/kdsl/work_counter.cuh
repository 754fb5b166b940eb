// kdsl/work_counter.cuh — the work counter of a persistent launch, shared by the Hopper attention
// kernel (its items) and the FP8 GEMM (contiguous tiles): two words of a per-stream slot the
// host passes (runtime/launch.py, Loaded.work_counter), {next item - gridDim.x, CTAs done},
// zero when the launch starts. Each CTA starts with item blockIdx.x and takes the next from the
// counter; the last CTA to take no more zeroes both words for the next launch on the stream
// (ordered before it by the kernel boundary), so a launch needs no memset. One thread a CTA
// calls these.
#pragma once
#include "kdsl/hopper.cuh"

namespace kdsl {

// The next unclaimed item.
KDSL_DEVICE int work_counter_take(int* work) { return (int)gridDim.x + atomicAdd(work, 1); }

// This CTA takes no more items (once per CTA, after its last take, which the fence orders
// before its count).
KDSL_DEVICE void work_counter_done(int* work) {
  __threadfence();
  if (atomicAdd(work + 1, 1) == (int)gridDim.x - 1) {
    atomicExch(work, 0);
    atomicExch(work + 1, 0);
  }
}

}  // namespace kdsl
