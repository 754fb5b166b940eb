#!/usr/bin/env python3
"""Random kernel calls with random attrs, on the GPU: FP8 GEMMs (the four samples) and
attention (every attention program of samples/, bench/variants.kd and tools/dev/unseen.kd).
Each call either passes kdsl check's judge (kdsl.check.gemm_case / attention_case: error
within tolerance, guard bands and rows it must leave untouched intact, inputs unchanged, two
runs bitwise equal) or is refused with a KdslError that says why. Anything else is a finding:
another exception, a build that fails (a CompileError: attrs the tiling pass let through that
NVRTC or ptxas cannot build), a wrong or irreproducible result, or a CUDA fault (the process
dies; the last "trial" line printed names the call).

    python3 tools/dev/config_fuzz.py [--kinds fp8,attention] [--seed 1] [--seconds 400] [--build-only]

--build-only needs no GPU: each call's kernel is lowered and built for sm_90a (NVRTC), and a
build that fails is the finding (what a call would have met first).

Sizes straddle tile edges (1, 63-65, 127-129, ...) or are drawn at random; each attr is given
with probability 0.2, from its legal values and beyond them (stages 1-9, tile widths no
kernel has, four consumers, ...).
"""
from __future__ import annotations

import argparse
import collections
import random
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

FP8_NAMES = ("fp8_gemm", "fp8_gemm_accumulate", "fp8_grouped_contiguous", "fp8_grouped_masked")
ATTENTION_FILES = sorted((ROOT / "samples").glob("*.kd")) + [ROOT / "bench" / "variants.kd",
                                                             ROOT / "tools" / "dev" / "unseen.kd"]
EDGES = (1, 2, 3, 8, 16, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257, 383, 384, 385)
GEMM_WORK_CAP = 1.5e11       # M x N x K x G: keeps the float64 reference quick
ATTENTION_WORK_CAP = 3e10    # B x H x M x N x (D + Dv)
# Values beyond the legal ones (and raster, which tune describes rather than lists)
BEYOND = {"stages": (1, 9), "tile_n": (100,), "consumers": (4,), "schedule": ("dynamic",), "poly_exp2": (5,),
          "lazy_rescale": (3,), "raster": tuple(range(1, 17))}


def draw_dim(rng: random.Random, most: int) -> int:
    r = rng.random()
    if r < 0.5:
        return rng.choice(EDGES)
    if r < 0.8:
        return rng.randint(1, most)
    return rng.randint(1, 40) * 128 + rng.choice((-1, 0, 1, 8))


def attr_values(kernel) -> dict:
    """The values a call may fix each schedule attr to: those kdsl tune offers for the kernel
    (kdsl.tune.protocol.offered) and some beyond them (BEYOND)."""
    from kdsl.passes.target import get_target
    from kdsl.tune.protocol import offered
    legal = offered(kernel, get_target("sm_90a"))[1]
    return {a: (() if isinstance(v, str) else tuple(v)) + BEYOND.get(a, ()) for a, v in legal.items()}


def some(rng: random.Random, choices: dict) -> dict:
    return {a: rng.choice(v) for a, v in choices.items() if v and rng.random() < 0.2}


def draw_gemm(rng: random.Random, mods: dict):
    """(kernel callable, attrs, case, judge)."""
    from kdsl.cases import GemmCase
    from kdsl.check import gemm_case
    name = rng.choice(FP8_NAMES)
    grouping = {"fp8_grouped_contiguous": "contiguous", "fp8_grouped_masked": "masked"}.get(name, "dense")
    while True:
        m, n, k = draw_dim(rng, 3000), draw_dim(rng, 5000), 128 * rng.randint(1, 60)
        g = 1 if grouping == "dense" else rng.randint(1, 8)
        if m * n * k * g <= GEMM_WORK_CAP:
            break
    attrs = some(rng, attr_values(mods[name].ir[name]))
    if grouping == "masked" and rng.random() < 0.3:
        attrs["expected_rows"] = rng.randint(1, 2 * m)
    case = GemmCase(m, n, k, g, seed=rng.randrange(2**31))
    return getattr(mods[name], name), attrs, case, gemm_case


