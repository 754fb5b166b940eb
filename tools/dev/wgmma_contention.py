#!/usr/bin/env python3
"""Does a promotion's FFMA stream slow another warpgroup's wgmmas on the same SM? A one-CTA-per-SM
microbenchmark of the FP8 GEMM's inner pattern, outside the kernel: warpgroup 0 runs waves of
four m64n128k32 e4m3 wgmmas from shared memory (wait for each wave, as fp8_gemm_wgmma.cuh does),
and the other warpgroups do one of:

  alone     nothing (warpgroup 0's wave rate by itself)
  ffma      a stream of FFMAs over 128 registers (a promotion that never stops)
  wgmma     the same waves (two warpgroups share the tensor cores: each wave should take 2x)
  promote   warpgroup 0 promotes each wave itself (64 FFMAs), the other warpgroups idle
  both      two warpgroups each wave + promote, in step (the kernel without turns)
  stores    as both, while a third warpgroup writes 16-byte stores into another 32 KB of shared
            memory as fast as it can (shared-memory writes, as TMA's refills of the ring make)
  arrive    as both, and every thread arrives on an mbarrier after each wave (the kernel's
            release of a stage: one arrival per math thread)
  arrive1   the same with one arrival per warp
  tma, tma_slow
            as both, while a thread of a third warpgroup refills a two-slot ring of 16 KB tiles
            by TMA from an L2-resident buffer, both slots in flight (tma_slow: one at a time)

Then the 128x128 tile's loop in miniature (kdsl_wgmma_ring): a 3-stage ring refilled by TMA by a
producer warp through full / empty mbarriers, two math warpgroups of one wave each a block,
printed as cycles a K block (the tensor peak is 512; the kernel's block period is ~780):

  ring_bare    no promotion
  ring         promotion by a constant
  ring_scales  promotion by the scales the producer wrote into the stage

(The ring modes were written at the end of the twenty-ninth session, when its device time was spent:
they compile, but have not run yet. A hang there is the ring's barrier protocol, not the GPU.)

It prints SM cycles per wave of warpgroup 0 (clock64, median over the CTAs) and, where the other
warpgroup works, its FFMAs per cycle. Timing only: the operands are arbitrary bytes.

    python3 tools/dev/wgmma_contention.py [--waves 4000]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

MODES = ("alone", "ffma", "wgmma", "promote", "both", "stores", "arrive", "arrive1", "tma", "tma_slow")
RING_MODES = ("ring_bare", "ring", "ring_scales")

SOURCE = r"""
#include "kdsl/hopper.cuh"
#include "kdsl/wgmma_fp8_ops.cuh"
using namespace kdsl;

