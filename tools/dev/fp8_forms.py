#!/usr/bin/env python3
"""A/B of FP8 GEMM kernel forms and tile configurations, timed in turns with torch's blockwise
_scaled_mm in one process (kdsl.bench.Timer.in_turns: same inputs, L2 flushed before each
launch). A form is a set of NVRTC defines (e.g. -DKDSL_FP8_SCALES_IN_RING=1); each variant
is a (form, attrs) pair compiled for the shape it is timed on.

    python3 tools/dev/fp8_forms.py [--reps 40] [--compile-only [--digest]] [--only dense|grouped|small]
                                   [--shapes "8192x8192x8192;masked:256x4096x7168x4;masked:4096x7168x2048x16@64"]
                                   [--variants "tile_m=128;expected_rows=E"]

A masked case written ...@E draws its counts as DeepGEMM's tests do (E x uniform(0.7, 1.3)), and
a variant's expected_rows=E takes that E.

--compile-only builds every variant for 132 SMs without a GPU and prints its resources
(registers, spills), so that a device call only times what compiles cleanly.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from devtools import extra_options, sass_text  # noqa: E402

DENSE = [(4096, 2112, 7168), (4096, 24576, 1536), (4096, 32768, 512), (4096, 7168, 16384),
         (4096, 4096, 7168), (4096, 7168, 2048)]
SMALL = [(128, 2112, 7168), (128, 24576, 1536), (128, 7168, 2048), (128, 4096, 7168), (4096, 1536, 7168),
         (4096, 4096, 7168), (4096, 7168, 16384)]
GROUPED = [("fp8_grouped_contiguous", (32768, 4096, 7168, 4)), ("fp8_grouped_masked", (256, 4096, 7168, 4))]
# A form names NVRTC defines its variants are compiled with (an A/B of a kernel change kept
# behind a macro); "now" is the kernel as it is.
FORMS = {"now": []}
VARIANTS = [("now", {})]
# How a contiguous case's rows are split among its groups (--contiguous-layout).
CONTIGUOUS_LAYOUT = ["equal"]
# Extra (form, attrs) variants of one case.
PER_SHAPE = {("fp8_gemm", 4096, 4096, 7168, 1): [("now", {"tile_m": 128, "tile_n": 128})]}


def with_form(form: str):
    return extra_options(FORMS[form])


def label(form: str, attrs: dict) -> str:
    return form + ("" if not attrs else " " + ",".join(f"{k}={v}" for k, v in attrs.items()))


# masked cases given as masked:MxNxKxG@E: counts drawn as DeepGEMM's tests draw them, E times
# uniform(0.7, 1.3) (at most M); a variant attr written expected_rows=E takes the case's E.
# A case is (name, (M, N, K, G)) or, with E, (name, (M, N, K, G), E).


def parse_shapes(spec: str):
    """'MxNxK' (dense) or 'contiguous:MxNxKxG' / 'masked:MxNxKxG[@E]', ';'-separated."""
    out = []
    for item in filter(None, spec.split(";")):
        grouping, _, dims = item.rpartition(":")
        dims, _, expected = dims.partition("@")
        m, n, k, *g = (int(d) for d in dims.split("x"))
        case = (f"fp8_grouped_{grouping}" if grouping else "fp8_gemm", (m, n, k, g[0] if g else 1))
        out.append(case + ((int(expected),) if expected else ()))
    return out


def with_expected(attrs: dict, expected: list) -> dict | None:
    """A variant's attrs with expected_rows=E replaced by the case's E; None where the case has none."""
    if attrs.get("expected_rows") != "E":
        return attrs
    return {**attrs, "expected_rows": expected[0]} if expected else None


def masked_counts(m: int, g: int, expected: int | None):
    """Valid rows per group: in [m / 2, m], or (expected given) expected * uniform(0.7, 1.3)
    clamped to m, from a generator seeded by the case."""
    import torch
    gen = torch.Generator().manual_seed(m * 7919 + g * 31 + (expected or 0))
    if expected is None:
        return torch.randint(m // 2, m + 1, (g,), generator=gen, dtype=torch.int32).to("cuda")
    u = 0.7 + 0.6 * torch.rand((g,), generator=gen)
    return (u * expected).to(torch.int32).clamp(max=m).to("cuda")


def parse_variant(spec: str):
    """'k=v,k=v' (the kernel as it is) or 'FORM:k=v,...' (compiled under --form FORM)."""
    form, _, spec = spec.rpartition(":")
    return (form or "now", {k: int(v) if v.isdigit() else {"true": True, "false": False}.get(v, v)
                            for k, v in (kv.split("=") for kv in spec.split(","))})


def cases(only: str):
    if only.startswith("shapes:"):
        return parse_shapes(only[len("shapes:"):])
    out = []
    if only in ("all", "dense"):
        out += [("fp8_gemm", (m, n, k, 1)) for m, n, k in DENSE]
    if only in ("all", "small"):
        out += [("fp8_gemm", (m, n, k, 1)) for m, n, k in SMALL]
    if only in ("all", "grouped"):
        out += GROUPED
    return out


def contiguous_groups(m: int, g: int, layout: str):
    """Expert per row of a contiguous call: `equal` segments of m / g rows, or `random` ones
    whose starts are distinct multiples of 128 drawn with a seed of the shape (as a router's
    counts padded to 128 rows, DeepGEMM's layout); returns (ids, segment sizes)."""
    import random
    import torch
    if layout == "equal":
        sizes = [m // g] * g
    else:
        starts = sorted(random.Random(m * 1000 + g).sample(range(128, m, 128), g - 1))
        sizes = [b - a for a, b in zip([0] + starts, starts + [m])]
    ids = torch.repeat_interleave(torch.arange(g, dtype=torch.int32), torch.tensor(sizes))
    return ids.to("cuda"), sizes


def sass_digest(cubin: bytes) -> str:
    """A digest of the cubin's instructions (cuobjdump -sass without the encodings): equal
    digests mean the same kernel, whatever else the ELF carries."""
    import hashlib
    import re
    text = sass_text(cubin)
    insns = [re.sub(r"/\* 0x[0-9a-f]+ \*/", "", line).strip() for line in text.splitlines() if re.match(r"\s+/\*[0-9a-f]+\*/", line)]
    return hashlib.sha256("\n".join(insns).encode()).hexdigest()[:12]


def compile_only(only: str, digest: bool = False) -> None:
    import kdsl
    from kdsl import sass
    from kdsl.errors import KdslError
    from kdsl.runtime.compiler import build
    for name, (m, n, k, g), *expected in cases(only):
        kir = kdsl.load(ROOT / "samples" / f"{name}.kd").ir[name]
        for form, attrs in VARIANTS + PER_SHAPE.get((name, m, n, k, g), []):
            attrs = with_expected(attrs, expected)
            if attrs is None:
                continue
            try:
                with with_form(form):
                    b = build(kir.with_attrs(shape=[m, n, k, g], sms=132, **attrs), "sm_90a", 0)
            except KdslError as e:
                print(f"{name} {m}x{n}x{k}x{g} {label(form, attrs)}: refused: {str(e)[:120]}")
                continue
            lk = b.kernel
            r = sass.inspect(b.compiled.cubin)
            res = f"regs {r.registers} local {r.local_bytes} spills {r.spill_ops} LDG {r.other_ops.get('LDG')}" if r else ""
            if digest:
                res += f" sass {sass_digest(b.compiled.cubin)}"

            print(f"{name} {m}x{n}x{k}x{g} {label(form, attrs)}: tile {lk.attr('tile_m')}x{lk.attr('tile_n')}x"
                  f"{lk.attr('stages')} cluster {lk.attr('cluster')} {lk.attr('multicast')} {res}", flush=True)


def timed(only: str, reps: int) -> None:
    import torch
    import kdsl
    from kdsl import bench, fp8
    from kdsl.errors import KdslError
    from kdsl.testing import fp8_difference
    from kdsl import reference
    timer = bench.Timer(reps)
    print(torch.cuda.get_device_name(), flush=True)
    for name, (m, n, k, g), *expected in cases(only):
        mod = kdsl.load(ROOT / "samples" / f"{name}.kd")
        grouping = mod.ir[name].attr("grouping")
        a, sa = fp8.quantize_1x128(torch.randn((g, m, k) if grouping == "masked" else (m, k), device="cuda"))
        b, sb = fp8.quantize_128x128(torch.randn((n, k) if grouping == "dense" else (g, n, k), device="cuda"))
        extra, rows = (), m * g if grouping == "masked" else m
        layout = ""
        if grouping == "contiguous":
            ids, sizes = contiguous_groups(m, g, CONTIGUOUS_LAYOUT[0])
            extra = (ids,)
            layout = f" groups {sizes}" if CONTIGUOUS_LAYOUT[0] != "equal" else ""
        elif grouping == "masked":
            count = masked_counts(m, g, expected[0] if expected else None)
            extra, rows = (count,), int(count.sum())
            layout = f" counts {count.tolist()}"
        ref = reference.fp8_gemm(a, sa, b, sb, *((extra[0], None) if grouping == "contiguous" else
                                                 (None, extra[0]) if grouping == "masked" else ()))
        fns, notes = {}, {}
        for form, attrs in VARIANTS + PER_SHAPE.get((name, m, n, k, g), []):
            attrs = with_expected(attrs, expected)
            if attrs is None:
                continue
            fn = getattr(mod, name).with_attrs(**attrs) if attrs else getattr(mod, name).with_attrs()
            try:
                with with_form(form):
                    out = fn(a, sa, b, sb, *extra)
            except KdslError as e:
                notes[label(form, attrs)] = f"refused: {str(e)[:100]}"
                continue
            if grouping == "masked":
                valid = (torch.arange(m, device="cuda").view(1, m, 1) < extra[0].view(g, 1, 1)).expand(out.shape)
                err = fp8_difference(out[valid], ref[valid])
            else:
                err = fp8_difference(out, ref)
            lk = next(iter(fn._loaded.values()))[0].kernel
            notes[label(form, attrs)] = (f"{lk.attr('tile_m')}x{lk.attr('tile_n')}x{lk.attr('stages')} "
                                         f"c{lk.attr('cluster')}{lk.attr('multicast')[0]} err {err:.1e}")
            o = out
            fns[label(form, attrs)] = (lambda f=fn, o=o: f(a, sa, b, sb, *extra, out=o))
        if grouping == "dense":
            peer = lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb.t(), out_dtype=torch.bfloat16)  # noqa: E731
            try:
                peer()
                fns["scaled_mm"] = peer
            except RuntimeError as e:  # e.g. N not a multiple of 16
                notes["scaled_mm"] = f"refused: {str(e)[:100]}"
        times = timer.in_turns(fns)
        base = times.get("scaled_mm") or times.get("now")
        print(f"\n{name} M={m} N={n} K={k} G={g}{f' E={expected[0]}' if expected else ''}{layout}", flush=True)
        for lab, t in times.items():
            print(f"  {lab:42s} {t * 1e3:9.1f} us {2 * rows * n * k / t / 1e9:7.1f} TFLOPS  x{base / t:5.3f}  "
                  f"{notes.get(lab, '')}", flush=True)
        for lab, why in notes.items():
            if lab not in times:
                print(f"  {lab:42s} {why}")
        del ref


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--digest", action="store_true", help="with --compile-only: a digest of each kernel's SASS "
                                                           "(run in two trees to see which kernels a change left alone)")
    ap.add_argument("--only", default="all", choices=("all", "dense", "small", "grouped"))
    ap.add_argument("--variants", default="", help="';'-separated attrs (k=v,k=v) timed beside the kernel as it is; "
                                                    "FORM:k=v,... compiles one under a --form")
    ap.add_argument("--form", action="append", default=[],
                    help="NAME=-DA=1,-DB=0: a form timed beside 'now' with the tile the model picks (repeatable)")
    ap.add_argument("--per-shape", default="", help="a JSON file {case: [attrs, ...]}, each case as --shapes writes "
                                                    "it and each attrs as --variants does: variants of that case only")
    ap.add_argument("--shapes", default="", help="';'-separated cases timed instead of --only's: MxNxK (dense), "
                                                 "contiguous:MxNxKxG, masked:MxNxKxG")
    ap.add_argument("--contiguous-layout", default="equal", choices=("equal", "random"),
                    help="contiguous cases: equal groups, or random 128-aligned ones (seeded by the shape)")
    args = ap.parse_args()
    CONTIGUOUS_LAYOUT[0] = args.contiguous_layout
    only = f"shapes:{args.shapes}" if args.shapes else args.only
    for spec in args.form:
        name, _, defines = spec.partition("=")
        FORMS[name] = [d for d in defines.split(",") if d]
        VARIANTS.append((name, {}))
    for spec in filter(None, args.variants.split(";")):
        VARIANTS.append(parse_variant(spec))
    if args.per_shape:
        import json
        for case, specs in json.loads(Path(args.per_shape).read_text()).items():
            (name, (m, n, k, g)), = parse_shapes(case)
            PER_SHAPE.setdefault((name, m, n, k, g), []).extend(parse_variant(s) for s in specs)
    if args.compile_only:
        compile_only(only, args.digest)
    else:
        timed(only, args.reps)


if __name__ == "__main__":
    main()
