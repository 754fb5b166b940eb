"""Strength reduction of position arithmetic in the score: float(i - j) -> dqkf (qf - kvf).

Scores that use positions (relative bias, ALiBi, T5 buckets' inputs) convert an integer
built from q and kv to float for every element, and a conversion costs as much as eight
FMAs on Hopper. When the integer is a sum or difference of q, kv and constants (through
neg and abs), the conversion is pushed down to the leaves: float(q) is a per-row value,
float(kv) a per-tile base plus a constant per register, so each element keeps one FADD.
The rewrite is exact while every intermediate value is an integer below 2^24 in magnitude,
which holds for M, N <= MAX_LENGTH and constants within the budget below; the runtime
refuses longer sequences for kernels that use qf / kvf (`uses_index_floats`).
"""
from __future__ import annotations

from .. import ir
from .simplify import simplify

MAX_LENGTH = 2**23  # q, kv < this: |q - kv| + constants stays within 2^24
_CONST_BUDGET = 2**22
_LEAVES = {"q": "qf", "kv": "kvf"}


def run(k: ir.Kernel) -> ir.Kernel:
    score = k.func("score_log2") if k.kind == "attention" else None
    if score is None:
        return k
    rewritten = _relative(simplify(_rewrite(score)))
    return k if rewritten == score else k.with_func("score_log2", rewritten)


def uses_index_floats(k: ir.Kernel) -> bool:
    e = k.func("score_log2")
    return e is not None and any(ir.uses(e, v) for v in ("qf", "kvf", "dqkf"))


def _relative(e: ir.Expr) -> ir.Expr:
    """qf - kvf -> dqkf and kvf - qf -> -dqkf: the kernel keeps q - kv as a per-row base for
    the tile minus a constant per register, one FADD an element instead of two."""
    return ir.as_difference(e, "qf", "kvf", ir.Var("f32", "dqkf"))


def _rewrite(e: ir.Expr) -> ir.Expr:
    if isinstance(e, ir.Op) and e.op == "float":
        f = _as_float(e.args[0])
        if f is not None and _bound(e.args[0]) <= 2**24:  # every integer up to 2^24 is a float
            return f
    if isinstance(e, ir.Op):
        return ir.Op(e.ty, e.op, tuple(_rewrite(a) for a in e.args))
    return e  # loads keep their integer indices


def _as_float(e: ir.Expr) -> ir.Expr | None:
    """The f32 twin of an i32 expression over q, kv and small constants, or None."""
    if isinstance(e, ir.Var) and e.name in _LEAVES:
        return ir.Var("f32", _LEAVES[e.name])
    if isinstance(e, ir.Const) and e.ty == "i32" and abs(e.value) <= _CONST_BUDGET:
        return ir.Const("f32", float(e.value))
    if isinstance(e, ir.Op) and e.op in ("add", "sub", "neg", "abs"):
        args = [_as_float(a) for a in e.args]
        return None if None in args else ir.Op("f32", e.op, tuple(args))
    return None


def _range(e: ir.Expr) -> tuple[int, int]:
    """[lo, hi] of e for q, kv in [0, MAX_LENGTH); callers only pass _as_float's forms."""
    if isinstance(e, ir.Var):
        return 0, MAX_LENGTH - 1
    if isinstance(e, ir.Const):
        return int(e.value), int(e.value)
    r = [_range(a) for a in e.args]
    if e.op == "add":
        return r[0][0] + r[1][0], r[0][1] + r[1][1]
    if e.op == "sub":
        return r[0][0] - r[1][1], r[0][1] - r[1][0]
    if e.op == "neg":
        return -r[0][1], -r[0][0]
    lo, hi = r[0]  # abs
    return (0 if lo <= 0 <= hi else min(abs(lo), abs(hi))), max(abs(lo), abs(hi))


def _bound(e: ir.Expr) -> int:
    """The largest |value| of e or of any intermediate value in it."""
    own = max(abs(x) for x in _range(e))
    return max([own] + [_bound(a) for a in getattr(e, "args", ())])
