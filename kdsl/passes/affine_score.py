"""Column-affine scores: score_log2 = scale_log2 * c * (qk + slope * col) + base.

Within one kv tile the Hopper kernel sees an element's key as a per-thread base plus a
column offset `col` that is a constant once its loop is unrolled (kvf = kvf0 + col, dqkf =
dq0 - col; index_floats.py). Many scores are affine in the positions with coefficients the
same for a whole (b, h): relative position terms (`s + float(i - j)`), ALiBi under a causal
mask (`s - slopes[h] * abs(i - j)`, mask_facts.py drops the abs), row biases (`s + g[b, q]`).
Written as

    score_log2 = F * (qk + slope * col) + base,   F = scale_log2 * c, c > 0 a constant
    slope      = (coefficient of kvf - coefficient of dqkf) / F      per (b, h)
    base       = the position terms at col = 0, plus the terms of the row alone

each element costs one FFMA (qk + slope * col, col an immediate) on top of the scaled dot
product's path: the row max is taken on the unit and shifted by the base once per row, and
F and the base go into the exponent's FFMA. Before, the score took an FADD and an FFMA an
element, and the max and exponent an FADD more (relpos D=64: 580 -> 5xx SASS instructions
a tile). F > 0 (scale_log2 > 0, which the runtime arranges) keeps the max on the unit.

Where the slope is not the constant 0 (column_slope) and the inputs are bf16, the tiling pass
sets attr slope_step: the kernel then adds slope * col on the tensor cores, in one more k-step
of Q K^T (attention_wgmma_parts.cuh), and the FFMA goes too.

The pass defines score_slope (over b, h and the scales) and score_base (over b, h, q, the
scales and the positions, read at the thread's first column) when score_log2 has this form;
under `math exact` it leaves the score as written (the division by F rounds differently).
"""
from __future__ import annotations

from dataclasses import replace

from .. import ir
from .invariant_factors import invariant
from .simplify import const, op, simplify

DERIVED = ("score_slope", "score_base")
_POSITIONS = ("kvf", "dqkf")  # the float positions that carry the column (index_floats.py)
_ELEMENT = ("qk", "kv", "kvf", "dqkf", "s")  # what makes a term differ between a row's elements


def run(k: ir.Kernel) -> ir.Kernel:
    # Always derived from score_log2 as it is now: what an IR file carries is dropped first.
    k = replace(k, funcs=tuple((n, e) for n, e in k.funcs if n not in DERIVED))
    if k.kind != "attention" or k.attr("kernel") != "wgmma" or k.attr("math") == "exact":
        return k
    form = decompose(k.func("score_log2"))
    if form is None:
        return k
    factor, slope, base = form
    return k.with_func("score_slope", slope).with_func("score_base", base).with_attrs(score_factor=factor)


def needs_positive_scale(k: ir.Kernel) -> bool:
    """Whether lowered kernel k computes its score in the affine form, whose factor
    F = scale_log2 * c (c > 0) must be positive: the row max is taken on qk + slope * col and
    the slope is divided by F. A call with scale <= 0 runs the program that computes the score
    as written (runtime/attention_launch.py; the kernel's KDSL_AFFINE_SCORE=0). So does a key
    table's raw form (key_table.raw_form: the table holds kt / F)."""
    return k.func("score_slope") is not None or k.func("key_gain") is not None


def column_slope(k: ir.Kernel) -> bool:
    """Whether run() will give k a slope that is not the constant 0 (a term in the key position):
    what the slope step (tiling's attr slope_step) takes from the FFMA per element."""
    if k.kind != "attention" or k.attr("math") == "exact" or k.func("score_log2") is None:
        return False
    form = decompose(k.func("score_log2"))
    return form is not None and not (isinstance(form[1], ir.Const) and form[1].value == 0)


def decompose(score: ir.Expr) -> tuple[float, ir.Expr, ir.Expr] | None:
    """(c, slope, base) with score == scale_log2 * c * (qk + slope * col) + base, or None when
    the score has another form or nothing to gain (the bare scaled dot product)."""
    if ir.uses(score, "kvt"):  # an IR file's score read by tile (tile_blocks.py): lowered as it was
        return None
    terms = _linear(score)
    if terms is None or "qk" not in terms:
        return None
    c = positive_multiple_of_scale(simplify(terms["qk"]))
    if c is None or not (set(terms) - {"qk"}):
        return None
    zero = const("f32", 0.0)
    if "kvf" in terms and "dqkf" in terms:
        per_col = op("f32", "sub", terms["kvf"], terms["dqkf"])
    else:
        per_col = terms["kvf"] if "kvf" in terms else op("f32", "neg", terms.get("dqkf", zero))
    factor = op("f32", "mul", ir.Var("f32", "scale_log2"), const("f32", c))
    slope = simplify(op("f32", "div", per_col, factor)) if set(terms) & set(_POSITIONS) else zero
    base = zero
    for name in _POSITIONS:
        if name in terms:
            base = op("f32", "add", base, op("f32", "mul", terms[name], ir.Var("f32", name)))
    if "1" in terms:
        base = op("f32", "add", base, terms["1"])
    return c, slope, simplify(base)


def positive_multiple_of_scale(f: ir.Expr) -> float | None:
    """c when f is scale_log2 * c with c a positive constant."""
    if isinstance(f, ir.Var) and f.name == "scale_log2":
        return 1.0
    if isinstance(f, ir.Op) and f.op == "mul":
        for x, y in (f.args, f.args[::-1]):
            inner = positive_multiple_of_scale(x)
            if inner is not None and isinstance(y, ir.Const) and 0 < y.value < float("inf"):
                return inner * y.value
    return None


def _linear(e: ir.Expr) -> dict[str, ir.Expr] | None:
    """e as a sum over {qk, kvf, dqkf} of coefficient * variable, plus a term "1" that is the
    same for every element of a row; coefficients the same for a whole (b, h). None if not."""
    if isinstance(e, ir.Var) and e.name in ("qk", *_POSITIONS):
        return {e.name: const("f32", 1.0)}
    if not any(ir.uses(e, v) for v in _ELEMENT):
        return {"1": e}
    if not isinstance(e, ir.Op) or e.ty != "f32":
        return None
    if e.op in ("add", "sub"):
        x, y = _linear(e.args[0]), _linear(e.args[1])
        if x is None or y is None:
            return None
        out = dict(x)
        for name, coef in y.items():
            coef = coef if e.op == "add" else op("f32", "neg", coef)
            out[name] = op("f32", "add", out[name], coef) if name in out else coef
        return out
    if e.op == "neg":
        x = _linear(e.args[0])
        return None if x is None else {n: op("f32", "neg", c) for n, c in x.items()}
    if e.op == "mul":
        for x, y in (e.args, e.args[::-1]):
            if invariant(x):
                inner = _linear(y)
                return None if inner is None else {n: op("f32", "mul", c, x) for n, c in inner.items()}
    return None
