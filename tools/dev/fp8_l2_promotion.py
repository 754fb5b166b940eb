#!/usr/bin/env python3
"""Does the FP8 GEMM's time depend on how TMA's requests reach HBM? Times the kernel with its
tensor maps encoded at each L2 promotion (none, 64, 128, 256 bytes: a request for 128 bytes
of a row fetches that much around it into L2), in turns with a read of b alone, on a masked
grouping (B streamed once, each box 128 rows x 128 bytes, rows K bytes apart) and a dense
shape.

    python3 tools/dev/fp8_l2_promotion.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import kdsl  # noqa: E402
from kdsl import bench, fp8  # noqa: E402
from kdsl.runtime import tma  # noqa: E402

PROMOTIONS = {"none": 0, "64B": 1, "128B": 2, "256B (the kernel)": 3}


def case(name, a_shape, b_shape, extra):
    a, sa = fp8.quantize_1x128(torch.randn(a_shape, device="cuda"))
    b, sb = fp8.quantize_128x128(torch.randn(b_shape, device="cuda"))
    fns = {}
    for label, promo in PROMOTIONS.items():
        tma._L2_PROMOTION_256B = promo  # read when a map is encoded: each fresh module's plans take it
        fn = getattr(kdsl.load(ROOT / "samples" / f"{name}.kd"), name)
        out = fn(a, sa, b, sb, *extra)
        torch.cuda.synchronize()
        fns[label] = lambda fn=fn, out=out: fn(a, sa, b, sb, *extra, out=out)
    tma._L2_PROMOTION_256B = 3
    fns["read b once"] = lambda: bench.read_once(b)
    return fns


def main() -> None:
    timer = bench.Timer(30)
    print(torch.cuda.get_device_name(), flush=True)
    count = torch.randint(128, 257, (4,), device="cuda", dtype=torch.int32)
    cases = {
        f"masked 4 x 256, N 4096, K 7168, counts {count.tolist()}":
            case("fp8_grouped_masked", (4, 256, 7168), (4, 4096, 7168), (count,)),
        "dense 128x7168x16384": case("fp8_gemm", (128, 16384), (7168, 16384), ()),
        "dense 4096x7168x16384": case("fp8_gemm", (4096, 16384), (7168, 16384), ()),
    }
    for title, fns in cases.items():
        times = timer.in_turns(fns)
        base = times["256B (the kernel)"]
        print(f"\n{title}")
        for label, t in times.items():
            print(f"  {label:20s} {t * 1e3:8.1f} us  x{base / t:5.3f}", flush=True)


if __name__ == "__main__":
    main()
