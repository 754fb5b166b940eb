"""Translate a kdsl attention program into FlexAttention's score_mod / mask_mod, from the
IR, so peers are timed on exactly the same function."""
from __future__ import annotations

import functools

from . import ir
from .semantics import eval_torch


@functools.cache
def compiled_flex_attention():
    """torch.compile(flex_attention) with static shapes. With Dynamo's automatic dynamic
    shapes, variants compiled after others in one process (recompiles of the same function)
    got symbolic sizes, and a score_mod that indexes a captured tensor then failed to lower
    ("unbacked_bindings" on an .item()); each shape is compiled for itself instead, as a
    user with fixed shapes would."""
    import torch
    from torch.nn.attention.flex_attention import flex_attention
    return torch.compile(flex_attention, dynamic=False)


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
