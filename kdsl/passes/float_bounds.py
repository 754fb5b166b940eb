"""Bounds of an f32 expression over a block, for the mask analysis' float comparisons.

A mask may compare floats: `float(j) <= float(i) * ratio[h] + 1.0`, `abs(float(i - j)) * scale[h]
< 64.0`. Over a block (q in [q0, q1], kv in [k0, k1]) such an expression is bounded as an integer
one is (block_bounds.BlockBounds._parts), from its operands' bounds, with one difference: the
kernel rounds every float op, and NVVM may contract a multiply and an add into one FMA in the
element's code and not in the predicate's (or the other way round). Rounding to nearest is
monotone, so a bound computed from the operands' bounds is off the element's value by a few
units in the last place at most. Each bound an op yields is therefore moved outwards by
REL_SLACK of its magnitude (2^-18: 32 to 64 ulps, where an op and a contraction need 2) plus
ABS_SLACK (past flushed subnormals). The bound then holds whichever way either side rounds or
contracts, and whether the tile predicate runs in f32 on the GPU or in float64 on the CPU
(interpreter, tests).

Non-finite values: an element is NaN or infinite only where an operand is (loaded data) or an
op overflows. A sum, a difference or a product with a factor the same over the block carries an
infinite or NaN operand bound into its own bounds; an op that could hide one (min, max, abs,
where, a product of two ranges, exp(-inf) = 0) records its operands' bounds as guards instead.
A comparison is decided only where the four bounds it compares and every guard are finite;
there every element's value is finite and inside its bounds.

Covered: constants; b, h, dims and data read at neither q nor kv (exact over a block);
float() of an i32 expression (its integer bounds: conversion is monotone), or where the integer
analysis has none, of an integer sum, difference, product ... of positions (as the float ops, in
reals: `dy * dy + dx * dx`); + - neg abs min max; exp exp2 log log2 sqrt rsqrt tanh sigmoid
(monotone, each with the slack of its approximation); `*` by a factor the same over the block (a
constant, `ratio[h]`, its sign tested in the bound), or of two varying factors (the extremes of
their bounds' four products; a square from |x|); `/` by a constant within 2^+-120 (the kernel's
__fdividef is within 2 ulp there); where() of a condition the analysis decides; f32 data read at
q or at kv (`t_q[b, i]`, `t_k[b, j]`) by the tile summary's min and max of its bits as ordered
integers (exact: the loaded values themselves), not data read at both (`bias[b, h, i, j] > -0.15`:
its summary would read the whole tensor again). Anything else is unbounded and leaves the
comparison to the per-element check.
"""
from __future__ import annotations

import functools
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


def down(x: ir.Expr | None, rel: float = REL_SLACK, absolute: float = ABS_SLACK) -> ir.Expr | None:
    """x - |x| rel - absolute (ir.WIDENINGS: one op, naming x once)."""
    return None if x is None else _f("widen_down", x, f32(rel), f32(absolute))


def up(x: ir.Expr | None, rel: float = REL_SLACK, absolute: float = ABS_SLACK) -> ir.Expr | None:
    return None if x is None else _f("widen_up", x, f32(rel), f32(absolute))


# Monotone functions: op -> (increasing, relative slack, absolute slack, hides), each slack past
# the GPU's approximation (docs/language.md, "Precision of the float functions") with room to
# spare: exp's x * log2(e) rounds by |x| 2^-24 relative to the result (|x| < 128 where it is
# finite); lg2.approx errs by 2^-22 absolutely; tanh.approx by 2^-11 relatively, sigmoid = 0.5 +
# 0.5 tanh(x / 2) by 2^-12 absolutely; sqrt is IEEE; rsqrt is within 2 ulp. An approximation need
# not be monotone: the bound is the exact function's at the operand's bound, widened by its
# error. hides: a non-finite operand may give a finite value (exp(-inf) = 0, tanh(inf) = 1), so
# the operand's bounds are guards; log(-inf), sqrt(-inf) are NaN and +inf stays +inf.
_MONOTONE = {"exp": (True, 2.0 ** -14, ABS_SLACK, True), "exp2": (True, 2.0 ** -18, ABS_SLACK, True),
             "log": (True, 2.0 ** -18, 2.0 ** -19, False), "log2": (True, 2.0 ** -18, 2.0 ** -19, False),
             "sqrt": (True, REL_SLACK, ABS_SLACK, False), "rsqrt": (False, REL_SLACK, ABS_SLACK, True),
             "tanh": (True, 2.0 ** -9, 2.0 ** -20, True), "sigmoid": (True, 2.0 ** -9, 2.0 ** -10, True)}


