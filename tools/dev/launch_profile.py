#!/usr/bin/env python3
"""Which kernels one kdsl attention call launches, with their device times (torch.profiler),
and the call's time by events: where a program runs slower than its work says, whether the
time is in the attention kernel or in something beside it (a summary, a combine, a copy).

    python3 tools/dev/launch_profile.py FILE:KERNEL:B,H,M,N,D[:SEED] ...

SEED (default 0) draws the inputs (kdsl.cases: odd seeds sort bool captures along their last
axis).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile
    import kdsl
    from kdsl.bench import Timer, kept_pairs
    from kdsl.backends import Torch
    from kdsl.cases import AttentionCase, attention_inputs
    print(torch.cuda.get_device_name(), flush=True)
    for case in args.cases:
        path, name, shape, *rest = case.split(":")
        seed = int(rest[0]) if rest else 0
        B, H, M, N, D = map(int, shape.split(","))
        fn = getattr(kdsl.load(ROOT / path), name)
        q, k, v, caps = attention_inputs(fn.ir, AttentionCase(B, H, H, M, N, D, seed), Torch("cuda"))
        dims = {"B": B, "H": H, "Hkv": H, "M": M, "N": N, "D": D, "Dv": D}
        kept = kept_pairs(fn.ir, dims, caps, B, H, M, N)
        fn(q, k, v, **caps)
        t = Timer(args.reps).in_turns({"call": lambda: fn(q, k, v, **caps)})["call"]
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                fn(q, k, v, **caps)
            torch.cuda.synchronize()
        print(f"\n== {name} B={B} H={H} M={M} N={N} D={D} seed {seed}: {t * 1e3:.1f} us a call, kept "
              f"{kept / (B * H * M * N):.3f} of the pairs, {4 * D * kept / t / 1e9:.1f} TFLOPS", flush=True)
        for ev in prof.key_averages():
            if ev.device_type.name == "CUDA" or getattr(ev, "self_device_time_total", 0):
                total = getattr(ev, "self_device_time_total", 0) or getattr(ev, "self_cuda_time_total", 0)
                print(f"   {ev.count // 3:3d} x  {total / 3:9.1f} us  {ev.key[:90]}")


if __name__ == "__main__":
    main()
