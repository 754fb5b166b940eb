"""The key table (passes/key_table.py, attr key_table, the default where it applies and fits):
a score's part read per key comes from a table per tile in shared memory. Against the float64
reference at ragged, GQA, decode (split-KV, one warpgroup), masked and three-warpgroup shapes,
with the table and without."""
import pytest

import kdsl

from exprgen import program
from gpu.test_attention_gpu import _check
from gpu.test_offset_table_gpu import MASKS, SHAPES  # the same masks and awkward shapes

pytestmark = pytest.mark.gpu

SCORES = {
    "rank1": "s + qb[b, h, i] * kb[b, h, j]",
    "forgetting": "s + fq[b, h, i] - kb[b, h, j]",
    "key_gate": "s + 4.0 * tanh(g[b, j])",
    "key_position": "s * 0.7 + float(j) / 512.0 * g[b, j]",
    "row_gain": "s + float(i) / 1024.0 * g[b, j] + fq[b, h, i]",  # the raw form with a base (key_table.raw_form)
    "select": "where(g[b, j] > 0.0, s + 2.0, s)",  # s + a select once simplified (passes/simplify.py)
    "temperature": "s / (1.0 + g[b, j] * g[b, j])",  # the table holds the reciprocal (key_table._reciprocal)
}


def _module(name, score, mask, lse=False):
    decls = ("lse: f32[B, H, M]",) * lse + ("qb: f32[B, H, M]", "fq: f32[B, H, M]", "kb: f32[B, H, N]",
                                             "g: f32[B, N]")
    return kdsl.compile(program(score, mask, name, decls), f"{name}.kd")


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("mask", list(MASKS), ids=str)
@pytest.mark.parametrize("name", list(SCORES))
def test_key_scores_with_the_table_match_reference(name, mask, shape):
    mod = _module(name, SCORES[name], MASKS[mask])
    for table in (1, 0):
        kern = getattr(mod, name).with_attrs(key_table=table)
        _check(mod, name, shape, seed=hash((name, mask, shape, table)) % 2**31, kernel=kern)


def test_the_table_with_lse_and_three_warpgroups():
    import torch
    mod = _module("rank1", SCORES["rank1"], "j <= i", lse=True)
    for attrs in ({"key_table": 1}, {"key_table": 1, "consumers": 3, "stages": 2}):
        got, ref, lse, ref_lse = _check(mod, "rank1", (2, 4, 4, 700, 900, 64), seed=7,
                                        kernel=mod.rank1.with_attrs(**attrs))
        finite = torch.isfinite(ref_lse)
        assert torch.equal(torch.isfinite(lse), finite)
        assert torch.allclose(lse[finite], ref_lse[finite].float(), atol=2e-3, rtol=1e-3), attrs


@pytest.mark.parametrize("d", [64, 128, 192])
@pytest.mark.parametrize("mask", list(MASKS), ids=str)
@pytest.mark.parametrize("name", list(SCORES))
def test_key_scores_backward_match_reference(name, mask, d):
    """The wgmma backwards evaluate the key part once a step per key of a thread (G::kKeyPart,
    attention_bwd_wgmma.cuh key_parts; the wide kernel at 192): gradients of q, k, v against
    float64 autograd at a ragged GQA shape (keys past N read key N - 1's part, then dropped)."""
    import torch
    from gradcheck import check_grads
    from kdsl.testing import attention_inputs
    mod = _module(name, SCORES[name], MASKS[mask])
    kir = mod.ir[name]
    gen = torch.Generator(device="cuda").manual_seed(hash((name, mask, d)) % 2**31)
    q, k, v, caps = attention_inputs(kir, 2, 4, 2, 300, 517, d, generator=gen)
    dout = torch.randn((2, 4, 300, d), device="cuda", generator=gen).to(q.dtype)
    check_grads(f"{name} {mask} d={d}", getattr(mod, name), kir, q, k, v, caps, dout)


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("name", ["rank1", "key_gate", "key_position"])
def test_key_scores_capture_gradients(name, d):
    """The captured tensors' gradients of key scores (the backward built with KDSL_CAPTURE_GRADS
    reads the key part per element for them; the score itself from the step's key parts)."""
    import torch
    from gradcheck import check_grads
    from kdsl.testing import attention_inputs
    mod = _module(name, SCORES[name], "j <= i")
    kir = mod.ir[name]
    gen = torch.Generator(device="cuda").manual_seed(d)
    q, k, v, caps = attention_inputs(kir, 2, 4, 2, 190, 300, d, generator=gen)
    caps = {n: c.detach().requires_grad_() for n, c in caps.items()}
    dout = torch.randn((2, 4, 190, d), device="cuda", generator=gen).to(q.dtype)
    check_grads(f"{name} d={d}", getattr(mod, name), kir, q, k, v, caps, dout, of_captures=True)
