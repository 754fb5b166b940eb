#!/usr/bin/env python3
"""Does the order in which a GEMM reads B cost HBM bandwidth? B [N, K] bytes read in full by
plain 16-byte loads, timed in turns under kdsl bench's L2 flush, in three orders:

- contiguous: kdsl bench's floor (bench.read_once: grid-stride over the buffer);
- ring, G = 1: what the FP8 GEMM's TMA ring does: each CTA owns R rows of B and walks K in
  128-byte chunks (one K block), keeping D chunks of every row in flight, the next chunk of
  a row issued only when its oldest one has landed (the ring's refill);
- ring, G = 8: as many bytes in flight (D = 16: 8 to 16 chunks), issued 8 chunks (1 KB of a
  row) at a time; D = 16, G = 1 is its control with the same depth.

If "ring, G = 1" reads slower than G = 8 and the floor, a kernel streaming B (M = 128 dense,
masked groupings) loses bandwidth to its 128-byte-per-row requests, and fetching rows in
longer pieces (a wider L2 prefetch) is worth building; if not, the pattern is not the gap.

    python3 tools/dev/b_pattern_probe.py [--shapes 7168x16384,16384x7168] [--rows 56,112]
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

# Thread t of a CTA reads 16 bytes at column (t % 8) * 16 of each 128-byte chunk of row
# blockIdx.x * R + t / 8. Registers x[D] form the ring: chunk j of the row lives in x[j % D];
# with G > 1 a thread issues G chunks, then consumes G, so each burst is G chunks of one row.
_SOURCE = r"""
template <int D, int G>
__device__ void ring(const uint4* __restrict__ b, int N, int K16, int R, unsigned* sink) {
  const int row = blockIdx.x * R + threadIdx.x / 8, col = threadIdx.x % 8;
  if (threadIdx.x / 8 >= R || row >= N) return;
  const uint4* p = b + (long long)row * K16 + col;
  const int chunks = K16 / 8;
  uint4 x[D];
  unsigned acc = 0;
#pragma unroll
  for (int j = 0; j < D; ++j) x[j] = j < chunks ? __ldg(p + 8 * j) : make_uint4(0, 0, 0, 0);
  for (int j0 = 0; j0 < chunks; j0 += D) {
#pragma unroll
    for (int g = 0; g < D; g += G) {
#pragma unroll
      for (int u = 0; u < G; ++u) acc ^= x[g + u].x ^ x[g + u].y ^ x[g + u].z ^ x[g + u].w;
#pragma unroll
      for (int u = 0; u < G; ++u) {
        const int j = j0 + D + g + u;
        x[g + u] = j < chunks ? __ldg(p + 8 * j) : make_uint4(0, 0, 0, 0);
      }
    }
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}
extern "C" __global__ void ring_d8_g1(const uint4* b, int N, int K16, int R, unsigned* s) { ring<8, 1>(b, N, K16, R, s); }
extern "C" __global__ void ring_d16_g1(const uint4* b, int N, int K16, int R, unsigned* s) { ring<16, 1>(b, N, K16, R, s); }
extern "C" __global__ void ring_d16_g8(const uint4* b, int N, int K16, int R, unsigned* s) { ring<16, 8>(b, N, K16, R, s); }
"""


VARIANTS = ("d8_g1", "d16_g1", "d16_g8")  # ring depth D chunks a row, issued G at a time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="7168x16384,16384x7168,24576x1536", help="NxK of B, comma-separated")
    ap.add_argument("--rows", default="32,56", help="rows of B a CTA owns (R), comma-separated")
    ap.add_argument("--reps", type=int, default=40)
    args = ap.parse_args()
    import cupy
    import torch
    from kdsl import bench
    mod = cupy.RawModule(code=_SOURCE, options=("-std=c++17",))
    kernels = {v: mod.get_function(f"ring_{v}") for v in VARIANTS}
    sink = cupy.zeros(1, dtype=cupy.uint32)
    timer = bench.Timer(args.reps)
    print(f"device: {torch.cuda.get_device_name()}")
    print("| B (N x K) | MB | contiguous us | " + " | ".join(f"ring R={r} {v} us" for r in args.rows.split(",")
                                                          for v in VARIANTS) + " |")
    for shape in args.shapes.split(","):
        N, K = map(int, shape.split("x"))
        b = torch.randint(-128, 127, (N, K), dtype=torch.int8, device="cuda")
        with warnings.catch_warnings():  # cupy 14 deprecates ExternalStream (as bench.read_once)
            warnings.simplefilter("ignore", DeprecationWarning)
            stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
        fns = {"contiguous": lambda: bench.read_once(b)}
        for r in map(int, args.rows.split(",")):
            for v, kern in kernels.items():
                def launch(kern=kern, r=r):
                    with stream:
                        kern((-(-N // r),), (8 * r,), (cupy.uint64(b.data_ptr()), cupy.int32(N), cupy.int32(K // 16),
                                                       cupy.int32(r), sink))
                fns[f"R={r} {v}"] = launch
        ms = timer.in_turns(fns)
        print(f"| {shape} | {N * K / 1e6:.1f} | " + " | ".join(f"{ms[name] * 1e3:.1f}" for name in fns) + " |")


if __name__ == "__main__":
    main()
