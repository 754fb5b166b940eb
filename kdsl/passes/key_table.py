"""Scores with a part read per key: a table per tile.

A key padding bias, a per-key gate, the key half of a rank-one bias or of forgetting attention's
cumulative gates:

    s + kbias[b, j]          s + 4.0 * tanh(g[b, j])          s + qb[b, h, i] * kb[b, h, j]

read a captured tensor at the key position. Per element, a consumer thread loads it for each of
its 2 x BN/8 elements a tile, in the softmax's critical path (a load per column pair, L1-bound),
where a tile has only BN distinct keys. With attr key_table = 1 the Hopper kernel evaluates that
part once per key of a tile into a table in shared memory (each thread of the consumer
warpgroup one key), and an element reads its key's entry: one shared-memory load at a
per-thread base plus a constant column (attention_wgmma.cuh, kKeyTable; the offset table's
storage and turns, passes/offset_score.py).

part() finds the part: the subexpression of score_log2 that depends on the key position (kv,
float(kv)) and on nothing per query or per element (q, q - kv, the dot product), reads a
captured tensor or computes a transcendental or a division, and is the largest such: one part
per score, or none (a score with two distinct such parts keeps them per element). run() defines
key_part (over b, h, kv) and score_keyed, the score with that part replaced by the variable kt,
and where score_keyed is scale_log2 * c * qk + G * kt + B with a gain G per row (raw_form), the
gain, the base and c, which let the kernel keep one FFMA an element.
"""
from __future__ import annotations

from dataclasses import replace

from .. import ir
from ..errors import KdslError
from . import affine_score, exp2_fold, offset_score, streaming
from .invariant_factors import invariant
from .simplify import const, simplify

KT = ir.Var("f32", "kt")  # the table's entry; reserved (ir.BUILTIN_VARS)
_PER_ROW = ("q", "qf", "dqkf", "dqk", "qk", "s", "col", "sv")  # what the part may not read
_PER_ELEMENT = ("dqkf", "dqk", "qk", "s", "col", "sv")  # nor a row's gain and base
_KEY = ("kv", "kvf")
FUNCS = ("key_part", "score_keyed", "key_gain", "key_base")  # what run() defines
_COSTLY_OPS = ("div", "floordiv", "mod")


def run(k: ir.Kernel) -> ir.Kernel:
    k = replace(k, funcs=tuple((n, e) for n, e in k.funcs if n not in FUNCS))
    if not k.attr("key_table") or k.attr("kernel") != "wgmma":
        return k
    score = k.func("score_log2")
    g = part(score)
    if g is None:
        raise KdslError(f"kernel '{k.name}': internal error: attr key_table on a score tiling should have refused")
    keyed, g = _absorb_constant(*_reciprocal(with_kt(score, g), g))
    k = k.with_func("key_part", g).with_func("score_keyed", keyed)
    form = raw_form(keyed)
    if form is None:
        return k
    c, gain, base = form
    return k.with_func("key_gain", gain).with_func("key_base", base).with_attrs(key_factor=c)


def raw_form(keyed: ir.Expr) -> tuple[float, ir.Expr, ir.Expr] | None:
    """(c, G, B) with score_keyed == scale_log2 * c * qk + G * kt + B, c > 0, G and B the same
    for a whole row (q, b, h and what they read), G not a constant: the kernel then keeps
    qk + G * kt / F per element (one FFMA, F = scale_log2 * c; the table holds kt / F) and takes
    the row max on it, as the affine form does (affine_score.py); a call whose scale makes
    F <= 0 runs the score as written (runtime/programs.py, KDSL_AFFINE_SCORE=0).
    Where G is a constant (s + kbias[b, j]: the score is one FFMA already) the form gains no
    instruction, and measured 4-6 % slower (H200, call7 against call5: the key bias and the tanh
    key gate at D=64): None. The rank-one bias' G = qb[b, h, i] saves an FMUL and an FADD an
    element: x1.227 over no table against x1.144 without the form (D=64, calls 6 and 7)."""
    split = offset_score.split_linear(keyed, "qk", invariant)
    if split is None or split[0] is None or split[1] is None:
        return None
    c = affine_score.positive_multiple_of_scale(simplify(split[0]))
    linear = offset_score.split_linear(split[1], KT.name)
    if c is None or linear is None:
        return None
    gain, base = (simplify(x) if x is not None else const("f32", d) for x, d in zip(linear, (1.0, 0.0)))
    if isinstance(gain, ir.Const) or any(ir.uses(x, v) for x in (gain, base) for v in (*_KEY, *_PER_ELEMENT)):
        return None
    return c, gain, base


