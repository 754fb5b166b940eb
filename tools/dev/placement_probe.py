#!/usr/bin/env python3
"""Does where the operands and the output sit in memory move an FP8 GEMM's time? Two builds of
the same SASS ran 5.8 % apart at 4096x7168x16384 in one run (bench/NOTES.md, thirty-fourth
session), each writing its own output tensor. This times one kernel in turns on several output
buffers (spacers of random sizes between their allocations), on copies of its inputs, and on the
same arguments twice (the control), as `kdsl bench` times: L2 flushed, blocks in turns.

    python3 tools/dev/placement_probe.py [--shapes 4096x7168x16384 ...] [--outs 4] [--reps 20]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", nargs="+", default=["4096x7168x16384", "4096x4096x7168"])
    ap.add_argument("--outs", type=int, default=4)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    import torch
    import kdsl
    from kdsl import bench, fp8, reference
    from kdsl.testing import fp8_difference
    timer = bench.Timer(args.reps)
    gen = torch.Generator().manual_seed(0)
    print(torch.cuda.get_device_name(), flush=True)
    fn = kdsl.load(ROOT / "samples" / "fp8_gemm.kd").fp8_gemm
    for spec in args.shapes:
        m, n, k = (int(x) for x in spec.split("x"))
        a, sa = fp8.quantize_1x128(torch.randn(m, k, device="cuda"))
        b, sb = fp8.quantize_128x128(torch.randn(n, k, device="cuda"))
        ref = reference.fp8_gemm(a, sa, b, sb)
        outs, spacers = [], []
        for _ in range(args.outs):  # (spacers keep each output at an address of its own)
            spacers.append(torch.empty(int(torch.randint(1, 64, (1,), generator=gen)) << 20, dtype=torch.uint8,
                                       device="cuda"))
            outs.append(torch.empty(m, n, dtype=torch.bfloat16, device="cuda"))
        a2, b2 = a.clone(), b.clone()
        fns = {f"out {i}": (lambda o=o: fn(a, sa, b, sb, out=o)) for i, o in enumerate(outs)}
        fns["out 0 again"] = lambda: fn(a, sa, b, sb, out=outs[0])
        fns["inputs copied, out 0"] = lambda: fn(a2, sa, b2, sb, out=outs[0])
        times = timer.in_turns(fns)
        base = times["out 0"]
        print(f"\nfp8_gemm M={m} N={n} K={k}", flush=True)
        for name, t in times.items():
            o = outs[int(name.split()[1])] if name.startswith("out ") else outs[0]
            err = fp8_difference(o, ref)
            print(f"  {name:22s} {t * 1e3:8.1f} us  x{base / t:5.3f}  out at {o.data_ptr():#x} "
                  f"(mod 2 MB {o.data_ptr() % (2 << 20):#x})  err {err:.1e}", flush=True)


if __name__ == "__main__":
    main()
