"""Scores that see the positions only through the offset q - kv: a table per tile.

T5's buckets, learned relative tables with a clamp, log-distance or periodic biases:

    score_log2 = scale_log2 * c * qk + g(b, h, q - kv)

with g as costly as the program makes it (t5_bias: a log, two divisions and a gather). Within
a consumer warpgroup's tile of 64 rows and BN keys, q - kv takes only 64 + BN - 1 values, so
the Hopper kernel (attr offset_table = 1) evaluates g at those into a table in shared memory
once a tile, each thread one or two of them, and an element costs one shared-memory load at a
per-thread base less a constant column, and an FFMA (attention_wgmma.cuh, kOffsetTable).

decompose() decides whether a score has that form: the qk term is split off, and the rest is
rewritten with q - kv as one variable d (the IR's `dqk`: q - kv -> d, kv - q -> -d, q <op> kv
-> d <op> 0, float(q - kv) -> float(d)); it qualifies when nothing of q, kv or their floats is left. The
check is syntactic and sound: a score that depends on the offset in another way is refused,
never misread. run() defines score_offset (over b, h, d and the scales) and the attr
offset_factor (c) when the kernel has asked for the table.
"""
from __future__ import annotations

from dataclasses import replace

from .. import ir
from ..errors import KdslError
from . import affine_score
from .invariant_factors import invariant
from .simplify import const, op, simplify

D = ir.Var("i32", "dqk")  # q - kv; reserved (ir.BUILTIN_VARS), so no user dimension reads as it
_POSITIONS = ("q", "kv", "qf", "kvf", "dqkf", "col", "sv", "s", "qk")  # what must be gone after the rewrite
_FLIP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}


def run(k: ir.Kernel) -> ir.Kernel:
    k = replace(k, funcs=tuple((n, e) for n, e in k.funcs if n != "score_offset"))
    if not k.attr("offset_table") or k.attr("kernel") != "wgmma":
        return k
    form = decompose(k.func("score_log2"))
    if form is None:
        raise KdslError(f"kernel '{k.name}': internal error: attr offset_table on a score tiling should have refused")
    c, g = form
    return k.with_func("score_offset", g).with_attrs(offset_factor=c)


def applies(k: ir.Kernel) -> bool:
    """Whether k's score has the offset form and is not affine in the positions (the affine
    form, affine_score.py, costs less: an FFMA an element or nothing)."""
    score = k.func("score_log2") if k.kind == "attention" and k.attr("math") != "exact" else None
    return score is not None and decompose(score) is not None and affine_score.decompose(score) is None


def costly(k: ir.Kernel) -> bool:
    """Whether the table is the default for k: its score has the offset form and the offset part
    costs more than the table's load an element: a gather from a captured tensor, a
    transcendental function or a division, or TABLE_LOAD_OPS instructions or more of arithmetic
    on the offset. A cheap part (where(j > i, a, b)) stays per element."""
    if not applies(k):
        return False
    _, g = decompose(k.func("score_log2"))
    nodes = set(ir.walk(g))
    return any(isinstance(e, ir.Load) or (isinstance(e, ir.Op) and (e.op in ir.FLOAT_FUNCS or e.op in _COSTLY_OPS))
               for e in nodes) or sum(isinstance(e, ir.Op) and ir.uses(e, D.name) for e in nodes) >= TABLE_LOAD_OPS


_COSTLY_OPS = ("div", "floordiv", "mod")
# An element's read of the table (LDS, a quarter of the FP32 instruction rate) against the offset
# part's instructions computed per element (its distinct ops that read the offset; those of b and
# h alone are per row). H200, B=2 H=16 4096², table against per element: two steps near the
# diagonal, `where(abs(i - j) < 4, 2.0, where(abs(i - j) < 32, 1.0, 0.0))` (5 ops), x1.100 at
# D=64 and x1.257 at D=128; a soft causal penalty `where(j > i, 8.0, 0.0)` (2 ops) x0.791 and
# x0.978 (bench/NOTES.md, sixty-first session).
TABLE_LOAD_OPS = 4


