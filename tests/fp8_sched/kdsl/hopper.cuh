// Host stand-in for kdsl/hopper.cuh, for tests/test_fp8_schedule.py: compiles the FP8 GEMM's
// tile scheduler (kdsl/fp8_gemm_sched.cuh) with g++ and runs its producer warp as 32 threads
// in step, so that every CTA's unit sequence can be checked without a GPU. Only what the
// scheduler uses is emulated: the index registers, __ldg, the warp collectives, and the
// atomics of the tile counter (CTAs run one after another, so a fence has nothing to order).
#pragma once
#include <atomic>
#include <barrier>

struct HostDim3 { unsigned x = 0, y = 0, z = 0; };
inline thread_local HostDim3 threadIdx;
inline HostDim3 blockIdx, gridDim;

template <class T> T __ldg(const T* p) { return *p; }

namespace host_warp {
inline std::barrier<>* sync = nullptr;  // 32 participants: the lanes of the simulated warp
inline int values[32];
template <class F> int reduce(int v, F f) {
  values[threadIdx.x & 31] = v;
  sync->arrive_and_wait();
  int r = values[0];
  for (int i = 1; i < 32; ++i) r = f(r, values[i]);
  sync->arrive_and_wait();  // nobody overwrites values[] before every lane has read it
  return r;
}
}  // namespace host_warp

inline int __all_sync(unsigned, int pred) {
  return host_warp::reduce(pred ? 1 : 0, [](int a, int b) { return a & b; });
}

inline int __shfl_sync(unsigned, int v, int src) {
  host_warp::values[threadIdx.x & 31] = v;
  host_warp::sync->arrive_and_wait();
  const int r = host_warp::values[src];
  host_warp::sync->arrive_and_wait();
  return r;
}

inline void __syncwarp() { host_warp::sync->arrive_and_wait(); }
inline void __threadfence() {}
inline int atomicAdd(int* p, int v) { return std::atomic_ref<int>(*p).fetch_add(v); }
inline int atomicExch(int* p, int v) { return std::atomic_ref<int>(*p).exchange(v); }

namespace kdsl {
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;
#define KDSL_DEVICE inline
inline int warp_min(int v) { return host_warp::reduce(v, [](int a, int b) { return a < b ? a : b; }); }
}  // namespace kdsl
