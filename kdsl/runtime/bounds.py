"""Prove, for concrete shapes, that every captured-tensor index stays in bounds.

Interval arithmetic over b in [0, B), h in [0, H), q in [0, M), kv in [0, N): if an index
might leave its axis, the call is refused before launch — never a CUDA fault, never a read
of someone else's memory. Write indices so the bound follows (clamp with min/max)."""
from __future__ import annotations

from .. import ir
from ..errors import LaunchError
from ..semantics import scalar_op

UNKNOWN = (None, None)


def interval(e: ir.Expr, ranges: dict) -> tuple:
    if isinstance(e, ir.Const):
        return (e.value, e.value) if e.ty == "i32" else UNKNOWN
    if isinstance(e, ir.Var):
        return ranges.get(e.name, UNKNOWN)
    if not isinstance(e, ir.Op) or e.ty != "i32":
        return UNKNOWN
    if e.op == "where":
        a, b = interval(e.args[1], ranges), interval(e.args[2], ranges)
        return UNKNOWN if None in a + b else (min(a[0], b[0]), max(a[1], b[1]))
    args = [interval(a, ranges) for a in e.args]
    if any(None in a for a in args) or e.op in ("int",):
        return UNKNOWN
    if e.op in ("add", "sub", "mul", "min", "max"):
        (al, ah), (bl, bh) = args
        if e.op == "add":
            return (al + bl, ah + bh)
        if e.op == "sub":
            return (al - bh, ah - bl)
        if e.op in ("min", "max"):
            f = min if e.op == "min" else max
            return (f(al, bl), f(ah, bh))
        prods = [al * bl, al * bh, ah * bl, ah * bh]
        return (min(prods), max(prods))
    if e.op == "neg":
        return (-args[0][1], -args[0][0])
    if e.op == "abs":
        lo, hi = args[0]
        return (0 if lo <= 0 <= hi else min(abs(lo), abs(hi)), max(abs(lo), abs(hi)))
    if e.op in ("floordiv", "mod"):
        (al, ah), (bl, bh) = args
        if bl != bh or bl <= 0:
            return UNKNOWN
        if e.op == "floordiv":
            return (al // bl, ah // bl)
        return (al % bl, ah % bl) if al // bl == ah // bl else (0, bl - 1)
    return UNKNOWN


def check_capture_indices(k: ir.Kernel, dims: dict, kname: str) -> None:
    ranges = {n: (v, v) for n, v in dims.items()}
    ranges.update(b=(0, dims_of(k, dims, "q", 0) - 1), h=(0, dims_of(k, dims, "q", 1) - 1),
                  q=(0, dims_of(k, dims, "q", 2) - 1), kv=(0, dims_of(k, dims, "k", 2) - 1))
    for fname in ("score", "mask"):
        e = k.func(fname)
        if e is None:
            continue
        for node in ir.walk(e):
            if not isinstance(node, ir.Load):
                continue
            t = k.tensor(node.tensor)
            for axis, (idx, extent) in enumerate(zip(node.indices, t.shape)):
                size = _eval(extent, dims)
                lo, hi = interval(idx, ranges)
                if lo is None or lo < 0 or hi >= size:
                    got = "cannot be bounded" if lo is None else f"ranges over [{lo}, {hi}]"
                    raise LaunchError(
                        f"{kname}: in {fname}(), index {axis} of '{node.tensor}' ({ir.print_expr(idx)}) {got} "
                        f"for these shapes, but that axis has size {size}; clamp it, e.g. with min(...)/max(...)")


def dims_of(k, dims, tensor, axis):
    return _eval(k.tensor(tensor).shape[axis], dims)


def _eval(e, dims):
    if isinstance(e, ir.Const):
        return int(e.value)
    if isinstance(e, ir.Var):
        return dims[e.name]
    return int(scalar_op(e.op, [_eval(a, dims) for a in e.args]))
