#!/usr/bin/env python3
"""The forward alone, timed against itself planned and built under other environment switches
(A/B), in turns on the same inputs (bench.Timer):

    python3 tools/dev/forward_ab.py tools/dev/heldout35.kd --programs aligned_cross \
        --shape 2,16,4096,4096,128 --variants "default;KDSL_DEFINES=KDSL_KEY_BOUNDS=0" [--reps 10]

A variant is ','-separated NAME=VALUE pairs ("default": none); each gets a fresh kernel whose
first call (its plan and build) runs under them, as tools/dev/structured_masks.py does. Every
variant's output must match the first's within 1e-2 (relative Frobenius): a switch that changed
the answer fails here, not in the timing. Prints per program and variant µs and the speed-up
over the first (> 1: faster).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools" / "dev"))
from structured_masks import call_under  # noqa: E402  (a call with some environment variables set)


def parse_variants(text: str) -> list[tuple[str, dict]]:
    out = []
    for spec in (s.strip() for s in text.split(";")):
        pairs = [] if spec in ("", "default") else [p.split("=", 1) for p in spec.split(",")]
        out.append((spec or "default", {n.strip(): v.strip() for n, v in pairs}))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--programs", required=True, help="','-separated kernel names")
    ap.add_argument("--shape", default="2,16,4096,4096,128", help="B,H,M,N,D")
    ap.add_argument("--variants", default="default;KDSL_DEFINES=KDSL_KEY_BOUNDS=0")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    import torch
    import kdsl
    from kdsl.bench import Timer
    from kdsl.runtime.attention_launch import AttentionKernel
    from kdsl.testing import attention_inputs, rel_frobenius
    B, H, M, N, D = map(int, args.shape.split(","))
    module, variants = kdsl.load(args.file), parse_variants(args.variants)
    print(f"{torch.cuda.get_device_name()}; B={B} H={H} M={M} N={N} D={D} seed {args.seed}")
    print("| program | variant | us | x |")
    print("|---|---|---|---|")
    for name in args.programs.split(","):
        kir = module.ir[name]
        hkv = H // 4 if kir.tensor("k").shape[1] != kir.tensor("q").shape[1] else H
        q, k, v, caps = attention_inputs(kir, B, H, hkv, M, N, D, seed=args.seed)
        kerns = {label: (AttentionKernel(kir), env) for label, env in variants}
        outs = {label: call_under(kerns[label], q, k, v, **caps) for label, _ in variants}
        first = variants[0][0]
        for label, _ in variants[1:]:
            err = rel_frobenius(outs[label], outs[first])
            assert err < 1e-2, f"{name} {label}: output differs from {first}'s ({err:.2e})"
        t = Timer(args.reps).in_turns({label: (lambda kk=kerns[label]: call_under(kk, q, k, v, **caps))
                                       for label, _ in variants})
        for label, _ in variants:
            print(f"| {name} | {label} | {t[label] * 1e3:.1f} | x{t[first] / t[label]:.3f} |")


if __name__ == "__main__":
    main()
