#!/usr/bin/env python3
"""How fast this GPU reads a buffer the size of a decode call's K and V (268 MB: B=1 H=16
N=32768 D=128 bf16): torch's sum, and a plain read kernel (16-byte loads, grid-stride, a
few CTAs per SM), L2 flushed before each launch. The read kernel's best is the ceiling
decode is measured against (bench/NOTES.md, decode).

    python3 tools/dev/read_ceiling.py [--mb 268]
"""
from __future__ import annotations

import argparse



def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=268.4)
    args = ap.parse_args()
    import cupy
    import torch
    n_bytes = int(args.mb * 1e6) // 16 * 16
    buf = torch.randint(-2**31, 2**31 - 1, (n_bytes // 4,), dtype=torch.int32, device="cuda")
    as_bf16 = buf.view(torch.bfloat16)
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    sink = torch.zeros(1, dtype=torch.int32, device="cuda")
    from kdsl.bench import _READ_SOURCE  # the kernel kdsl bench's "reading b once" times
    kern = cupy.RawKernel(_READ_SOURCE, "kdsl_read_once")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
    cbuf, csink = cupy.asarray(buf), cupy.asarray(sink)

    def timed(fn, reps=30):
        times = []
        for _ in range(reps):
            flush.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) * 1e3)
        return sorted(times)[len(times) // 2]

    print(torch.cuda.get_device_name(), f"{n_bytes / 1e6:.1f} MB")
    t = timed(lambda: as_bf16.sum())
    print(f"torch sum (bf16)           {t:8.1f} us {n_bytes / t / 1e6:6.2f} TB/s")
    n16 = n_bytes // 16
    for per_sm, threads in ((1, 1024), (2, 512), (4, 256), (8, 256), (16, 256), (32, 128)):
        grid = sms * per_sm
        with stream:
            t = timed(lambda: kern((grid,), (threads,), (cbuf, cupy.int64(n16), csink)))
        print(f"read kernel {grid:5d}x{threads:<5d}    {t:8.1f} us {n_bytes / t / 1e6:6.2f} TB/s")


if __name__ == "__main__":
    main()
