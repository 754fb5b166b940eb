"""Unions of two key intervals (passes/kv_bounds.py): a mask such as Longformer's `abs(i - j) <=
W or j < G or i < G` keeps one interval per row on the partial tiles where one side holds
nowhere, and checks the others per element. Forward and backward against the float64 reference
at ragged, GQA, decode (split-KV) and head-dim-96 shapes, every row compared (a tile that kept
the keys between the two intervals would be wrong in a few rows only)."""
import pytest

import kdsl
from kdsl import reference
from kdsl.testing import attention_inputs

from conftest import assert_rows_close, lowered
from exprgen import program
from gradcheck import check_grads

pytestmark = pytest.mark.gpu

MASKS = {
    "longformer": "abs(i - j) <= 200 or j < 40 or i < 24",
    "outside_window": "abs(i - j) >= 70",
    "opposite_rays": "j < 10 or j > i + 5",
    "global_ends": "i < 8 or abs(i - j) <= 100 or j >= N - 16",
    "per_batch_globals": "abs(i - j) <= 150 or j < ng[b]",
    "causal_longformer": "j <= i and (i - j <= 130 or j < 17)",
}
# (B, H, Hkv, M, N, D)
SHAPES = [(2, 4, 4, 256, 256, 64), (1, 4, 2, 129, 1000, 128), (2, 2, 1, 700, 513, 96), (1, 8, 2, 1, 4096, 128),
          (1, 2, 2, 1000, 1000, 64)]


def _module(name, mask, monkeypatch, unions):
    monkeypatch.setenv("KDSL_KEY_UNIONS", str(unions))
    src = program(None, mask, name, ("ng: i32[B]",) if "ng[" in mask else ())
    if unions:
        assert lowered(src, 128).attr("kv_bounds") == "interval where the rest holds"
    return kdsl.compile(src, f"{name}.kd")


def _inputs(kir, shape, seed):
    import torch
    B, H, Hkv, M, N, D = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, N, D, generator=gen)
    if "ng" in caps:  # global tokens per sequence: none, some, past the end
        caps["ng"] = torch.tensor([0, 37, N + 3, 5][:B], dtype=torch.int32, device="cuda")
    return q, k, v, caps, gen


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", list(MASKS))
@pytest.mark.parametrize("unions", [1, 0])
def test_unions_of_key_intervals_match_reference_row_by_row(name, shape, unions, monkeypatch):
    mod = _module(name, MASKS[name], monkeypatch, unions)
    kir = mod.ir[name]
    q, k, v, caps, _ = _inputs(kir, shape, hash((name, shape, unions)) % 2**31)
    got = getattr(mod, name)(q, k, v, **caps)
    ref, _ = reference.attention(kir, q, k, v, caps)
    assert_rows_close(got, ref, f"{name} {shape}")


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("name", ["longformer", "per_batch_globals", "outside_window"])
def test_unions_of_key_intervals_backward(name, d, monkeypatch):
    """The backward solves the bounds again on its own key tiles (64 or 128 keys)."""
    import torch
    mod = _module(name, MASKS[name], monkeypatch, 1)
    kir = mod.ir[name]
    shape = (2, 4, 2, 600, 700, d)
    q, k, v, caps, gen = _inputs(kir, shape, d)
    dout = torch.randn((2, 4, 600, d), device="cuda", generator=gen).to(q.dtype)
    check_grads(f"{name} {shape}", getattr(mod, name), kir, q, k, v, caps, dout)
