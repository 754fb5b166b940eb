"""The float64 torch reference for a kdsl program: materialised scores, plain softmax.

It reads the same IR the compiler reads (score, mask), so any program, sample or
generated, has its own reference; tests and `kdsl check` compare kernels against it."""
from __future__ import annotations

import math

from . import ir
from .semantics import eval_torch


def attention(kernel: ir.Kernel, q, k, v, captures: dict | None = None, scale: float | None = None):
    """Returns (out, lse) in float64; rows with every key masked give out = 0, lse = -inf."""
    import torch

    captures = captures or {}
    B, H, M, D = q.shape
    Hkv, N = k.shape[1], k.shape[2]
    dims = _dims(kernel, {"q": q, "k": k, "v": v, **captures})
    if scale is None:
        from .runtime.launch import eval_scalar
        scale = float(eval_scalar(kernel.func("scale"), dims))
    qd, kd, vd = (x.to(torch.float64) for x in (q, k, v))
    rep = H // Hkv
    kd, vd = kd.repeat_interleave(rep, dim=1), vd.repeat_interleave(rep, dim=1)
    s = torch.einsum("bhmd,bhnd->bhmn", qd, kd) * scale
    dev = q.device
    idx = {
        "b": torch.arange(B, device=dev).view(B, 1, 1, 1), "h": torch.arange(H, device=dev).view(1, H, 1, 1),
        "q": torch.arange(M, device=dev).view(1, 1, M, 1), "kv": torch.arange(N, device=dev).view(1, 1, 1, N),
    }
    env = {**{n: v for n, v in dims.items()}, **idx, "scale": scale}
    caps = {n: t for n, t in captures.items()}
    score = kernel.func("score")
    if score is not None:
        s = _full(eval_torch(score, {**env, "s": s}, caps), s.shape, torch.float64, dev)
    mask = kernel.func("mask")
    if mask is not None:
        keep = _full(eval_torch(mask, env, caps), s.shape, torch.bool, dev)
        s = s.masked_fill(~keep, -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isinf(lse), 0.0, lse)[..., None])
    p = torch.nan_to_num(p, nan=0.0)
    out = torch.einsum("bhmn,bhnd->bhmd", p, vd)
    return out, lse


def _full(x, shape, dtype, dev):
    import torch
    if not isinstance(x, torch.Tensor):
        x = torch.tensor(x, dtype=dtype, device=dev)
    return x.to(dtype).expand(shape)


def _dims(kernel: ir.Kernel, tensors: dict) -> dict:
    dims = {}
    for name, (t, axis) in kernel.dims.items():
        if t in tensors:
            dims[name] = int(tensors[t].shape[axis])
    return dims


def fp8_gemm(a, a_scale, b, b_scale, group=None, count=None):
    """float64 product of the dequantised inputs, in the kernel's grouping."""
    import torch
    from .fp8 import dequantize_1x128, dequantize_128x128

    A = dequantize_1x128(a, a_scale).to(torch.float64)
    Bm = dequantize_128x128(b, b_scale).to(torch.float64)
    if group is not None:  # contiguous: row m uses b[group[m]]; -1 rows give NaN (never compared)
        out = torch.full((A.shape[0], Bm.shape[1]), float("nan"), dtype=torch.float64, device=A.device)
        for g in range(Bm.shape[0]):
            rows = group == g
            if rows.any():
                out[rows] = A[rows] @ Bm[g].T
        return out
    if count is not None or A.dim() == 3:
        return torch.einsum("gmk,gnk->gmn", A, Bm)
    return A @ Bm.T
