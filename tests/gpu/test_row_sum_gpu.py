"""attr tensor_row_sum: P's row sums from P V over 8 columns of ones beside V (value head dim
64), against the float64 reference: out and lse, masked, ragged, GQA, decode and fully masked
rows, in samples whose softmax takes each path (running max, lazy rescale, fixed reference)."""
import pytest

import kdsl

from conftest import ROOT
from gpu.test_attention_gpu import _check

pytestmark = pytest.mark.gpu

SHAPES = [(2, 4, 4, 256, 256, 64), (1, 2, 2, 1, 1, 64), (2, 2, 2, 129, 127, 64), (1, 4, 1, 200, 513, 64),
          (1, 8, 2, 1, 5000, 64), (1, 2, 2, 1000, 1000, 64)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", ["relpos", "causal", "alibi", "softcap", "document_mask", "prefix_lm"])
def test_row_sums_from_the_tensor_cores_match_reference(name, shape):
    pytest.importorskip("torch")
    mod = kdsl.load(ROOT / "samples" / f"{name}.kd")
    kern = getattr(mod, name).with_attrs(tensor_row_sum=1)
    _check(mod, name, shape, seed=hash((name, shape)) % 2**31, kernel=kern)


def test_row_sums_with_lse_and_fully_masked_rows():
    torch = pytest.importorskip("torch")
    from kdsl import reference
    from kdsl.testing import attention_inputs
    mod = kdsl.compile("""attention m {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    lse: f32[B, H, M]
    mask(b, h, i, j) = j <= i - 100
}
""", "m.kd")
    kern = mod.m.with_attrs(tensor_row_sum=1)
    q, k, v, caps = attention_inputs(mod.ir["m"], 2, 3, 3, 300, 300, 64)
    out, lse = kern(q, k, v)
    ref, ref_lse = reference.attention(mod.ir["m"], q, k, v, caps)
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    assert torch.allclose(lse[finite], ref_lse[finite].float(), atol=2e-3, rtol=1e-3)
    assert torch.all(out[~finite] == 0)
    assert (out[finite] - ref[finite]).abs().max() < 3e-2


def test_row_sum_needs_value_head_dim_64():
    torch = pytest.importorskip("torch")
    mod = kdsl.load(ROOT / "samples" / "causal.kd")
    x = torch.randn(1, 2, 64, 128, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(kdsl.KdslError, match="tensor_row_sum needs value head dim 64"):
        mod.causal.with_attrs(tensor_row_sum=1)(x, x, x)


@pytest.mark.parametrize("shape", [(2, 4, 4, 1, 1, 64), (1, 4, 4, 3, 2, 64), (1, 2, 2, 300, 1000, 64)],
                         ids=lambda s: "x".join(map(str, s)))
def test_kernels_that_return_lse_keep_fp32_row_sums(shape):
    """Regression (found by the interpreter, tests/test_interp.py): soft-capping with lse at head
    dim 64 took its row sums by P V by default, and under its fixed reference a lone key's
    rounded weight put lse up to 3.9e-3 off. Kernels that declare lse now keep fp32 sums."""
    torch = pytest.importorskip("torch")
    from kdsl import reference
    from kdsl.testing import attention_inputs
    mod = kdsl.compile("""attention sc {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    lse: f32[B, H, M]
    score(s, b, h, i, j) = 30 * tanh(s / 30)
}
""", "sc.kd")
    B, H, Hkv, M, N, D = shape
    q, k, v, caps = attention_inputs(mod.ir["sc"], B, H, Hkv, M, N, D)
    out, lse = mod.sc(q, k, v)
    ref, ref_lse = reference.attention(mod.ir["sc"], q, k, v, caps)
    assert torch.allclose(lse.double(), ref_lse, atol=1e-3, rtol=1e-4)
    assert (out.double() - ref).abs().max() < 3e-2
