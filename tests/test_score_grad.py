"""The score's derivative in s (passes/score_grad.py) against central differences in float64,
on random scores and on every function the language has."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kdsl import ir
from kdsl.grammar import parse
from kdsl.passes import pipeline
from kdsl.passes.score_grad import derivative, score_grad
from kdsl.semantics import eval_numpy

from exprgen import float_expr, program

DIMS = {"B": 2, "H": 3, "M": 40, "N": 50, "D": 64, "Hkv": 3}


def _score(text: str, decls=()) -> ir.Kernel:
    return pipeline.check(parse(program(text, None, decls=decls), "t.kd"))[0]


def _env(rng, n):
    return {**DIMS, "b": rng.integers(0, 2, n), "h": rng.integers(0, 3, n), "q": rng.integers(0, 40, n),
            "kv": rng.integers(0, 50, n), "scale": 0.125}


def _compare(k: ir.Kernel, s_range=3.0, captures=None, n=400, seed=0):
    """g'(s) by the pass against (g(s + e) - g(s - e)) / 2e, where g is smooth around s (the
    one-sided differences agree)."""
    rng = np.random.default_rng(seed)
    g, dg = k.func("score"), score_grad(k)
    env = _env(rng, n)
    s = rng.uniform(-s_range, s_range, n)
    eps = 1e-6
    at = lambda x: np.broadcast_to(np.asarray(eval_numpy(g, {**env, "s": x}, captures or {}), np.float64), (n,))
    lo, mid, hi = at(s - eps), at(s), at(s + eps)
    want = (hi - lo) / (2 * eps)
    smooth = np.isclose((hi - mid) / eps, (mid - lo) / eps, rtol=1e-3, atol=1e-4) & np.isfinite(want)
    got = np.broadcast_to(np.asarray(eval_numpy(dg, {**env, "s": s}, captures or {}), np.float64), (n,))
    assert smooth.mean() > 0.5, "too few smooth points to compare"
    np.testing.assert_allclose(got[smooth], want[smooth], rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("score", [
    "s", "s * 0.5 + float(i - j)", "30 * tanh(s / 30)", "exp(s / 4)", "exp2(s / 4)", "log(s * s + 1)",
    "log2(s * s + 1)", "sqrt(s * s + 1)", "rsqrt(s * s + 1)", "sin(s) + cos(2 * s)", "tan(s / 4)",
    "sigmoid(s) * s", "s / (s * s + 2)", "abs(s) - min(s, 1.0) + max(s, -1.0)",
    "where(i >= j, s, s * 2)", "float(int(s * 4)) / 4 + s", "s * float(abs(i - j) // 3) - float(h)",
    "float(s) + 2 * float(tanh(s))",  # float() of a float: the identity (it once had no rule)
])
def test_every_function(score):
    _compare(_score(score))


def test_captured_tensors_are_constants():
    k = _score("s * w[h] + bias[h, i]", ("w: f32[H]", "bias: f32[H, M]"))
    rng = np.random.default_rng(1)
    caps = {"w": rng.normal(size=3), "bias": rng.normal(size=(3, 40))}
    _compare(k, captures=caps)
    assert ir.print_expr(score_grad(k)) == "(load:f32 w h)"


def test_float_of_a_loaded_float_passes_its_gradient():
    """float() of a float captured value is the identity: the load's derivative is 1 (backward
    builds once failed with 'no derivative rule for op float'; tools/dev/backward_build_fuzz.py)."""
    from kdsl.passes.score_grad import capture_grads
    k = _score("s + float(a[h])", ("a: f32[H]",))
    ((load, d),) = capture_grads(k)
    assert load.tensor == "a" and d == ir.Const("f32", 1.0)


def test_plain_programs_have_unit_derivative():
    assert score_grad(_score(None)) == ir.Const("f32", 1.0)
    assert score_grad(_score("s + float(i - j)")) == ir.Const("f32", 1.0)


@settings(max_examples=150, deadline=None)
@given(float_expr(depth=3), st.integers(0, 2**31))
def test_random_scores(score, seed):
    k = _score(score)
    if not ir.uses(k.func("score"), "s"):
        assert derivative(k.func("score"), "s") == ir.Const("f32", 0.0)
        return
    _compare(k, seed=seed)


@pytest.mark.parametrize("decls,score,uniform", [
    (("gain: f32[H]",), "s * gain[h]", [True]),
    (("slopes: f32[H]",), "s - slopes[h] * float(abs(i - j))", [True]),
    (("t: f32[B, H]", "idx: i32[H]"), "s + t[b, idx[h]]", [True]),
    (("bias: f32[H, 64]",), "s + bias[h, (i - j) % 64]", [False]),
    (("gain: f32[H]", "bias: f32[64]"), "s * gain[h] + bias[j % 64]", [True, False]),
])
def test_loads_indexed_by_b_and_h_alone_are_step_uniform(decls, score, uniform):
    """A load whose index reads no position is one entry for a whole (b, h): the backward
    kernels sum its gradient in registers over a step and add it once a warp (emit.py's
    flush_uniform_grads), instead of an atomic per element into one address."""
    from kdsl.codegen.emit_backward import generate_backward
    from kdsl.passes.score_grad import capture_grads, step_uniform
    from kdsl.passes.target import get_target
    k = _score(score, decls)
    assert [step_uniform(load) for load, _ in capture_grads(k)] == uniform
    src = generate_backward(pipeline.lower(k, get_target("sm_90a"), 64), get_target("sm_90a")).source
    assert src.count("kdsl::warp_sum_add(") == sum(uniform)
    assert src.count("atomicAdd(g.") == len(uniform) - sum(uniform)


@pytest.mark.parametrize("decls,score,offset", [
    (("bias: f32[H, 64]",), "s + bias[h, (i - j) % 64]", [True]),
    (("bias: f32[H, 256]",), "s + bias[h, max(0, min(255, i - j + 128))]", [True]),
    (("bias: f32[H, 64]",), "s + bias[h, (j + 3 * i) % 64]", [False]),
    (("w: f32[N]",), "s + w[j]", [False]),
    (("bias: f32[H, 64]", "gain: f32[H]"), "s * gain[h] + bias[h, (j - i) % 64] * float(i)", [False, True]),
    (("bias: f32[H, 64]",), "s + bias[h, (i - j) % 64] - bias[h, (j - i + 5) % 64]", [True, True]),
])
def test_loads_indexed_by_the_offset_alone_are_summed_per_offset(decls, score, offset):
    """A load whose index reads the positions only as q - kv (a relative-position table):
    offset_score.offset_load writes it over the offset, and the backward's Grad hands its
    share to the kernel (o[]) and adds per offset (add_offset_grad) instead of an atomic an
    element (the first such load; others keep their atomics); a load indexed by b and h alone
    stays step-uniform."""
    from kdsl.codegen.emit_backward import generate_backward
    from kdsl.passes.offset_score import offset_load
    from kdsl.passes.score_grad import capture_grads, step_uniform
    from kdsl.passes.target import get_target
    k = _score(score, decls)
    got = [offset_load(load) is not None and not step_uniform(load) for load, _ in capture_grads(k)]
    assert got == offset
    src = generate_backward(pipeline.lower(k, get_target("sm_90a"), 64), get_target("sm_90a")).source
    assert f"kOffsetGrads = {min(sum(offset), 1)};" in src
