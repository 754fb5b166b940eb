"""The score's range, for a softmax against a fixed reference.

Online softmax keeps a running max per row because scores are unbounded: every tile reduces
its row maxima and, when the max moves, rescales O and the row sum by one more exponential.
A score that cannot leave a narrow interval needs none of that. cap * tanh(s / cap) lies in
[-cap, cap]; exponentiated against a fixed reference r, every weight lies in
[2^(lo - r), 2^(hi - r)]. With r at most BELOW[dtype] above lo, the largest weight of any
row is a normal number in fp32 and in P's type (so the row sum and P V keep their relative
precision; smaller weights underflow exactly as they do against a running max), and with r
at most ABOVE[dtype] below hi nothing overflows (P, its fp32 row sum over up to 2^31 keys,
and O).

This pass evaluates score_log2 over intervals (s, qk, positions and captured data unbounded;
tanh, sin, cos, sigmoid and min / max with constants bound it) and sets attr score_ref to
r = min(hi, lo + BELOW) when hi - r <= ABOVE, else null. The Hopper kernel then takes it as
every row's reference from the start and never moves it (attention_wgmma.cuh,
V::kFixedRef): no row max, no rescale.
"""
from __future__ import annotations

import math

from .. import ir

# log2 units, per P type: how far below the reference the largest weight of a row may fall
# (fp32 and bf16 are normal down to 2^-126, f16 to 2^-14) and how far above it a weight may
# rise (bf16 and fp32 hold 2^127; f16 only 65504: 2^15).
BELOW = {"bf16": 110.0, "f16": 14.0}
ABOVE = {"bf16": 64.0, "f16": 15.0}

INF = math.inf
Interval = tuple  # (lo, hi), floats, possibly infinite
ANY = (-INF, INF)


def run(k: ir.Kernel) -> ir.Kernel:
    if k.kind != "attention":
        return k
    return k.with_attrs(score_ref=fixed_reference(bounds(k.func("score_log2")), k.tensor("q").dtype))


def fixed_reference(b: Interval, dtype: str) -> float | None:
    lo, hi = b
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    ref = min(hi, lo + BELOW[dtype])
    return float(ref) if hi - ref <= ABOVE[dtype] else None


def bounds(e: ir.Expr) -> Interval:
    """An interval holding every value of float expression e (ANY when nothing is known)."""
    if isinstance(e, ir.Const):
        v = float(e.value)
        return (v, v)
    if not isinstance(e, ir.Op) or e.ty != "f32":
        return ANY
    a = [bounds(x) if x.ty == "f32" else _int_const(x) for x in e.args]
    op = e.op
    if op == "add":
        return _add(a[0], a[1])
    if op == "sub":
        return _add(a[0], (-a[1][1], -a[1][0]))
    if op == "neg":
        return (-a[0][1], -a[0][0])
    if op == "mul":
        return _mul(a[0], a[1])
    if op == "div":
        lo, hi = a[1]
        if lo > 0 or hi < 0:
            return _mul(a[0], (1 / hi, 1 / lo))
        return ANY
    if op in ("min", "max"):
        f = min if op == "min" else max
        return (f(a[0][0], a[1][0]), f(a[0][1], a[1][1]))
    if op == "abs":
        lo, hi = a[0]
        return (0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi)), max(abs(lo), abs(hi)))
    if op == "where":
        return (min(a[1][0], a[2][0]), max(a[1][1], a[2][1]))
    if op == "tanh":
        return (math.tanh(a[0][0]) if a[0][0] > -INF else -1.0, math.tanh(a[0][1]) if a[0][1] < INF else 1.0)
    if op == "sigmoid":
        return (_sigmoid(a[0][0]), _sigmoid(a[0][1]))
    if op in ("sin", "cos"):
        return (-1.0, 1.0)
    if op in ("exp", "exp2"):
        f = math.exp if op == "exp" else (lambda x: 2.0 ** x)
        return (_safe(f, a[0][0], 0.0), _safe(f, a[0][1], INF))
    if op == "float":
        return a[0]
    return ANY


def _add(x: Interval, y: Interval) -> Interval:
    lo, hi = x[0] + y[0], x[1] + y[1]  # nan only from -inf + inf: then nothing is known
    return (lo if lo == lo else -INF, hi if hi == hi else INF)


def _mul(x: Interval, y: Interval) -> Interval:
    def m(p, q):  # 0 * inf is 0 here: a factor that is exactly 0 makes the product 0
        return 0.0 if p == 0 or q == 0 else p * q
    products = [m(p, q) for p in x for q in y]
    return (min(products), max(products))


def _int_const(e: ir.Expr) -> Interval:
    return (float(e.value), float(e.value)) if isinstance(e, ir.Const) else ANY


def _sigmoid(x: float) -> float:
    if x == INF:
        return 1.0
    if x == -INF:
        return 0.0
    return 1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0


def _safe(f, x, overflow):
    if x == -INF:
        return 0.0
    if x == INF:
        return INF
    try:
        return f(x)
    except OverflowError:
        return overflow
