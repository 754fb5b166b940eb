"""A zero divisor the call cannot refuse (read from data, or in a `where` branch not taken)
gives 0 in the kernel as in the reference (kdsl::floordiv / floormod, common.cuh), not the
hardware's unspecified value: forward and backward against the float64 reference, row by row."""
import pytest

import kdsl
from kdsl import reference
from kdsl.testing import attention_inputs

from conftest import assert_rows_close
from exprgen import program
from gradcheck import check_grads

pytestmark = pytest.mark.gpu

MASKS = {  # name: (mask, declarations); every divisor below is 0 somewhere
    "batch_period": ("j <= i and i % per[b] == j % per[b]", ("per: i32[B]",)),
    "key_group": ("(i - j) // kg[b, j] <= 2 or j == 0", ("kg: i32[B, N]",)),
    "guarded_head": ("j <= i and where(h > 0, (i - j) // h, 0) < 64", ()),
}
# (B, H, Hkv, M, N, D)
SHAPES = [(2, 4, 4, 700, 900, 128), (3, 4, 2, 129, 513, 64)]


def _inputs(kir, shape, seed):
    import torch
    B, H, Hkv, M, N, D = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, N, D, generator=gen)
    if "per" in caps:  # a zero period in batch 0, small ones elsewhere
        caps["per"] = torch.randint(1, 9, (B,), device="cuda", generator=gen, dtype=torch.int32)
        caps["per"][0] = 0
    if "kg" in caps:  # a quarter of the keys' groups 0, the rest -3 .. 40
        kg = torch.randint(-3, 41, (B, N), device="cuda", generator=gen, dtype=torch.int32)
        caps["kg"] = torch.where(torch.rand((B, N), device="cuda", generator=gen) < 0.25, 0, kg).int()
    return q, k, v, caps, gen


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", list(MASKS))
def test_zero_divisors_give_zero_as_the_reference(name, shape):
    import torch
    mask, decls = MASKS[name]
    mod = kdsl.compile(program(None, mask, name, decls), f"{name}.kd")
    kir = mod.ir[name]
    q, k, v, caps, gen = _inputs(kir, shape, hash((name, shape)) % 2**31)
    got = getattr(mod, name)(q, k, v, **caps)
    ref, _ = reference.attention(kir, q, k, v, caps)
    assert_rows_close(got, ref, f"{name} {shape}")
    B, H, _, M, _, D = shape
    dout = torch.randn((B, H, M, D), device="cuda", generator=gen).to(q.dtype)
    check_grads(f"{name} {shape}", getattr(mod, name), kir, q, k, v, caps, dout)