// mode: 0 alone, 1 ffma, 2 wgmma, 3 promote, 4 both, 5 stores (both + warpgroup 2 storing),
// 6 arrive (both + an mbarrier arrival a thread a wave), 7 arrive1 (one a warp), 8 tma, 9 tma_slow
// (both + thread 256 refilling a ring by TMA; tmap: a map over a [1024, 128] u8 buffer in global memory)
extern "C" __global__ void __launch_bounds__(384, 1)
kdsl_wgmma_contention(int waves, int mode, long long* cycles, float* sink, const TmaDesc* tmap) {
  extern __shared__ __align__(1024) u8 raw[];
  const u32 raw_addr = smem_addr(raw);
  const u32 base = (raw_addr + 1023u) & ~1023u;
  u8* tile = raw + (base - raw_addr);
  // A: 64 x 128 bytes, B: 128 x 128 bytes, e4m3 values of magnitude < 2 (exponent bits kept low)
  for (int i = threadIdx.x; i < 192 * 128; i += blockDim.x) tile[i] = (u8)((i * 2654435761u) >> 24) & 0xB7;
  const u32 bar = base + 192 * 128 + 32768 + 8;
  if (threadIdx.x == 0) {
    *reinterpret_cast<volatile int*>(tile + 192 * 128 + 32768) = 0;
    mbar_init(bar, mode == 7 ? 8 : 256);
    mbar_init(bar + 8, 1);
    mbar_init(bar + 16, 1);
    mbar_init_fence();
  }
  fence_proxy_async();
  __syncthreads();
  const int wg = threadIdx.x >> 7;
  const u64 da = desc_kmajor_sw128(base), db = desc_kmajor_sw128(base + 64 * 128);
  const bool mma = wg == 0 || ((mode == 2 || mode >= 4) && wg == 1);
  const bool promote = (wg == 0 && mode == 3) || (mode >= 4 && wg < 2);
  float acc[64], total[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) total[i] = 0.f;
  const float s = 1.0f + threadIdx.x * 1e-7f;
  long long t0 = clock64();
  if (mma) {
    for (int w = 0; w < waves; ++w) {
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < 4; ++k) WgmmaFp8<128>::run(acc, da + 2 * k, db + 2 * k, k);
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_pin(acc);
      if (mode == 6 || (mode == 7 && (threadIdx.x & 31) == 0)) mbar_arrive(bar);
      if (promote) {
#pragma unroll
        for (int i = 0; i < 64; ++i) total[i] = fmaf(acc[i], s, total[i]);
      }
    }
  } else if (mode >= 8 && threadIdx.x == 256) {
    volatile int* done = reinterpret_cast<volatile int*>(tile + 192 * 128 + 32768);
    long long n = 0;
    // tma: both slots in flight, each refilled as soon as it lands; tma_slow: one load at a time
    const int depth = mode == 8 ? 2 : 1;
    u32 parity = 0u;  // bit s: the phase slot s waits for next
    for (int slot = 0; slot < depth; ++slot) {
      mbar_arrive_expect_tx(bar + 8 + 8 * slot, 16384);
      tma_load_2d(base + 192 * 128 + 16384 * slot, tmap, bar + 8 + 8 * slot, 0, 128 * slot);
    }
    for (int i = 0; !*done; ++i) {
      const int slot = i % depth;
      mbar_wait(bar + 8 + 8 * slot, (parity >> slot) & 1u);
      parity ^= 1u << slot;
      ++n;
      mbar_arrive_expect_tx(bar + 8 + 8 * slot, 16384);
      tma_load_2d(base + 192 * 128 + 16384 * slot, tmap, bar + 8 + 8 * slot, 0, 128 * (i & 7));
    }
    for (int slot = 0; slot < depth; ++slot) mbar_wait(bar + 8 + 8 * slot, (parity >> slot) & 1u);  // in flight
    total[0] = (float)(n * 8);  // in 2 KB units, as the stores count
  } else if (mode == 5 && wg == 2) {
    // 32 KB past the operands, 16 bytes a thread a store, until warpgroup 0 is done (a flag it sets)
    uint4* dst = reinterpret_cast<uint4*>(tile + 192 * 128);
    const uint4 v = make_uint4(threadIdx.x, 1, 2, 3);
    volatile int* done = reinterpret_cast<volatile int*>(tile + 192 * 128 + 32768);
    long long n = 0;
    while (!*done) {
#pragma unroll
      for (int r = 0; r < 16; ++r) dst[(threadIdx.x & 127) + 128 * r] = v;
      n += 16;
    }
    total[0] = (float)n;
  } else if (mode == 1 && wg == 1) {
    float x[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) x[i] = threadIdx.x + i;
    for (int w = 0; w < 4 * waves; ++w) {
#pragma unroll
      for (int i = 0; i < 64; ++i) total[i] = fmaf(x[i], s, total[i]);
    }
  }
  long long t1 = clock64();
  if (mode >= 5 && threadIdx.x == 0) *reinterpret_cast<volatile int*>(tile + 192 * 128 + 32768) = 1;
  if ((threadIdx.x & 127) == 0) cycles[blockIdx.x * 3 + wg] = t1 - t0;
  if ((mode == 5 || mode >= 8) && threadIdx.x == 256) sink[1 + blockIdx.x] = total[0];  // bytes written / 2 KB
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < 64; ++i) sum += total[i] + (mma ? acc[i] : 0.f);
  if (sum == 1234.5f) sink[0] = sum;  // keeps the work live
}

