// What compute-sanitizer's racecheck credits an mbarrier arrival with.
//
// One producer thread writes a shared word, then arrives on "full"; 128 consumer threads wait
// on "full", read the word and hand it back on "empty"; the producer waits on "empty" before
// writing the next value. Three ways to hand it back:
//   0: the consumers meet at a named barrier, then one of them arrives (empty counts 1)
//   1: every consumer arrives (empty counts 128)
//   2: each warp meets at __syncwarp, then its lane 0 arrives (empty counts 4)
// All three are ordered under the PTX memory model (the barrier or __syncwarp orders each
// read before the arriving thread's release, the producer's wait acquires it), and the
// kernels compute the same sums.
//
//   nvcc -arch=sm_90a -lineinfo -o /tmp/probe tools/dev/racecheck_mbarrier_probe.cu
//   for m in 0 1 2; do compute-sanitizer --tool racecheck /tmp/probe $m; done
//
// H200, driver 580.159.04, 2026-11-30 (bench/NOTES.md, fifty-fourth session; run as a draft
// with the same three kernels, before the sums' check was added): modes 0 and 2 report a WAR
// hazard on the word (4 errors each), mode 1 none. racecheck orders a read before
// a later write only through an arrival by the reading thread itself. The attention forward
// hands ring stages back as mode 0 does (attention_wgmma.cuh; KDSL_RACECHECK_ARRIVALS=1 makes
// it mode 1 for sanitizer runs).
#include <cstdio>
#include <cstdlib>

__device__ __forceinline__ unsigned smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void bar_init(unsigned b, int n) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(b), "r"(n) : "memory");
}
__device__ __forceinline__ void bar_arrive(unsigned b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(b) : "memory");
}
__device__ __forceinline__ void bar_wait(unsigned b, unsigned parity) {
  asm volatile("{\n.reg .pred p;\nWAIT: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra WAIT;\n}"
               :: "r"(b), "r"(parity) : "memory");
}

template <int MODE>
__global__ void ring(int* out, int rounds) {
  __shared__ unsigned long long full, empty;
  __shared__ int word;
  const int tid = threadIdx.x;
  if (tid == 0) {
    bar_init(smem(&full), 1);
    bar_init(smem(&empty), MODE == 0 ? 1 : MODE == 1 ? 128 : 4);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (tid < 32) {  // the producer warp; lane 0 writes
    if (tid == 0) {
      for (int r = 0; r < rounds; ++r) {
        bar_wait(smem(&empty), (r & 1) ^ 1);
        word = 7 * r + 1;
        bar_arrive(smem(&full));
      }
    }
    return;
  }
  int sum = 0;  // consumers: threads 32..159
  for (int r = 0; r < rounds; ++r) {
    bar_wait(smem(&full), r & 1);
    sum += word;
    if (MODE == 0) {
      asm volatile("bar.sync 1, 128;" ::: "memory");
      if (tid == 32) bar_arrive(smem(&empty));
    } else if (MODE == 1) {
      bar_arrive(smem(&empty));
    } else {
      __syncwarp();
      if (tid % 32 == 0) bar_arrive(smem(&empty));
    }
  }
  out[tid - 32] = sum;
}

int main(int argc, char** argv) {
  const int mode = argc > 1 ? atoi(argv[1]) : 0, rounds = 8;
  int* out;
  cudaMalloc(&out, 128 * sizeof(int));
  if (mode == 0) ring<0><<<1, 160>>>(out, rounds);
  if (mode == 1) ring<1><<<1, 160>>>(out, rounds);
  if (mode == 2) ring<2><<<1, 160>>>(out, rounds);
  int host[128];
  cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost);
  int want = 0;
  for (int r = 0; r < rounds; ++r) want += 7 * r + 1;
  int wrong = 0;
  for (int i = 0; i < 128; ++i) wrong += host[i] != want;
  printf("mode %d: %s, %d of 128 sums wrong\n", mode, cudaGetErrorString(cudaGetLastError()), wrong);
  return wrong != 0;
}
