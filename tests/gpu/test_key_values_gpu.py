"""A mask's value gathered once a key of a partial tile and handed to its elements by shuffles
(passes/key_values.py, KDSL_KEY_VALUES=1) against the float64 reference row by row, beside the
per-element gathers (KDSL_KEY_VALUES=0): thresholds, buckets of a k/v head, unsorted document ids
and the value in arithmetic, at ragged shapes (the last tile's keys past N clamped) and head dims
64, 96 and 128, with a score that reads the same tensor as the mask. The backward's mirror (the
value gathered once a query of a step, KDSL_BWD_QUERY_VALUES=1; two values where the mask has
two, KDSL_BWD_QUERY_VALUES2) by its gradients, both ways."""
import pytest

import kdsl
from kdsl import reference
from kdsl.testing import attention_inputs

from conftest import assert_rows_close
from exprgen import program
from gradcheck import check_grads

pytestmark = pytest.mark.gpu

DECLS = ("ks: f32[B, H, N]", "thr: f32[B, H, M]", "bk: i32[B, Hkv, N]", "bq: i32[B, H, M]", "doc: i32[B, N]",
         "allow: bool[4, 4]")
PROGRAMS = {  # name: (score, mask)
    "row_threshold": (None, "ks[b, h, j] >= thr[b, h, i] or i == j"),
    "kv_head_buckets": (None, "j <= i and bq[b, h, i] == bk[b, h // (H // Hkv), j]"),
    "scattered_docs": (None, "doc[b, i] == doc[b, j]"),
    "value_arithmetic": ("s + 0.01 * ks[b, h, j]", "abs(ks[b, h, j] * 2.0 - float(i - j)) < 300.0 or i == j"),
    # the key's value inside a table's index (held-out 2's segment_rules, 5's class_table)
    "class_table": (None, "allow[bq[b, h, i] % 4, bk[b, h // (H // Hkv), j] % 4]"),
    # a band of key scores: thr inside thr + 150 (one value at the query); two values at the query
    # (KDSL_BWD_QUERY_VALUES2): a band's two bounds, two levels of ids
    "score_band": (None, "(ks[b, h, j] >= thr[b, h, i] and ks[b, h, j] <= thr[b, h, i] + 150.0) or i == j"),
    "band_two_bounds": (None, "(ks[b, h, j] >= thr[b, h, i] and ks[b, h, j] <= float(bq[b, h, i]) * 100.0) or i == j"),
    "two_levels": (None, "doc[b, i] == doc[b, j] and bq[b, h, i] == bk[b, h // (H // Hkv), j]"),
}
# (B, H, Hkv, M, N, D)
SHAPES = [(2, 8, 4, 1000, 1000, 128), (1, 4, 2, 129, 2003, 64), (2, 6, 3, 517, 700, 96)]


def _inputs(kir, shape, gen):
    """q, k, v and the captures: scattered ids (every tile partial), values on both sides of the
    thresholds; doc as long as the longer sequence (the mask reads it at both)."""
    import torch
    B, H, Hkv, M, N, D = shape
    q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, N, D, generator=gen)
    caps.update(doc=torch.randint(0, 4, (B, N), device="cuda", generator=gen, dtype=torch.int32),
                bk=torch.randint(0, 3, (B, Hkv, N), device="cuda", generator=gen, dtype=torch.int32),
                bq=torch.randint(0, 3, (B, H, M), device="cuda", generator=gen, dtype=torch.int32),
                ks=torch.randn((B, H, N), device="cuda", generator=gen) * 200,
                thr=torch.randn((B, H, M), device="cuda", generator=gen) * 200)
    return q, k, v, caps


@pytest.mark.parametrize("on", ["1", "0", "1 KDSL_KEY_VALUES_RANGE=0"],
                         ids=["values", "gathers", "values-per-key-bound"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_key_values_match_reference_row_by_row(name, shape, on, monkeypatch):
    """values-per-key-bound: KDSL_KEY_VALUES_RANGE=0 (keys past N dropped per element, not once a
    ragged tile: the A/B of the default)."""
    import torch
    monkeypatch.setenv("KDSL_DEFINES", f"KDSL_KEY_VALUES={on}")
    mod = kdsl.compile(program(*PROGRAMS[name], name, DECLS), f"{name}.kd")
    kir = mod.ir[name]
    gen = torch.Generator(device="cuda").manual_seed(hash((name, shape)) % 2**31)
    q, k, v, caps = _inputs(kir, shape, gen)
    got = getattr(mod, name)(q, k, v, **caps)
    ref, _ = reference.attention(kir, q, k, v, caps)
    assert_rows_close(got, ref, f"{name} {shape} key values={on}")


@pytest.mark.parametrize("on", [1, 0], ids=["values", "gathers"])
@pytest.mark.parametrize("shape", SHAPES[:2] + [(1, 4, 2, 300, 517, 256)],  # D=256: the wide backward
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_query_values_give_the_reference_gradients(name, shape, on, monkeypatch):
    import torch
    monkeypatch.setenv("KDSL_DEFINES", f"KDSL_BWD_QUERY_VALUES={on}")
    mod = kdsl.compile(program(*PROGRAMS[name], name, DECLS), f"{name}.kd")
    kir = mod.ir[name]
    gen = torch.Generator(device="cuda").manual_seed(hash((name, shape, "bwd")) % 2**31)
    q, k, v, caps = _inputs(kir, shape, gen)
    B, H, _, M, _, D = shape
    dout = torch.randn((B, H, M, D), device="cuda", generator=gen).to(q.dtype)
    check_grads(f"{name} {shape} query values={on}", getattr(mod, name), kir, q, k, v, caps, dout)
