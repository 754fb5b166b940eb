#!/usr/bin/env python3
"""Does prefetching B into L2 in row bursts speed up the read-bound FP8 GEMMs (small M, masked)?

The kernel reads B through its ring 128 bytes a row at a time; tools/dev/b_pattern_probe.py
found 1 KB a row at a time reads the same bytes 2-4 % faster. Here the producer prefetches each
of the tile's B rows into L2 in 512- or 1024-byte chunks, one or two chunks ahead of its loads
(fp8_gemm_wgmma.cuh, KDSL_FP8_B_ROW_PREFETCH, an experiment compiled in only here). B's address
reaches the kernel in the `group` pointer, which dense and masked kernels leave unused: each
variant's plans are wrapped to pass it (on the Python launch path).

Timed in turns with the kernel as it is, `_scaled_mm` (dense) and a plain read of b (the
floor), L2 flushed before each launch (kdsl.bench.Timer.in_turns); every variant's output is
checked against the float64 reference first.

    python3 tools/dev/b_prefetch_probe.py [--reps 40]
"""
from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from devtools import extra_options  # noqa: E402

CASES = [("fp8_gemm", (128, 7168, 16384, 1)), ("fp8_gemm", (128, 24576, 1536, 1)), ("fp8_gemm", (128, 7168, 2048, 1)),
         ("fp8_gemm", (128, 4096, 7168, 1)), ("fp8_gemm", (128, 2112, 7168, 1)),
         ("fp8_grouped_masked", (256, 4096, 7168, 4)), ("fp8_gemm", (4096, 4096, 7168, 1))]
VARIANTS = {"now": [],
            "1 KB, 1 ahead": ["-DKDSL_FP8_B_ROW_PREFETCH=1024", "-DKDSL_FP8_B_PREFETCH_AHEAD=1"],
            "1 KB, 2 ahead": ["-DKDSL_FP8_B_ROW_PREFETCH=1024", "-DKDSL_FP8_B_PREFETCH_AHEAD=2"],
            "512 B, 2 ahead": ["-DKDSL_FP8_B_ROW_PREFETCH=512", "-DKDSL_FP8_B_PREFETCH_AHEAD=2"]}


def with_b_address(fn, inject: bool):
    """fn on the Python launch path; with `inject`, each plan's launches carry B's address
    (the call's second pointer) in the group slot."""
    fn.launch_path = "python"
    if not inject:
        return fn
    make = fn._plan

    def plan(*args, **kw):
        p = make(*args, **kw)
        if p.loaded is not None:
            launch = p.launch
            p.launch = lambda ptrs: launch([*ptrs[:5], ptrs[1], *ptrs[6:]])
        return p
    fn._plan = plan
    return fn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=40)
    args = ap.parse_args()
    import torch
    import kdsl
    from kdsl import bench, fp8, reference
    from kdsl.testing import fp8_difference
    timer = bench.Timer(args.reps)
    print(torch.cuda.get_device_name(), flush=True)
    for name, (m, n, k, g) in CASES:
        mod = kdsl.load(ROOT / "samples" / f"{name}.kd")
        masked = name.endswith("masked")
        a, sa = fp8.quantize_1x128(torch.randn((g, m, k) if masked else (m, k), device="cuda"))
        b, sb = fp8.quantize_128x128(torch.randn((g, n, k) if masked else (n, k), device="cuda"))
        extra, rows = (), m
        if masked:
            count = torch.randint(m // 2, m + 1, (g,), device="cuda", dtype=torch.int32)
            extra, rows = (count,), int(count.sum())
        ref = reference.fp8_gemm(a, sa, b, sb, *((None, extra[0]) if masked else ()))
        fns, notes = {}, {}
        for label, defines in VARIANTS.items():
            fn = with_b_address(getattr(mod, name).with_attrs(), inject=bool(defines))
            with extra_options(defines):
                out = fn(a, sa, b, sb, *extra)
            torch.cuda.synchronize()
            if masked:
                valid = (torch.arange(m, device="cuda").view(1, m, 1) < count.view(g, 1, 1)).expand(out.shape)
                err = fp8_difference(out[valid], ref[valid])
            else:
                err = fp8_difference(out, ref)
            lk = next(iter(fn._loaded.values()))[0].kernel
            notes[label] = f"{lk.attr('tile_m')}x{lk.attr('tile_n')}x{lk.attr('stages')} err {err:.1e}"
            fns[label] = functools.partial(fn, a, sa, b, sb, *extra, out=out)
        if not masked:
            fns["scaled_mm"] = lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb.t(), out_dtype=torch.bfloat16)
        fns["read b"] = functools.partial(bench.read_once, b)  # the suite's floor
        times = timer.in_turns(fns)
        print(f"\n{name} M={m} N={n} K={k} G={g}", flush=True)
        for label, t in times.items():
            print(f"  {label:16s} {t * 1e3:8.1f} us {2 * rows * n * k / t / 1e9:7.1f} TFLOPS  "
                  f"x{times['now'] / t:5.3f} of now  {notes.get(label, '')}", flush=True)
        del ref


if __name__ == "__main__":
    main()
