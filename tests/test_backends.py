"""numpy and torch compute the same thing: rounding to bf16 / f16 / e4m3, FP8 quantisation,
and the float64 reference are one implementation over kdsl.backends, and must agree."""
import numpy as np
import pytest

import kdsl
from kdsl import fp8, reference
from kdsl.backends import Numpy, Torch
from kdsl.cases import AttentionCase, attention_inputs, conform

from conftest import ROOT

torch = pytest.importorskip("torch")


def _awkward_floats(rng, n=200_000):
    """Magnitudes from e4m3's subnormals to past its range, both signs, plus exact ties."""
    x = rng.choice([-1, 1], n) * 2.0 ** rng.uniform(-12, 10, n)
    ties = (rng.integers(1, 64, 2000) + 0.5) * 2.0 ** rng.integers(-9, 4, 2000)  # halfway between e4m3 values
    return np.concatenate([x, ties, -ties, [0.0, 448.0, 464.0, 1e6, -1e6]]).astype(np.float32)


@pytest.mark.parametrize("dtype", ["bf16", "f16", "e4m3"])
def test_numpy_rounding_matches_torch_casts(dtype):
    x = _awkward_floats(np.random.default_rng())
    got = Numpy().cast(x, dtype).astype(np.float32)
    want = Torch().cast(torch.from_numpy(x), dtype).float().numpy()
    bad = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
    assert bad.size == 0, list(zip(x[bad[:5]], got[bad[:5]], want[bad[:5]]))


@pytest.mark.parametrize("shape", [(130, 384), (3, 70, 256)])
def test_fp8_quantisation_is_the_same_on_numpy_and_torch(shape):
    x = torch.randn(shape) * torch.logspace(-3, 2, shape[-1])
    for quantize in (fp8.quantize_1x128, fp8.quantize_128x128):
        qt, st = quantize(x)
        qn, sn = quantize(x.numpy())
        assert qn.dtype == np.float32 and sn.dtype == np.float32
        assert np.array_equal(qt.float().numpy(), qn) and np.array_equal(st.numpy(), sn)
        assert tuple(s // 4 for s in sn.strides) == st.stride()  # M-major scales on both


ATTENTION = ["relpos", "alibi", "softcap", "causal", "sliding_window", "document_mask", "natten2d", "prefix_lm",
             "padded_causal"]


@pytest.mark.parametrize("name", ATTENTION)
def test_reference_attention_is_the_same_on_numpy_and_torch(name):
    k_ir = kdsl.load(ROOT / "samples" / f"{name}.kd").ir[name]
    case = conform(k_ir, AttentionCase(2, 4, 2, 150, 131, 64, seed=np.random.default_rng().integers(2**62)))
    q, k, v, caps = attention_inputs(k_ir, case, Torch())
    out_t, lse_t = reference.attention(k_ir, q, k, v, caps)
    f = lambda x: x.float().numpy() if x.dtype != torch.int32 else x.numpy()
    out_n, lse_n = reference.attention(k_ir, f(q), f(k), f(v), {n: f(c) for n, c in caps.items()})
    assert isinstance(out_n, np.ndarray) and out_n.dtype == np.float64
    np.testing.assert_allclose(out_n, out_t.numpy(), rtol=1e-9, atol=1e-12)
    fin = np.isfinite(lse_t.numpy())
    assert np.array_equal(fin, np.isfinite(lse_n))
    # lse = m + log(l) cancels where it is near 0: there its error is the terms' rounding
    # (~1e-16 |m|, seen: 4.4e-16 on an lse of 3.6e-4, 1.2e-12 relative), not the result's
    np.testing.assert_allclose(lse_n[fin], lse_t.numpy()[fin], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["fp8_gemm", "fp8_grouped_contiguous", "fp8_grouped_masked"])
def test_reference_fp8_gemm_is_the_same_on_numpy_and_torch(name):
    g = kdsl.load(ROOT / "samples" / f"{name}.kd").ir[name].attr("grouping")
    a, sa = fp8.quantize_1x128(torch.randn((2, 100, 256) if g == "masked" else (100, 256)))
    b, sb = fp8.quantize_128x128(torch.randn((130, 256) if g == "dense" else (2, 130, 256)))
    extra = {"group": torch.randint(-1, 2, (100,), dtype=torch.int32)} if g == "contiguous" else \
        {"count": torch.tensor([7, 100], dtype=torch.int32)} if g == "masked" else {}
    want = reference.fp8_gemm(a, sa, b, sb, **extra).numpy()
    got = reference.fp8_gemm(a.float().numpy(), sa.numpy(), b.float().numpy(), sb.numpy(),
                             **{n: x.numpy() for n, x in extra.items()})
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)  # NaN rows (padding) equal too


