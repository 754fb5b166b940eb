"""Scores of -inf from captured data: the additive masks that PyTorch code carries (0 where kept,
-inf where not, as `s + am[b, i, j]`), a key's -inf beside a mask, and a capped score with one.
A -inf score is a masked element that no mask analysis saw: the kernel's running max, its
rescale and its fixed reference (a capped score's) must take it as one. Rows whose every score is
-inf give 0 and lse -inf, never NaN; the gradients of every input are finite and match the float64
reference's, forward and backward, at densities up to 99 % of -inf."""
import zlib

import pytest

import kdsl
from kdsl import reference

from conftest import assert_rows_close
from gradcheck import check_grads

pytestmark = pytest.mark.gpu

SRC = """
attention additive {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    am: f32[B, M, N]
    lse: f32[B, H, M]
    score(s, b, h, i, j) = s + am[b, i, j]
}
attention key_inf_causal {
    q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]
    kb: f32[B, N]
    score(s, b, h, i, j) = s + kb[b, j]
    mask(b, h, i, j) = j <= i
}
attention capped_additive {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    am: f32[B, H, M, N]
    lse: f32[B, H, M]
    score(s, b, h, i, j) = 30.0 * tanh(s / 30.0) + am[b, h, i, j]
}
"""
# (B, H, Hkv, M, N, D); the last two decode shapes, whose keys split over CTAs (a split of -inf
# scores alone is an empty partial for the combine)
SHAPES = [(2, 4, 2, 300, 500, 64), (1, 8, 4, 1000, 1000, 128), (2, 4, 4, 129, 2000, 128), (2, 8, 2, 1, 6000, 128),
          (1, 8, 8, 16, 5000, 64)]


def _module():
    return kdsl.compile(SRC, "infinite.kd")


def _inputs(kir, shape, density, seed):
    """q, k, v and the captures: each -inf with probability density, finite (normal) otherwise;
    a few whole rows (or leading keys) -inf, whatever the density."""
    import torch
    B, H, Hkv, M, N, D = shape
    Hkv = Hkv if kir.tensor("k").shape[1] != kir.tensor("q").shape[1] else H
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn((B, H, M, D), device="cuda", generator=gen).to(torch.bfloat16)
    k, v = (torch.randn((B, Hkv, N, D), device="cuda", generator=gen).to(torch.bfloat16) for _ in range(2))
    caps = {}
    for t in kir.tensors:
        if t.name not in ("am", "kb"):
            continue
        dims = {"B": B, "H": H, "M": M, "N": N}
        size = tuple(dims[d.name] for d in t.shape)
        x = torch.randn(size, device="cuda", generator=gen)
        x[torch.rand(size, device="cuda", generator=gen) < density] = float("-inf")
        if t.name == "kb":
            x[:, :3] = float("-inf")  # rows 0-2 see keys 0-2 only under the causal mask
        else:
            x[0, ..., :4, :] = float("-inf")  # batch 0 only: at M = 1 batch 1 keeps its row
        caps[t.name] = x
    return q, k, v, caps, gen


@pytest.mark.parametrize("density", [0.0, 0.5, 0.99])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", ["additive", "key_inf_causal", "capped_additive"])
def test_infinite_scores_forward(name, shape, density):
    import torch
    mod = _module()
    kir = mod.ir[name]
    q, k, v, caps, _ = _inputs(kir, shape, density, zlib.crc32(f"{name} {shape} {density}".encode()))  # reproducible
    res = getattr(mod, name)(q, k, v, **caps)
    got, lse = res if isinstance(res, tuple) else (res, None)
    ref, ref_lse = reference.attention(kir, q, k, v, caps)
    label = f"{name} {shape} density {density}"
    assert not torch.isnan(got).any(), f"{label}: NaN in the output"
    assert_rows_close(got, ref, label)
    empty = torch.isneginf(ref_lse)
    assert empty.any(), f"{label}: no fully masked row drawn"
    assert torch.all(got[empty] == 0), f"{label}: a row of -inf scores is not 0"
    if lse is not None:
        assert torch.equal(torch.isneginf(lse), empty), f"{label}: lse -inf at other rows than the reference's"
        assert torch.allclose(lse[~empty].double(), ref_lse[~empty], atol=2e-3, rtol=1e-4), label


@pytest.mark.parametrize("density", [0.5, 0.99])
@pytest.mark.parametrize("name", ["additive", "key_inf_causal", "capped_additive"])
def test_infinite_scores_backward(name, density):
    import torch
    mod = _module()
    kir = mod.ir[name]
    shape = (2, 4, 2, 600, 700, 128)
    q, k, v, caps, gen = _inputs(kir, shape, density, 5)
    dout = torch.randn((2, 4, 600, 128), device="cuda", generator=gen).to(q.dtype)
    kern = getattr(mod, name)
    q.requires_grad_(True), k.requires_grad_(True), v.requires_grad_(True)
    res = kern(q, k, v, **caps)
    out = res[0] if isinstance(res, tuple) else res
    out.backward(dout)
    for n, g in (("dq", q.grad), ("dk", k.grad), ("dv", v.grad)):
        assert torch.isfinite(g).all(), f"{name} density {density}: {n} not finite"
    q, k, v = (x.detach() for x in (q, k, v))
    check_grads(f"{name} density {density}", lambda *a, **c: _out(kern(*a, **c)), kir, q, k, v, caps, dout)


def _out(res):
    return res[0] if isinstance(res, tuple) else res
