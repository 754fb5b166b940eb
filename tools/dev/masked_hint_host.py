#!/usr/bin/env python3
"""Host time per eager launch of a masked FP8 GEMM with and without a tile hint, in turns
(kdsl.hosttime): the plain call, the call with expected_rows=E (a dict lookup to the hinted
kernel, then its own launch path) and a kernel made once with with_attrs(expected_rows=E).

    python3 tools/dev/masked_hint_host.py [--shape 4096x4096x7168x8] [--expected 64]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="4096x4096x7168x8")
    ap.add_argument("--expected", type=int, default=64)
    args = ap.parse_args()
    import torch
    import kdsl
    from kdsl import fp8, hosttime
    m, n, k, g = (int(x) for x in args.shape.split("x"))
    kern = kdsl.load(ROOT / "samples" / "fp8_grouped_masked.kd").fp8_grouped_masked
    hinted = kern.with_attrs(expected_rows=args.expected)
    a, sa = fp8.quantize_1x128(torch.randn(g, m, k, device="cuda"))
    b, sb = fp8.quantize_128x128(torch.randn(g, n, k, device="cuda"))
    count = torch.full((g,), args.expected, dtype=torch.int32, device="cuda")
    out = torch.empty(g, m, n, dtype=torch.bfloat16, device="cuda")
    fns = {"plain": lambda: kern(a, sa, b, sb, count, out=out),
           "expected_rows=": lambda: kern(a, sa, b, sb, count, out=out, expected_rows=args.expected),
           "with_attrs": lambda: hinted(a, sa, b, sb, count, out=out)}
    print(torch.cuda.get_device_name(), args.shape, "E", args.expected)
    for name, us in hosttime.host_us_in_turns(fns).items():
        print(f"  {name:16s} {us:6.2f} us host per call")


if __name__ == "__main__":
    main()
