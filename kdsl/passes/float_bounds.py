"""Bounds of an f32 expression over a block, for the mask analysis' float comparisons.

A mask may compare floats: `float(j) <= float(i) * ratio[h] + 1.0`, `abs(float(i - j)) * scale[h]
< 64.0`. Over a block (q in [q0, q1], kv in [k0, k1]) such an expression is bounded as an integer
one is (mask_analysis._Analysis._parts), from its operands' bounds, with one difference: the
kernel rounds every float op, and NVVM may contract a multiply and an add into one FMA in the
element's code and not in the predicate's (or the other way round). Rounding to nearest is
monotone, so a bound computed from the operands' bounds is off the element's value by a few
units in the last place at most. Each bound an op yields is therefore moved outwards by
REL_SLACK of its magnitude (2^-18: 32 to 64 ulps, where an op and a contraction need 2) plus
ABS_SLACK (past flushed subnormals). The bound then holds whichever way either side rounds or
contracts, and whether the tile predicate runs in f32 on the GPU or in float64 on the CPU
(interpreter, tests).

Non-finite values: an element is NaN or infinite only where an operand is (loaded data) or an
op overflows. Each op's bounds are built so that a non-finite operand bound makes one of them
non-finite too (a choice among bounds adds `x - x`, NaN for an infinite x, to the one chosen),
and a comparison is decided only where all four bounds it compares are finite; there every
element's value is finite and inside them.

Covered: constants; b, h, dims and data read at neither q nor kv (exact over a block);
float() of an i32 expression (its integer bounds: conversion is monotone); + - neg abs min max;
`*` by a factor the same over the block (a constant, `ratio[h]`, its sign tested in the bound);
`/` by a constant within 2^+-120 (the kernel's __fdividef is within 2 ulp there); where() of a
condition the analysis decides. Anything else, data read at q or kv included, is unbounded and
leaves the comparison to the per-element check.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import ir
from .simplify import FALSE, const, op

REL_SLACK = 2.0 ** -18
ABS_SLACK = 2.0 ** -100
F32_MAX = float(np.finfo(np.float32).max)
_DIVISOR_RANGE = (2.0 ** -120, 2.0 ** 120)

Bounds = tuple  # (lo, hi): f32 IR expressions, or None where unbounded


def f32(v: float) -> ir.Const:
    return const("f32", v)


def _f(name: str, *args: ir.Expr) -> ir.Expr:
    return op("f32", name, *args)


def _slack(x: ir.Expr) -> ir.Expr:
    return _f("add", _f("mul", _f("abs", x), f32(REL_SLACK)), f32(ABS_SLACK))


def down(x: ir.Expr | None) -> ir.Expr | None:
    return None if x is None else _f("sub", x, _slack(x))


def up(x: ir.Expr | None) -> ir.Expr | None:
    return None if x is None else _f("add", x, _slack(x))


def _poisoned(x: ir.Expr | None, *others: ir.Expr | None) -> ir.Expr | None:
    """x, made NaN where any of others is infinite or NaN (x - x is 0 for a finite x)."""
    if x is None or any(o is None for o in others):
        return None
    for o in dict.fromkeys(o for o in others if not isinstance(o, ir.Const) and o != x):
        x = _f("add", x, _f("sub", o, o))
    return x


def finite(*xs: ir.Expr | None) -> ir.Expr:
    """True where every bound is finite (|x| <= FLT_MAX is false for +-inf and NaN)."""
    test = None
    for x in dict.fromkeys(xs):
        if x is None:
            return FALSE
        if isinstance(x, ir.Const) or isinstance(x, ir.Op) and x.op == "float":  # finite
            continue
        one = op("bool", "le", _f("abs", x), f32(F32_MAX))
        test = one if test is None else op("bool", "and", test, one)
    return test if test is not None else const("bool", True)


def _same_over_block(e: ir.Expr) -> bool:
    return not (ir.uses(e, "q") or ir.uses(e, "kv"))


class FloatBounds:
    """interval: the analysis' i32 bounds (an object with .lo / .hi); truth: its bool verdicts
    (.always / .never)."""

    def __init__(self, interval: Callable, truth: Callable):
        self.interval, self.truth = interval, truth

    def of(self, e: ir.Expr) -> Bounds:
        if isinstance(e, ir.Const) or (isinstance(e, (ir.Var, ir.Load)) and _same_over_block(e)):
            return e, e
        if not isinstance(e, ir.Op):
            return None, None
        if e.op == "float":
            i = self.interval(e.args[0])
            return (None if i.lo is None else _f("float", i.lo)), (None if i.hi is None else _f("float", i.hi))
        if e.op == "neg":
            lo, hi = self.of(e.args[0])
            return (None if hi is None else _f("neg", hi)), (None if lo is None else _f("neg", lo))
        if e.op in ("add", "sub"):
            (alo, ahi), (blo, bhi) = self.of(e.args[0]), self.of(e.args[1])
            if e.op == "sub":
                blo, bhi = bhi, blo
            join = lambda x, y: None if x is None or y is None else _f(e.op, x, y)  # noqa: E731
            return down(join(alo, blo)), up(join(ahi, bhi))
        if e.op == "mul":
            return self._scaled(e, "mul")
        if e.op == "div" and isinstance(e.args[1], ir.Const) and \
                _DIVISOR_RANGE[0] <= abs(e.args[1].value) <= _DIVISOR_RANGE[1]:
            return self._scaled(e, "div")
        if e.op == "abs":
            lo, hi = self.of(e.args[0])
            if lo is None or hi is None:
                return None, None
            zero = f32(0.0)
            a_lo = _f("where", op("bool", "ge", lo, zero), lo, _f("where", op("bool", "le", hi, zero), _f("neg", hi), zero))
            a_hi = _f("where", op("bool", "ge", hi, _f("neg", lo)), hi, _f("neg", lo))
            return _poisoned(a_lo, lo, hi), _poisoned(a_hi, lo, hi)
        if e.op in ("min", "max"):
            (alo, ahi), (blo, bhi) = self.of(e.args[0]), self.of(e.args[1])
            every = (alo, ahi, blo, bhi)
            return (_poisoned(_pick(e.op, alo, blo), *every), _poisoned(_pick(e.op, ahi, bhi), *every))
        if e.op == "where":
            t = self.truth(e.args[0])
            (xlo, xhi), (ylo, yhi) = self.of(e.args[1]), self.of(e.args[2])
            every = (xlo, xhi, ylo, yhi)
            choose = lambda x, y, join: _poisoned(  # noqa: E731
                _f("where", t.always, x, _f("where", t.never, y, _pick(join, x, y))), *every)
            return choose(xlo, ylo, "min"), choose(xhi, yhi, "max")
        return None, None

    def _scaled(self, e: ir.Op, name: str) -> Bounds:
        """x * r, r * x or x / c with r (c) the same over the block: x's bounds times r, swapped
        where r is negative (a constant's sign is known; a loaded factor's is tested)."""
        x, r = e.args
        if name == "mul" and _same_over_block(x) and not _same_over_block(r):
            x, r = r, x
        if not _same_over_block(r):
            return None, None
        lo, hi = self.of(x)
        if lo is None or hi is None:
            return None, None
        a, b = _f(name, lo, r), _f(name, hi, r)
        if isinstance(r, ir.Const):
            return (down(a), up(b)) if r.value >= 0 else (down(b), up(a))
        nonneg = op("bool", "ge", r, f32(0.0))  # NaN r: the second arm, NaN bounds
        return down(_f("where", nonneg, a, b)), up(_f("where", nonneg, b, a))


def _pick(join: str, x: ir.Expr | None, y: ir.Expr | None) -> ir.Expr | None:
    """min or max of two bounds by a select (x <= y), the caller poisoning it."""
    if x is None or y is None:
        return None
    first = op("bool", "le", x, y) if join == "min" else op("bool", "ge", x, y)
    return _f("where", first, x, y)
