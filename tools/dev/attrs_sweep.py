#!/usr/bin/env python3
"""Time one attention kernel under several schedules (kernel attrs), same inputs, same process.

    python3 tools/dev/attrs_sweep.py samples/document_mask.kd:document_mask:8,16,2048,2048,128 \
        --attrs "schedule=persistent;consumers=1" [--reps 50]

Each spec is k=v[,k=v] (integers, strings for schedule, null: stream_capture=null), or -DNAME=VALUE [-DNAME2=VALUE2 ...] (the default
schedule compiled with that define: A/B of a kernel change kept behind a macro), or
head_group=G (the default kernel launched with that AttnArgs::head_group), or splits=S (the
default kernel with its keys split into S ranges a work item: splitkv.kv_splits forced), or
KDSL_NAME=V (the default kernel, its plan made with that environment variable set:
KDSL_SPLIT_COMBINE=1); the first
row is the default schedule. Every variant's output is compared with the default's (they must agree to bf16).
A case may carry its own specs after a second colon group (FILE:KERNEL:SHAPE:SPEC;SPEC),
used instead of --attrs. plain and causal cases also time cuDNN SDPA in the same process.
All rows of a case are timed in turns, launch by launch (bench.Timer.in_turns), so that the
GPU clock's drift over the case does not favour the rows measured first.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from devtools import extra_options  # noqa: E402


@contextlib.contextmanager
def forced_head_group(group: int):
    """Plans made inside take this head group (the plan keeps it for later calls)."""
    from kdsl.runtime import geometry
    saved = geometry.attention_head_group
    geometry.attention_head_group = lambda *args, **kwargs: group
    try:
        yield
    finally:
        geometry.attention_head_group = saved


@contextlib.contextmanager
def forced_splits(splits: int):
    """Plans made inside split each work item's keys into `splits` ranges (1: none)."""
    from kdsl.runtime import splitkv
    saved = splitkv.kv_splits
    # as kv_splits counts: no range left empty (a range of ceil(tiles / splits) tiles each)
    splitkv.kv_splits = lambda items, kv_tiles, sms: -(-kv_tiles // -(-kv_tiles // min(splits, kv_tiles)))
    try:
        yield
    finally:
        splitkv.kv_splits = saved


def parse_attrs(spec: str) -> dict:
    out = {}
    for kv in filter(None, spec.split(",")):
        k, v = kv.split("=")
        out[k] = int(v) if v.lstrip("-").isdigit() else None if v == "null" else v  # null: stream_capture=null
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+", help="FILE:KERNEL:B,H,M,N,D")
    ap.add_argument("--attrs", default="", help="';'-separated schedules")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--seed", type=int, default=None,
                    help="draw the inputs from this seed (kdsl.cases: an even seed leaves bool captures unsorted)")
    args = ap.parse_args()
    import torch
    import kdsl
    from kdsl.bench import Timer, kept_pairs
    from kdsl.runtime.attention_launch import AttentionKernel
    from kdsl.testing import attention_inputs, rel_frobenius
    timer = Timer(args.reps)
    print(torch.cuda.get_device_name(), flush=True)
    for case in args.cases:
        path, name, shape, *own = case.split(":")
        specs = own[0] if own else args.attrs
        B, H, M, N, D = map(int, shape.split(","))
        base = getattr(kdsl.load(ROOT / path), name)
        if args.seed is None:
            q, k, v, caps = attention_inputs(base.ir, B, H, H, M, N, D)
        else:
            from kdsl.backends import Torch
            from kdsl.cases import AttentionCase, attention_inputs as case_inputs
            q, k, v, caps = case_inputs(base.ir, AttentionCase(B, H, H, M, N, D, args.seed), Torch("cuda"))
        dims = {"B": B, "H": H, "Hkv": H, "M": M, "N": N, "D": D, "Dv": D}
        flops = 4 * D * kept_pairs(base.ir, dims, caps, B, H, M, N)
        first = lambda res: res[0] if isinstance(res, tuple) else res  # (out, lse) where lse is declared
        ref = first(base(q, k, v, **caps))
        timed, notes = {"default": lambda: base(q, k, v, **caps)}, {}
        if name in ("plain", "causal"):
            from torch.nn.attention import SDPBackend, sdpa_kernel

            def cudnn():
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=name == "causal")
            timed["cuDNN SDPA"] = cudnn
        for spec in filter(None, specs.split(";")):
            try:
                if spec.startswith("head_group="):  # the default kernel, its plan made with this head group
                    kern = AttentionKernel(base.ir)
                    with forced_head_group(int(spec.split("=")[1])):
                        out = kern(q, k, v, **caps)
                elif spec.startswith("splits="):  # the default kernel, its plan made with this split
                    kern = AttentionKernel(base.ir)
                    with forced_splits(int(spec.split("=")[1])):
                        out = kern(q, k, v, **caps)
                elif spec.startswith("KDSL_") and "=" in spec:  # a runtime switch, read when the plan is made
                    kern = AttentionKernel(base.ir)
                    name_, value = spec.split("=", 1)
                    saved, os.environ[name_] = os.environ.get(name_), value
                    try:
                        out = kern(q, k, v, **caps)
                    finally:
                        if saved is None:
                            del os.environ[name_]
                        else:
                            os.environ[name_] = saved
                elif spec.startswith("-D"):  # a define: the same schedule, compiled with -DNAME=VALUE
                    kern = AttentionKernel(base.ir)
                    with extra_options(spec.split()):  # one or more -D, space-separated
                        out = kern(q, k, v, **caps)
                else:
                    kern = AttentionKernel(base.ir.with_attrs(**parse_attrs(spec)))
                    out = kern(q, k, v, **caps)
                low = next(iter(kern._loaded.values()))[0].kernel
                notes[spec] = (f"vs default {rel_frobenius(first(out), ref):.1e}  tile {low.attr('tile_n')}x"
                               f"{low.attr('consumers')}x{low.attr('stages')} stream {low.attr('stream_capture')}")
                timed[spec] = lambda kern=kern: kern(q, k, v, **caps)
            except Exception as e:  # an illegal schedule: say so, go on
                notes[spec] = f"{type(e).__name__}: {str(e)[:150]}"
        times = timer.in_turns(timed)  # in turns: the GPU clock's drift hits every row alike
        t0 = times["default"]
        lowered = next(iter(base._loaded.values()))[0].kernel
        sched = {a: lowered.attr(a) for a in ("tile_n", "consumers", "stages", "schedule", "poly_exp2",
                                              "stream_capture")}
        print(f"\n== {name} B={B} H={H} M={M} N={N} D={D}: default {sched}: {t0 * 1e3:8.1f} us "
              f"{flops / t0 / 1e9:6.1f} TFLOPS", flush=True)
        for label in list(timed)[1:] + [s for s in notes if s not in timed]:
            if label in times:
                t = times[label]
                print(f"   {label:40s} {t * 1e3:8.1f} us {flops / t / 1e9:6.1f} TFLOPS  x{t0 / t:5.3f}  "
                      f"{notes.get(label, '')}", flush=True)
            else:
                print(f"   {label:40s} {notes[label]}", flush=True)

if __name__ == "__main__":
    main()
