"""The score passes that cut per-element work: invariant factors gathered into one product,
|q - kv| simplified under the mask, and codegen's FFMA for a uniform factor times a position."""
import math
import random

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kdsl import ir
from kdsl.codegen import emit
from kdsl.grammar import parse
from kdsl.passes import exp2_fold, index_floats, invariant_factors, mask_facts, pipeline
from kdsl.passes.target import get_target
from kdsl.semantics import eval_numpy
from kdsl.semantics import eval_scalar

from exprgen import float_expr, program


def kernel(score, mask=None):
    return pipeline.check(parse(program(score, mask), "t.kd"))[0]


def lowered(score, mask=None, **attrs):
    k = kernel(score, mask)
    return pipeline.lower(k.with_attrs(**attrs) if attrs else k, get_target("sm_90a"), 128)


@settings(max_examples=80, deadline=None)
@given(float_expr(depth=3), st.integers(0, 2**32 - 1))
def test_gathering_invariant_factors_preserves_value(score, seed):
    k = exp2_fold.run(kernel(score))
    got_k = invariant_factors.run(k)
    rng = random.Random(seed)
    for _ in range(20):
        env = {"b": rng.randrange(2), "h": rng.randrange(4), "q": rng.randrange(300), "kv": rng.randrange(257),
               "B": 2, "H": 4, "Hkv": 2, "M": 300, "N": 257, "D": 128}
        qk, scale = rng.uniform(-40, 40), rng.uniform(0.01, 0.2)
        env.update(qk=qk, scale=scale, scale_log2=scale * exp2_fold.LOG2E)
        try:
            want = eval_scalar(k.func("score_log2"), env)
        except (ZeroDivisionError, OverflowError, ValueError):
            continue
        got = eval_scalar(got_k.func("score_log2"), env)
        # reassociated products round differently: equal to f32 precision, not bitwise
        assert math.isclose(got, want, rel_tol=1e-5, abs_tol=1e-5) or (math.isnan(got) and math.isnan(want)), \
            (score, got, want)


_ROW_FORMS = ["({e}) * qn[b, h, i]", "({e}) / (0.5 + abs(qn[b, h, i]))", "({e}) * qn[b, h, i] * kn[b, h, j] / 3.0",
              "qn[b, h, i] * (({e}) + kn[b, h, j]) * float(i + 1)", "({e}) / qn[b, h, i] / kn[b, h, j]",
              "2.0 * ({e}) * (1.0 + exp(qn[b, h, i])) / float(h + 1)"]


@settings(max_examples=80, deadline=None)
@given(float_expr(depth=3), st.sampled_from(_ROW_FORMS), st.booleans())
def test_gathering_factors_twice_changes_nothing(score, form, exact):
    """Regression: a lowered kernel written as IR (`--emit ir`) and lowered again generated
    different CUDA, the row's factors gathered in another order the second time (gated_rows)."""
    src = program(form.format(e=score), None, decls=("qn: f32[B, H, M]; kn: f32[B, Hkv, N]",))
    k = exp2_fold.run(pipeline.check(parse(src, "t.kd"))[0])
    once = invariant_factors.gather(k.func("score_log2"), exact)
    assert invariant_factors.gather(once, exact) == once


def test_soft_capping_multiplies_the_dot_product_once():
    """tanh(s / 30): s = qk * scale, so (qk * scale) / 30 -> qk * (scale * (1 / 30))."""
    e = lowered("30 * tanh(s / 30)").func("score_log2")
    inner = next(n for n in ir.walk(e) if isinstance(n, ir.Op) and n.op == "tanh").args[0]
    assert isinstance(inner, ir.Op) and inner.op == "mul" and ir.Var("f32", "qk") in inner.args
    assert not any(isinstance(n, ir.Op) and n.op == "div" for n in ir.walk(e))


def test_exact_math_keeps_a_division_by_an_invariant():
    e = lowered("30 * tanh(s / 30)", math="exact").func("score_log2")
    assert any(isinstance(n, ir.Op) and n.op == "div" for n in ir.walk(e))


def _row_scaled(score, **attrs):
    src = ("attention t { q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]\n"
           " qn: f32[B, H, M]; kn: f32[B, H, N]\n"
           f" score(s, b, h, i, j) = {score} }}")
    k = pipeline.check(parse(src, "t.kd"))[0]
    return invariant_factors.run(exp2_fold.run(k.with_attrs(**attrs) if attrs else k)).func("score_log2")


