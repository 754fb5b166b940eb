"""Helpers for checking kernels: random inputs for any program, and the error metrics
with the tolerances the project commits to."""
from __future__ import annotations

from . import ir
from .runtime.bounds import _eval as eval_dim

ATTENTION_TOL = 2e-2   # relative Frobenius error, bf16/fp16 attention
FP8_TOL = 1e-3         # 1 - 2 sum(xy) / sum(x^2 + y^2), FP8 GEMM vs dequantised product


def rel_frobenius(out, ref) -> float:
    import torch
    out, ref = out.to(torch.float64), ref.to(torch.float64)
    if not torch.isfinite(out).all():
        return float("inf")
    den = torch.linalg.norm(ref)
    return float(torch.linalg.norm(out - ref) / den) if den > 0 else float(torch.linalg.norm(out))


def fp8_difference(x, y) -> float:
    import torch
    x, y = x.to(torch.float64), y.to(torch.float64)
    if not torch.isfinite(x).all():
        return float("inf")
    return float(1 - 2 * (x * y).sum() / (x * x + y * y).sum())


def attention_inputs(kernel: ir.Kernel, B, H, Hkv, M, N, D, device="cuda", dtype=None, generator=None):
    """Random q, k, v and captured tensors for an attention program (fresh on each call).

    Integer captures get sorted small ids along their last axis (document-id-like); float
    captures get standard normal values scaled to 0.1 (bias-like)."""
    import torch
    dtype = dtype or {"bf16": torch.bfloat16, "f16": torch.float16}[kernel.tensor("q").dtype]
    g = generator
    q = torch.randn(B, H, M, D, device=device, dtype=dtype, generator=g)
    k = torch.randn(B, Hkv, N, D, device=device, dtype=dtype, generator=g)
    v = torch.randn(B, Hkv, N, D, device=device, dtype=dtype, generator=g)
    dims = {}
    for name, (t, axis) in kernel.dims.items():
        if t in ("q", "k", "v"):
            dims[name] = {"q": (B, H, M, D), "k": (B, Hkv, N, D), "v": (B, Hkv, N, D)}[t][axis]
    caps = {}
    for t in kernel.tensors:
        if t.role != "capture":
            continue
        shape = []
        for e in t.shape:
            if isinstance(e, ir.Var) and e.name not in dims:
                dims[e.name] = 2 * max(M, N)  # free dims: generous, so clamped indices fit
            shape.append(eval_dim(e, dims))
        if t.dtype == "i32":
            caps[t.name] = torch.sort(torch.randint(0, 3, shape, device=device, generator=g), dim=-1).values.int()
        else:
            x = 0.1 * torch.randn(shape, device=device, generator=g)
            caps[t.name] = x.to({"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[t.dtype])
    return q, k, v, caps