# i32 ops whose exact value is the same op on the operands' values as reals (no floor, no
# wrap: the runtime refuses a call whose positions' values leave i32): float() of them may be
# bounded as the float op of float() operands, where the integer analysis has no bound (a product
# of two ranges, `dy * dy + dx * dx`). op -> which operands are numbers (where's condition is not).
_EXACT_IN_REALS = {"add": (0, 1), "sub": (0, 1), "mul": (0, 1), "neg": (0,), "abs": (0,), "min": (0, 1),
                   "max": (0, 1), "where": (1, 2)}


def in_reals(e: ir.Expr) -> bool:
    """Whether float(e) may be bounded as as_floats(e): an op of _EXACT_IN_REALS over positions
    and dims only (data could wrap: its range is the caller's to keep, docs/language.md) with a
    product of two varying factors in it, the one op reals bound and the integer analysis does
    not (anything else the integer analysis left unbounded, reals would not bound either, and
    trying would redo its work at every level)."""
    if not (isinstance(e, ir.Op) and e.op in _EXACT_IN_REALS):
        return False
    nodes = list(ir.walk(e))
    return not any(isinstance(n, ir.Load) for n in nodes) and any(
        isinstance(n, ir.Op) and n.op == "mul" and n.ty == "i32" and not any(isinstance(a, ir.Const) for a in n.args)
        for n in nodes)


def as_floats(e: ir.Op) -> ir.Op:
    """float(e) of an i32 op of _EXACT_IN_REALS, as the f32 op of float() of its operands."""
    numbers = _EXACT_IN_REALS[e.op]
    return ir.Op("f32", e.op, tuple(ir.Op("f32", "float", (a,)) if n in numbers else a for n, a in enumerate(e.args)))


def _finite_always(x: ir.Expr) -> bool:
    return isinstance(x, ir.Const) and abs(x.value) <= F32_MAX or isinstance(x, ir.Op) and x.op == "float"


def finite(*xs: ir.Expr | None) -> ir.Expr:
    """True where every bound is finite (|x| <= FLT_MAX is false for +-inf and NaN)."""
    test = None
    for x in dict.fromkeys(xs):
        if x is None:
            return FALSE
        if _finite_always(x):
            continue
        one = op("bool", "le", _f("abs", x), f32(F32_MAX))
        test = one if test is None else op("bool", "and", test, one)
    return test if test is not None else const("bool", True)


def _same_over_block(e: ir.Expr) -> bool:
    return not (ir.uses(e, "q") or ir.uses(e, "kv"))


