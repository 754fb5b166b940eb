"""Fuzz the kernels' numerics: generated attention variants (tests/variantgen.py: captured tensors,
structured and random masks, random score formulas, lse outputs, f16, GQA, a value head dim
of its own) at generated shapes (every head dim, tile edges, decode, few items with long keys),
each judged as `kdsl check` judges (poisoned and guarded outputs, determinism, inputs untouched,
the float64 reference) forward and, with --grad, backward. Counts every outcome instead of
stopping at the first failure and writes each failure, with its program and case, to --out.

    python3 tools/gpu_fuzz.py --minutes 5 --seed S [--grad] [--workers 6] [--head-dims 192,256] [--out DIR]
    python3 tools/gpu_fuzz.py --interpret --minutes 1       # the CPU interpreter, small shapes

A call kdsl refuses with its own error (an index it cannot bound at these sizes) is counted
apart, with the first message of each kind. Exit status 1 if any case failed or crashed.
"""
from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

import kdsl  # noqa: E402
import variantgen  # noqa: E402
from kdsl.backends import Numpy, Torch  # noqa: E402
from kdsl.cases import AttentionCase, conform  # noqa: E402
from kdsl.check import attention_case, gradient_case  # noqa: E402
from kdsl.errors import KdslError  # noqa: E402
from kdsl.interpreted import Interpreted  # noqa: E402


class _OutOfTime(Exception):
    pass


def _out_of_time(e: BaseException) -> bool:
    """Whether e is a worker's deadline, as raised or as Hypothesis wrapped it: where the replay
    of the example that raised it did not raise again, Hypothesis reports a FlakyFailure (an
    exception group) holding it, which ended a 60-minute interpreter run before its summary."""
    if isinstance(e, _OutOfTime):
        return True
    subs = getattr(e, "exceptions", None)
    return bool(subs) and all(_out_of_time(x) for x in subs)


def judge(text: str, shape, case_seed: int, grad: bool, interpret: bool) -> list[dict]:
    """One program at one shape: a record per judged direction (forward, backward)."""
    mod = kdsl.compile(text, "fuzz.kd")
    kir = mod.ir["gen"]
    B, H, Hkv, M, N, D, Dv = shape
    case = conform(kir, AttentionCase(B, H, Hkv, M, N, D, case_seed, Dv=Dv))
    fn = Interpreted(kir) if interpret else mod.gen
    judges = [("forward", attention_case, Numpy() if interpret else Torch("cuda"))]
    if grad:
        judges.append(("backward", gradient_case, Torch("cpu" if interpret else "cuda")))
    records = []
    for direction, run, backend in judges:
        rec = {"direction": direction, "case": case.label()}
        t0 = time.perf_counter()
        try:
            res = run(backend, kir, fn, case)
            rec.update(outcome="passed" if res.passed else "failed", error=res.error, tolerance=res.tolerance,
                       problems=res.problems)
        except KdslError as e:
            rec.update(outcome="refused", message=str(e).splitlines()[0][:300])
        except Exception as e:  # a crash is a finding: record it and go on
            frame = traceback.extract_tb(e.__traceback__)[-1]
            rec.update(outcome="crashed", message=f"{type(e).__name__} at {Path(frame.filename).name}:"
                                                  f"{frame.lineno}: {str(e)[:300]}")
        rec["seconds"] = round(time.perf_counter() - t0, 2)
        records.append(rec)
        if rec["outcome"] == "refused":
            break  # the backward of a refused call is refused too
    return records


