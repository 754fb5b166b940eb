"""Edge arguments through real calls (issue #6 point 4): batches past CUDA's grid.z limit,
empty inputs (empty in, empty out, as torch), and a scale that is not a real number.
The rules themselves are unit-tested without a GPU in tests/test_launch_args_cpu.py."""
import re

import pytest

import kdsl
from kdsl import fp8, reference
from kdsl.errors import LaunchError
from kdsl.runtime.geometry import GRID_YZ_LIMIT
from kdsl.testing import ATTENTION_TOL, attention_inputs, rel_frobenius

from conftest import ROOT

pytestmark = pytest.mark.gpu

WITH_LSE = """
attention big {
    q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]
    lse: f32[B, H, M]
    score(s, b, h, i, j) = s - 0.1 * float(h)
}
"""


def test_batch_past_the_grid_limit_is_split_and_exact():
    torch = pytest.importorskip("torch")
    mod = kdsl.compile(WITH_LSE, "big.kd")
    B = 70000
    q, k, v, _ = attention_inputs(mod.ir["big"], B, 2, 1, 3, 5, 64)
    out = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:3], float("nan"), device="cuda")
    mod.big(q, k, v, out=out, lse=lse)
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()  # every batch of every launch written
    # Batches on each side of every launch boundary, and random ones.
    picks = torch.tensor([0, GRID_YZ_LIMIT - 1, GRID_YZ_LIMIT, B - 1, *torch.randint(0, B, (4,)).tolist()])
    ref, ref_lse = reference.attention(mod.ir["big"], q[picks], k[picks], v[picks])
    assert rel_frobenius(out[picks], ref) <= ATTENTION_TOL
    assert torch.allclose(lse[picks].double(), ref_lse, atol=1e-3, rtol=1e-4)


def test_batch_past_the_limit_with_batch_index():
    """The Hopper kernel puts its work items on grid.x, so any batch runs; the mma.sync kernel
    (sm_80/89) cannot split a call whose program reads the batch index and refuses it."""
    torch = pytest.importorskip("torch")
    mod = kdsl.load(ROOT / "samples" / "document_mask.kd")
    q, k, v, caps = attention_inputs(mod.ir["document_mask"], 70000, 1, 1, 1, 2, 64)
    if torch.cuda.get_device_capability() != (9, 0):
        with pytest.raises(LaunchError, match="batch 70000 exceeds the CUDA grid limit of 65535"):
            mod.document_mask(q, k, v, **caps)
        return
    out = mod.document_mask(q, k, v, **caps)
    picks = torch.tensor([0, GRID_YZ_LIMIT - 1, GRID_YZ_LIMIT, 69999, *torch.randint(0, 70000, (4,)).tolist()])
    ref, _ = reference.attention(mod.ir["document_mask"], q[picks], k[picks], v[picks],
                                 {n: c[picks] for n, c in caps.items()})
    assert rel_frobenius(out[picks], ref) <= ATTENTION_TOL


@pytest.mark.parametrize("shape", [(2, 4, 0, 16), (0, 4, 8, 16), (2, 0, 8, 16)])
def test_empty_queries_give_an_empty_output(shape):
    torch = pytest.importorskip("torch")
    mod = kdsl.compile(WITH_LSE, "big.kd")
    B, H, M, N = shape
    q = torch.randn(B, H, M, 64, device="cuda", dtype=torch.bfloat16)
    kv = torch.randn(B, H, N, 64, device="cuda", dtype=torch.bfloat16)
    out, lse = mod.big(q, kv, kv)
    assert out.shape == q.shape and out.dtype == q.dtype and out.device == q.device
    assert lse.shape == (B, H, M) and lse.dtype == torch.float32


