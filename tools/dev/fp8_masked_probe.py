#!/usr/bin/env python3
"""Where a masked grouped FP8 GEMM's time goes: the suite's shape (G=4, up to 256 rows a group,
N 4096, K 7168) at fixed row counts, under kernel forms (NVRTC defines) and tiles, timed in
turns in one process (kdsl.bench.Timer.in_turns: L2 flushed before each launch).

Counts 256 make every tile full (TMA stores only); 255 makes each group's second 128-row tile
partial (the partial-tile store path) at the same work; 192 / 160 leave its second half empty
(the empty-wave skip); 128 is one wave of full tiles (the per-CTA fixed cost: T(256) - 2 T(128)).
Every output is checked against the reference, and rows past a group's count must stay NaN.
The "read B" row is torch summing B's bytes under the same flush: the time any kernel that
reads all of B once needs (the floor the masked kernel is held to); "read B, 16-byte loads" is
kdsl bench's own floor (bench.read_once: a plain read kernel, 16 CTAs of 256 threads an SM),
in case torch's sum is not the fastest read. --flush read evicts L2 by reading 256 MB instead of writing it (the suite's
write leaves ~50 MB of dirty lines that drain while the timed kernel reads HBM), to size what
that costs a kernel bound by HBM.

    python3 tools/dev/fp8_masked_probe.py [--reps 40] [--counts 256,rand0] [--flush read]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from devtools import extra_options  # noqa: E402

FORMS = {
    "now": [],
    "old": ["-DKDSL_FP8_STAGED_PARTIAL=0", "-DKDSL_FP8_SKIP_EMPTY_WAVES=0"],  # before 2026-11-25
    "staged only": ["-DKDSL_FP8_SKIP_EMPTY_WAVES=0"],
    "skip only": ["-DKDSL_FP8_STAGED_PARTIAL=0"],
}
COUNTS = {"256": [256] * 4, "255": [255] * 4, "192": [192] * 4, "160": [160] * 4, "128": [128] * 4,
          "rand0": None, "rand1": None, "rand2": None}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--attrs", default="", help="';'-separated attrs (k=v,k=v) timed as extra variants of 'now'")
    ap.add_argument("--forms", default=",".join(FORMS), help="comma-separated forms to time (the first is the base)")
    ap.add_argument("--counts", default=",".join(COUNTS), help="comma-separated row-count sets to time")
    ap.add_argument("--flush", default="write", choices=("write", "read"),
                    help="evict L2 before each launch by writing 256 MB (the suite's) or by reading it")
    args = ap.parse_args()
    import torch
    import kdsl
    from kdsl import bench, fp8, reference
    from kdsl.testing import fp8_difference
    G, M, N, K = 4, 256, 4096, 7168
    forms = args.forms.split(",")
    variants = [(f, {}) for f in forms]
    for spec in filter(None, args.attrs.split(";")):
        variants.append(("now", {k: int(v) if v.isdigit() else v for k, v in (kv.split("=") for kv in spec.split(","))}))
    timer = bench.Timer(args.reps)
    if args.flush == "read":  # the same buffer, read: L2 ends up holding clean lines only
        flush_buf = timer.flush_buf
        timer.flush_buf = type("ReadFlush", (), {"fill_": lambda self, v: flush_buf.view(torch.int64).sum()})()
    print(torch.cuda.get_device_name(), flush=True)
    mod = kdsl.load(ROOT / "samples" / "fp8_grouped_masked.kd")
    gen = torch.Generator(device="cpu").manual_seed(7)
    for name in args.counts.split(","):
        counts = COUNTS[name]
        if counts is None:
            counts = torch.randint(M // 2, M + 1, (G,), generator=gen).tolist()
        count = torch.tensor(counts, device="cuda", dtype=torch.int32)
        a, sa = fp8.quantize_1x128(torch.randn(G, M, K, device="cuda"))
        b, sb = fp8.quantize_128x128(torch.randn(G, N, K, device="cuda"))
        ref = reference.fp8_gemm(a, sa, b, sb, None, count)
        rows = int(count.sum())
        fns, notes = {}, {}
        for form, attrs in variants:
            lab = form + ("" if not attrs else " " + ",".join(f"{k}={v}" for k, v in attrs.items()))
            fn = mod.fp8_grouped_masked.with_attrs(**attrs)
            out = torch.full((G, M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            with extra_options(FORMS[form]):
                fn(a, sa, b, sb, count, out=out)
            untouched = all(bool(torch.isnan(out[g, c:].float()).all()) for g, c in enumerate(counts))
            err = max(fp8_difference(out[g, :c], ref[g, :c]) for g, c in enumerate(counts) if c)
            lk = next(iter(fn._loaded.values()))[0].kernel
            notes[lab] = (f"{lk.attr('tile_m')}x{lk.attr('tile_n')}x{lk.attr('stages')} err {err:.1e}"
                          f"{'' if untouched else ' ROWS PAST COUNT WRITTEN'}")
            fns[lab] = (lambda f=fn, o=out: f(a, sa, b, sb, count, out=o))
        b_words = b.view(torch.float32)  # (the sum of B's bytes as floats: a bandwidth-bound read)
        fns["read B"] = lambda: b_words.sum()
        notes["read B"] = f"{b.numel() / 2**20:.0f} MiB"
        fns["read B, 16-byte loads"] = lambda: bench.read_once(b)
        notes["read B, 16-byte loads"] = notes["read B"]
        times = timer.in_turns(fns)
        base = times[forms[0]]
        print(f"\ncounts {counts} ({rows} rows)", flush=True)
        for lab, t in times.items():
            print(f"  {lab:34s} {t * 1e3:8.1f} us {2 * rows * N * K / t / 1e9:7.1f} TFLOPS  x{base / t:5.3f}  "
                  f"{notes[lab]}", flush=True)
        del ref


if __name__ == "__main__":
    main()
