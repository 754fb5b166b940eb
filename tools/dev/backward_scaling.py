#!/usr/bin/env python3
"""The backward kernel alone (no forward), timed over shapes that change one thing at a time,
to split a CTA's time into per-step work and fixed cost (prologue, epilogue, skipped steps):
with N (and so the CTA count) fixed, time = waves x (steps + fixed) x step time, steps = M / 64.

    python3 tools/dev/backward_scaling.py --programs plain,causal --B 2 --H 16 --D 128 \
        --shapes 4096x4096,2048x4096,1024x4096 [--reps 10]
"""
import argparse
import statistics
from pathlib import Path

import torch

import kdsl
from kdsl.runtime import attention_backward as ab
from kdsl.testing import attention_inputs

ROOT = Path(__file__).resolve().parents[2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--programs", default="plain,causal")
    ap.add_argument("--B", type=int, default=2)
    ap.add_argument("--H", type=int, default=16)
    ap.add_argument("--D", type=int, default=128)
    ap.add_argument("--shapes", default="4096x4096,2048x4096,1024x4096")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--profile", action="store_true", help="also print torch.profiler's table of one call per shape: "
                    "the backward kernel and the torch ops around it (zeroing, dQ's layout and dtype)")
    args = ap.parse_args()
    print(f"device: {torch.cuda.get_device_name()}; backward alone, B={args.B} H={args.H} D={args.D}; median us")
    print("| program | M | N | us | us per (64 x 128) step of work |\n|---|---|---|---|---|")
    for name in args.programs.split(","):
        kern = getattr(kdsl.load(ROOT / "samples" / f"{name}.kd"), name)
        for shape in args.shapes.split(","):
            M, N = map(int, shape.split("x"))
            q, k, v, caps = attention_inputs(kern.ir, args.B, args.H, args.H, M, N, args.D)
            cap_list = [caps[t.name] for t in kern.captures]
            out, lse = kern._run(q, k, v, cap_list, None, None, None, None, keep_lse=True)
            dout = torch.randn_like(out)
            ab.backward(kern, q, k, v, out, dout, lse, None, cap_list, None)
            times = []
            for _ in range(args.reps):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                ab.backward(kern, q, k, v, out, dout, lse, None, cap_list, None)
                e1.record()
                e1.synchronize()
                times.append(e0.elapsed_time(e1) * 1e3)
            t = statistics.median(times)
            if args.profile:
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                        torch.profiler.ProfilerActivity.CUDA]) as prof:
                    ab.backward(kern, q, k, v, out, dout, lse, None, cap_list, None)
                    torch.cuda.synchronize()
                print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=60))
            steps = args.B * args.H * -(-M // 64) * -(-N // 128)
            print(f"| {name} | {M} | {N} | {t:.0f} | {t / steps * 132:.2f} |", flush=True)


if __name__ == "__main__":
    main()
