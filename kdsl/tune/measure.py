"""GPU timing for `kdsl tune`, with kdsl bench's timer (CUDA events, warm-up, L2 flushed
before each launch, median of the repetitions).

A candidate replaces the best program only if it is faster beyond noise: both are timed in
ROUNDS interleaved rounds (so clock and thermal drift hit both alike), each round's time the
sum over the tuning shapes of a median of `reps` launches, and the candidate's slowest round
must beat the best program's fastest round: intervals that do not overlap.
"""
from __future__ import annotations

import statistics

from .. import ir
from ..cases import AttentionCase, GemmCase, attention_inputs, conform, gemm_inputs

ROUNDS = 5


class Bench:
    def __init__(self, original: ir.Kernel, shapes: list[dict], arch: str, reps: int = 50):
        from ..backends import Torch
        from ..bench import Timer
        self.original, self.arch = original, arch
        self.timer = Timer(reps)
        be = Torch("cuda")
        self.inputs = []
        for i, s in enumerate(shapes):
            if original.kind == "attention":
                case = conform(original, AttentionCase(s["B"], s["H"], s.get("Hkv", s["H"]), s["M"], s["N"], s["D"],
                                                       seed=i, Dv=s.get("Dv", 0)))
                q, k, v, caps = attention_inputs(original, case, be)
                self.inputs.append(((q, k, v), caps))
            else:
                a, sa, b, sb, extra = gemm_inputs(original, GemmCase(s["M"], s["N"], s["K"], s.get("G", 1), seed=i), be)
                self.inputs.append(((a, sa, b, sb, *extra), {}))

    def _callable(self, k: ir.Kernel):
        from ..runtime.gemm_launch import GemmKernel
        from ..runtime.attention_launch import AttentionKernel
        return (AttentionKernel if k.kind == "attention" else GemmKernel)(k, self.arch)

    def _round(self, fn) -> float:
        return sum(self.timer(lambda: fn(*args, **kw)) for args, kw in self.inputs)

    def time(self, k: ir.Kernel, rounds: int = ROUNDS) -> list[float]:
        fn = self._callable(k)
        return [self._round(fn) for _ in range(rounds)]

    def compare(self, best: ir.Kernel, candidate: ir.Kernel) -> tuple[bool, dict]:
        """(faster beyond noise, {"best": ms, "candidate": ms, intervals})."""
        fb, fc = self._callable(best), self._callable(candidate)
        tb, tc = [], []
        for _ in range(ROUNDS):
            tb.append(self._round(fb))
            tc.append(self._round(fc))
        return max(tc) < min(tb), {"best": statistics.median(tb), "candidate": statistics.median(tc),
                                   "best_interval": [min(tb), max(tb)], "candidate_interval": [min(tc), max(tc)]}
