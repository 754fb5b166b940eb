"""Fuzz the compiler: N generated programs (tests/fuzzgen.py) through parse, check, lower and
CUDA generation. Every program must compile or get a located diagnostic, in under a second.
Counts every outcome instead of stopping at the first failure, and lists each failure site.

    python3 tools/fuzz.py --examples 100000 [--seed S] [--slow 1.0]

Exit status 1 if any program raised something other than a diagnostic or took too long.
The CI form of the same check is tests/test_fuzz.py (pytest --fuzz-examples N).
"""
from __future__ import annotations

import argparse
import collections
import gc
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

import fuzzgen  # noqa: E402


_GC = {"start": 0.0, "total": 0.0}  # CPU seconds spent in Python's garbage collector


def _time_gc(phase, info):
    if phase == "start":
        _GC["start"] = time.process_time()
    else:
        _GC["total"] += time.process_time() - _GC["start"]


def _seconds(text: str) -> float:
    """CPU time of this process for one compile: a busy machine that deschedules it does
    not count against the compiler."""
    t0 = time.process_time()
    try:
        fuzzgen.compile_all(text)
    except Exception:
        pass
    return time.process_time() - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--examples", type=int, default=10_000, metavar="N", help="programs to generate (default 10000)")
    p.add_argument("--seed", type=int, default=0, help="Hypothesis seed (default 0)")
    p.add_argument("--slow", type=float, default=1.0, metavar="S", help="a program slower than S seconds fails")
    args = p.parse_args(argv)
    counts: collections.Counter = collections.Counter()
    failures: dict[str, tuple[int, str, str]] = {}  # site -> (count, first program, first message)
    slowest = [0.0, "", 0.0]  # seconds, program, of which garbage collection
    gc.callbacks.append(_time_gc)
    start = time.perf_counter()

    @seed(args.seed)
    @settings(max_examples=args.examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(fuzzgen.programs())
    def one(text):
        site, t0, gc0 = None, time.process_time(), _GC["total"]
        try:
            outcome = "compiled" if fuzzgen.compile_all(text) is None else "diagnostic"
        except Exception as e:  # every exception is a finding here: count it, keep going
            outcome = "internal error"
            frame = traceback.extract_tb(e.__traceback__)[-1]
            site = f"{type(e).__name__} at {Path(frame.filename).name}:{frame.lineno}"
            message = f"{type(e).__name__}: {str(e)[:300]}"
        counts[outcome] += 1
        elapsed = time.process_time() - t0
        if elapsed > args.slow:
            elapsed = min(elapsed, _seconds(text), _seconds(text))  # slow again, or was it a GC pause?
        if elapsed > slowest[0]:
            slowest[:] = elapsed, text, _GC["total"] - gc0
        if elapsed > args.slow:
            counts["slow"] += 1
            site, message = site or f"slow (> {args.slow} s)", f"took {elapsed:.2f} s"
        if site:
            n, first, msg = failures.get(site, (0, text, message))
            failures[site] = (n + 1, first, msg)
        total = sum(counts[k] for k in ("compiled", "diagnostic", "internal error"))
        if total % 5000 == 0:
            print(f"{total} programs, {time.perf_counter() - start:.0f} s: {dict(counts)}", flush=True)

    one()
    again = _seconds(slowest[1])  # the slowest program once more, on its own
    total = sum(counts[k] for k in ("compiled", "diagnostic", "internal error"))
    print(f"\n{total} programs in {time.perf_counter() - start:.0f} s (seed {args.seed}): "
          f"{counts['compiled']} compiled, {counts['diagnostic']} located diagnostics, "
          f"{counts['internal error']} internal errors, {counts['slow']} over {args.slow} s "
          f"(slowest: {slowest[0]:.3f} s CPU, {slowest[2]:.3f} s of it garbage collection; "
          f"{again:.3f} s when run again)")
    print(f"slowest program:\n{slowest[1][:3000]}")
    for site, (n, text, message) in sorted(failures.items(), key=lambda x: -x[1][0]):
        print(f"\n--- {n} x {site}\n{message}\nfirst program:\n{text[:2000]}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
