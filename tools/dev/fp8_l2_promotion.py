#!/usr/bin/env python3
"""Does the FP8 GEMM's time depend on how TMA's requests reach HBM? Times the kernel with its
tensor maps encoded at each L2 promotion (geometry.GEMM_L2_PROMOTION: none, 64, 128 or 256
bytes fetched into L2 around each miss of a 128-byte row request), in turns with
torch._scaled_mm (dense) or a read of b alone (grouped). The last promotion listed is the
ratios' base.

    python3 tools/dev/fp8_l2_promotion.py [--shapes "4096x7168x16384;masked:256x4096x7168x4"]
                                          [--promotions none,256B]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import kdsl  # noqa: E402
from kdsl import bench, fp8  # noqa: E402
from kdsl.runtime import geometry  # noqa: E402

PROMOTIONS = {"none": 0, "64B": 64, "128B": 128, "256B": 256}
KERNEL = geometry.GEMM_L2_PROMOTION  # what the kernel's maps use


def case(name, a_shape, b_shape, extra, promotions):
    a, sa = fp8.quantize_1x128(torch.randn(a_shape, device="cuda"))
    b, sb = fp8.quantize_128x128(torch.randn(b_shape, device="cuda"))
    fns = {}
    for label in promotions:
        promo = PROMOTIONS[label]
        geometry.GEMM_L2_PROMOTION = promo  # read when a plan is made: each fresh module's plans take it
        fn = getattr(kdsl.load(ROOT / "samples" / f"{name}.kd"), name)
        out = fn(a, sa, b, sb, *extra)
        torch.cuda.synchronize()
        fns[label] = lambda fn=fn, out=out: fn(a, sa, b, sb, *extra, out=out)
    geometry.GEMM_L2_PROMOTION = KERNEL
    if name == "fp8_gemm":
        fns["scaled_mm"] = lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb.t(), out_dtype=torch.bfloat16)
    else:
        fns["read b once"] = lambda: bench.read_once(b)
    return fns


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="masked:256x4096x7168x4;128x7168x16384;4096x7168x16384",
                    help="';'-separated: MxNxK (dense), contiguous:MxNxKxG, masked:MxNxKxG")
    ap.add_argument("--promotions", default=",".join(PROMOTIONS))
    args = ap.parse_args()
    promotions = args.promotions.split(",")
    timer = bench.Timer(30)
    print(torch.cuda.get_device_name(), flush=True)
    for item in filter(None, args.shapes.split(";")):
        grouping, _, dims = item.rpartition(":")
        m, n, k, *g = (int(d) for d in dims.split("x"))
        g = g[0] if g else 1
        if grouping == "masked":
            count = torch.randint(m // 2, m + 1, (g,), device="cuda", dtype=torch.int32)
            fns = case("fp8_grouped_masked", (g, m, k), (g, n, k), (count,), promotions)
        elif grouping == "contiguous":
            group = torch.arange(m, device="cuda", dtype=torch.int32) // (m // g)
            fns = case("fp8_grouped_contiguous", (m, k), (g, n, k), (group,), promotions)
        else:
            fns = case("fp8_gemm", (m, k), (n, k), (), promotions)
        times = timer.in_turns(fns)
        base = times[promotions[-1]]
        print(f"\n{item}")
        for label, t in times.items():
            print(f"  {label:12s} {t * 1e3:8.1f} us  x{base / t:5.3f}", flush=True)


if __name__ == "__main__":
    main()
