#!/usr/bin/env python3
"""Random FP8 GEMM calls with random attrs, on the GPU. Each call either passes kdsl check's
judge (kdsl.check.gemm_case: calc_diff < 1e-3, guard bands and rows it must leave untouched
intact, inputs unchanged, two runs bitwise equal) or is refused with a KdslError that says
why. Anything else is a finding: another exception, a wrong or irreproducible result, or a
CUDA fault (the process dies; the last "trial" line printed names the call).

    python3 tools/dev/fp8_config_fuzz.py [--seed 1] [--seconds 400] [--trials 10000]

Shapes straddle tile edges (1, 63-65, 127-129, ...) or are drawn at random; K is 128 to 7680;
each attr is given with probability 0.2, from its legal values and beyond them (stages 1-9).
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

NAMES = ("fp8_gemm", "fp8_gemm_accumulate", "fp8_grouped_contiguous", "fp8_grouped_masked")
EDGES = (1, 2, 3, 8, 16, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257, 383, 384, 385)
WORK_CAP = 1.5e11  # M x N x K x G: keeps the float64 reference quick


def draw_dim(rng: random.Random, most: int) -> int:
    r = rng.random()
    if r < 0.5:
        return rng.choice(EDGES)
    if r < 0.8:
        return rng.randint(1, most)
    return rng.randint(1, 40) * 128 + rng.choice((-1, 0, 1, 8))


def draw_attrs(rng: random.Random, grouping: str, m: int) -> dict:
    from kdsl.passes import gemm_tiles as t
    choices = {"tile_m": t.BLOCK_M, "tile_n": t.BLOCK_N, "stages": range(1, 10), "cluster": (1, 2),
               "multicast": t.MULTICAST, "store": t.STORES, "stream_k": (False, True),
               "scale_load": t.SCALE_LOADS, "b_scale_load": t.B_SCALE_LOADS, "raster": range(1, 17)}
    attrs = {a: rng.choice(list(v)) for a, v in choices.items() if rng.random() < 0.2}
    if grouping == "masked" and rng.random() < 0.3:
        attrs["expected_rows"] = rng.randint(1, max(1, 2 * m))
    return attrs


def draw(rng: random.Random):
    name = rng.choice(NAMES)
    grouping = {"fp8_grouped_contiguous": "contiguous", "fp8_grouped_masked": "masked"}.get(name, "dense")
    while True:
        m, n, k = draw_dim(rng, 3000), draw_dim(rng, 5000), 128 * rng.randint(1, 60)
        g = 1 if grouping == "dense" else rng.randint(1, 8)
        if max(m, 1) * n * k * g <= WORK_CAP:
            return name, grouping, (m, n, k, g), draw_attrs(rng, grouping, m)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=400)
    ap.add_argument("--trials", type=int, default=10000)
    args = ap.parse_args()
    import torch
    import kdsl
    from kdsl.backends import Torch
    from kdsl.cases import GemmCase
    from kdsl.check import gemm_case
    from kdsl.errors import KdslError
    print(torch.cuda.get_device_name(), flush=True)
    mods = {n: kdsl.load(ROOT / "samples" / f"{n}.kd") for n in NAMES}
    be = Torch("cuda")
    rng = random.Random(args.seed)
    tally, refusals, findings = collections.Counter(), collections.Counter(), []
    start = time.time()
    for i in range(args.trials):
        if time.time() - start > args.seconds:
            break
        name, grouping, (m, n, k, g), attrs = draw(rng)
        print(f"trial {i}: {name} M={m} N={n} K={k} G={g} {attrs}", flush=True)
        base = getattr(mods[name], name)
        try:
            fn = base.with_attrs(**attrs)
            res = gemm_case(be, fn.ir, fn, GemmCase(m, n, k, g, seed=i))
        except KdslError as e:
            msg = str(e)
            assert msg.strip(), "a refusal without a message"
            tally["refused"] += 1
            refusals[msg.rsplit(": ", 1)[-1][:110]] += 1  # the reason, after the call it names
            continue
        except Exception:  # noqa: BLE001 - every other exception is what the fuzzer looks for
            tally["error"] += 1
            findings.append((i, name, (m, n, k, g), attrs, traceback.format_exc(limit=6)))
            print("  ERROR\n" + findings[-1][-1], flush=True)
            continue
        if res.passed:
            tally["passed"] += 1
            lk = next(iter(fn._loaded.values()))[0].kernel
            print(f"  passed {res.error:.1e} tile {lk.attr('tile_m')}x{lk.attr('tile_n')}x{lk.attr('stages')} "
                  f"c{lk.attr('cluster')}{lk.attr('multicast')[0]} {lk.attr('store')} sk {lk.attr('stream_k')}",
                  flush=True)
        else:
            tally["failed"] += 1
            findings.append((i, name, (m, n, k, g), attrs, f"error {res.error} problems {res.problems}"))
            print(f"  FAILED {findings[-1][-1]}", flush=True)
        torch.cuda.empty_cache()
    print(f"\n{sum(tally.values())} calls in {time.time() - start:.0f} s: {dict(tally)}")
    print("refusals (their reasons):")
    for why, count in refusals.most_common():
        print(f"  {count:4d}  {why}")
    for f in findings:
        print("FINDING", *f[:4])
        print(f[4])


if __name__ == "__main__":
    main()
