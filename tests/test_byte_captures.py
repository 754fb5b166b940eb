"""Captured tensors of 1-byte element types: bool (a dense mask, as torch's boolean attn_mask),
i8 and u8 (small ids and tables). A load of a bool tensor is a condition, of i8 / u8 an int.
CPU only: the interpreter against the float64 reference, the front end's messages, the
argument checks, and the Hopper build (tests/gpu/test_variants_gpu.py runs them on a GPU)."""
from __future__ import annotations

import numpy as np
import pytest

import kdsl
from kdsl.backends import Numpy
from kdsl.cases import AttentionCase, attention_inputs
from kdsl.check import check_attention
from kdsl.errors import LaunchError, SourceError
from kdsl.grammar import parse
from kdsl.passes import pipeline
from kdsl.runtime.compiler import build
from kdsl.sass import find_cuobjdump, inspect

MASKS = """
attention bool_mask {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    keep: bool[B, M, N]
    boost: bool[H]
    score(s, b, h, i, j) = s + 0.5 * float(keep[b, i, j]) + float(int(boost[h]))
    mask(b, h, i, j) = where(boost[h], keep[b, i, j], j <= i) or not keep[b, i, 0]
}
attention byte_ids {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    seg_q: u8[B, M]; seg_k: u8[B, N]
    shift: i8[H]
    score(s, b, h, i, j) = s + 0.1 * float(shift[h])
    mask(b, h, i, j) = seg_q[b, i] == seg_k[b, j] and j <= i
}
"""
SHAPES = [(1, 2, 2, 1, 1, 64), (2, 2, 2, 67, 131, 64), (1, 3, 3, 129, 127, 32)]


def _module():
    return kdsl.compile(MASKS, "masks.kd", interpret=True)


@pytest.mark.parametrize("name", ["bool_mask", "byte_ids"])
def test_byte_captures_match_the_reference_on_the_interpreter(name):
    mod = _module()
    results = check_attention(mod.ir[name], getattr(mod, name), 2, 11, SHAPES, Numpy())
    assert all(r.passed for r in results), [(r.shape, r.error, r.problems) for r in results]


def test_a_kernel_that_reads_the_bool_mask_wrongly_fails_the_judge():
    """The judge can fail: a candidate that keeps the keys the tensor drops (keep inverted)."""
    mod = _module()

    def inverted(q, k, v, keep, boost, **kw):
        return mod.bool_mask(q, k, v, ~keep, boost, **kw)
    results = check_attention(mod.ir["bool_mask"], inverted, 1, 11, SHAPES[1:], Numpy())
    assert not any(r.passed for r in results)


def test_inputs_of_byte_types_hold_their_values():
    """Draws for u8 ids and i8 values stay inside the type (no wraparound), bools both ways."""
    mod = _module()
    case = AttentionCase(2, 2, 2, 300, 300, 64, seed=5)
    _, _, _, caps = attention_inputs(mod.ir["byte_ids"], case, Numpy())
    assert caps["seg_q"].dtype == np.uint8 and caps["shift"].dtype == np.int8
    assert caps["shift"].min() >= 0 and np.all(np.diff(caps["seg_q"].astype(int), axis=-1) >= 0)
    _, _, _, caps = attention_inputs(mod.ir["bool_mask"], case, Numpy())
    assert caps["keep"].dtype == np.bool_ and 0.3 < caps["keep"].mean() < 0.7


def test_a_mask_tensor_of_another_type_is_refused_by_name():
    mod = _module()
    q = np.random.default_rng(0).standard_normal((1, 2, 8, 64)).astype(np.float32)
    with pytest.raises(LaunchError, match="argument 'keep' must be bool, got int32"):
        mod.bool_mask(q, q, q, np.ones((1, 8, 8), np.int32), np.ones(2, bool))
    with pytest.raises(LaunchError, match="argument 'seg_q' must be uint8"):
        mod.byte_ids(q, q, q, np.zeros((1, 8), np.int32), np.zeros((1, 8), np.uint8), np.zeros(2, np.int8))


@pytest.mark.parametrize("mask, message", [
    ("keep[b, i, j] + 1 > 0", "cannot add bool and integer: a bool is not a number"),
    ("j < 1 + int(keep[b, i, j]) + keep[b, j, i]", "cannot add int and bool: convert explicitly"),
    ("(i < j) == 0", "cannot compare bool and integer"),
    ("keep[b, i, j] < keep[b, j, i]", "cannot order bools"),
])
def test_bool_loads_in_arithmetic_get_located_messages(mask, message):
    src = ("attention t {\n    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]\n"
           f"    keep: bool[B, M, N]\n    mask(b, h, i, j) = {mask}\n}}\n")
    with pytest.raises(SourceError, match=message) as e:
        kdsl.compile(src, "t.kd", interpret=True)
    assert "t.kd:4:" in str(e.value) and "^" in str(e.value)


def test_byte_captures_build_for_hopper_from_byte_pointers_without_local_memory():
    assert find_cuobjdump(), "cuobjdump is needed for the SASS check: pip install 'kdsl[sass]'"
    for k in pipeline.check(parse(MASKS, "masks.kd")):
        built = build(k, "sm_90a", 128)
        rep = inspect(built.compiled.cubin, built.generated.entry)
        assert rep.local_bytes == 0 and rep.tensor_ops.get("HGMMA", 0) > 0, rep
        assert "const bool* cap_keep" in built.generated.source or k.name != "bool_mask"
        assert "const unsigned char* cap_seg_q" in built.generated.source or k.name != "byte_ids"


def test_a_wrong_dtype_names_the_conversion():
    """torch's default integer type is int64: the refusal says how to convert (it had printed
    'got int64', not 'got torch.int64', and no conversion)."""
    torch = pytest.importorskip("torch")
    mod = _module()
    q = torch.randn(1, 2, 8, 64).to(torch.bfloat16)
    ids = torch.zeros(1, 8, dtype=torch.int64)
    with pytest.raises(LaunchError) as e:
        mod.byte_ids(q, q, q, ids, ids.to(torch.uint8), torch.zeros(2, dtype=torch.int8))
    assert str(e.value).endswith("argument 'seg_q' must be torch.uint8, got torch.int64; convert with "
                                 "seg_q.to(torch.uint8)"), str(e.value)
    with pytest.raises(LaunchError, match=r"must be uint8, got int32; convert with seg_q.astype\(numpy.uint8\)"):
        mod.byte_ids(q.float().numpy(), q.float().numpy(), q.float().numpy(), ids.int().numpy(),
                     ids.numpy().astype("uint8"), np.zeros(2, np.int8))
