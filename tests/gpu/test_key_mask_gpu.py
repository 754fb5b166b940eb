"""The key mask (passes/key_mask.py, attr key_mask, the default where it applies): a mask's
part gathered per key is voted once per key of a partial tile into bits. Against the float64
reference at ragged, GQA, decode (split-KV, one warpgroup) and long shapes, with the bits and
without, on flags drawn dense and sparse (every tile partial, or a few keys in most tiles)."""
import pytest

import kdsl
from kdsl import reference
from kdsl.check import ATTENTION_TOL
from kdsl.testing import attention_inputs, rel_frobenius

from exprgen import program
from gpu.test_offset_table_gpu import SHAPES

pytestmark = pytest.mark.gpu

MASKS = {
    "flag": "flag[b, j]",
    "flag_or_window": "flag[b, j] or abs(i - j) < 300",
    "not_flag_causal": "not flag[b, j] and j <= i",
    "typed_keys": "kind[b, h // (H // Hkv), j] > 2 and j <= i",
    "flag_or_row": "flag[b, j] or rows[b, i] != 0 and j <= i",  # the arm beside the bit loads
    "bottom_right_padded": "j <= i + (N - M) and flag[b, j]",
    "two_gathers": "(flag[b, j] and kind[b, h // (H // Hkv), j] > 0) or abs(i - j) < 64",
    "flag_or_stride": "flag[b, j] or (i - j) % 7 == 0",  # an arm that is no key interval: per element
    "dilated_causal": "j <= i and (i - j < 128 or j % 4 == 0)",  # a division of the key; both arms intervals
    "valid_pairs": "flag[b, j] and rows[b, i] != 0 or j == i",  # both arms intervals, one reading data
}


def _module(name, mask):
    decls = ("flag: bool[B, N]", "kind: i32[B, Hkv, N]", "rows: i32[B, M]")
    return kdsl.compile(program(None, mask, name, decls), f"{name}.kd")


@pytest.mark.parametrize("density", [0.5, 0.02])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", list(MASKS))
def test_key_masks_match_reference(name, shape, density):
    torch = pytest.importorskip("torch")
    mod = _module(name, MASKS[name])
    k_ir = mod.ir[name]
    B, H, Hkv, M, N, D = shape
    gen = torch.Generator(device="cuda").manual_seed(hash((name, shape, density)) % 2**31)
    q, k, v, caps = attention_inputs(k_ir, B, H, Hkv, M, N, D, generator=gen)
    # flags at the density asked for, unsorted (attention_inputs sorts them on odd seeds)
    caps["flag"] = torch.rand(B, N, device="cuda", generator=gen) < density
    caps["kind"] = torch.randint(0, 4 if density > 0.1 else 40, (B, Hkv, N), device="cuda", generator=gen,
                                 dtype=torch.int32)
    caps["rows"] = torch.randint(0, 2, (B, M), device="cuda", generator=gen, dtype=torch.int32)
    ref, _ = reference.attention(k_ir, q, k, v, caps, None)
    for bits in (1, 0):
        kern = getattr(mod, name).with_attrs(key_mask=bits)
        got = kern(q, k, v, **caps)
        err = rel_frobenius(got, ref)
        assert err <= ATTENTION_TOL, f"{name} {shape} key_mask={bits}: rel err {err:.3e}"



# the tiles that are not whole vote words: 112 keys (head dim 192's default), 80 (256's), 96
@pytest.mark.parametrize("d, tile", [(192, 112), (256, 80), (128, 96)])
@pytest.mark.parametrize("name", ["flag_or_window", "not_flag_causal", "valid_pairs", "flag_or_stride"])
def test_key_masks_on_the_wide_head_dims_tiles(name, d, tile):
    torch = pytest.importorskip("torch")
    mod = _module(name, MASKS[name])
    k_ir = mod.ir[name]
    B, H, Hkv, M, N = 1, 4, 2, 300, 1000
    gen = torch.Generator(device="cuda").manual_seed(hash((name, d, tile)) % 2**31)
    q, k, v, caps = attention_inputs(k_ir, B, H, Hkv, M, N, d, generator=gen)
    caps["flag"] = torch.rand(B, N, device="cuda", generator=gen) < 0.3
    caps["rows"] = torch.randint(0, 2, (B, M), device="cuda", generator=gen, dtype=torch.int32)
    ref, _ = reference.attention(k_ir, q, k, v, caps, None)
    kern = getattr(mod, name).with_attrs(key_mask=1, tile_n=tile)
    err = rel_frobenius(kern(q, k, v, **caps), ref)
    assert err <= ATTENTION_TOL, f"{name} D={d} tile {tile}: rel err {err:.3e}"