def _per_element_ops(e, op):
    """How many `op` nodes of e vary along a row (what a thread computes per element)."""
    return sum(isinstance(n, ir.Op) and n.op == op and not invariant_factors.row_invariant(n) for n in ir.walk(e))


def test_factors_of_the_query_row_gather_with_the_invariants(monkeypatch):
    """A QK-norm's scales: qk * qn[b, h, i] * kn[b, h, j] * scale_log2 multiplies per element
    by the key's scale and by one product per row (two FMULs an element, not three); a division
    by a row's temperature becomes a product with its reciprocal, except under exact math; the
    switch KDSL_ROW_FACTORS=0 leaves them as written."""
    e = _row_scaled("s * qn[b, h, i] * kn[b, h, j]")
    assert _per_element_ops(e, "mul") == 2
    assert invariant_factors.row_invariant(e.args[1]) and ir.loads_at(e.args[1], "q")
    assert _per_element_ops(_row_scaled("s / qn[b, h, i]"), "div") == 0
    assert _per_element_ops(_row_scaled("s / qn[b, h, i]"), "mul") == 1
    assert _per_element_ops(_row_scaled("s / qn[b, h, i]", math="exact"), "div") == 1
    monkeypatch.setenv("KDSL_ROW_FACTORS", "0")
    assert _per_element_ops(_row_scaled("s * qn[b, h, i] * kn[b, h, j]"), "mul") == 3


@pytest.mark.parametrize("mask,sign", [("j <= i", 1), ("j < i and i - j < 64", 1), ("i > j", 1),
                                       ("i <= j", -1), ("j >= i", -1), ("j <= i or j < 4", 0),
                                       ("j <= i and j >= i", 0), ("j != i", 0)])
def test_mask_fixes_the_sign_of_q_minus_kv(mask, sign):
    assert mask_facts.q_minus_kv_sign(kernel(None, mask).func("mask")) == sign


@pytest.mark.parametrize("mask", ["j <= i", "j <= i and i - j < 100", "i <= j", "j >= i and j - i < 7"])
def test_abs_of_the_relative_position_drops_where_the_mask_keeps_elements(mask):
    """Where the mask keeps an element the simplified score equals the score; abs is gone."""
    score = "s - 0.25 * float(abs(i - j)) + 0.5 * float(abs(j - i))"
    k = index_floats.run(invariant_factors.run(exp2_fold.run(kernel(score, mask))))
    simplified = mask_facts.run(k)
    assert not any(isinstance(n, ir.Op) and n.op == "abs" for n in ir.walk(simplified.func("score_log2")))
    q = np.arange(300).reshape(-1, 1)
    kv = np.arange(257).reshape(1, -1)
    env = {"qk": np.float32(0.25), "scale": np.float32(0.125), "scale_log2": np.float32(0.18), "b": 0, "h": 0,
           "q": q, "kv": kv, "qf": q.astype(np.float32), "kvf": kv.astype(np.float32),
           "dqkf": (q - kv).astype(np.float32), "B": 1, "H": 1, "Hkv": 1, "M": 300, "N": 257, "D": 64}
    kept = eval_numpy(k.func("mask"), env, {}, np.float32)
    want = eval_numpy(k.func("score_log2"), env, {}, np.float32)
    got = eval_numpy(simplified.func("score_log2"), env, {}, np.float32)
    assert kept.any() and np.array_equal(got[kept], want[kept])


def test_abs_inside_a_load_index_stays():
    """A masked element's loads are still issued: its index must stay in bounds as written."""
    src = """attention t {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    bias: f32[4096]
    score(s, b, h, i, j) = s + bias[abs(i - j)] + float(abs(i - j))
    mask(b, h, i, j) = j <= i
}
"""
    k = pipeline.lower(pipeline.check(parse(src, "t.kd"))[0], get_target("sm_90a"), 128)
    e = k.func("score_log2")
    loads = [n for n in ir.walk(e) if isinstance(n, ir.Load)]
    assert loads and all(any(isinstance(x, ir.Op) and x.op == "abs" for i in n.indices for x in ir.walk(i))
                         for n in loads)
    outside = [n for n in ir.walk(e) if isinstance(n, ir.Op) and n.op == "abs" and n.ty == "f32"]
    assert not outside


