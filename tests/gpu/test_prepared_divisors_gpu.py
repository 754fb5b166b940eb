"""Integer // and % by a divisor of b, h and the sizes, prepared once an item, or of the query
position too, prepared per row (kdsl/divisor.cuh, passes/item_divisions.py divisors()): the
Hopper forward against the float64 reference row by row, with divisors of both signs, dividends
of both signs, widths from 1 to past N, and the plain division (KDSL_MAGIC_DIVISION=0) alike, and
tile()'s divisor prepared at each division with the constants' divisions signed (DEFINES "each"); the
backward's (its Hopper kernel prepares the item's too, since the seventy-seventh session) by its
gradients, both ways."""
import pytest

import kdsl
from kdsl import reference
from kdsl.testing import attention_inputs

from conftest import assert_rows_close
from exprgen import program
from gradcheck import check_grads

pytestmark = pytest.mark.gpu

PROGRAMS = {  # name: (score, mask, declarations)
    "head_stride": (None, "j <= i and (i - j) % (h + 2) == 0", ()),
    "signed_heads": (None, "j <= i and (i - j) % (2 * h - 7) != 1", ()),  # -7, -5, ..., 7
    "width_blocks": ("s + rel[h, (i + j) % W]", "abs(i // W - j // W) <= 2", ("rel: f32[H, W]",)),
    "guarded_head": (None, "j <= i and where(h > 0, (i - j) // h, 0) < 64", ()),
    "mixed_signs": ("s + 0.25 * float((i * 7 - j * 13) // (h - 9) % 5)", "j <= i + 300", ()),
    # a divisor of the query position, prepared per row (its elements share the preparation)
    "row_stride": (None, "j <= i and (i - j < 64 or j % (i // 300 + 1) == 0)", ()),
    "row_signed": ("s + 0.25 * float((j - 2 * i) // (i % 7 - 9) % 5)", "j <= i + 300", ()),
    "key_rows": ("s + 0.25 * float(i % (j // 3 + 1) % 4)", "j <= i and (i - j) % (j % 5 + 1) != 2", ()),
    # an item's divisor that tile() prepares once at its top (kdsl::tile_divisor)
    "group_dilation": (None, "j <= i and (i - j < 64 or (i - j) % (h // (H // Hkv) + 1) == 0)", ()),
    # constant divisors of dividends >= 0, divided unsigned, beside one of either sign
    "constant_blocks": ("s + 0.25 * float(i % 6 + j // 10 % 3 + (i - j) // 7 % 2)",
                        "(i // 3 + j // 5) % 7 != 0 and j <= i + 100", ()),
}
# KDSL_DEFINES of each variant: the default; the plain division; tile() and the constants' divisions as before
DEFINES = {"prepared": "", "plain": "KDSL_MAGIC_DIVISION=0",
           "each": "KDSL_TILE_DIVISORS=0 KDSL_UNSIGNED_DIVISION=0"}
# (B, H, Hkv, M, N, D, W)
SHAPES = [(2, 8, 8, 1000, 1000, 128, 37), (1, 8, 2, 129, 2000, 64, 1), (3, 8, 4, 513, 700, 96, 4096)]


def _inputs(kir, shape, seed):
    import torch
    B, H, Hkv, M, N, D, W = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, N, D, generator=gen)
    if "rel" in caps:  # the width W is rel's second dim
        caps["rel"] = torch.randn((H, W), device="cuda", generator=gen)
    return q, k, v, caps, gen


@pytest.mark.parametrize("magic", list(DEFINES))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_prepared_divisors_match_reference_row_by_row(name, shape, magic, monkeypatch):
    monkeypatch.setenv("KDSL_DEFINES", DEFINES[magic])
    score, mask, decls = PROGRAMS[name]
    mod = kdsl.compile(program(score, mask, name, decls), f"{name}.kd")
    kir = mod.ir[name]
    q, k, v, caps, _ = _inputs(kir, shape, hash((name, shape)) % 2**31)
    got = getattr(mod, name)(q, k, v, **caps)
    ref, _ = reference.attention(kir, q, k, v, caps)
    assert_rows_close(got, ref, f"{name} {shape} magic={magic}")


@pytest.mark.parametrize("magic", list(DEFINES))
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_prepared_divisors_backward(name, magic, monkeypatch):
    import torch
    monkeypatch.setenv("KDSL_DEFINES", DEFINES[magic])
    score, mask, decls = PROGRAMS[name]
    mod = kdsl.compile(program(score, mask, name, decls), f"{name}.kd")
    kir = mod.ir[name]
    shape = (2, 8, 4, 600, 700, 128, 29)
    q, k, v, caps, gen = _inputs(kir, shape, 7)
    dout = torch.randn((2, 8, 600, 128), device="cuda", generator=gen).to(q.dtype)
    check_grads(f"{name} {shape} magic={magic}", getattr(mod, name), kir, q, k, v, caps, dout)
