"""Tables of blocks read at a tile's corners (passes/mask_analysis.py, _corners): a block-sparse
mask per head skips the tiles its table empties and runs those it fills unchecked. Forward
(kernel and split-KV decode) and backward against the float64 reference, every row compared, at
ragged and GQA shapes, blocks as wide as a tile and narrower or wider (tiles across two blocks),
tables mostly empty, mostly full and mixed."""
import pytest

import kdsl
from kdsl import reference
from kdsl.testing import attention_inputs

from conftest import assert_rows_close, lowered
from exprgen import program
from gradcheck import check_grads

pytestmark = pytest.mark.gpu

MASKS = {  # name: (mask, the table's declaration)
    "blocks128": ("blocks[b, h, min(i // 128, 15), min(j // 128, 15)]", "blocks: bool[B, H, 16, 16]"),
    "blocks64_causal": ("j <= i and blocks[b, h, min(i // 64, 31), min(j // 64, 31)]", "blocks: bool[B, H, 32, 32]"),
    "blocks96_shared": ("blocks[b, 0, min(i // 96, 15), min(j // 96, 15)]", "blocks: bool[B, 1, 16, 16]"),
    "u8_kinds": ("kinds[h, min(i // 256, 7), min(j // 128, 15)] >= 2 or j == i", "kinds: u8[H, 8, 16]"),
}
# (B, H, Hkv, M, N, D)
SHAPES = [(2, 4, 4, 256, 256, 64), (1, 4, 2, 129, 1000, 128), (2, 2, 1, 700, 513, 96), (1, 8, 2, 1, 2000, 128),
          (1, 2, 2, 1000, 1000, 64)]


def _inputs(name, kir, shape, seed, density):
    import torch
    B, H, Hkv, M, N, D = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, N, D, generator=gen)
    if "blocks" in caps:
        caps["blocks"] = torch.rand(caps["blocks"].shape, device="cuda", generator=gen) < density
    else:
        caps["kinds"] = torch.randint(0, 4, caps["kinds"].shape, device="cuda", generator=gen).to(torch.uint8)
    return q, k, v, caps, gen


def _module(name):
    mask, decl = MASKS[name]
    src = program(None, mask, name, (decl,))
    assert lowered(src, 128).func("tile_empty").__class__.__name__ != "Const"  # the corners are read
    return kdsl.compile(src, f"{name}.kd")


@pytest.mark.parametrize("density", [0.1, 0.5, 0.95])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", list(MASKS))
def test_block_tables_match_reference_row_by_row(name, shape, density):
    mod = _module(name)
    kir = mod.ir[name]
    q, k, v, caps, _ = _inputs(name, kir, shape, hash((name, shape, density)) % 2**31, density)
    got = getattr(mod, name)(q, k, v, **caps)
    ref, _ = reference.attention(kir, q, k, v, caps)
    assert_rows_close(got, ref, f"{name} {shape}")


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("name", ["blocks128", "blocks64_causal", "u8_kinds"])
def test_block_tables_backward(name, d):
    """The backward reads the corners of its own tiles."""
    import torch
    mod = _module(name)
    kir = mod.ir[name]
    shape = (2, 4, 2, 600, 700, d)
    q, k, v, caps, gen = _inputs(name, kir, shape, d, 0.5)
    dout = torch.randn((2, 4, 600, d), device="cuda", generator=gen).to(q.dtype)
    check_grads(f"{name} {shape}", getattr(mod, name), kir, q, k, v, caps, dout)
