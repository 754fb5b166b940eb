"""The backward's divisions shared among its elements (KDSL_SPECULATED_DIVISION in its programs:
floordiv / floormod through the magnitudes, divisor.cuh; a mask whose divisor divides evaluated
for every element, Variant::kMaskDivides) against the float64 reference's gradients, and the
per-element form (both switches off) beside them: floor division of negative dividends (keys
past the query both ways) by divisors of the k/v group, at GQA and ragged shapes."""
import pytest

import kdsl

from exprgen import program
from gradcheck import check_grads

pytestmark = pytest.mark.gpu

PROGRAMS = {  # name: mask
    # held-out 44's group_dilation, both ways: i - j of either sign modulo the group's dilation
    "group_dilation_both_ways": "abs(i - j) < 16 or (i - j) % (h // (H // Hkv) + 1) == 0",
    # floor quotients of negative differences by divisors that divide
    "floor_bands": "(j - i) // (h // (H // Hkv) + 2) <= 4 and (i - j) // (h % 3 + 1) <= 40",
}
SHAPES = [(2, 8, 2, 300, 517, 64), (1, 6, 3, 700, 300, 128), (2, 4, 4, 129, 1000, 96)]


@pytest.mark.parametrize("switches", ["", "KDSL_SPECULATED_DIVISION=0 KDSL_BWD_DIVIDING_FIRST=0"],
                         ids=["shared", "per-element"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_shared_divisions_give_the_reference_gradients(name, shape, switches, monkeypatch):
    import torch
    if switches:
        monkeypatch.setenv("KDSL_DEFINES", switches)
    mod = kdsl.compile(program(None, PROGRAMS[name], name), f"{name}.kd")
    kir = mod.ir[name]
    from kdsl.testing import attention_inputs
    gen = torch.Generator(device="cuda").manual_seed(hash((name, shape)) % 2**31)
    B, H, Hkv, M, N, D = shape
    q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, N, D, generator=gen)
    dout = torch.randn((B, H, M, D), device="cuda", generator=gen).to(q.dtype)
    check_grads(f"{name} {shape} {switches or 'shared'}", getattr(mod, name), kir, q, k, v, caps, dout)
