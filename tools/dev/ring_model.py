#!/usr/bin/env python3
"""The FP8 GEMM's ring protocol (fp8_gemm_producer.cuh, fp8_gemm_math.cuh) as a host model, to
check a change to its waits and arrivals for deadlocks and overwrites before it costs device
time: a trial of the producer's waits hung a device call (bench/NOTES.md, thirty-third session),
and this model finds that hang in a millisecond.

One CTA: a producer and the math warpgroups (one actor: they wait and hand back in step) share
STAGES slots, each with a "full" and an "empty" mbarrier. A barrier completes a phase when its
expected arrivals are in (loads land at once). `try_wait.parity(P)` passes unless the barrier's
current, incomplete phase has parity P, as the hardware's does, so a waiter two phases behind
passes wrongly; the model reports the overwrite or the wrong block read that follows.

Forms (the kernel's and its trials):
- prefetch (one-wave tiles, the kernel): the math warpgroups wait for block kb + 1's "full"
  before handing block kb's slot back;
- pair (a trial not kept: correct, but x0.72-0.97 on the H200, bench/NOTES.md thirty-fourth
  session): slots 2i and 2i + 1 share slot 2i's barriers, and a unit starts a pair;
- group G (a trial not kept): the producer waits until the G-th slot ahead is free before
  loading the first of a group.

    python3 tools/dev/ring_model.py --stages 4 --pair --prefetch --units 3,5,2
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field


@dataclass
class Barrier:
    expected: int
    completed: int = 0  # phases completed
    arrivals: int = 0

    def arrive(self, n: int = 1) -> None:
        self.arrivals += n
        if self.arrivals == self.expected:
            self.arrivals = 0
            self.completed += 1

    def passes(self, parity: int) -> bool:
        """try_wait.parity: false only while the current phase has this parity."""
        return self.completed % 2 != parity


@dataclass
class Ring:
    stages: int
    pair: bool = False
    group: int = 1
    prefetch: bool = False
    full: list = field(default_factory=list)
    empty: list = field(default_factory=list)
    slot_block: list = field(default_factory=list)  # what each slot holds: (unit, kb) or None
    held: set = field(default_factory=set)         # slots the math warpgroups have not handed back
    hazards: list = field(default_factory=list)

    def __post_init__(self):
        self.full = [Barrier(1) for _ in range(self.stages)]
        self.empty = [Barrier(1) for _ in range(self.stages)]
        self.slot_block = [None] * self.stages

    def bar(self, s: int) -> int:
        return s & ~1 if self.pair else s

    def opens(self, s: int) -> bool:
        return not self.pair or s % 2 == 0

    def closes(self, s: int, kb: int, nk: int) -> bool:
        return not self.pair or s % 2 == 1 or kb + 1 == nk


def _advance(pos: int, phase: int, r: Ring) -> tuple[int, int]:
    pos += 1
    return (0, phase ^ 1) if pos == r.stages else (pos, phase)


def _wait(barrier: Barrier, parity: int):
    while not barrier.passes(parity):
        yield "blocked"


def producer(r: Ring, units: list[int]):
    """Fills the slots unit by unit (units: each unit's K blocks), as fp8_producer does."""
    pos, phase = 0, 0
    for u, nk in enumerate(units):
        for kb in range(nk):
            s = pos
            if r.group > 1 and kb % r.group == 0:  # the group's last slot free first
                d = min(r.group, nk - kb) - 1
                yield from _wait(r.empty[r.bar((s + d) % r.stages)], phase ^ ((s + d) // r.stages) ^ 1)
            if r.opens(s):
                yield from _wait(r.empty[r.bar(s)], phase ^ 1)
            if s in r.held:
                r.hazards.append(f"producer refilled slot {s} (unit {u} block {kb}) before it was handed back")
            r.slot_block[s] = (u, kb)
            if r.closes(s, kb, nk):
                r.full[r.bar(s)].arrive()  # the stage's (or pair's) bytes landed, its arrivals in
            pos, phase = _advance(pos, phase, r)
            yield "step"
        if r.pair and pos % 2:  # the next unit starts a pair
            pos, phase = _advance(pos, phase, r)


def math(r: Ring, units: list[int]):
    """Consumes the slots in the same order, as fp8_math does."""
    pos, phase = 0, 0
    for u, nk in enumerate(units):
        for kb in range(nk):
            s = pos
            if r.opens(s) and not (r.prefetch and kb > 0):  # (prefetch: waited for during block kb - 1)
                yield from _wait(r.full[r.bar(s)], phase)
            if r.slot_block[s] != (u, kb):
                r.hazards.append(f"math read slot {s} for unit {u} block {kb}, holding {r.slot_block[s]}")
            r.held.add(s)
            nxt, nph = _advance(pos, phase, r)
            if r.prefetch and kb + 1 < nk and r.opens(nxt):
                yield from _wait(r.full[r.bar(nxt)], nph)
            if r.closes(s, kb, nk):
                r.held -= {s, s & ~1} if r.pair else {s}
                r.empty[r.bar(s)].arrive()
            pos, phase = nxt, nph
            yield "step"
        if r.pair and pos % 2:
            pos, phase = _advance(pos, phase, r)


def run(stages: int, units: list[int], pair=False, group=1, prefetch=False) -> str:
    """'ok', 'deadlock' or the first hazard. A last unit of one block stands for the end-of-work
    stage both roles pass through."""
    r = Ring(stages, pair, group, prefetch)
    units = list(units) + [1]
    actors = [producer(r, units), math(r, units)]
    live = list(actors)
    while live:
        progressed = False
        for actor in list(live):
            event = next(actor, "done")
            if r.hazards:
                return r.hazards[0]
            if event == "done":
                live.remove(actor)
            progressed = progressed or event != "blocked"
        if not progressed:  # every live role polled a wait that cannot pass: nothing else moves
            return "deadlock"
    return "ok"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--units", default="3,5,2", help="each unit's K blocks, comma-separated")
    ap.add_argument("--pair", action="store_true")
    ap.add_argument("--group", type=int, default=1)
    ap.add_argument("--prefetch", action="store_true")
    args = ap.parse_args()
    print(run(args.stages, [int(x) for x in args.units.split(",")], args.pair, args.group, args.prefetch))


if __name__ == "__main__":
    main()
