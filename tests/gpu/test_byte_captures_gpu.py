"""1-byte captured tensors (bool masks, u8 ids, i8 tables; tests/test_byte_captures.py has the
programs) on the GPU, judged as `kdsl check` judges: forward at awkward shapes, including long
keys with few items (the split-KV program) and GQA-free ragged tiles, and gradients."""
import pytest

import kdsl
from kdsl.check import check_attention, check_gradients

from test_byte_captures import MASKS

pytestmark = pytest.mark.gpu

# (B, H, Hkv, M, N, D)
SHAPES = [(1, 2, 2, 1, 1, 64), (2, 4, 4, 127, 129, 128), (1, 4, 4, 129, 2000, 64), (2, 2, 2, 64, 5000, 128),
          (1, 2, 2, 1000, 1000, 192), (2, 8, 8, 1, 3000, 128)]
MODULE = kdsl.compile(MASKS, "masks.kd")


@pytest.mark.parametrize("name", ["bool_mask", "byte_ids"])
def test_byte_captures_match_the_reference(name):
    pytest.importorskip("torch")
    results = check_attention(MODULE.ir[name], getattr(MODULE, name), 2, 23, SHAPES)
    assert all(r.passed for r in results), [(r.shape, r.error, r.problems) for r in results if not r.passed]


@pytest.mark.parametrize("name", ["bool_mask", "byte_ids"])
def test_byte_captures_gradients_match_the_reference(name):
    pytest.importorskip("torch")
    results = check_gradients(MODULE.ir[name], getattr(MODULE, name), 1, 29, SHAPES[1:4])
    assert all(r.passed for r in results), [(r.shape, r.error, r.problems) for r in results if not r.passed]
