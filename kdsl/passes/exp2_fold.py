"""exp2 folding: rewrite score(s) into the log2 domain the kernel's softmax works in.

The kernel computes exp2(x - max), so it needs score * log2(e). Multiplying through the
expression lets the scale and log2(e) meet in one constant: `s + bias` becomes
`qk * scale_log2 + bias * 1.44269504`, one FMUL on the dot product instead of two.
The result is `def score_log2` over qk (the raw dot product), scale, scale_log2 and the
index variables; `s` itself no longer appears. A kernel that carries a score_log2 already
(an IR file written by `kdsl tune`, whose guard verified it against score) keeps it.
"""
from __future__ import annotations

import math

from .. import ir
from .simplify import op, simplify

LOG2E = 1.4426950408889634


def run(k: ir.Kernel) -> ir.Kernel:
    if k.kind != "attention" or k.func("score_log2") is not None:
        return k
    score = k.func("score") or ir.Var("f32", "s")
    # fold() rewrites the s it can reach; any other s (a where() condition, an argument of
    # tanh, ...) is still the natural-domain score, qk * scale.
    return k.with_func("score_log2", simplify(ir.substitute(fold(score, LOG2E), {"s": _natural_s()})))


def _natural_s() -> ir.Expr:
    return op("f32", "mul", ir.Var("f32", "qk"), ir.Var("f32", "scale"))


def _s_times(c: float) -> ir.Expr:
    """s * c, with s = qk * scale."""
    qk = ir.Var("f32", "qk")
    base = op("f32", "mul", qk, ir.Var("f32", "scale_log2"))
    return base if c == LOG2E else op("f32", "mul", base, ir.Const("f32", c / LOG2E))


def fold(e: ir.Expr, c: float) -> ir.Expr:
    """An expression equal to e * c (c finite, > 0), pushing c towards the leaves."""
    if isinstance(e, ir.Var) and e.name == "s":
        return _s_times(c)
    if isinstance(e, ir.Const):
        return ir.Const("f32", e.value * c if math.isfinite(e.value) else e.value)
    if isinstance(e, ir.Op):
        if e.op in ("add", "sub"):
            return op("f32", e.op, fold(e.args[0], c), fold(e.args[1], c))
        if e.op == "neg":
            return op("f32", "neg", fold(e.args[0], c))
        for x, k in ((e.args[0], e.args[1]), (e.args[1], e.args[0])) if e.op == "mul" else ():
            if isinstance(k, ir.Const) and _finite_pos(k.value) and _finite_pos(c * k.value):
                return fold(x, c * k.value)
        for x, y in ((e.args[0], e.args[1]), (e.args[1], e.args[0])) if e.op == "mul" else ():
            # A factor the same for every element of a (b, h): c goes onto it (once per row
            # block after CSE) or, when the other factor holds s, into s (scale_log2).
            if not any(ir.uses(x, v) for v in ("s", "q", "kv")):
                return op("f32", "mul", x, fold(y, c)) if ir.uses(y, "s") else \
                    op("f32", "mul", op("f32", "mul", x, ir.Const("f32", c)), y)
        if e.op == "div" and isinstance(e.args[1], ir.Const) and _finite_pos(e.args[1].value) \
                and _finite_pos(c / e.args[1].value):
            return fold(e.args[0], c / e.args[1].value)
        if e.op == "where":
            return op("f32", "where", e.args[0], fold(e.args[1], c), fold(e.args[2], c))
        if e.op in ("min", "max"):  # c > 0 preserves order
            return op("f32", e.op, fold(e.args[0], c), fold(e.args[1], c))
    natural = ir.substitute(e, {"s": _natural_s()})
    return op("f32", "mul", natural, ir.Const("f32", c))


def _finite_pos(v) -> bool:
    """A factor that can move through the expression: finite, and a normal float so that
    it neither overflows nor loses precision in the kernel's f32."""
    return math.isfinite(v) and _F32_TINY <= v <= _F32_MAX


_F32_TINY, _F32_MAX = 1.1754943508222875e-38, 3.4028234663852886e+38


def score_is_scaled_dot(k: ir.Kernel) -> bool:
    """Whether score_log2 is exactly qk * scale_log2 (no score of the user's: plain attention
    and every mask-only variant). The Hopper kernel then takes the row max on the raw dot
    products and folds the scale into the exponent's FFMA, one instruction less an element;
    that needs scale_log2 > 0, which the runtime arranges (runtime/attention_launch.py)."""
    e = k.func("score_log2")
    return isinstance(e, ir.Op) and e.op == "mul" and \
        {a.name for a in e.args if isinstance(a, ir.Var)} == {"qk", "scale_log2"}


def positive_factor(k: ir.Kernel) -> tuple[ir.Expr, float] | None:
    """score_log2 as C * x with C a positive constant and x the part that varies (soft-capping:
    43.28 * tanh(qk * scale / 30)), or None. The Hopper kernel then keeps x per element, takes
    the row max on x and folds C into the exponent's FFMA (exp2(C * x - max)), as it does with
    the scale for the scaled dot product: one FMUL less an element. Not for that case itself
    (score_is_scaled_dot), whose factor is the runtime scale."""
    if score_is_scaled_dot(k):
        return None
    e = k.func("score_log2")
    if not (isinstance(e, ir.Op) and e.op == "mul"):
        return None
    for x, c in ((e.args[0], e.args[1]), (e.args[1], e.args[0])):
        if isinstance(c, ir.Const) and _finite_pos(c.value) and not isinstance(x, ir.Const):
            return x, float(c.value)
    return None
