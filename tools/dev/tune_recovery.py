"""How much of the hand-tuned speed `kdsl tune --rewriter search` recovers from a naive
schedule (GPU; issue 10's done-when line). For each sample:

1. writes the program with a deliberately naive schedule pinned as IR (attention: 64-key
   tiles, one consumer warpgroup, 2 stages, the grid schedule, exact math; FP8 GEMM: 64x64
   tiles, 2 stages);
2. runs the real CLI on it: `kdsl tune NAIVE.ir --rewriter search --budget B -o TUNED.ir`
   (timing shapes: kdsl bench's for the kernel), in a fresh process, wall clock measured;
3. times naive, tuned and hand-tuned (the program as kdsl compiles it by default) in one
   process, interleaved, with kdsl tune's timer, and prints the table.

    python3 tools/dev/tune_recovery.py                       # relpos, causal, fp8_gemm; 10 min each
    python3 tools/dev/tune_recovery.py --samples relpos --budget 8m    # one per call (a 10-minute runner)

recovered % = hand-tuned time / tuned time (100 % = as fast as the hand-tuned schedule).
Writes the table to --out (markdown) as well.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import kdsl  # noqa: E402
from kdsl import ir  # noqa: E402
from kdsl.bench import file_cases  # noqa: E402
from kdsl.tune.measure import Bench  # noqa: E402

NAIVE = {"attention": dict(tile_n=64, consumers=1, stages=2, schedule="grid", math="exact"),
         "gemm": dict(tile_m=64, tile_n=64, stages=2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", nargs="+", default=["relpos", "causal", "fp8_gemm"])
    ap.add_argument("--budget", default="10m", help="kdsl tune --budget per kernel (default 10m)")
    ap.add_argument("--rounds", type=int, default=7, help="timing rounds for the table (default 7)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "tune_recovery.md"))
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kdsl-tune-recovery-"))
    rows = []
    for sample in args.samples:
        src = ROOT / "samples" / f"{sample}.kd"
        mod = kdsl.load(src, interpret=True)  # IR only; kernels are built below
        name, hand = next(iter(mod.ir.items()))
        naive = hand.with_attrs(**NAIVE[hand.kind])
        naive_path = work / f"{sample}.naive.ir"
        naive_path.write_text(f"# {sample} with a naive schedule (tools/dev/tune_recovery.py)\n" + ir.print_ir(naive))
        tuned_path, log = work / f"{sample}.tuned.ir", work / f"{sample}.tune.jsonl"
        cmd = [sys.executable, "-m", "kdsl.cli", "tune", str(naive_path), "--rewriter", "search",
               "--budget", args.budget, "--proposals", "1000", "-o", str(tuned_path), "--log", str(log)]
        print("$ " + " ".join(cmd), flush=True)
        t0 = time.monotonic()
        path = os.pathsep.join([str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        run = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": path}, text=True, capture_output=True)
        wall = time.monotonic() - t0
        print(run.stdout + run.stderr, flush=True)
        if run.returncode != 0:
            rows.append((sample, "-", "-", "-", "-", f"kdsl tune failed (exit {run.returncode})", f"{wall:.0f}"))
            continue
        tuned = kdsl.load(tuned_path, interpret=True).ir[name]
        shape = file_cases(str(src), mod)[0].shape
        bench = Bench(hand, [shape], _arch(), reps=50)
        times = {k: [] for k in ("naive", "tuned", "hand")}
        for _ in range(args.rounds):  # interleaved: drift hits all three alike
            for key, k in (("naive", naive), ("tuned", tuned), ("hand", hand)):
                times[key] += bench.time(k, rounds=1)
        med = {k: statistics.median(v) for k, v in times.items()}
        accepted = sum('"verdict": "accepted' in line for line in log.read_text().splitlines())
        proposals = len(log.read_text().splitlines())
        rows.append((sample, ",".join(f"{k}={v}" for k, v in shape.items()), f"{med['naive']:.4f}",
                     f"{med['tuned']:.4f}", f"{med['hand']:.4f}", f"{100 * med['hand'] / med['tuned']:.1f}",
                     f"{wall:.0f} s, {proposals} proposals, {accepted} accepted"))
    table = ["| sample | shape | naive ms | tuned ms | hand-tuned ms | recovered % | kdsl tune |",
             "|---|---|---|---|---|---|---|"] + ["| " + " | ".join(r) + " |" for r in rows]
    text = "\n".join(table) + "\n"
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(f"# kdsl tune: recovery from a naive schedule ({_device()})\n\n{text}\n"
                              f"Tuned programs and logs: {work}\n")
    return 0


def _arch() -> str:
    import cupy
    sm = int(cupy.cuda.Device().compute_capability)
    return "sm_90a" if sm == 90 else f"sm_{sm}"


def _device() -> str:
    import torch
    return torch.cuda.get_device_name()


if __name__ == "__main__":
    sys.exit(main())