def test_no_keys_give_zeros_and_minus_infinity():
    torch = pytest.importorskip("torch")
    mod = kdsl.compile(WITH_LSE, "big.kd")
    q = torch.randn(2, 3, 5, 64, device="cuda", dtype=torch.bfloat16)
    kv = torch.randn(2, 3, 0, 64, device="cuda", dtype=torch.bfloat16)
    out = torch.full_like(q, float("nan"))
    res, lse = mod.big(q, kv, kv, out=out)
    assert res.data_ptr() == out.data_ptr() and torch.all(out == 0) and torch.all(torch.isneginf(lse))
    as_torch = torch.nn.functional.scaled_dot_product_attention(q.cpu().float(), kv.cpu().float(), kv.cpu().float())
    assert torch.equal(out.cpu().float(), as_torch)


def test_scale_must_be_a_real_number():
    torch = pytest.importorskip("torch")
    mod = kdsl.load(ROOT / "samples" / "plain.kd")
    q = torch.randn(1, 2, 64, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(LaunchError, match=r"scale must be a real number \(int or float\), got str '0.1'"):
        mod.plain(q, q, q, scale="0.1")
    ref, _ = reference.attention(mod.ir["plain"], q, q, q, scale=0.1)
    assert rel_frobenius(mod.plain(q, q, q, scale=0.1), ref) <= ATTENTION_TOL


def test_empty_gemm_rows_give_an_empty_output():
    torch = pytest.importorskip("torch")
    mod = kdsl.load(ROOT / "samples" / "fp8_gemm.kd")
    a, sa = fp8.quantize_1x128(torch.randn(0, 256, device="cuda"))
    b, sb = fp8.quantize_128x128(torch.randn(384, 256, device="cuda"))
    out = mod.fp8_gemm(a, sa, b, sb)
    assert out.shape == (0, 384)


@pytest.mark.parametrize("sample", ["relpos", "alibi"])
@pytest.mark.parametrize("scale", [-0.7, 0.0, 0.05])
@pytest.mark.parametrize("d", [64, 128])
def test_affine_scores_take_any_scale(sample, scale, d):
    """Regression (found by the interpreter, tests/test_interp.py): relpos and ALiBi run in the
    affine form F * (qk + slope * col) + base, whose slope is divided by F = scale_log2 * c and
    whose row max is taken on qk + slope * col: scale 0 gave NaN, a negative one a wrong
    reference. Calls with scale <= 0 now run the program that computes the score as written."""
    torch = pytest.importorskip("torch")
    src = re.sub(r"(v: bf16\[[^\]]*\])", r"\1\n    lse: f32[B, H, M]", (ROOT / "samples" / f"{sample}.kd").read_text(), count=1)
    mod = kdsl.compile(src, f"{sample}.kd")
    q, k, v, caps = attention_inputs(mod.ir[sample], 2, 3, 3, 200, 333, d)
    out, lse = getattr(mod, sample)(q, k, v, **caps, scale=scale)
    ref, ref_lse = reference.attention(mod.ir[sample], q, k, v, caps, scale=scale)
    assert rel_frobenius(out, ref) <= ATTENTION_TOL
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    assert torch.allclose(lse[finite].double(), ref_lse[finite], atol=1e-3, rtol=1e-4)


@pytest.mark.parametrize("sample", ["plain", "causal"])
@pytest.mark.parametrize("scale", [-0.7, 0.0, 0.05])
def test_scaled_dot_kernels_take_any_scale(sample, scale):
    """plain and causal take the row max on raw q.k and fold the scale into the exponent,
    which needs scale > 0: a negative scale runs on -q, a zero one on 0 * q (uniform
    weights over the unmasked keys). M != N and a ragged last tile, with lse."""
    torch = pytest.importorskip("torch")
    src = re.sub(r"(v: bf16\[[^\]]*\])", r"\1\n    lse: f32[B, H, M]", (ROOT / "samples" / f"{sample}.kd").read_text(), count=1)
    mod = kdsl.compile(src, f"{sample}.kd")
    q, k, v, _ = attention_inputs(mod.ir[sample], 2, 3, 3, 200, 333, 128)
    out, lse = getattr(mod, sample)(q, k, v, scale=scale)
    ref, ref_lse = reference.attention(mod.ir[sample], q, k, v, scale=scale)
    assert rel_frobenius(out, ref) <= ATTENTION_TOL
    assert torch.allclose(lse.double(), ref_lse, atol=1e-3, rtol=1e-4)