// The kernel's loop in miniature (fp8_gemm_wgmma.cuh's 128x128 tile): a 3-stage ring of 128 x 128
// A and B tiles (32 KB a stage) refilled by TMA from an L2-resident buffer by warp 8, whose lanes also
// write the stage's scales (128 of A's rows, one of B's) before its lane 0 arrives with the bytes
// expected; two math warpgroups of one wave each (A rows 64 wg ..) wait on the stage's full barrier,
// run their wave, arrive on its empty barrier (every thread) and promote. mode: 0 no promotion,
// 1 promotion by a constant, 2 promotion by the stage's scales.
extern "C" __global__ void __launch_bounds__(384, 1)
kdsl_wgmma_ring(int blocks, int mode, long long* cycles, float* sink, const TmaDesc* tmap) {
  constexpr int STAGES = 3, STAGE = 32768, SCALES = 132;  // floats a stage: A's 128, B's, padding
  extern __shared__ __align__(1024) u8 raw[];
  const u32 raw_addr = smem_addr(raw);
  const u32 base = (raw_addr + 1023u) & ~1023u;
  float* scales = reinterpret_cast<float*>(raw + (base - raw_addr) + STAGES * STAGE);
  const u32 bars = base + STAGES * STAGE + STAGES * SCALES * 4;  // full[s]: bars + 8 s; empty[s]: + 64
  if (threadIdx.x == 0) {
    for (int st = 0; st < STAGES; ++st) {
      mbar_init(bars + 8 * st, 32);        // warp 8's lanes: 31 arrivals after their scale stores, lane 0's with the bytes
      mbar_init(bars + 64 + 8 * st, 256);  // every math thread
    }
    mbar_init_fence();
  }
  __syncthreads();
  const int wg = threadIdx.x >> 7, lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
  float acc[64], total[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) total[i] = 0.f;
  const float c = 1.0f + threadIdx.x * 1e-7f;
  long long t0 = clock64();
  if (threadIdx.x >= 256 && threadIdx.x < 288) {  // the producer warp
    for (int b = 0; b < blocks; ++b) {
      const int st = b % STAGES;
      const u32 parity = ((b / STAGES) & 1) ^ 1u;  // a fresh barrier's phase 0 counts as "empty"
      mbar_wait(bars + 64 + 8 * st, parity);
      float* sc = scales + st * SCALES;
      for (int r = lane; r < 129; r += 32) sc[r] = 1.0f + (b * 131 + r) * 1e-7f;
      if (lane == 0) {
        mbar_arrive_expect_tx(bars + 8 * st, STAGE);
        tma_load_2d(base + st * STAGE, tmap, bars + 8 * st, 0, 128 * (b & 7));
        tma_load_2d(base + st * STAGE + 16384, tmap, bars + 8 * st, 0, 128 * ((b + 3) & 7));
      } else {
        mbar_arrive(bars + 8 * st);
      }
    }
  } else if (wg < 2) {
    const int r = wg * 64 + warp * 16 + (lane >> 2);  // this thread's accumulator rows: r and r + 8
    for (int b = 0; b < blocks; ++b) {
      const int st = b % STAGES;
      mbar_wait(bars + 8 * st, (b / STAGES) & 1);
      const float* sc = scales + st * SCALES;
      const float s0 = mode == 2 ? sc[r] * sc[128] : c, s1 = mode == 2 ? sc[r + 8] * sc[128] : c;
      const u64 da = desc_kmajor_sw128(base + st * STAGE + wg * 64 * 128);
      const u64 db = desc_kmajor_sw128(base + st * STAGE + 16384);
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < 4; ++k) WgmmaFp8<128>::run(acc, da + 2 * k, db + 2 * k, k);
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_pin(acc);
      mbar_arrive(bars + 64 + 8 * st);
      if (mode >= 1) {
#pragma unroll
        for (int i = 0; i < 64; i += 4) {
          total[i] = fmaf(acc[i], s0, total[i]);
          total[i + 1] = fmaf(acc[i + 1], s0, total[i + 1]);
          total[i + 2] = fmaf(acc[i + 2], s1, total[i + 2]);
          total[i + 3] = fmaf(acc[i + 3], s1, total[i + 3]);
        }
      }
    }
  }
  long long t1 = clock64();
  if ((threadIdx.x & 127) == 0) cycles[blockIdx.x * 3 + wg] = t1 - t0;
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < 64; ++i) sum += total[i] + (wg < 2 ? acc[i] : 0.f);
  if (sum == 1234.5f) sink[0] = sum;
}
"""


def _tensor_map(ptr: int) -> bytes:
    """A 2-D map over a [1024, 128] u8 buffer, boxes of 128 x 128 in the 128-byte swizzle."""
    import ctypes
    from kdsl.runtime import tma
    buf = tma.TensorMapBuffer()
    dims, strides = (ctypes.c_uint64 * 2)(128, 1024), (ctypes.c_uint64 * 1)(128)
    box, elem = (ctypes.c_uint32 * 2)(128, 128), (ctypes.c_uint32 * 2)(1, 1)
    status = tma._encoder()(ctypes.addressof(buf), tma._DTYPE["u8"], 2, ptr, dims, strides, box, elem, 0,
                            tma._SWIZZLE[128], tma._L2_PROMOTION[256], 0)
    assert status == 0, status
    return bytes(buf)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--waves", type=int, default=4000)
    args = ap.parse_args()
    import cupy
    import numpy
    from kdsl.codegen import emit
    from kdsl.runtime import nvrtc
    include = Path(emit.__file__).resolve().parent / "include"
    compiled = nvrtc.compile_cuda(SOURCE, "wgmma_contention.cu", nvrtc.default_options("sm_90a", include))
    path = Path("/tmp/kdsl_wgmma_contention.cubin")
    path.write_bytes(compiled.cubin)
    module = cupy.RawModule(path=str(path))
    fn = module.get_function("kdsl_wgmma_contention")
    smem = 192 * 128 + 32768 + 32 + 1024  # operands, stores or TMA ring, flag and barriers, alignment
    sms = cupy.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    cycles = cupy.zeros(sms * 3, dtype=cupy.int64)
    sink = cupy.zeros(1 + sms, dtype=cupy.float32)
    fn.max_dynamic_shared_size_bytes = smem
    src = cupy.asarray(numpy.random.default_rng(0).integers(0, 256, (1024, 128), dtype=numpy.uint8))
    tmap = cupy.asarray(numpy.frombuffer(_tensor_map(int(src.data.ptr)), dtype=numpy.uint8))
    print(cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(), f"{sms} CTAs, {args.waves} waves", flush=True)
    for trial in range(2):  # the first round warms the clocks up and is not printed
        for mode, name in enumerate(MODES):
            fn((sms,), (384,), (cupy.int32(args.waves), cupy.int32(mode), cycles, sink, tmap), shared_mem=smem)
            cupy.cuda.runtime.deviceSynchronize()
            c = cycles.get().reshape(sms, 3)
            line = f"  {name:8s} warpgroup 0: {statistics.median(c[:, 0]) / args.waves:7.1f} cycles a wave"
            if name == "ffma":
                lanes = 128 * 64 * 4 * args.waves / statistics.median(c[:, 1])
                line += f"; warpgroup 1: {lanes:6.1f} FFMA lanes a cycle (at most 128)"
            if name in ("wgmma", "both", "stores", "arrive", "arrive1"):
                line += f"; warpgroup 1: {statistics.median(c[:, 1]) / args.waves:7.1f}"
            if name in ("stores", "tma", "tma_slow"):
                rounds = statistics.median(sink.get()[1:].tolist())
                line += f"; stores {rounds * 2048 / statistics.median(c[:, 0]):5.1f} bytes a cycle"
            if trial:
                print(line, flush=True)
    ring = module.get_function("kdsl_wgmma_ring")
    ring_smem = 3 * 32768 + 3 * 132 * 4 + 128 + 1024
    ring.max_dynamic_shared_size_bytes = ring_smem
    for trial in range(2):
        for mode, name in enumerate(RING_MODES):
            ring((sms,), (384,), (cupy.int32(args.waves), cupy.int32(mode), cycles, sink, tmap), shared_mem=ring_smem)
            cupy.cuda.runtime.deviceSynchronize()
            c = cycles.get().reshape(sms, 3)
            if trial:
                print(f"  {name:11s} {statistics.median(c[:, 0]) / args.waves:7.1f} cycles a K block "
                      f"(warpgroup 1: {statistics.median(c[:, 1]) / args.waves:7.1f})", flush=True)

if __name__ == "__main__":
    main()