def test_reference_where_on_a_condition_over_dims_only():
    """Regression: where(N < M, ...) over tensors gave torch.where a Python bool (TypeError)."""
    src = """attention t {
        q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
        score(s, b, h, i, j) = where(N < M, s, s + float(i - j))
    }"""
    k_ir = kdsl.compile(src, "t.kd").ir["t"]
    for M, N in ((5, 9), (9, 5)):
        case = AttentionCase(1, 2, 2, M, N, 64, seed=int(np.random.default_rng().integers(2**62)))
        q, k, v, _ = attention_inputs(k_ir, case, Torch())
        out_t, _ = reference.attention(k_ir, q, k, v)
        out_n, _ = reference.attention(k_ir, q.float().numpy(), k.float().numpy(), v.float().numpy())
        plain = kdsl.compile(src.replace("where(N < M, s, s + float(i - j))", "s" if N < M else "s + float(i - j)"),
                             "p.kd").ir["t"]
        want, _ = reference.attention(plain, q, k, v)
        np.testing.assert_allclose(out_t.numpy(), want.numpy(), rtol=1e-12)
        np.testing.assert_allclose(out_n, want.numpy(), rtol=1e-9, atol=1e-12)  # (outputs near 0: as above)


class _LogLowByAFewUlps:
    """numpy, except that log comes out a few ulps low: a stand-in for a GPU's float64 log,
    which differs from the CPU's libm in the last bits here and there."""

    def __getattr__(self, name):
        return getattr(np, name)

    def log(self, x):
        return np.log(x) * (1 - 4e-16)


def test_the_reference_rounds_floats_to_integers_on_the_host():
    """A T5 bucket's edge, int(log(d / 8) / log(16) * 8) at d = 64, is exactly 6: a log a few
    ulps low gives 5 there. With a host backend, eval_array takes int()'s operand from the
    host, so a GPU reference buckets each offset as the CPU does (regression: the t5 variant
    test failed 1 run in 10 on the H100, its GPU reference a bucket off at d = 64)."""
    from kdsl.semantics import eval_array
    mod = kdsl.compile("attention t5 {\n    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]\n"
                       "    score(s, b, h, i, j) = s + float(int(log(float(max(abs(i - j), 1)) / 8.0) / log(16.0) * 8.0))\n}\n")
    score = mod.ir["t5"].func("score")
    env = {"q": np.arange(65).reshape(65, 1), "kv": np.zeros((1, 1), np.int64), "s": 0.0}
    skewed = Numpy()
    skewed.xp = _LogLowByAFewUlps()
    cpu = eval_array(score, env, {}, Numpy())
    assert cpu[[16, 32, 64], 0].tolist() == [2.0, 4.0, 6.0]
    assert eval_array(score, env, {}, skewed)[64, 0] == 5.0  # the stand-in does differ
    assert np.array_equal(eval_array(score, env, {}, skewed, host=Numpy()), cpu)


def test_a_bool_tensors_element_is_read_as_it_is():
    """FlexAttention's mask_mod (kdsl/flex.py) reads `keep[b, i, j]` as its users write it, with
    no `!= 0` after the load (an extra compare in the peer's timed kernel); a tensor given as
    integers still becomes a condition."""
    from kdsl import flex
    kir = kdsl.load(ROOT / "bench" / "variants.kd", interpret=True).ir["bool_attn_mask"]
    dims = {"B": 1, "H": 1, "M": 4, "N": 4, "D": 64}

    class Element:  # what indexing a bool tensor gives, refusing a compare
        dtype = torch.bool

        def __ne__(self, other):
            raise AssertionError("a bool element was compared")

    class Tensor:
        def __getitem__(self, idx):
            return Element()

    assert isinstance(flex.mask_mod(kir, dims, {"keep": Tensor()})(0, 0, 1, 2), Element)
    ints = torch.tensor([[[0, 3], [1, 0]]], dtype=torch.uint8)
    got = flex.mask_mod(kir, dims, {"keep": ints})(torch.tensor(0), torch.tensor(0), torch.tensor([0, 0, 1]),
                                                     torch.tensor([0, 1, 0]))
    assert got.dtype == torch.bool and got.tolist() == [False, True, True]
