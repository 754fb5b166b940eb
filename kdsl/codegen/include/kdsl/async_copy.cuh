// kdsl/async_copy.cuh — shared-memory addressing and cp.async, used by every kernel.
#pragma once
#include "kdsl/common.cuh"

namespace kdsl {

// 32-bit shared-window address of a generic pointer into shared memory (what PTX wants).
KDSL_DEVICE u32 smem_addr(const void* p) {
  u32 r;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
  return r;
}

// 16-byte global -> shared copy that bypasses L1. src_bytes = 0 zero-fills the 16 bytes
// without reading: rows past the end of a tensor land as zeros, never as garbage or NaN.
KDSL_DEVICE void cp_async16(u32 dst, const void* src, u32 src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
               :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
KDSL_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
KDSL_DEVICE void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory"); }

}  // namespace kdsl
