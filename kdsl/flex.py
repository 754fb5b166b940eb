"""Translate a kdsl attention program into FlexAttention's score_mod / mask_mod, from the
IR, so peers are timed on exactly the same function."""
from __future__ import annotations

import functools

from . import ir
from .semantics import eval_torch


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

    def mod(score, b, h, q_idx, kv_idx):
        env = {**dims, "s": score, "b": b, "h": h, "q": q_idx, "kv": kv_idx, "scale": scale}
        return eval_torch(e, env, captures, float_dtype=torch.float32)
    return mod


def mask_mod(kernel: ir.Kernel, dims: dict, captures: dict):
    e = kernel.func("mask")
    if e is None:
        return None

    def mod(b, h, q_idx, kv_idx):
        return eval_torch(e, {**dims, "b": b, "h": h, "q": q_idx, "kv": kv_idx}, captures)
    return mod
