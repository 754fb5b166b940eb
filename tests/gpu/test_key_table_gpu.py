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
