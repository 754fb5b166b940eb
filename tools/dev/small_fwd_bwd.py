#!/usr/bin/env python3
"""Where a small forward + backward's time goes, kdsl against cuDNN SDPA: on shapes where the
suite's fwd+bwd ratio sat far below the forward's (B=8 H=16 512^2, B=1 H=4 2048^2), whether
the call is host-bound (host µs a call against the GPU's) and which kernels run how long.

    python3 tools/dev/small_fwd_bwd.py --shape 8,16,512,512,64 --program causal [--calls 50]

Prints per peer: the host time a call (perf_counter, calls queued back to back), the time a
call over a back-to-back loop (CUDA events: host-bound where it equals the host time), and
torch.profiler's CUDA kernels of one call (name, µs).
"""
import argparse
import cProfile
import pstats
import statistics
import time
from pathlib import Path

import torch

import kdsl
from kdsl.bench import SDPA_FORMS, cudnn_attend

ROOT = Path(__file__).resolve().parents[2]


def measure(name, call, calls):
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    host = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        t0 = time.perf_counter()
        call()
        host.append((time.perf_counter() - t0) * 1e6)
    end.record()
    torch.cuda.synchronize()
    loop = start.elapsed_time(end) * 1e3 / calls
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    kernels = [(e.key, e.self_device_time_total, e.count) for e in prof.key_averages() if e.self_device_time_total > 0]
    gpu = sum(t for _, t, _ in kernels)
    print(f"{name}: host {statistics.median(host):.1f} µs a call, loop {loop:.1f} µs a call, "
          f"kernels {gpu:.1f} µs in {len(kernels)}")
    for n, t, c in kernels:
        print(f"    {t:8.1f}  x{c}  {n[:110]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--program", default="causal")
    ap.add_argument("--shape", default="8,16,512,512,64", help="B,H,M,N,D")
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--cprofile", action="store_true", help="also cProfile kdsl's fwd+bwd calls (top functions)")
    args = ap.parse_args()
    B, H, M, N, D = map(int, args.shape.split(","))
    fn = getattr(kdsl.load(ROOT / "samples" / f"{args.program}.kd"), args.program)
    q, k, v = (torch.randn(B, H, L, D, device="cuda", dtype=torch.bfloat16).requires_grad_()
               for L in (M, N, N))
    dout = torch.randn(B, H, M, D, device="cuda", dtype=torch.bfloat16)
    print(f"{args.program} B={B} H={H} M={M} N={N} D={D}, {torch.cuda.get_device_name()}")
    peers = {"kdsl": fn, "cudnn": cudnn_attend(SDPA_FORMS[args.program], False)}
    for name, attend in peers.items():
        measure(name, lambda: torch.autograd.grad(attend(q, k, v), (q, k, v), dout), args.calls)
        measure(name + " forward", lambda: attend(q.detach(), k.detach(), v.detach()), args.calls)
    if args.cprofile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.calls):
            torch.autograd.grad(fn(q, k, v), (q, k, v), dout)
        torch.cuda.synchronize()
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    main()
