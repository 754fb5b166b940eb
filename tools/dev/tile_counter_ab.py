#!/usr/bin/env python3
"""Grouped contiguous GEMMs with and without the tile counter (gemm_tiles.tile_counter), timed
in turns in one process: the same build launched with the stream's counters, and with none
(the fixed stride, as a captured launch runs). Equal groups and random 128-aligned ones
(fp8_forms.contiguous_groups); calc_diff per row. With one group (G = 1) the dense kernel of the
same tile runs in the same turns.

    python3 tools/dev/tile_counter_ab.py [--reps 12] [--shapes "16384x7168x2048x8;..."]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools" / "dev"))

SHAPES = "16384x7168x2048x8;8192x4096x7168x4;32768x4096x7168x4;32768x4096x7168x16;12800x4096x7168x4"


def built(fn):
    """The lowered kernel (its tile attrs) of the one configuration fn has built."""
    return next(iter(fn._loaded.values()))[0].kernel


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=12)
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--attrs", default="", help="k=v,... fixed on the kernel (e.g. tile_m=192,tile_n=128)")
    args = ap.parse_args()
    import torch
    import kdsl
    from kdsl import bench, fp8, reference
    from kdsl.testing import fp8_difference
    import fp8_forms
    attrs = fp8_forms.parse_variant(args.attrs)[1] if args.attrs else {}
    timer = bench.Timer(args.reps)
    print(torch.cuda.get_device_name(), flush=True)
    base = kdsl.load(ROOT / "samples" / "fp8_grouped_contiguous.kd").fp8_grouped_contiguous
    for spec in filter(None, args.shapes.split(";")):
        m, n, k, g = (int(d) for d in spec.split("x"))
        a, sa = fp8.quantize_1x128(torch.randn(m, k, device="cuda"))
        b, sb = fp8.quantize_128x128(torch.randn(g, n, k, device="cuda"))
        for layout in ("equal", "random"):
            fp8_forms.CONTIGUOUS_LAYOUT[0] = layout
            ids, sizes = fp8_forms.contiguous_groups(m, g, layout)
            counted, stride = base.with_attrs(**attrs), base.with_attrs(**attrs)
            stride._work_counter = lambda plan: 0  # the kernel then walks its tiles by the stride
            ref = reference.fp8_gemm(a, sa, b, sb, ids, None)
            outs, notes = {}, {}
            for name, fn in (("counter", counted), ("stride", stride)):
                outs[name] = fn(a, sa, b, sb, ids)
                (plan,) = fn._plans.values()
                lk = built(fn)
                notes[name] = (f"{lk.attr('tile_m')}x{lk.attr('tile_n')}x{lk.attr('stages')} dynamic {plan.dynamic} "
                               f"err {fp8_difference(outs[name], ref):.1e}")
            fns = {name: (lambda f=fn, o=outs[name]: f(a, sa, b, sb, ids, out=o))
                   for name, fn in (("counter", counted), ("stride", stride))}
            if g == 1:  # one group: the dense kernel on the same operands, same tile, in the same turns
                dense = kdsl.load(ROOT / "samples" / "fp8_gemm.kd").fp8_gemm.with_attrs(
                    **{a_: built(counted).attr(a_) for a_ in ("tile_m", "tile_n", "cluster", "stages", "b_scale_load")})
                d_out = dense(a, sa, b[0], sb[0])
                lk = built(dense)
                notes["dense"] = (f"{lk.attr('tile_m')}x{lk.attr('tile_n')}x{lk.attr('stages')} "
                                  f"err {fp8_difference(d_out, ref):.1e}")
                fns["dense"] = lambda: dense(a, sa, b[0], sb[0], out=d_out)
            times = timer.in_turns(fns)
            print(f"\ncontiguous M={m} N={n} K={k} G={g} {layout} {sizes if layout == 'random' else ''}", flush=True)
            for name, t in times.items():
                print(f"  {name:8s} {t * 1e3:9.1f} us {2 * m * n * k / t / 1e9:7.1f} TFLOPS  "
                      f"x{times['stride'] / t:5.3f}  {notes[name]}", flush=True)


if __name__ == "__main__":
    main()
