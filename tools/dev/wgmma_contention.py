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

It prints SM cycles per wave of warpgroup 0 (clock64, median over the CTAs, the second of two
rounds), one column per operand fill (--fill: e4m3 codes below 2, e4m3 of N(0, 1) scaled to 448
a row, uniform bytes, zeros), and the bytes a cycle the stores or TMA wrote beside the waves.
tools/dev/wgmma_ring.py runs the kernel's whole loop in miniature.

    python3 tools/dev/wgmma_contention.py [--waves 4000] [--fill normal ...]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

MODES = ("alone", "ffma", "wgmma", "promote", "both", "stores", "arrive", "arrive1", "tma", "tma_slow")
FILLS = ("masked", "normal", "random", "zeros")

SOURCE = r"""
#include "kdsl/hopper.cuh"
#include "kdsl/wgmma_fp8_ops.cuh"
using namespace kdsl;

// mode: 0 alone, 1 ffma, 2 wgmma, 3 promote, 4 both, 5 stores (both + warpgroup 2 storing),
// 6 arrive (both + an mbarrier arrival a thread a wave), 7 arrive1 (one a warp), 8 tma, 9 tma_slow
// (both + thread 256 refilling a ring by TMA; tmap: a map over a [1024, 128] u8 buffer in global memory)
extern "C" __global__ void __launch_bounds__(384, 1)
kdsl_wgmma_contention(int waves, int mode, long long* cycles, float* sink, const TmaDesc* tmap, const u8* fill) {
  extern __shared__ __align__(1024) u8 raw[];
  const u32 raw_addr = smem_addr(raw);
  const u32 base = (raw_addr + 1023u) & ~1023u;
  u8* tile = raw + (base - raw_addr);
  // A: 64 x 128 bytes, B: 128 x 128 bytes, from the fill buffer (--fill)
  for (int i = threadIdx.x; i < 192 * 128; i += blockDim.x) tile[i] = fill[i];
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
"""


def tensor_map(ptr: int, rows: int = 1024) -> bytes:
    """A 2-D map over a [rows, 128] u8 buffer, boxes of 128 x 128 in the 128-byte swizzle."""
    from kdsl.runtime import tma
    return tma.encode_tiled(ptr, "u8", (128, rows), (128,), (128, 128))


def compile_module(source: str, name: str):
    """`source` (with kdsl's headers) as a cupy module, through NVRTC for sm_90a."""
    import cupy
    from kdsl.codegen import emit
    from kdsl.runtime import nvrtc
    include = Path(emit.__file__).resolve().parent / "include"
    compiled = nvrtc.compile_cuda(source, f"{name}.cu", nvrtc.default_options("sm_90a", include))
    path = Path(f"/tmp/kdsl_{name}.cubin")
    path.write_bytes(compiled.cubin)
    return cupy.RawModule(path=str(path))


def fill_bytes(kind: str, rng):
    """The operand bytes (a [1024, 128] u8 buffer): e4m3 codes of the kind asked for."""
    import numpy
    if kind == "zeros":
        return numpy.zeros((1024, 128), numpy.uint8)
    if kind == "random":  # every code, NaNs included
        return rng.integers(0, 256, (1024, 128), dtype=numpy.uint8)
    if kind == "masked":  # magnitudes below 2 (exponent bits kept low), as the tool used first
        return rng.integers(0, 256, (1024, 128), dtype=numpy.uint8) & 0xB7
    # "normal": N(0, 1) scaled so that each row's largest magnitude is 448, as a 1x128 block-scaled
    # quantisation makes, rounded to e4m3 (subnormals below 2^-6; no NaN)
    x = rng.standard_normal((1024, 128))
    x *= 448.0 / numpy.abs(x).max(axis=1, keepdims=True)
    mag = numpy.abs(x)
    e = numpy.clip(numpy.floor(numpy.log2(numpy.maximum(mag, 2.0 ** -9))), -6, 8)
    m = numpy.where(mag < 2.0 ** -6, numpy.rint(mag / 2.0 ** -9), numpy.rint((mag / 2.0 ** e - 1.0) * 8))
    field = numpy.where(mag < 2.0 ** -6, 0, e + 7)
    field, m = numpy.where(m == 8, field + 1, field), numpy.where(m == 8, 0, m)  # rounding carried
    code = numpy.minimum(field * 8 + m, 0x7E).astype(numpy.uint8)  # 448 at most
    return code | (numpy.signbit(x).astype(numpy.uint8) << 7)



def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--waves", type=int, default=4000)
    ap.add_argument("--fill", nargs="+", default=list(FILLS), choices=FILLS, help="operand bytes, one column each")
    args = ap.parse_args()
    import cupy
    import numpy
    module = compile_module(SOURCE, "wgmma_contention")
    fn = module.get_function("kdsl_wgmma_contention")
    smem = 192 * 128 + 32768 + 32 + 1024  # operands, stores or TMA ring, flag and barriers, alignment
    sms = cupy.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    cycles = cupy.zeros(sms * 3, dtype=cupy.int64)
    sink = cupy.zeros(1 + sms, dtype=cupy.float32)
    fn.max_dynamic_shared_size_bytes = smem
    rng = numpy.random.default_rng(0)
    print(cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(), f"{sms} CTAs, {args.waves} waves a CTA;",
          "cycles a wave of warpgroup 0, median over CTAs, by operand fill", flush=True)
    rows: dict[str, list[str]] = {}
    for fill in args.fill:
        src = cupy.asarray(fill_bytes(fill, rng))
        tmap = cupy.asarray(numpy.frombuffer(tensor_map(int(src.data.ptr)), dtype=numpy.uint8))
        for trial in range(2):  # the first round warms the clocks up and is not kept
            for mode, name in enumerate(MODES):
                fn((sms,), (384,), (cupy.int32(args.waves), cupy.int32(mode), cycles, sink, tmap, src), shared_mem=smem)
                cupy.cuda.runtime.deviceSynchronize()
                c = cycles.get().reshape(sms, 3)
                cell = f"{statistics.median(c[:, 0]) / args.waves:7.1f}"
                if name in ("stores", "tma", "tma_slow"):  # bytes a cycle written beside the waves
                    rate = statistics.median(sink.get()[1:].tolist()) * 2048 / statistics.median(c[:, 0])
                    cell += f" ({rate:.0f} B/c)"
                if trial:
                    rows.setdefault(name, []).append(cell)
    print(f"  {'mode':10s}" + "".join(f"{f:>18s}" for f in args.fill))
    for name, cells in rows.items():
        print(f"  {name:10s}" + "".join(f"{c:>18s}" for c in cells))


if __name__ == "__main__":
    main()
