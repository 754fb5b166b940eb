#!/usr/bin/env python3
"""Host time of the backward's launch path (runtime/attention_backward.py backward) on a
shape too small for the GPU to matter: the median wall time a call, and cProfile's top
functions over many calls (where a call's host microseconds go).

    python3 tools/dev/backward_host.py [--program causal] [--calls 300]
"""
import argparse
import cProfile
import pstats
import statistics
import time
from pathlib import Path

import torch

import kdsl
from kdsl.runtime import attention_backward as ab
from kdsl.testing import attention_inputs

ROOT = Path(__file__).resolve().parents[2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--program", default="causal")
    ap.add_argument("--calls", type=int, default=300)
    args = ap.parse_args()
    kern = getattr(kdsl.load(ROOT / "samples" / f"{args.program}.kd"), args.program)
    q, k, v, caps = attention_inputs(kern.ir, 1, 2, 2, 128, 128, 64)
    cap_list = [caps[t.name] for t in kern.captures]
    out, lse = kern._run(q, k, v, cap_list, None, None, None, None, keep_lse=True)
    dout = torch.randn_like(out)
    call = lambda: ab.backward(kern, q, k, v, out, dout, lse, None, cap_list, None)  # noqa: E731
    call()
    torch.cuda.synchronize()
    times = []
    for _ in range(args.calls):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
    print(f"{args.program}: host time of backward() a call, median {statistics.median(times) * 1e6:.1f} us "
          f"(min {min(times) * 1e6:.1f}) over {args.calls} calls")
    qq, kk, vv = (x.detach().requires_grad_() for x in (q, k, v))
    times = []
    for _ in range(50):
        o = kern(qq, kk, vv, *cap_list)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        o.backward(dout)
        times.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
    print(f"{args.program}: out.backward(dout) through autograd, median {statistics.median(times) * 1e6:.1f} us host")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.calls):
        call()
    prof.disable()
    torch.cuda.synchronize()
    pstats.Stats(prof).sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    main()
