"""The guard: every proposal passes these in order, and the first failure is its verdict.

1. offered   it changes only the blocks the proposer was offered (protocol.offered);
2. types     each def type-checks as IR (kdsl.ircheck);
3. legal     the candidate lowers for every head dim of the kernel on the target (tile sizes,
             stages, shared memory: passes/tiling.py's legality);
4. exprs     its blocks agree with the ORIGINAL program in float64 on index grids (exprcheck);
5. compiled  (GPU) NVRTC compiles it; registers, spills and shared memory are recorded;
6. judged    kdsl check's judge, against the float64 reference of the ORIGINAL program: fresh
             random inputs, poisoned outputs, guard bands, inputs unchanged, determinism, awkward
             shapes at the candidate's tile sizes; through the numpy interpreter with interpret.

The candidate is always the current program with the proposal applied; "original" is the
program as loaded, whose score and mask define what is correct.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import ir, ircheck
from ..cases import AttentionCase, attention_shapes, conform, gemm_shapes
from ..errors import KdslError
from ..passes import pipeline
from . import exprcheck
from .protocol import Proposal, offered


@dataclass
class Verdict:
    accepted: bool
    reason: str                       # "accepted ..." or "rejected: <why>"
    stage: str                        # the last stage reached
    candidate: ir.Kernel | None = None
    error: dict | None = None         # the worst judged case: metric, value, tolerance, shape
    resources: dict = field(default_factory=dict)


def _reject(stage: str, why: str, **kw) -> Verdict:
    return Verdict(False, f"rejected: {why}", stage, **kw)


class Guard:
    def __init__(self, original: ir.Kernel, target, interpret: bool, seed: int = 0):
        self.original, self.target, self.interpret, self.seed = original, target, interpret, seed
        self.defs, self.attrs = offered(original, target)
        self.head_dims = pipeline.head_dims(original)
        self.derived = {n for d in self.head_dims for n, _ in pipeline.lower(original, target, d).attrs}

    def verify(self, proposal: Proposal, current: ir.Kernel) -> Verdict:
        why = self._not_offered(proposal)
        if why:
            return _reject("offered", why)
        for name, e in proposal.defs:
            try:
                ircheck.check_func(self.original, name, e)
            except ircheck.IrTypeError as err:
                return _reject("types", f"type error: {err}")
        candidate = proposal.apply(current)
        try:
            lowered = {d: pipeline.lower(candidate, self.target, d) for d in self.head_dims}
        except KdslError as err:
            return _reject("legal", f"illegal schedule: {err}")
        self.seed += 1
        problem = exprcheck.check(self.original, candidate, self.target, self.seed)
        if problem:
            return _reject("exprs", f"semantics differ from the original program: {problem}", candidate=candidate)
        resources = {"smem_bytes": max(low.attr("smem_bytes") for low in lowered.values()),
                     "threads": max(low.attr("threads") for low in lowered.values())}
        if not self.interpret:
            try:
                resources.update(_compiled_resources(candidate, self.target, self.head_dims))
            except KdslError as err:
                return _reject("compiled", f"does not compile: {str(err)[:500]}", candidate=candidate)
        return self._judge(candidate, resources)

    def _not_offered(self, p: Proposal) -> str:
        if not p.defs and not p.attrs:
            return "no replacement lines"
        for name, _ in p.defs:
            if name in self.defs:
                continue
            if name in ("mask", "tile_empty", "tile_full"):
                return f"def {name}: kernel '{self.original.name}' has no mask, and a proposal cannot add one"
            if name in ("score", "scale"):
                return f"def {name} defines the program (and its reference); it is not offered"
            return f"def {name} is not offered (may replace: {', '.join(self.defs) or 'no defs'})"
        for name, _ in p.attrs:
            if name in self.attrs:
                continue
            if name in self.derived:
                return f"attr {name} is not tunable: it is derived (may set: {', '.join(self.attrs)})"
            return f"attr {name} is not offered (may set: {', '.join(self.attrs)})"
        return ""

    def _judge(self, candidate: ir.Kernel, resources: dict) -> Verdict:
        from ..backends import Numpy
        from ..check import check_attention, check_gemm, gpu_backend
        self.seed += 1
        try:
            fn = _callable(candidate, self.target.arch, self.interpret)
            be = Numpy() if self.interpret else gpu_backend()
            if self.original.kind == "attention":
                results = check_attention(self.original, fn, 1, self.seed, self._attention_shapes(candidate), be)
            else:
                results = check_gemm(self.original, fn, 1, self.seed, self._gemm_shapes(), be)
        except KdslError as err:
            return _reject("judged", f"refused or failed when called: {str(err)[:500]}", candidate=candidate,
                           resources=resources)
        except Exception as err:  # noqa: BLE001 - whatever a candidate does, it is not accepted
            return _reject("judged", f"crashed: {type(err).__name__}: {str(err)[:300]}", candidate=candidate,
                           resources=resources)
        worst = max(results, key=lambda r: (not r.passed, r.error / r.tolerance if r.tolerance else r.error))
        error = {"metric": worst.metric, "value": worst.error, "tolerance": worst.tolerance, "shape": worst.shape}
        if not worst.passed:
            why = "; ".join(worst.problems) or f"error {worst.error:.3g} above tolerance {worst.tolerance:g}"
            return _reject("judged", f"wrong on {worst.shape}: {why}", candidate=candidate, error=error,
                           resources=resources)
        return Verdict(True, "accepted", "judged", candidate, error, resources)

    def _attention_shapes(self, candidate: ir.Kernel) -> list[AttentionCase]:
        if not self.interpret:  # at the head dims the schedule was tuned for
            return attention_shapes(candidate, self.target.arch,
                                    [(d, pipeline.default_value_dim(candidate, d)) for d in self.head_dims])
        d0, d1 = self.head_dims[0], self.head_dims[-1]
        low = pipeline.lower(candidate, self.target, d0)
        tm, tn = low.attr("tile_m"), low.attr("tile_n")
        gqa = self.original.tensor("k").shape[1] != self.original.tensor("q").shape[1]
        h, hkv = (4, 2) if gqa else (2, 2)
        # The last partial tiles, a single query row, and a second batch.
        shapes = [AttentionCase(1, h, hkv, tm + 1, 2 * tn + 5, d0), AttentionCase(2, h, hkv, 2 * tm + 3, tn - 1, d1),
                  AttentionCase(1, h, hkv, 1, tn + 1, d0), AttentionCase(1, h, hkv, 2 * tm + 3, 2 * tn + 5, d1)]
        return [conform(self.original, c) for c in shapes]

    def _gemm_shapes(self):
        shapes = gemm_shapes(self.original.attr("grouping"))
        # The interpreter's share: every tile edge of the fixed shapes, none of the long ones.
        return [c for c in shapes if c.G * c.N * c.K <= 600_000] if self.interpret else shapes


def _callable(candidate: ir.Kernel, arch: str, interpret: bool):
    if interpret:
        from ..interpreted import Interpreted
        return Interpreted(candidate, arch)
    from ..runtime.gemm_launch import GemmKernel
    from ..runtime.attention_launch import AttentionKernel
    return (AttentionKernel if candidate.kind == "attention" else GemmKernel)(candidate, arch)


def _compiled_resources(candidate: ir.Kernel, target, head_dims) -> dict:
    """The heaviest head dim's registers and spills, from the cubin's SASS (cuobjdump)."""
    from ..runtime.compiler import build
    from ..sass import inspect
    out: dict = {}
    for d in head_dims:
        built = build(candidate, target.arch, d)
        rep = inspect(built.compiled.cubin, built.generated.entry)
        if rep is not None:
            out["registers"] = max(out.get("registers", 0), rep.registers)
            out["spill_ops"] = max(out.get("spill_ops", 0), rep.spill_ops)
            out["local_bytes"] = max(out.get("local_bytes", 0), rep.local_bytes)
            out["mufu"] = max(out.get("mufu", 0), (rep.other_ops or {}).get("MUFU", 0))
    return out
