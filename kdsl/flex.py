"""Translate a kdsl attention program into FlexAttention's score_mod / mask_mod, from the
IR, so peers are timed on exactly the same function."""
from __future__ import annotations

from . import ir
from .semantics import eval_torch


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