def decompose(score: ir.Expr) -> tuple[float, ir.Expr] | None:
    """(c, g) with score == scale_log2 * c * qk + g(b, h, d), d = q - kv; or None."""
    split = _split_qk(score)
    if split is None:
        return None
    coef, rest = split
    c = affine_score.positive_multiple_of_scale(simplify(coef)) if coef is not None else None
    if c is None or rest is None:
        return None
    g = simplify(_offset(rest))
    if isinstance(g, ir.Const) or any(ir.uses(g, v) for v in _POSITIONS) or not ir.uses(g, D.name):
        return None
    return c, g


def offset_load(load: ir.Load) -> ir.Load | None:
    """The load with its index written over (b, h, d), d = q - kv, when it reads the positions
    only through their offset (a relative-position table); else None. The backward sums such a
    load's gradient per offset (attention_bwd_wgmma.cuh, Grad::kOffsetGrads)."""
    moved = replace(load, indices=tuple(simplify(_offset(i)) for i in load.indices))
    reads = lambda v: any(ir.uses(i, v) for i in moved.indices)  # noqa: E731
    return None if any(reads(v) for v in _POSITIONS) or not reads(D.name) else moved


def _split_qk(e: ir.Expr):
    """(coefficient of qk, the rest) for e linear in qk with (b, h)-invariant coefficients;
    either part None where there is none. None if e is not of that form."""
    return split_linear(e, "qk", invariant)


def split_linear(e: ir.Expr, name: str, coefficient_ok=lambda x: True):
    """(coefficient, rest) with e == coefficient * var + rest for the f32 variable `name`, the
    coefficient's factors passing coefficient_ok; either part None where there is none. None if
    e is not of that form."""
    if isinstance(e, ir.Var) and e.name == name:
        return const("f32", 1.0), None
    if not ir.uses(e, name):
        return None, e
    if not isinstance(e, ir.Op) or e.ty != "f32":
        return None
    if e.op in ("add", "sub"):
        x, y = split_linear(e.args[0], name, coefficient_ok), split_linear(e.args[1], name, coefficient_ok)
        if x is None or y is None:
            return None
        sign = (lambda t: op("f32", "neg", t)) if e.op == "sub" else (lambda t: t)
        return _plus(x[0], None if y[0] is None else sign(y[0])), _plus(x[1], None if y[1] is None else sign(y[1]))
    if e.op == "neg":
        x = split_linear(e.args[0], name, coefficient_ok)
        return None if x is None else tuple(None if t is None else op("f32", "neg", t) for t in x)
    if e.op == "mul":
        for x, y in (e.args, e.args[::-1]):
            if coefficient_ok(x) and not ir.uses(x, name):
                inner = split_linear(y, name, coefficient_ok)
                return None if inner is None else tuple(None if t is None else op("f32", "mul", t, x) for t in inner)
    return None


def _plus(x, y):
    return y if x is None else x if y is None else op("f32", "add", x, y)


def _is(e: ir.Expr, name: str) -> bool:
    return isinstance(e, ir.Var) and e.name == name


def _offset(e: ir.Expr) -> ir.Expr:
    """e with every offset pattern replaced by d (what is left of q, kv is left as it is)."""
    if _is(e, "dqkf"):
        return op("f32", "float", D)
    if isinstance(e, ir.Load):
        return replace(e, indices=tuple(_offset(i) for i in e.indices))
    if not isinstance(e, ir.Op):
        return e
    if len(e.args) == 2:
        x, y = e.args
        if e.op == "sub" and _is(x, "q") and _is(y, "kv"):
            return D
        if e.op == "sub" and _is(x, "kv") and _is(y, "q"):
            return op("i32", "neg", D)
        if e.op in _FLIP and _is(x, "q") and _is(y, "kv"):
            return op("bool", e.op, D, const("i32", 0))
        if e.op in _FLIP and _is(x, "kv") and _is(y, "q"):
            return op("bool", _FLIP[e.op], D, const("i32", 0))
    return replace(e, args=tuple(_offset(a) for a in e.args))
