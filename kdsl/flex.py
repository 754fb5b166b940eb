"""Translate a kdsl attention program into FlexAttention's score_mod / mask_mod, from the
IR, so peers are timed on exactly the same function."""
from __future__ import annotations

import functools
from dataclasses import replace

from . import ir
from .semantics import eval_scalar, eval_torch


@functools.cache
def compiled_flex_attention(backend: str = "inductor"):
    """torch.compile(flex_attention) with static shapes, whole or not at all.
    Static: with Dynamo's automatic dynamic shapes, variants compiled after others in one
    process (recompiles of the same function) got symbolic sizes, and a score_mod that indexes a
    captured tensor then failed to lower ("unbacked_bindings" on an .item()); each shape is
    compiled for itself instead, as a user with fixed shapes would.
    fullgraph: where Dynamo cannot compile a call (a graph break in a mod, or its recompile limit
    on this one function) it raises instead of running FlexAttention eagerly, a peer 60-90x slower
    than it is that a benchmark would otherwise report as a ratio. fresh_flex_compile() keeps
    the recompile limit out of reach of a benchmark's many programs and shapes."""
    import torch
    from torch.nn.attention.flex_attention import flex_attention
    return torch.compile(flex_attention, dynamic=False, fullgraph=True, backend=backend)


def fresh_flex_compile() -> None:
    """Forget every compiled FlexAttention call, so that the next one compiles as the process's
    first. Dynamo counts the recompiles of a function (flex_attention's, for every program and
    shape a benchmark times in one process) and stops compiling it at a limit (8 in torch
    2.11): a long `kdsl bench` ran its last rows' Flex eagerly at 24 ms, 64x its compiled time
    (H200, bench/NOTES.md, sixty-first session). Clears all of Dynamo's caches: for benchmarks,
    which compile each peer once per row."""
    import torch
    torch._dynamo.reset()


def score_mod(kernel: ir.Kernel, dims: dict, captures: dict, scale: float):
    import torch
    e = kernel.func("score")
    if e is None:
        return None
    e = _constants_folded(e, {**dims, "scale": scale})
    # A score that ignores s (a constant, or a function of the positions alone) is still made a
    # function of it: FlexAttention's eager backward differentiates the mod by s and fails on a
    # gradient that does not exist (vmap: "must only return Tensors, got NoneType"), and its
    # compiled forward failed to lower a constant (Triton "invalid axis 1"; causal_mean, H200,
    # eighty-second session). s is the finite q . k, so s * 0 adds nothing.
    reads_s = any(isinstance(n, ir.Var) and n.name == "s" for n in ir.walk(e))

    def mod(score, b, h, q_idx, kv_idx):
        env = {**dims, "s": score, "b": b, "h": h, "q": q_idx, "kv": kv_idx, "scale": scale}
        value = float(e.value) if isinstance(e, ir.Const) else eval_torch(e, env, captures, float_dtype=torch.float32)
        return value if reads_s else score * 0.0 + value
    return mod


def mask_mod(kernel: ir.Kernel, dims: dict, captures: dict):
    import torch
    e = kernel.func("mask")
    if e is None:
        return None
    e = _constants_folded(e, dims)

    def mod(b, h, q_idx, kv_idx):
        if isinstance(e, ir.Const):  # a constant mask: a tensor of it
            return torch.full_like(q_idx, bool(e.value), dtype=torch.bool)
        return eval_torch(e, {**dims, "b": b, "h": h, "q": q_idx, "kv": kv_idx}, captures)
    return mod


def _constants_folded(e: ir.Expr, known: dict) -> ir.Expr:
    """e with each part that reads only `known` names (the dims, the scale) and constants
    computed here, once, as eval_torch would on Python numbers: the mods then trace tensor
    arithmetic alone (scalar folding goes through numpy's errstate, which Dynamo cannot trace:
    `float(D) / 64.0` left a program with no Flex peer)."""
    if isinstance(e, ir.Load):
        return replace(e, indices=tuple(_constants_folded(i, known) for i in e.indices))
    if not isinstance(e, ir.Op):
        return e
    if all(n.name in known for n in ir.walk(e) if isinstance(n, ir.Var)) and \
            not any(isinstance(n, ir.Load) for n in ir.walk(e)):
        return ir.Const(e.ty, eval_scalar(e, known))
    return replace(e, args=tuple(_constants_folded(a, known) for a in e.args))