def applies(k: ir.Kernel) -> bool:
    """Whether k's score has a key part and no cheaper form: not affine in the positions
    (affine_score.py), not a function of q - kv (offset_score.py's table), no streamed tensor
    (passes/streaming.py), not a positive factor times a unit whose row max the kernel takes
    (exp2_fold.py: the table serves the whole score only)."""
    if k.kind != "attention" or k.attr("math") == "exact":
        return False
    score = k.func("score_log2")
    return (score is not None and part(score) is not None and affine_score.decompose(score) is None
            and offset_score.decompose(score) is None and streaming.candidate(k) is None
            and exp2_fold.positive_factor(k) is None)


def part(score: ir.Expr) -> ir.Expr | None:
    """The score's one key part, or None."""
    return ir.only_largest(score, _is_part)


def _is_part(e: ir.Expr) -> bool:
    if not isinstance(e, (ir.Op, ir.Load)) or e.ty != "f32":
        return False
    if any(ir.uses(e, v) for v in _PER_ROW) or not any(ir.uses(e, v) for v in _KEY):
        return False
    return any(isinstance(n, ir.Load) or (isinstance(n, ir.Op) and (n.op in ir.FLOAT_FUNCS or n.op in _COSTLY_OPS))
               for n in ir.walk(e))


def _reciprocal(keyed: ir.Expr, g: ir.Expr) -> tuple[ir.Expr, ir.Expr]:
    """x / kt as x * kt, the table holding 1 / g: a key temperature `s / (1.0 + knorm[b, h, j])`
    then costs an FMUL an element instead of a reciprocal on the MUFU unit, which the softmax's
    exp2 needs (fast math's division is x times an approximate reciprocal either way,
    common.cuh math_div; exact math takes no table)."""
    walked = list(ir.walk(keyed))
    divisions = sum(isinstance(n, ir.Op) and n.op == "div" and n.args[1] == KT for n in walked)
    if not divisions or divisions != sum(n == KT for n in walked):  # kt also read elsewhere: g stays
        return keyed, g

    def rewrite(e):
        if not isinstance(e, ir.Op):
            return e
        if e.op == "div" and e.args[1] == KT:
            return ir.Op("f32", "mul", (rewrite(e.args[0]), KT))
        return replace(e, args=tuple(rewrite(a) for a in e.args))
    return rewrite(keyed), ir.Op("f32", "div", (const("f32", 1.0), g))


def _absorb_constant(keyed: ir.Expr, g: ir.Expr) -> tuple[ir.Expr, ir.Expr]:
    """(A * kt) * C, kt read once: the table holds g * C and the element computes A * kt, one
    multiplication less an element (the rank-one bias' log2 e; A * C is per row, so the
    product is reassociated: one rounding more, as invariant_factors' rewrites)."""
    if sum(n == KT for n in ir.walk(keyed)) != 1:
        return keyed, g
    found = []

    def visit(e):
        if isinstance(e, ir.Op) and e.op == "mul" and isinstance(e.args[1], ir.Const) and \
                isinstance(e.args[0], ir.Op) and e.args[0].op == "mul" and KT in e.args[0].args:
            found.append(e.args[1])
            return e.args[0]
        return replace(e, args=tuple(visit(a) for a in e.args)) if isinstance(e, ir.Op) else e
    keyed = visit(keyed)
    return (keyed, ir.Op("f32", "mul", (g, found[0]))) if found else (keyed, g)


def with_kt(e: ir.Expr, g: ir.Expr) -> ir.Expr:
    """e with every occurrence of the part g read as kt."""
    return ir.replace_expr(e, g, KT)
