#!/usr/bin/env python3
"""Clocks and power while an FP8 GEMM runs back to back, kdsl's kernel and torch's blockwise
_scaled_mm in alternating phases: whether the long dense shapes (4096x7168x16384: kdsl 0.93 of
_scaled_mm, its blocks spread over [0.91, 0.99]) lose their time to the power cap rather than
to the main loop. nvidia-smi samples SM clock and board power every 20 ms in the background;
each phase runs ~1.5 s of launches and reports the median sample, the launches' mean time
and the TFLOPS.

    python3 tools/dev/fp8_power.py [--shape 4096x7168x16384] [--phases 3]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="4096x7168x16384")
    ap.add_argument("--phases", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=1.5)
    args = ap.parse_args()
    import torch
    import kdsl
    from kdsl import fp8
    m, n, k = (int(x) for x in args.shape.split("x"))
    a, sa = fp8.quantize_1x128(torch.randn(m, k, device="cuda"))
    b, sb = fp8.quantize_128x128(torch.randn(n, k, device="cuda"))
    gemm = kdsl.load(ROOT / "samples" / "fp8_gemm.kd").fp8_gemm
    out = gemm(a, sa, b, sb)
    fns = {"kdsl": lambda: gemm(a, sa, b, sb, out=out),
           "scaled_mm": lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb.t(), out_dtype=torch.bfloat16)}
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu",
                            "--format=csv,noheader,nounits", "-lms", "20"], stdout=subprocess.PIPE, text=True)
    spans = []
    for _ in range(args.phases):
        for name, fn in fns.items():
            fn()
            torch.cuda.synchronize()
            t0, launches = time.time(), 0
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            while time.time() - t0 < args.seconds:
                for _ in range(20):
                    fn()
                launches += 20
                torch.cuda.synchronize()
            end.record()
            torch.cuda.synchronize()
            spans.append((name, t0, time.time(), start.elapsed_time(end) / launches))
            time.sleep(0.3)  # a gap between phases in the samples
    smi.terminate()
    samples = []
    for line in smi.stdout.read().splitlines():
        parts = [p.strip() for p in line.split(",")]
        try:
            stamp = time.mktime(time.strptime(parts[0].split(".")[0], "%Y/%m/%d %H:%M:%S")) + \
                float("0." + parts[0].split(".")[1])
            samples.append((stamp, float(parts[1]), float(parts[2]), float(parts[3])))
        except (IndexError, ValueError):
            continue
    print(torch.cuda.get_device_name(), args.shape)
    for name, t0, t1, ms in spans:
        inside = [s for s in samples if t0 + 0.2 <= s[0] <= t1]  # past the phase's ramp
        if not inside:
            print(f"  {name:10s} {ms * 1e3:8.1f} us  (no nvidia-smi samples)")
            continue
        clock, power, temp = (statistics.median(s[i] for s in inside) for i in (1, 2, 3))
        print(f"  {name:10s} {ms * 1e3:8.1f} us {2 * m * n * k / ms / 1e9:7.1f} TFLOPS   SM clock {clock:6.0f} MHz   "
              f"power {power:5.0f} W   {temp:3.0f} C   ({len(inside)} samples)")


if __name__ == "__main__":
    main()
