#!/usr/bin/env python3
"""Decode schedules timed in turns (kdsl.bench.Timer.in_turns) against cuDNN SDPA: kdsl at its
own split count, at forced split counts and with other tile attrs, same inputs, one process.

    python3 tools/dev/decode_turns.py [--reps 100] [--splits 4,16,33] [--attrs "tile_n=64,stages=6"]
        [--shapes "64,16,16,4096"]

Each variant is its own kernel object whose plan is made while its split count is forced, so
the timed calls run the plans as made.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from devtools import decode_case  # noqa: E402

SHAPES = [(1, 16, 16, 32768), (1, 16, 16, 4096), (1, 32, 8, 8192)]


def non_empty(splits: int, tiles: int) -> int:
    """The split count nearest `splits` whose key ranges (ceil(tiles / count) tiles each, as
    the kernel cuts them) are all non-empty: an empty range is never merged by the items that
    merge themselves, and kv_splits never returns one."""
    chunk = -(-tiles // max(1, min(splits, tiles)))
    return -(-tiles // chunk)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--splits", default="4,16,24,33")
    ap.add_argument("--attrs", default="consumers=1,tile_n=64,stages=6;consumers=1,tile_n=176,stages=2")
    ap.add_argument("--shapes", default="", help="';'-separated B,H,Hkv,N (default: the suite's B=1 decode rows)")
    args = ap.parse_args()
    shapes = [tuple(int(x) for x in sh.split(",")) for sh in args.shapes.split(";") if sh] or SHAPES
    import torch
    import kdsl
    from kdsl.bench import Timer
    from kdsl.runtime import attention_launch, splitkv
    timer = Timer(args.reps)
    base = kdsl.load(ROOT / "samples" / "plain.kd").plain
    own = splitkv.kv_splits
    print(torch.cuda.get_device_name(), flush=True)
    for B, H, Hkv, N in shapes:
        q, k, v, cudnn = decode_case(B, H, Hkv, N)
        ref = cudnn().float()
        fns, notes = {"cuDNN": cudnn}, {}
        variants = [("own", None, {})] + [(f"splits={s}", int(s), {}) for s in args.splits.split(",")] + \
                   [(spec, None, {kv.split("=")[0]: int(kv.split("=")[1]) for kv in spec.split(",")})
                    for spec in filter(None, args.attrs.split(";"))]
        for label, splits, attrs in variants:
            kern = attention_launch.AttentionKernel(base.ir.with_attrs(**attrs) if attrs else base.ir)
            splitkv.kv_splits = own if splits is None else (lambda items, tiles, sms, s=splits: non_empty(s, tiles))
            try:
                out = kern(q, k, v)
            finally:
                splitkv.kv_splits = own
            plan = next(iter(kern._plans.values()))
            err = ((out.float() - ref).norm() / ref.norm()).item()
            notes[label] = f"grid {plan.grid[0]} {'combine' if plan.combine else 'one kernel'} err {err:.1e}"
            fns[label] = lambda kern=kern: kern(q, k, v)
        times = timer.in_turns(fns)
        print(f"\n== B={B} H={H} Hkv={Hkv} N={N} D=128 (K and V: {2 * B * Hkv * N * 128 * 2 / 1e6:.0f} MB)", flush=True)
        for label, t in times.items():
            print(f"  {label:40s} {t * 1e3:8.1f} us  cuDNN/this {times['cuDNN'] / t:.3f}  {notes.get(label, '')}",
                  flush=True)


if __name__ == "__main__":
    main()