def draw_attention(rng: random.Random, mods: dict):
    """(kernel callable, attrs, case, judge)."""
    from kdsl.cases import AttentionCase, conform
    from kdsl.check import attention_case
    path, name = rng.choice([(p, n) for p, mod in mods.items() for n, k in mod.ir.items() if k.kind == "attention"])
    kernel = getattr(mods[path], name)
    while True:
        d = rng.choice((32, 64, 64, 96, 128, 128, 192, 256, 80))
        dv = d if rng.random() < 0.8 else rng.choice((64, 128, 256))
        h = rng.choice((1, 2, 4, 8))
        case = conform(kernel.ir, AttentionCase(rng.randint(1, 2), h, rng.choice((1, 2, h)), draw_dim(rng, 2000),
                                                draw_dim(rng, 3000), d, seed=rng.randrange(2**31), Dv=dv,
                                                scale=rng.choice((None, None, 0.3))))
        if case.B * case.H * case.M * case.N * (case.D + case.Dv) <= ATTENTION_WORK_CAP:
            break
    attrs = some(rng, attr_values(kernel.ir))
    return kernel, attrs, case, attention_case


class Built:
    """build_only's verdict, in the judges' terms (a build that fails raises)."""
    passed, error, problems = True, 0.0, ()


def build_only(fn, case) -> Built:
    """The kernel a call of this case would build first (raises what the build raises)."""
    from kdsl.runtime.compiler import build
    if fn.ir.kind == "attention":
        build(fn.ir, "sm_90a", case.D, value_dim=case.Dv)
    else:
        build(fn.ir.with_attrs(shape=[case.M, case.N, case.K, case.G], sms=132), "sm_90a", 0)
    return Built()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kinds", default="fp8,attention")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=400)
    ap.add_argument("--trials", type=int, default=100000)
    ap.add_argument("--build-only", action="store_true", help="no GPU: build each call's kernel, no more")
    args = ap.parse_args()
    import kdsl
    from kdsl.errors import CompileError, KdslError
    draws = {"fp8": (draw_gemm, {n: kdsl.load(ROOT / "samples" / f"{n}.kd") for n in FP8_NAMES}),
             "attention": (draw_attention, {p: kdsl.load(p) for p in ATTENTION_FILES})}
    kinds = [draws[k] for k in args.kinds.split(",")]
    if args.build_only:
        def run(fn, case, judge):
            return build_only(fn, case)
    else:
        import torch
        from kdsl.backends import Torch
        print(torch.cuda.get_device_name(), flush=True)
        be = Torch("cuda")

        def run(fn, case, judge):
            return judge(be, fn.ir, fn, case)
    verdict = "built" if args.build_only else "passed"
    rng = random.Random(args.seed)
    tally, refusals, findings = collections.Counter(), collections.Counter(), []
    start = time.time()
    for i in range(args.trials):
        if time.time() - start > args.seconds:
            break
        draw, mods = rng.choice(kinds)
        base, attrs, case, judge = draw(rng, mods)
        label = f"{base.ir.name} {case.label()} {attrs}"
        print(f"trial {i}: {label}", flush=True)
        try:
            fn = base.with_attrs(**attrs)
            res = run(fn, case, judge)
        except CompileError as e:  # the tiling pass let through what NVRTC or ptxas cannot build
            tally["did not build"] += 1
            findings.append((i, label, str(e)[-600:]))
            print(f"  DID NOT BUILD {findings[-1][-1]}", flush=True)
            continue
        except KdslError as e:
            msg = str(e)
            tally["refused"] += 1
            reason = msg.rsplit(": ", 1)[-1].strip()  # the reason, after the call it names
            if not reason:
                findings.append((i, label, f"refused without a reason: {msg}"))
            refusals[reason[:110]] += 1
            print(f"  refused: {reason[:150]}", flush=True)
            continue
        except Exception:  # noqa: BLE001 - every other exception is what the fuzzer looks for
            tally["error"] += 1
            findings.append((i, label, traceback.format_exc(limit=6)))
            print("  ERROR\n" + findings[-1][-1], flush=True)
            continue
        if res.passed:
            tally[verdict] += 1
            print(f"  {verdict} {res.error:.1e}", flush=True)
        else:
            tally["failed"] += 1
            findings.append((i, label, f"error {res.error} problems {res.problems}"))
            print(f"  FAILED {findings[-1][-1]}", flush=True)
        if not args.build_only:
            torch.cuda.empty_cache()
    print(f"\n{sum(tally.values())} calls in {time.time() - start:.0f} s: {dict(tally)}")
    print("refusals (their reasons):")
    for why, count in refusals.most_common():
        print(f"  {count:4d}  {why}")
    for i, label, what in findings:
        print(f"FINDING trial {i}: {label}\n{what}")


if __name__ == "__main__":
    main()
