"""The float64 reference for a kdsl program: materialised scores, plain softmax.

It reads the same IR the compiler reads (score, mask), so any program, sample or
generated, has its own reference; tests and `kdsl check` compare kernels against it. It
runs on numpy arrays (a CPU-only install) or torch tensors (on their device), and answers
in the caller's kind.
"""
from __future__ import annotations

import math

from . import ir
from .backends import backend_for, host_for
from .semantics import eval_array, eval_scalar


def attention(kernel: ir.Kernel, q, k, v, captures: dict | None = None, scale: float | None = None,
              dims: dict | None = None):
    """Returns (out, lse) in float64; rows with every key masked give out = 0, lse = -inf.
    dims: the program's dims (dims_of) where q, k, v and the captures are the first heads or
    batches of a larger problem, whose H (`float(H)`, `h < H // 2`) the score and mask read."""
    be = backend_for(q)
    xp = be.xp
    s = scores(kernel, q, k, v, captures, scale, dims)
    lse = be.logsumexp(s)
    p = xp.exp(s - xp.where(xp.isinf(lse), 0.0, lse)[..., None])
    H, Hkv = q.shape[1], k.shape[1]
    vd = be.float64(v)[:, be.arange(H) // (H // Hkv)]
    out = xp.nan_to_num(p, nan=0.0) @ vd
    return out, lse


def scores(kernel: ir.Kernel, q, k, v, captures: dict | None = None, scale: float | None = None,
           dims: dict | None = None):
    """The float64 scores [B, H, M, N], -inf where the mask drops the element (dims: attention)."""
    be = backend_for(q)
    xp = be.xp
    captures = captures or {}
    env = _index_env(kernel, q, k, v, captures, scale, dims)
    s = _scaled_dots(q, k, env["scale"])
    keep = mask_of(kernel, q, k, v, captures, scale, dims, env)
    score = kernel.func("score")
    if score is not None:
        gate = _gradient_gate(be, keep)
        s = xp.broadcast_to(be.asarray(eval_array(score, {**env, "s": gate(s)}, captures, be, host_for(be),
                                                  on_float_load=gate, branch_gate=_branch_gate(be)), "f64"),
                            s.shape)
    return s if keep is None else xp.where(keep, s, -math.inf)


def _gradient_gate(be, keep):
    """x, its gradient zero where the mask drops the element: the score is evaluated there too,
    where it may be NaN (`log(1.0 + float(i - j))` at j > i + 1 under causal), and autograd
    multiplies the zero gradient that reaches it by the NaN derivative (tanh's backward: 0 * (1 -
    NaN^2)), so the NaN reached dq, dk and the captured tensors' gradients. Gating the score's
    inputs (s and every float element read) stops it there. Identity without autograd or mask."""
    if keep is None or not hasattr(be.xp, "autograd") or not be.xp.is_grad_enabled():
        return lambda x: x
    return lambda x: be.xp.where(keep, x, x.detach()) if getattr(x, "requires_grad", False) else x


def _branch_gate(be):
    """eval_array's branch_gate under autograd (None otherwise): a `where` branch's inputs keep
    their gradient only where the branch is taken, so a NaN derivative of the branch not taken
    (`where(s >= 0.0, sqrt(s + 1.0), sqrt(1.0 - s))`) never reaches dq and dk as 0 * NaN."""
    if not hasattr(be.xp, "autograd") or not be.xp.is_grad_enabled():
        return None
    xp = be.xp

    def only_where(c):
        return lambda x: xp.where(c, x, x.detach()) if getattr(x, "requires_grad", False) else x

    def gates(c):
        if isinstance(c, xp.Tensor):
            return only_where(c), only_where(~c)
        keep, drop = (lambda x: x), (lambda x: x.detach() if getattr(x, "requires_grad", False) else x)
        return (keep, drop) if c else (drop, keep)  # a condition of the dims alone
    return gates


def scores_and_slope(kernel: ir.Kernel, q, k, v, captures: dict | None = None, scale: float | None = None):
    """(the scores as scores() gives them, d score / d s), float64 [B, H, M, N], detached, from
    one evaluation of the score by torch autograd. The slope is 1 where the program has no score,
    0 where the score does not read s: how much the score magnifies s, and so a backward's
    rounding of its dS (check.slope_factor). torch tensors only."""
    import torch
    be = backend_for(q)
    captures = captures or {}
    env = _index_env(kernel, q, k, v, captures, scale, None)
    kv_head = be.arange(q.shape[1]) // (q.shape[1] // k.shape[1])
    s = ((be.float64(q) @ be.float64(k)[:, kv_head].transpose(-1, -2)) * env["scale"]).detach()
    keep = mask_of(kernel, q, k, v, captures, scale, None, env)
    masked = (lambda x: x) if keep is None else (lambda x: torch.where(keep, x, -math.inf))  # noqa: E731
    score = kernel.func("score")
    if score is None:
        return masked(s), torch.ones_like(s)
    with torch.enable_grad():
        s.requires_grad_()
        caps = {n: c.detach() for n, c in captures.items()}
        val = torch.broadcast_to(be.asarray(eval_array(score, {**env, "s": s}, caps, be, host_for(be),
                                                       branch_gate=_branch_gate(be)), "f64"), s.shape)
        if not val.requires_grad:
            return masked(val).detach(), torch.zeros_like(s)
        (slope,) = torch.autograd.grad(val.sum(), s, allow_unused=True)
    return masked(val).detach(), torch.zeros_like(s) if slope is None else slope


def mask_of(kernel: ir.Kernel, q, k, v, captures: dict | None = None, scale: float | None = None,
            dims: dict | None = None, env: dict | None = None):
    """Where the mask keeps an element, bool [B, H, M, N]; None for a program without a mask."""
    mask = kernel.func("mask")
    if mask is None:
        return None
    be = backend_for(q)
    env = env or _index_env(kernel, q, k, v, captures or {}, scale, dims)
    shape = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    return be.xp.broadcast_to(be.asarray(eval_array(mask, env, captures or {}, be, host_for(be)), "bool"), shape)


def decisions(kernel: ir.Kernel, q, k, v, captures: dict | None = None, scale: float | None = None) -> dict:
    """{condition as the program writes it: (true somewhere, false somewhere)} over every
    element, for the decisions that read captured data: each `where`'s condition and each
    comparison of the score and the mask that reads a captured tensor. Whether they went both
    ways is up to the inputs (a kind per head drawn past every value compared with it took one
    branch everywhere); the positions' own decisions are up to the shapes alone."""
    be = backend_for(q)
    captures = captures or {}
    named = {}
    for fname in ("score", "mask"):
        e = kernel.func(fname)
        for node in _data_decisions(e) if e is not None else ():
            named.setdefault(ir.format_expr(node, kernel.param_names(fname)), node)
    if not named:
        return {}
    env = _index_env(kernel, q, k, v, captures, scale, None)
    if any(ir.uses(node, "s") for node in named.values()):  # `where(s > cap[h], ...)` decides on the score
        env["s"] = _scaled_dots(q, k, env["scale"])
    found: dict = {}
    for text, node in named.items():
        value = be.asarray(eval_array(node, env, captures, be, host_for(be)), "bool")
        found[text] = (bool(value.any()), bool((~value).any()))
    return found


def _scaled_dots(q, k, scale: float):
    """scale * q . k in float64, [B, H, M, N] (k's heads repeated for grouped queries)."""
    be = backend_for(q)
    kv_head = be.arange(q.shape[1]) // (q.shape[1] // k.shape[1])
    return (be.float64(q) @ be.xp.swapaxes(be.float64(k)[:, kv_head], -1, -2)) * scale


def _data_decisions(e: ir.Expr) -> list[ir.Expr]:
    """The conditions of e's `where`s and e's comparisons that read a captured tensor, in order."""
    found = []
    for node in ir.walk_distinct(e):
        if isinstance(node, ir.Op) and node.op == "where":
            found.append(node.args[0])
        elif isinstance(node, ir.Op) and node.op in ("lt", "le", "gt", "ge", "eq", "ne"):
            found.append(node)
    reads = lambda x: any(isinstance(n, ir.Load) for n in ir.walk(x))  # noqa: E731
    return [x for x in dict.fromkeys(found) if reads(x)]


def _index_env(kernel: ir.Kernel, q, k, v, captures: dict, scale: float | None, dims: dict | None) -> dict:
    """The program's dims, the softmax scale and the indices b, h, q, kv as broadcastable
    [B, H, M, N] arrays: what the score and the mask are evaluated in."""
    be = backend_for(q)
    B, H, M, _ = q.shape
    N = k.shape[2]
    dims = {**dims_of(kernel, q, k, v, captures), **(dims or {})}
    if scale is None:
        scale = float(eval_scalar(kernel.func("scale"), dims))
    idx = {"b": be.arange(B).reshape(B, 1, 1, 1), "h": be.arange(H).reshape(1, H, 1, 1),
           "q": be.arange(M).reshape(1, 1, M, 1), "kv": be.arange(N).reshape(1, 1, 1, N)}
    return {**dims, **idx, "scale": scale}


def nan_scores(kernel: ir.Kernel, q, k, v, captures: dict | None = None, scale: float | None = None) -> str:
    """'' where every kept score is a number; else how many are NaN and the first one's (b, h, i, j):
    a program whose score is NaN for some inputs (a log or square root of a negative, 0 / 0,
    inf - inf) has no attention output there, and says so rather than failing as unwritten."""
    be = backend_for(q)
    nan = be.xp.isnan(scores(kernel, q, k, v, captures, scale))
    count = int(nan.sum())
    if not count:
        return ""
    first = tuple(int(x) for x in be.xp.argwhere(nan)[0])
    return f"{count} scores are NaN for these inputs, the first at (b, h, i, j) = {first}"


def dims_of(kernel: ir.Kernel, q, k, v, captures: dict | None = None) -> dict:
    """The program's dims, by its own names, bound from the tensors' shapes."""
    tensors = {"q": q, "k": k, "v": v, **(captures or {})}
    return {name: int(tensors[t].shape[axis]) for name, (t, axis) in kernel.dims.items() if t in tensors}


def fp8_gemm(a, a_scale, b, b_scale, group=None, count=None, c=None):
    """float64 product of the dequantised inputs, in the kernel's grouping; plus c (out's
    values before the call) for a kernel whose out accumulates."""
    out = _fp8_product(a, a_scale, b, b_scale, group)
    return out if c is None else out + backend_for(a).float64(c)


def fp8_gemm_magnitude(a, a_scale, b, b_scale, group=None, c=None):
    """Per output element, the sum of the squares of the terms the kernel adds up (every
    product a_ik * b_jk, and c_ij): what its rounding error scales with, however much the
    terms cancel in their sum (check.fp8_difference's floor)."""
    out = _fp8_product(a, a_scale, b, b_scale, group, square=True)
    return out if c is None else out + backend_for(a).float64(c) ** 2


def _fp8_product(a, a_scale, b, b_scale, group, square=False):
    from .fp8 import dequantize_1x128, dequantize_128x128

    be = backend_for(a)
    A = dequantize_1x128(a, a_scale, be.dtype("f64"))
    Bm = dequantize_128x128(b, b_scale, be.dtype("f64"))
    if square:
        A, Bm = A * A, Bm * Bm
    if group is not None:  # contiguous: row m uses b[group[m]]; -1 rows give NaN (never compared)
        out = be.full((A.shape[0], Bm.shape[1]), math.nan, "f64")
        for g in range(Bm.shape[0]):
            rows = group == g
            if rows.any():
                out[rows] = A[rows] @ Bm[g].T
        return out
    return A @ be.xp.swapaxes(Bm, -1, -2)
