#!/usr/bin/env python3
"""Which kernels a forward + backward launches and how long each runs (torch.profiler), for
builds of one kernel planned under other environment switches: where a switch's fwd+bwd time
went (the tile summary, delta, the backward itself, dQ's rows).

    python3 tools/dev/pass_kernels.py tools/dev/heldout25.kd:bias_gate 2,16,4096,4096,128 \
        --variants "KDSL_SUMMARY_BESIDE_LOADS=0;KDSL_SUMMARY_BESIDE_LOADS=1" [--seed 1] [--calls 3]

Each variant is a fresh kernel whose first call (its plan and builds) runs under the variant's
switches, as tools/dev/structured_masks.py does; inputs from kdsl.testing.attention_inputs
(--seed: odd draws bool captures sorted along their rows). Prints per variant the kernels of
--calls calls, µs a call each, and their sum.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools" / "dev"))
from structured_masks import call_under  # noqa: E402  (a call with some environment variables set)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kernel", help="FILE.kd:NAME")
    ap.add_argument("shape", help="B,H,M,N,D")
    ap.add_argument("--variants", default="", help="';'-separated, each ','-separated NAME=VALUE (empty: as is)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--calls", type=int, default=3)
    args = ap.parse_args()
    import torch
    import kdsl
    from kdsl.runtime.attention_launch import AttentionKernel
    from kdsl.testing import attention_inputs
    path, name = args.kernel.split(":")
    source = getattr(kdsl.load(ROOT / path if not Path(path).is_absolute() else path), name).ir
    B, H, M, N, D = map(int, args.shape.split(","))
    q, k, v, caps = attention_inputs(source, B, H, H, M, N, D, seed=args.seed)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    dout = torch.randn(B, H, M, D, device=q.device, dtype=q.dtype)
    print(f"{name} B={B} H={H} M={M} N={N} D={D} seed {args.seed}, {torch.cuda.get_device_name()}", flush=True)
    for spec in args.variants.split(";"):
        env = dict(item.split("=", 1) for item in filter(None, spec.split(",")))
        kern = AttentionKernel(source)
        step = lambda: torch.autograd.grad(kern(q, k, v, **caps), (q, k, v), dout)
        call_under((step, env))  # plans and builds under the switches
        step()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(args.calls):
                step()
            torch.cuda.synchronize()
        rows = [(e.key, e.self_device_time_total / args.calls) for e in prof.key_averages()
                if e.self_device_time_total > 0]
        print(f"  {spec or 'as is'}: {sum(t for _, t in rows):.1f} µs a call in {len(rows)} kernels")
        for kname, t in sorted(rows, key=lambda r: -r[1]):
            print(f"    {t:9.1f}  {kname[:100]}")


if __name__ == "__main__":
    main()
