"""Prove, for concrete shapes, that every captured-tensor index stays in bounds.

Interval arithmetic over b in [0, B), h in [0, H), q in [0, M), kv in [0, N): if an index
might leave its axis, the call is refused before launch — never a CUDA fault, never a read
of someone else's memory. Write indices so the bound follows (clamp with min/max)."""
from __future__ import annotations

import math

from .. import ir
from ..errors import LaunchError
from ..semantics import scalar_op

INF = math.inf
UNKNOWN = (-INF, INF)


def interval(e: ir.Expr, ranges: dict) -> tuple:
    """[lo, hi] that e's value lies in; an unknown side is infinite, so a clamp bounds even a
    value read from a captured tensor: min(max(ids[b, i], 0), T - 1) lies in [0, T - 1]."""
    if isinstance(e, ir.Const):
        return (e.value, e.value) if e.ty == "i32" else UNKNOWN
    if isinstance(e, ir.Var):
        return ranges.get(e.name, UNKNOWN)
    if not isinstance(e, ir.Op) or e.ty != "i32":
        return UNKNOWN  # loads and anything not integer
    if e.op == "where":
        a, b = interval(e.args[1], ranges), interval(e.args[2], ranges)
        return (min(a[0], b[0]), max(a[1], b[1]))
    args = [interval(a, ranges) for a in e.args]
    finite = all(math.isfinite(x) for a in args for x in a)
    if e.op in ("add", "sub", "min", "max"):  # safe with infinities: lo is never +inf, hi never -inf
        (al, ah), (bl, bh) = args
        if e.op == "add":
            return (al + bl, ah + bh)
        if e.op == "sub":
            return (al - bh, ah - bl)
        f = min if e.op == "min" else max
        return (f(al, bl), f(ah, bh))
    if e.op == "neg":
        return (-args[0][1], -args[0][0])
    if e.op == "abs":
        lo, hi = args[0]
        return (0 if lo <= 0 <= hi else min(abs(lo), abs(hi)), max(abs(lo), abs(hi)))
    if e.op == "mul" and finite:
        (al, ah), (bl, bh) = args
        prods = [al * bl, al * bh, ah * bl, ah * bh]
        return (min(prods), max(prods))
    if e.op in ("floordiv", "mod") and args[1][0] == args[1][1] and args[1][0] > 0:
        (al, ah), (b, _) = args
        if e.op == "mod":
            return (al % b, ah % b) if finite and al // b == ah // b else (0, b - 1)
        return (al // b if math.isfinite(al) else -INF, ah // b if math.isfinite(ah) else INF)
    return UNKNOWN


def check_capture_indices(k: ir.Kernel, dims: dict, kname: str) -> None:
    ranges = {n: (v, v) for n, v in dims.items()}
    ranges.update(b=(0, dims_of(k, dims, "q", 0) - 1), h=(0, dims_of(k, dims, "q", 1) - 1),
                  q=(0, dims_of(k, dims, "q", 2) - 1), kv=(0, dims_of(k, dims, "k", 2) - 1))
    ranges.update(q0=ranges["q"], q1=ranges["q"], k0=ranges["kv"], k1=ranges["kv"])
    # Every function the kernel evaluates: score and mask, and the score_log2 and tile
    # predicates an IR file may carry (kdsl tune's output) in their place.
    for fname, e in k.funcs:
        if fname == "scale":
            continue
        for node in ir.walk(e):
            if not isinstance(node, ir.Load):
                continue
            t = k.tensor(node.tensor)
            for axis, (idx, extent) in enumerate(zip(node.indices, t.shape)):
                size = _eval(extent, dims)
                lo, hi = interval(idx, ranges)
                if lo < 0 or hi >= size:
                    got = "cannot be bounded" if not (math.isfinite(lo) and math.isfinite(hi)) else \
                        f"ranges over [{lo}, {hi}]"
                    text = ir.format_expr(idx, k.param_names(fname))
                    raise LaunchError(
                        f"{kname}: in {fname}(), index {axis} of '{node.tensor}' ({text}) {got} "
                        f"for these shapes, but that axis has size {size}; clamp it, e.g. with min(...)/max(...)")


def dims_of(k, dims, tensor, axis):
    return _eval(k.tensor(tensor).shape[axis], dims)


def _eval(e, dims):
    if isinstance(e, ir.Const):
        return int(e.value)
    if isinstance(e, ir.Var):
        return dims[e.name]
    return int(scalar_op(e.op, [_eval(a, dims) for a in e.args]))
