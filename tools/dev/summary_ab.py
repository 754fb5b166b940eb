#!/usr/bin/env python3
"""A kernel's tile summary and its whole call (summary + attention), timed against builds of
itself with other NVRTC defines (A/B), in turns on the same inputs (bench.Timer):

    python3 tools/dev/summary_ab.py tools/dev/heldout22.kd:label_not_three 2,16,4096,4096,128 \
        --variants "default;KDSL_SUMMARY_BYTES=0" [--reps 10] [--seed 0]

Each variant is a fresh kernel whose plan and build are made under KDSL_DEFINES=its defines
(part of every cache key); its summary buffer must equal the first variant's bit for bit (a
define that changed the summary fails here, not in the timing). The summary's GB/s counts the
captured tensors it could read once each."""
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
    ap.add_argument("spec", help="FILE.kd:KERNEL")
    ap.add_argument("shape", help="B,H,M,N,D")
    ap.add_argument("--variants", default="default;KDSL_SUMMARY_BYTES=0", help="';'-separated KDSL_DEFINES")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    import torch
    import kdsl
    from kdsl.bench import Timer
    from kdsl.runtime.attention_launch import AttentionKernel
    from kdsl.testing import attention_inputs, rel_frobenius
    path, name = args.spec.split(":")
    B, H, M, N, D = map(int, args.shape.split(","))
    kir = kdsl.load(path).ir[name]
    q, k, v, caps = attention_inputs(kir, B, H, H, M, N, D, seed=args.seed)
    gb = sum(c.numel() * c.element_size() for c in caps.values()) / 1e9
    variants = [("" if s.strip() == "default" else s.strip()) for s in args.variants.split(";")]
    kerns = {d: AttentionKernel(kir) for d in variants}
    env = {d: {"KDSL_DEFINES": d} for d in variants}
    outs = {d: call_under((kerns[d], env[d]), q, k, v, **caps) for d in variants}
    sums = {d: call_under((kerns[d].tile_summary, env[d]), q, k, v, **caps) for d in variants}
    first = variants[0]
    for d in variants[1:]:
        assert torch.equal(sums[d].buffer, sums[first].buffer), f"{d or 'default'}: another summary than the first's"
        assert rel_frobenius(outs[d], outs[first]) < 1e-2, d
    timed = {}
    for d in variants:
        timed[f"{d or 'default'} summary"] = lambda d=d: kerns[d].tile_summary(q, k, v, **caps)
        timed[f"{d or 'default'} call"] = lambda d=d: kerns[d](q, k, v, **caps)
    t = Timer(args.reps).in_turns(timed)
    print(f"{torch.cuda.get_device_name()}; {name} B={B} H={H} M={M} N={N} D={D} seed {args.seed}; "
          f"captures {gb * 1e3:.0f} MB")
    print("| variant | summary us | GB/s | x | call us | x |")
    print("|---|---|---|---|---|---|")
    base_s, base_c = t[f"{first or 'default'} summary"], t[f"{first or 'default'} call"]
    for d in variants:
        s, c = t[f"{d or 'default'} summary"], t[f"{d or 'default'} call"]
        print(f"| {d or 'default'} | {s * 1e3:.1f} | {gb / (s * 1e-3):.0f} | x{base_s / s:.3f} | {c * 1e3:.1f} | "
              f"x{base_c / c:.3f} |")


if __name__ == "__main__":
    main()