class FloatBounds:
    """The bounds of one comparison's two sides. interval: the analysis' i32 bounds (an object
    with .lo / .hi); truth: its bool verdicts (.always / .never). `guards` collects the bounds
    whose infinity or NaN an op could hide (a min, a choice, exp(-inf) = 0): the comparison is
    decided only where they are finite too."""

    def __init__(self, interval: Callable, truth: Callable):
        self.interval, self.truth = interval, truth
        self.guards: list[ir.Expr] = []

    def _guard(self, *bounds: ir.Expr | None) -> bool:
        """Records bounds that must be finite; False where one is unknown."""
        if any(b is None for b in bounds):
            return False
        self.guards.extend(b for b in bounds if not _finite_always(b))
        return True

    def of(self, e: ir.Expr) -> Bounds:
        if isinstance(e, ir.Const) or (isinstance(e, (ir.Var, ir.Load)) and _same_over_block(e)):
            return e, e
        if isinstance(e, ir.Load) and e.ty == "f32" and not (ir.uses(e, "q") and ir.uses(e, "kv")):
            return self._data(e)
        if not isinstance(e, ir.Op):
            return None, None
        if e.op == "float":
            i = self.interval(e.args[0])
            if (i.lo is None or i.hi is None) and in_reals(e.args[0]):
                return self.of(as_floats(e.args[0]))
            return (None if i.lo is None else _f("float", i.lo)), (None if i.hi is None else _f("float", i.hi))
        if e.op == "neg":
            lo, hi = self.of(e.args[0])
            return (None if hi is None else _f("neg", hi)), (None if lo is None else _f("neg", lo))
        if e.op in ("add", "sub"):  # an infinite or NaN operand bound makes the sum's one so too
            (alo, ahi), (blo, bhi) = self.of(e.args[0]), self.of(e.args[1])
            if e.op == "sub":
                blo, bhi = bhi, blo
            join = lambda x, y: None if x is None or y is None else _f(e.op, x, y)  # noqa: E731
            return down(join(alo, blo)), up(join(ahi, bhi))
        if e.op in _MONOTONE:
            increasing, rel, absolute, hides = _MONOTONE[e.op]
            lo, hi = self.of(e.args[0])
            if lo is None or hi is None or (hides and not self._guard(lo, hi)):
                return None, None
            if not increasing:
                lo, hi = hi, lo
            return down(_f(e.op, lo), rel, absolute), up(_f(e.op, hi), rel, absolute)
        if e.op == "mul":
            return self._scaled(e, "mul")
        if e.op == "div" and isinstance(e.args[1], ir.Const) and \
                _DIVISOR_RANGE[0] <= abs(e.args[1].value) <= _DIVISOR_RANGE[1]:
            return self._scaled(e, "div")
        if e.op == "abs":
            lo, hi = self.of(e.args[0])
            if not self._guard(lo, hi):
                return None, None
            return _f("max", _f("max", lo, _f("neg", hi)), f32(0.0)), _f("max", _f("neg", lo), hi)
        if e.op in ("min", "max"):
            (alo, ahi), (blo, bhi) = self.of(e.args[0]), self.of(e.args[1])
            if not self._guard(alo, ahi, blo, bhi):
                return None, None
            return _f(e.op, alo, blo), _f(e.op, ahi, bhi)
        if e.op == "where":
            t = self.truth(e.args[0])
            (xlo, xhi), (ylo, yhi) = self.of(e.args[1]), self.of(e.args[2])
            if not self._guard(xlo, xhi, ylo, yhi):
                return None, None
            choose = lambda x, y, join: _f("where", t.always, x, _f("where", t.never, y, _f(join, x, y)))  # noqa: E731
            return choose(xlo, ylo, "min"), choose(xhi, yhi, "max")
        return None, None

    def _data(self, e: ir.Load) -> Bounds:
        """A float element read at q or at kv (`t_q[b, i]`; not at both: a whole-block summary of
        a float tensor [..., M, N] reads it all again per call, untimed): its bits as an ordered integer
        (ir.FLOAT_ORDER), bounded by the tile summary's min and max like any integer data, and
        turned back into floats (a NaN among the data comes back as a NaN bound)."""
        i = self.interval(ir.Op("i32", "f32_order", (e,)))
        if i.lo is None or i.hi is None:
            return None, None
        return _f("order_f32", i.lo), _f("order_f32", i.hi)

    def _scaled(self, e: ir.Op, name: str) -> Bounds:
        """x * r, r * x or x / c with r (c) the same over the block: x's bounds times r, swapped
        where r is negative (a constant's sign is known; a loaded factor's is tested). An
        infinite or NaN bound or r leaves the product's bounds so too (0 * inf is NaN)."""
        x, r = e.args
        if name == "mul" and _same_over_block(x) and not _same_over_block(r):
            x, r = r, x
        if not _same_over_block(r):
            return self._product(e) if name == "mul" else (None, None)
        lo, hi = self.of(x)
        if lo is None or hi is None:
            return None, None
        # a factor that may be 0 hides an infinite x (inf * 0 is NaN in the kernel's f32): x's bounds
        # must be finite, in whatever precision the predicate runs (`exp2(float(i)) * 0.0 < float(i)`:
        # in f64 the bound was 0 past i = 128 and the tile full, where f32 elements are NaN, dropped)
        if not (isinstance(r, ir.Const) and r.value != 0) and not self._guard(lo, hi):
            return None, None
        a, b = _f(name, lo, r), _f(name, hi, r)
        if isinstance(r, ir.Const):
            return (down(a), up(b)) if r.value >= 0 else (down(b), up(a))
        nonneg = op("bool", "ge", r, f32(0.0))  # NaN r: the second arm, NaN bounds
        return down(_f("where", nonneg, a, b)), up(_f("where", nonneg, b, a))

    def _product(self, e: ir.Op) -> Bounds:
        """x * y, both varying over the block (`d * d`, a squared distance): the least and the
        greatest of the four products of their bounds (finite bounds: products are not NaN)."""
        (alo, ahi), (blo, bhi) = self.of(e.args[0]), self.of(e.args[1])
        if not self._guard(alo, ahi, blo, bhi):
            return None, None
        if e.args[0] == e.args[1]:  # a square: from |x|'s bounds, never below 0
            low, high = _f("max", _f("max", alo, _f("neg", ahi)), f32(0.0)), _f("max", _f("neg", alo), ahi)
            return down(_f("mul", low, low)), up(_f("mul", high, high))
        products = [_f("mul", x, y) for x in dict.fromkeys((alo, ahi)) for y in dict.fromkeys((blo, bhi))]
        join = lambda kind: functools.reduce(lambda x, y: _f(kind, x, y), products)  # noqa: E731
        return down(join("min")), up(join("max"))
