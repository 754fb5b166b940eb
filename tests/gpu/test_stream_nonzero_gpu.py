"""Warps that test their rows of a streamed byte mask (passes/stream_mask.py, attention_wgmma.cuh
kNonzeroCheck): where a warp's 16 rows hold no zero byte on a tile where the rest of the mask
holds, the warp runs the tile as a full one. Against the float64 reference row by row, and
bit for bit against the same program built without the check: the two paths must give the same
output. The check is opt-in (KDSL_STREAM_NONZERO=1 when the program is lowered) and serves
per-head masks with no tile summary (KDSL_TILE_SUMMARY_HEADS=0). Masks laid out in runs (a run of zeros, then nonzero: whole
warps and tiles of each), with rows all zero, random, and all nonzero; ragged, GQA and decode
shapes; the mask in the first ring or beside a streamed bias in the second."""
import pytest

import kdsl
from kdsl import reference
from kdsl.testing import attention_inputs

from conftest import assert_rows_close, lowered
from exprgen import program

pytestmark = pytest.mark.gpu

MASKS = {  # name: (score, mask, declarations)
    "head_u8_causal": (None, "j <= i + N - M and sel[b, h, i, j] > 0", ("sel: u8[B, H, M, N]",)),
    "head_bool": (None, "keep[b, h, i, j]", ("keep: bool[B, H, M, N]",)),
    "head_i8_window": (None, "sel[b, h, i, j] != 0 and abs(i - j) <= 300", ("sel: i8[B, H, M, N]",)),
    "bias_and_mask": ("s + bias[b, h, i, j]", "keep[b, h, i, j]",
                      ("bias: bf16[B, H, M, N]", "keep: bool[B, H, M, N]")),
}
# (B, H, Hkv, M, N, D)
SHAPES = [(2, 4, 4, 256, 256, 128), (1, 4, 2, 1000, 768, 128), (2, 2, 1, 700, 512, 64), (1, 8, 2, 1, 2048, 128),
          (1, 2, 2, 129, 1024, 64)]
LAYOUTS = ["runs", "zero_rows", "random", "nonzero"]


def _module(name, monkeypatch, check: bool):
    """The program, lowered (at its first call) with the warps' test on or off."""
    monkeypatch.setenv("KDSL_STREAM_NONZERO", "1" if check else "0")
    monkeypatch.setenv("KDSL_TILE_SUMMARY_HEADS", "0")  # the masks it serves: per head, no summary
    score, mask, decls = MASKS[name]
    src = program(score, mask, name, decls)
    # (bias_and_mask at 128: a 64-key tile, no check)
    assert (lowered(src, 64).func("stream_rest_full") is not None) == check
    return kdsl.compile(src, f"{name}.kd")


def _mask(shape, dtype, layout, gen):
    """The mask tensor: runs of zeros then ones along each row (a run's length per row), some
    rows all zero, random bytes, or no zero at all."""
    import torch
    B, H, M, N = shape
    if layout == "runs":
        start = torch.randint(0, N + 1, (B, H, M, 1), device="cuda", generator=gen)
        start = start // 128 * 128 if torch.rand((), generator=gen, device="cuda") < 0.5 else start
        keep = torch.arange(N, device="cuda") >= start
    elif layout == "zero_rows":
        keep = (torch.rand((B, H, M, 1), device="cuda", generator=gen) < 0.7).expand(B, H, M, N)
    elif layout == "random":
        keep = torch.rand(shape, device="cuda", generator=gen) < 0.5
    else:
        keep = torch.ones(shape, dtype=torch.bool, device="cuda")
    if dtype == torch.bool:
        return keep.contiguous()
    values = torch.randint(1, 100, shape, device="cuda", generator=gen).to(dtype)
    return torch.where(keep, values, torch.zeros_like(values)).contiguous()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", list(MASKS))
def test_warps_testing_their_rows_match_reference_and_the_unchecked_kernel(name, shape, layout, monkeypatch):
    import torch
    mod = _module(name, monkeypatch, True)
    kir = mod.ir[name]
    B, H, Hkv, M, N, D = shape
    gen = torch.Generator(device="cuda").manual_seed(hash((name, shape, layout)) % 2**31)
    q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, N, D, generator=gen)
    key = "sel" if "sel" in caps else "keep"
    caps[key] = _mask((B, H, M, N), caps[key].dtype, layout, gen)
    got = getattr(mod, name)(q, k, v, **caps)
    ref, _ = reference.attention(kir, q, k, v, caps)
    assert_rows_close(got, ref, f"{name} {shape} {layout}")
    unchecked = getattr(_module(name, monkeypatch, False), name)(q, k, v, **caps)
    assert torch.equal(got, unchecked), f"{name} {shape} {layout}: differs from the kernel without the check"
