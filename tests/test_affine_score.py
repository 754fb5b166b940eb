"""passes/affine_score.py: score_log2 == scale_log2 * c * (qk + slope * col) + base, with the
positions split as the Hopper kernel splits them (kvf = kvf0 + col, dqkf = dq0 - col)."""
import random

import numpy as np

import pytest
from hypothesis import given, settings, strategies as st

from kdsl import ir
from kdsl.passes import tiling
from kdsl.semantics import eval_numpy

from conftest import ROOT, lowered
from exprgen import float_expr, program


def assert_identity(k, captures=None, trials=30, seed=0):
    rng = random.Random(seed)
    captures = captures or {}
    value = lambda e, env: float(eval_numpy(e, env, captures, np.float64))
    score, slope, base = k.func("score_log2"), k.func("score_slope"), k.func("score_base")
    c = k.attr("score_factor")
    for _ in range(trials):
        q, kv0, col = rng.randrange(2000), rng.randrange(2000), rng.randrange(128)
        env = {"B": 2, "H": 4, "Hkv": 4, "M": 2048, "N": 2176, "D": 64, "b": rng.randrange(2), "h": rng.randrange(4),
               "qk": rng.uniform(-30, 30), "scale": 0.125, "scale_log2": 0.125 * 1.4426950408889634, "q": q,
               "kv": kv0 + col, "qf": float(q), "kvf": float(kv0 + col), "dqkf": float(q - kv0 - col)}
        at0 = {**env, "kv": kv0, "kvf": float(kv0), "dqkf": float(q - kv0)}
        want = value(score, env)
        got = env["scale_log2"] * c * (env["qk"] + value(slope, env) * col) + value(base, at0)
        assert got == pytest.approx(want, rel=1e-9, abs=1e-9), (ir.print_expr(score), q, kv0, col)


@pytest.mark.parametrize("score,affine", [
    ("s + float(i - j)", True),                      # relpos
    ("s * 2.0 - float(j) * 0.5 + float(i) * 0.25", True),
    ("s + float(i) * 3.0", True),                     # a row bias only: slope 0
    ("s", False),                                     # the scaled dot product: nothing to gain
    ("s * float(i - j)", False),                      # the position multiplies the dot product
    ("s + sin(float(i - j))", False),
])
def test_decomposes_affine_scores_exactly(score, affine):
    k = lowered(program(score, None))
    assert (k.func("score_slope") is not None) == affine
    if affine:
        assert_identity(k)


def test_alibi_under_its_causal_mask_is_affine():
    k = lowered((ROOT / "samples" / "alibi.kd").read_text())
    assert k.func("score_slope") is not None
    assert_identity(k, captures={"slopes": np.array([0.5, 0.25, 0.125, 0.0625])})


@settings(max_examples=80, deadline=None)
@given(float_expr(depth=3), st.integers(0, 2**32 - 1))
def test_generated_scores_decompose_exactly_or_not_at_all(score, seed):
    k = lowered(program(score, None))
    if k.func("score_slope") is not None:
        assert_identity(k, trials=10, seed=seed)


def test_exact_math_keeps_the_score_as_written():
    k = lowered(program("s + float(i - j)", None), math="exact")
    assert k.func("score_slope") is None and k.func("score_base") is None


# The slope step (passes/tiling.py SLOPE_STEP): slope * col by one more wgmma k-step, chosen
# where the slope is not the constant 0, the inputs are bf16 and the slab fits shared memory.
@pytest.mark.parametrize("score,d,want", [
    ("s + float(i - j)", 64, 1),
    ("s + float(i - j)", 128, 1),
    ("s * 2.0 - float(j) * 0.5 + float(i) * 0.25", 96, 1),
    ("s + float(i) * 3.0", 64, 0),   # slope 0: nothing for the step to add
    ("s", 64, 0),
    ("s + sin(float(i - j))", 64, 0),
])
def test_slope_step_where_the_slope_is_not_zero(score, d, want):
    k = lowered(program(score, None), d)
    assert k.attr("slope_step") == want
    without = lowered(program(score, None), d, slope_step=0)
    assert k.attr("smem_bytes") - without.attr("smem_bytes") == want * tiling.slope_step_bytes(k.attr("tile_n"), k.attr("consumers"))


def test_slope_step_not_for_f16_inputs():
    text = program("s + float(i - j)", None).replace("bf16", "f16")
    assert lowered(text).attr("slope_step") == 0


def test_slope_step_only_where_its_slab_fits():
    # ALiBi at D=128 keeps three stages of 128-key tiles, which leave no room for the slab
    alibi = (ROOT / "samples" / "alibi.kd").read_text()
    assert lowered(alibi, 64).attr("slope_step") == 1
    k = lowered(alibi, 128)
    assert k.attr("slope_step") == 0 and k.attr("smem_bytes") <= 227 * 1024


def test_slope_step_asked_of_a_score_without_a_slope_is_refused():
    from kdsl.errors import KdslError
    with pytest.raises(KdslError, match="slope_step = 1 needs bf16 inputs and a score affine"):
        lowered(program("s * 0.5", None), 64, slope_step=1)
    with pytest.raises(KdslError, match="slope_step must be one of"):
        lowered(program("s + float(i - j)", None), 64, slope_step=2)


def _bf16(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even to bf16, as cvt.rn.bf16x2.f32 does, back as float32."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=-2.0**100, max_value=2.0**100, allow_nan=False, width=32).filter(lambda x: abs(x) > 2.0**-100 or x == 0))
def test_slope_splits_into_three_bf16_terms_exactly(slope):
    """attention_wgmma_parts.cuh slope_terms: hi = bf16(slope), mid = bf16(slope - hi), lo =
    slope - hi - mid; lo is a bf16 value itself and hi + mid + lo is the slope, so the slope
    step's products with the column offsets (integers below 256, exact in bf16) add up to
    slope * col as exactly as the FFMA it replaces."""
    x = np.array([slope], dtype=np.float32)
    hi = _bf16(x)
    r = (x - hi).astype(np.float32)
    mid = _bf16(r)
    lo = (r - mid).astype(np.float32)
    assert _bf16(lo)[0] == lo[0]
    assert float(hi[0]) + float(mid[0]) + float(lo[0]) == float(x[0])
