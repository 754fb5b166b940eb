"""Masks that compare floats (passes/float_bounds.py) skip the tiles their bounds empty and run
unchecked those they fill: forward and backward against the float64 reference, every row, with
ratios and widths from ordinary to NaN, +-inf, huge and subnormal (no tile may be decided where
an element could be NaN)."""
import pytest

import kdsl
from kdsl import reference
from kdsl.testing import attention_inputs

from conftest import assert_rows_close, lowered
from exprgen import program
from gradcheck import check_grads

pytestmark = pytest.mark.gpu

MASKS = {  # name: (mask, declarations)
    "ratio_line": ("float(j) <= float(i) * ratio[h] + 1.0", ("ratio: f32[H]",)),
    "float_radius": ("abs(float(i - j)) * ratio[h] < width[b]", ("ratio: f32[H]", "width: f32[B]")),
    "scaled_causal": ("float(j) * 0.5 - 2.0 <= min(float(i) * 0.5, width[b])", ("width: f32[B]",)),
    "decay_cutoff": ("j <= i and exp(-float(i - j) * abs(ratio[h]) * 0.05) > 0.3", ("ratio: f32[H]",)),
    "log_window": ("log2(float(abs(i - j) + 1)) <= 6.5 or float(j) < width[b] * 0.01", ("width: f32[B]",)),
    "timestamps": ("tk[b, j] <= tq[b, i] and tq[b, i] - tk[b, j] < 40.0", ("tq: f32[B, M]", "tk: bf16[B, N]")),
}
# No key lies exactly on a line or radius (abs(float(i - j)) * -0.2 < -1.0 at |i - j| = 5 rounds
# one way in f32, the other in float64: docs/language.md)
RATIOS = [0.1, -0.25, float("nan"), float("inf"), float("-inf"), 3.0e38, 1e-40, 0.75]
WIDTHS = [300.0, float("nan"), 4000.0, -1.3]
# (B, H, Hkv, M, N, D)
SHAPES = [(2, 8, 8, 1000, 1000, 128), (1, 8, 2, 129, 2000, 64), (4, 8, 4, 513, 700, 96)]


def _inputs(kir, shape, seed):
    import torch
    B, H, Hkv, M, N, D = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, N, D, generator=gen)
    if "ratio" in caps:
        caps["ratio"] = torch.tensor(RATIOS[:H], device="cuda", dtype=torch.float32)
    if "width" in caps:
        caps["width"] = torch.tensor((WIDTHS * B)[:B], device="cuda", dtype=torch.float32)
    if "tq" in caps:  # times in order, a quarter of a unit apart on average (keys shuffled in batch 1,
        # a NaN and an inf among them in the last batch); bf16 keys are whole quarters (no ties lost)
        for name, n in (("tq", M), ("tk", N)):
            gaps = torch.randint(0, 3, (B, n), device="cuda", generator=gen).float() * 0.25
            caps[name] = gaps.cumsum(1).to(caps[name].dtype)
        if B > 1:
            caps["tk"][1] = caps["tk"][1][torch.randperm(N, device="cuda", generator=gen)]
        caps["tk"][B - 1, N // 3] = float("nan")
        caps["tq"][B - 1, M // 2] = float("inf")
    return q, k, v, caps, gen


def _module(name):
    mask, decls = MASKS[name]
    src = program(None, mask, name, decls)
    assert lowered(src, 128).func("tile_empty").__class__.__name__ != "Const"  # bounded
    return kdsl.compile(src, f"{name}.kd")


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", list(MASKS))
def test_float_masks_match_reference_row_by_row(name, shape):
    mod = _module(name)
    kir = mod.ir[name]
    q, k, v, caps, _ = _inputs(kir, shape, hash((name, shape)) % 2**31)
    got = getattr(mod, name)(q, k, v, **caps)
    ref, _ = reference.attention(kir, q, k, v, caps)
    assert_rows_close(got, ref, f"{name} {shape}")


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("name", list(MASKS))
def test_float_masks_backward(name, d):
    import torch
    mod = _module(name)
    kir = mod.ir[name]
    shape = (2, 8, 4, 600, 700, d)
    q, k, v, caps, gen = _inputs(kir, shape, d)
    dout = torch.randn((2, 8, 600, d), device="cuda", generator=gen).to(q.dtype)
    check_grads(f"{name} {shape}", getattr(mod, name), kir, q, k, v, caps, dout)