def test_a_uniform_factor_times_a_position_is_one_ffma_with_the_column_offset():
    """alibi: slopes[h] * (q - kv) -> fmaf(-slope, col, slope * dq0): NVVM hoists slope * dq0 per
    row and keeps one FFMA with the constant column offset per element."""
    src = """attention alibi {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    slopes: f32[H]
    score(s, b, h, i, j) = s - slopes[h] * float(abs(i - j))
    mask(b, h, i, j) = j <= i
}
"""
    k = pipeline.lower(pipeline.check(parse(src, "t.kd"))[0], get_target("sm_90a"), 128)
    source = emit.generate(k).source
    body = source[source.index("float score("):]
    body = body[:body.index("}")]
    assert "fmaf(" in body and ", col, " in body and "* dq0" in body and "fabsf" not in body


def test_poly_exp2_is_a_checked_schedule_attr():
    from kdsl.errors import KdslError
    assert lowered("30 * tanh(s / 30)").attr("poly_exp2") == 0
    assert lowered("30 * tanh(s / 30)", poly_exp2=4).attr("poly_exp2") == 4
    with pytest.raises(KdslError, match="poly_exp2 must be one of"):
        lowered("30 * tanh(s / 30)", poly_exp2=5)


@settings(max_examples=120, deadline=None)
@given(float_expr(depth=3), st.integers(0, 2**32 - 1))
def test_score_bounds_hold_every_value_the_score_takes(score, seed):
    """passes/score_bounds.py: the interval of score_log2 contains its value wherever it is
    evaluated (the kernel's fixed reference rests on it)."""
    from kdsl.passes import score_bounds
    k = lowered(score)
    lo, hi = score_bounds.bounds(k.func("score_log2"))
    rng = random.Random(seed)
    for _ in range(30):
        env = {"b": rng.randrange(2), "h": rng.randrange(4), "q": rng.randrange(300), "kv": rng.randrange(257),
               "B": 2, "H": 4, "Hkv": 2, "M": 300, "N": 257, "D": 128}
        qk, scale = rng.choice([rng.uniform(-40, 40), rng.uniform(-1e4, 1e4)]), rng.uniform(0.01, 0.2)
        env.update(qk=qk, scale=scale, scale_log2=scale * exp2_fold.LOG2E, qf=float(env["q"]),
                   kvf=float(env["kv"]), dqkf=float(env["q"] - env["kv"]))
        try:
            v = eval_scalar(k.func("score_log2"), env)
        except (ZeroDivisionError, OverflowError, ValueError):
            continue
        if not math.isnan(v):
            assert lo - 1e-4 * (1 + abs(lo)) <= v <= hi + 1e-4 * (1 + abs(hi)), (score, lo, hi, v)


@pytest.mark.parametrize("score,mask,dtype,ref", [
    ("30 * tanh(s / 30)", None, "bf16", 30 * exp2_fold.LOG2E),            # [-43.3, 43.3]: the top
    ("50.0 * tanh(s / 50.0)", "j <= i", "bf16", -50 * exp2_fold.LOG2E + 110),  # span 144: 110 above the bottom
    ("90.0 * tanh(s / 90.0)", None, "bf16", None),                         # span 260: P would overflow
    ("30 * tanh(s / 30)", None, "f16", None),                              # f16's P: span 29 at most
    ("4.0 * sigmoid(s) - 2.0", None, "f16", 2 * exp2_fold.LOG2E),
    ("min(max(s, -8.0), 8.0)", None, "bf16", 8 * exp2_fold.LOG2E),
    ("s", None, "bf16", None),
    ("s + float(j - i)", "j <= i", "bf16", None),
    ("s * (0.5 + sigmoid(s))", None, "bf16", None),
])
def test_a_narrow_score_range_fixes_the_softmax_reference(score, mask, dtype, ref):
    src = program(score, mask).replace("bf16", dtype)
    k = pipeline.lower(pipeline.check(parse(src, "t.kd"))[0], get_target("sm_90a"), 128)
    got = k.attr("score_ref")
    assert (got is None) == (ref is None) and (ref is None or math.isclose(got, ref, rel_tol=1e-9)), (score, got, ref)
    assert f"attr score_ref = {'null' if ref is None else ''}" in ir.print_ir(k)
