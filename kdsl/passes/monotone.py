"""Whether an integer expression moves one way along a position, for the mask analysis' corners.

Interval arithmetic treats each occurrence of a position as free: over a tile's rows q0..q1,
`q - q // 4` gets [q0 - q1 // 4, q1 - q0 // 4], wider than its true [q0 - q0 // 4, q1 - q1 // 4]
by a quarter of the tile, and `i - j <= 64 + i // 4` (a window growing with the query) left the
tiles along its edge partial. Its value moves one way as q grows, though: q gains 1 and q // 4
at most 1. step() bounds that change per unit step of one position, and where both positions'
steps keep one sign, an expression takes its extremes over a tile at the tile's corners, so a
comparison of two such sides is decided there exactly (tile_corners.monotone_corners).

The bounds are exact integer reasoning, not a sample: a + b steps by the sum of the steps, c * a
by c times a's, a // c (c >= 1) by floor(lo / c) .. ceil(hi / c) of a's (by a c >= 1 that does not move with
the position, between 0 and a's), min and max within the
range of their arguments'; what reads the position in any other way (%, abs, a product of two
varying values, data) has no step bound.
"""
from __future__ import annotations

import math

from .. import ir
from .int_signs import positive_divisor

INF = math.inf


def step(e: ir.Expr, var: str) -> tuple[float, float] | None:
    """(lo, hi): e(var + 1) - e(var) lies in [lo, hi] for every value of var and of everything
    else e reads (lo may be -inf, hi inf); None where there is no such bound. One walk of e."""
    if isinstance(e, ir.Const):
        return (0, 0)
    if isinstance(e, ir.Var):
        return (1, 1) if e.name == var else (0, 0)
    if not isinstance(e, ir.Op) or e.ty != "i32" or e.op not in _STEPPED:
        return None if ir.uses(e, var) else (0, 0)  # a load not at var reads one element all along
    a = [step(x, var) for x in e.args]
    if e.op == "mul":
        for x, sx in ((e.args[0], a[1]), (e.args[1], a[0])):
            if isinstance(x, ir.Const) and sx is not None:
                c = x.value
                return (c * sx[0], c * sx[1]) if c >= 0 else (c * sx[1], c * sx[0])
        return (0, 0) if a == [(0, 0), (0, 0)] else None
    if None in a:
        return None
    if e.op == "add":
        return (a[0][0] + a[1][0], a[0][1] + a[1][1])
    if e.op == "sub":
        return (a[0][0] - a[1][1], a[0][1] - a[1][0])
    if e.op == "neg":
        return (-a[0][1], -a[0][0])
    if e.op in ("min", "max"):
        return (min(a[0][0], a[1][0]), max(a[0][1], a[1][1]))
    # floordiv
    if a[1] != (0, 0) or not positive_divisor(e.args[1]):
        return None
    lo, hi = a[0]
    if isinstance(e.args[1], ir.Const):
        c = e.args[1].value
        return (_floor_div(lo, c), _ceil_div(hi, c))
    # some c >= 1 the same all along var (the item's `h + 1`, or data read elsewhere, `max(blk[b], 1)`):
    # the step shrinks towards 0, keeping its sign
    return (min(lo, 0), max(hi, 0))


_STEPPED = ("add", "sub", "neg", "min", "max", "mul", "floordiv")


def one_way(e: ir.Expr, var: str) -> bool:
    """Whether e never rises or never falls as var grows."""
    s = step(e, var)
    return s is not None and (s[0] >= 0 or s[1] <= 0)


def _floor_div(x: float, c: int) -> float:
    return x if math.isinf(x) else x // c


def _ceil_div(x: float, c: int) -> float:
    return x if math.isinf(x) else -((-x) // c)
