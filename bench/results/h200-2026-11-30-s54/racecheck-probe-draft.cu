// Minimal ring-word protocol: does racecheck order consumers' reads before the producer's
// rewrite through (bar.sync among consumers + one arrive) or (every consumer arrives)?
#include <cstdio>
#include <cstdlib>
__device__ __forceinline__ unsigned sa(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void init(unsigned b, int n) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(b), "r"(n) : "memory"); }
__device__ __forceinline__ void arrive(unsigned b) { asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(b) : "memory"); }
__device__ __forceinline__ void wait(unsigned b, unsigned par) {
  asm volatile("{\n.reg .pred p;\nW: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra W;\n}" :: "r"(b), "r"(par) : "memory");
}
template <int MODE>  // 0: bar.sync + thread 0 arrives; 1: every consumer arrives; 2: __syncwarp + lane 0 of each warp arrives
__global__ void ring(int* out, int rounds) {
  __shared__ unsigned long long full, empty;
  __shared__ int word;
  const int tid = threadIdx.x;
  const int arrivals = MODE == 0 ? 1 : MODE == 1 ? 128 : 4;
  if (tid == 0) { init(sa(&full), 1); init(sa(&empty), arrivals); asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
  __syncthreads();
  if (tid < 32) {  // producer
    if (tid == 0) {
      for (int r = 0; r < rounds; ++r) {
        wait(sa(&empty), (r & 1) ^ 1);
        word = r * 7 + 1;
        arrive(sa(&full));
      }
    }
    return;
  }
  if (tid < 128 + 32) {
    int acc = 0;
    for (int r = 0; r < rounds; ++r) {
      wait(sa(&full), r & 1);
      acc += word;
      if (MODE == 0) { asm volatile("bar.sync 1, 128;" ::: "memory"); if (tid == 32) arrive(sa(&empty)); }
      if (MODE == 1) arrive(sa(&empty));
      if (MODE == 2) { __syncwarp(); if ((tid & 31) == 0) arrive(sa(&empty)); }
    }
    out[tid] = acc;
  }
}
int main(int argc, char** argv) {
  int* out; cudaMalloc(&out, 256 * sizeof(int));
  const int m = atoi(argv[1]);
  if (m == 0) ring<0><<<1, 160>>>(out, 8);
  if (m == 1) ring<1><<<1, 160>>>(out, 8);
  if (m == 2) ring<2><<<1, 160>>>(out, 8);
  printf("mode%d %s\n", m, cudaGetErrorString(cudaDeviceSynchronize()));
  return 0;
}