def run_worker(args) -> list[dict]:
    deadline = time.monotonic() + 60 * args.minutes
    max_elements = 1 << 14 if args.interpret else 1 << 25
    records: list[dict] = []
    seen: set = set()  # Hypothesis draws the simplest programs and shapes more than once

    @seed(args.seed)
    @settings(max_examples=10**6, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(variantgen.variants(), variantgen.shapes(max_elements, tuple(args.head_dims)),
           variantgen.st.integers(0, 2**62))
    def one(text, shape, case_seed):
        if time.monotonic() > deadline:
            raise _OutOfTime
        if (text, shape) in seen:
            return
        seen.add((text, shape))
        try:
            recs = judge(text, shape, case_seed, args.grad, args.interpret)
        except KdslError as e:  # refused at compile time
            recs = [{"direction": "compile", "outcome": "refused", "message": str(e).splitlines()[0][:300]}]
        for r in recs:
            r.update(program=text, shape=list(shape), seed=case_seed)
            records.append(r)
            if args.jsonl:  # as it goes: a worker stopped from outside leaves what it judged
                with args.jsonl.open("a") as f:
                    f.write(json.dumps(r) + "\n")
            if r["outcome"] in ("failed", "crashed"):
                print(f"{r['outcome'].upper()} {r['direction']} {r['case']} (shape {list(shape)}, seed {case_seed}): "
                      f"{r.get('error', '')} {r.get('problems', '')} {r.get('message', '')}\n{text}", flush=True)

    try:
        one()
    except Exception as e:
        if not _out_of_time(e):
            raise
    return records


def summary(records: list[dict]) -> str:
    counts = collections.Counter((r["direction"], r["outcome"]) for r in records)
    programs = len({r["program"] for r in records})
    draws = len({(r["program"], tuple(r["shape"])) for r in records})
    lines = [f"{programs} programs, {draws} program x shape draws", "",
             "| direction | passed | failed | crashed | refused |", "|---|---|---|---|---|"]
    for d in ("compile", "forward", "backward"):
        if any(k[0] == d for k in counts):
            lines.append(f"| {d} | " + " | ".join(str(counts[d, o]) for o in ("passed", "failed", "crashed",
                                                                              "refused")) + " |")
    judged = [r for r in records if r.get("tolerance")]
    for d in ("forward", "backward"):
        worst = max((r for r in judged if r["direction"] == d), key=lambda r: r["error"] / r["tolerance"], default=None)
        if worst:
            lines.append(f"\nworst {d}: {worst['error']:.3e} (tolerance {worst['tolerance']:g}) at {worst['case']}")
    refusals = collections.Counter(r["message"].split(":")[-1].strip()[:120] for r in records
                                   if r["outcome"] == "refused")
    for msg, n in refusals.most_common(5):
        lines.append(f"refused x{n}: {msg}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=5.0, help="time budget of each worker (default 5)")
    p.add_argument("--seed", type=int, default=0, help="Hypothesis seed (worker w takes seed + w)")
    p.add_argument("--grad", action="store_true", help="judge the backward (gradients) too")
    p.add_argument("--interpret", action="store_true", help="the CPU interpreter on small shapes (no GPU)")
    p.add_argument("--workers", type=int, default=1, help="processes sharing the GPU (compiling is the bound)")
    p.add_argument("--head-dims", type=lambda s: [int(x) for x in s.split(",")], default=[], metavar="D,D",
                   help="draw q's head dim from these only (default: every multiple of 16 up to 256)")
    p.add_argument("--out", type=Path, default=None, help="directory for records.jsonl and summary.md")
    p.add_argument("--jsonl", type=Path, default=None, help=argparse.SUPPRESS)  # a worker's records
    args = p.parse_args(argv)
    if args.workers > 1:
        folder = args.out or Path("/tmp")
        folder.mkdir(parents=True, exist_ok=True)
        outs = [folder / f"worker-{args.seed + w}.jsonl" for w in range(args.workers)]
        for out in outs:
            out.unlink(missing_ok=True)
        procs = [subprocess.Popen([sys.executable, __file__, "--minutes", str(args.minutes), "--seed",
                                   str(args.seed + w), "--jsonl", str(out)] + ["--grad"] * args.grad +
                                  ["--interpret"] * args.interpret +
                                  ["--head-dims", ",".join(map(str, args.head_dims))] * bool(args.head_dims))
                 for w, out in enumerate(outs)]
        for proc in procs:
            proc.wait()
        records = [json.loads(line) for out in outs if out.exists() for line in out.read_text().splitlines()]
    else:
        records = run_worker(args)
        if args.jsonl:
            return 0
    text = summary(records)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        (args.out / "summary.md").write_text(text + "\n")
    return int(any(r["outcome"] in ("failed", "crashed") for r in records))


if __name__ == "__main__":
    sys.exit(main())
