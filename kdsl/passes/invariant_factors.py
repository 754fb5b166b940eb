"""Gather the factors of a product that are the same for every element into one.

The score is evaluated per element, and float arithmetic does not reassociate, so NVVM
computes `(qk * scale) / 30` as written: two operations an element. Written as
`qk * (scale * 0.0333)`, the parenthesised factor is the same for every element of a call
and NVVM computes it once, leaving one FMUL an element. Soft-capping's
`tanh(s / cap)` is the common case; `slopes[h] * 2 * dq` likewise.

A factor is element-invariant when it depends on no position (q, kv and their float forms),
not on the dot product (qk) and loads nothing indexed by them: constants, scale, b, h and
loads such as slopes[h]. Division by an invariant becomes multiplication by its reciprocal
(one rounding more, within the approximations `math fast` already makes); under `attr math
"exact"` a product with an invariant divisor is left as written.

Factors of the query row alone (a QK-norm scale qn[b, h, i], a row temperature) gather beside
them: `qk * qn[b, h, i] * kn[b, h, j] * c` becomes `(qk * kn[...]) * (qn[...] * c)`, whose
right factor NVVM computes once per row of the thread (the row's load is hoisted too), one
FMUL an element fewer. KDSL_ROW_FACTORS=0 leaves them in place (an A/B switch).
"""
from __future__ import annotations

import os

from .. import ir
from .simplify import op

ELEMENT_VARS = ("q", "kv", "qf", "kvf", "dqkf", "qk", "s")
ROW_VARS = ("q", "qf")  # a factor that varies with these alone is the same along a row


def run(k: ir.Kernel) -> ir.Kernel:
    score = k.func("score_log2") if k.kind == "attention" else None
    if score is None:
        return k
    rewritten = gather(score, exact=k.attr("math") == "exact")
    return k if rewritten == score else k.with_func("score_log2", rewritten)


def invariant(e: ir.Expr) -> bool:
    return not any(ir.uses(e, v) for v in ELEMENT_VARS)


def row_invariant(e: ir.Expr) -> bool:
    """The same for every element of a query row (and not for every element: see invariant)."""
    return not any(ir.uses(e, v) for v in ELEMENT_VARS if v not in ROW_VARS)


def gather(e: ir.Expr, exact: bool = False) -> ir.Expr:
    if not isinstance(e, ir.Op):
        return e
    rows = os.environ.get("KDSL_ROW_FACTORS", "1") != "0"
    if rows and row_invariant(e):
        # computed once per row: nothing to gain inside it (`log(i + 1) / 6.24` keeps its
        # division), and left as written, the product that gathers it gathers to itself again
        # (IR read back from --emit ir, then lowered)
        return e
    e = ir.Op(e.ty, e.op, tuple(gather(a, exact) for a in e.args))
    if e.ty != "f32" or e.op not in ("mul", "div") or invariant(e):
        return e
    factors = _factors(e, 1)
    gathers = row_invariant if rows else invariant  # the row's factors join the invariants
    inv = [(f, p) for f, p in factors if gathers(f)]
    if len(inv) < 2 and not any(p < 0 for _, p in inv):
        return e  # at most one invariant multiplier: nothing to gather
    if exact and any(p < 0 for _, p in inv):
        return e
    varying = [(f, p) for f, p in factors if not gathers(f)]
    num = [f for f, p in varying if p > 0]
    den = [f for f, p in varying if p < 0]
    x = _product(num) if num else ir.Const("f32", 1.0)
    if den:
        x = op("f32", "div", x, _product(den))
    recip = [op("f32", "div", ir.Const("f32", 1.0), f) for f, p in inv if p < 0]
    if any(isinstance(r, ir.Const) and not _normal(r.value) for r in recip):
        return e  # 1 / c would over- or underflow
    c = _product([f for f, p in inv if p > 0] + recip)
    return op("f32", "mul", x, c)


def _normal(v: float) -> bool:
    return 1.1754943508222875e-38 <= abs(v) <= 3.4028234663852886e+38


def _factors(e: ir.Expr, power: int) -> list[tuple[ir.Expr, int]]:
    """e as a product of factors f ** power (power +-1), through mul and div."""
    if isinstance(e, ir.Op) and e.ty == "f32" and e.op == "mul":
        return _factors(e.args[0], power) + _factors(e.args[1], power)
    if isinstance(e, ir.Op) and e.ty == "f32" and e.op == "div":
        return _factors(e.args[0], power) + _factors(e.args[1], -power)
    return [(e, power)]


def _product(fs: list[ir.Expr]) -> ir.Expr:
    out = fs[0]
    for f in fs[1:]:
        out = op("f32", "mul", out, f)
    return out
