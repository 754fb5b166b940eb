"""The attention variants beyond samples/ (bench/variants.kd) on the GPU against the float64
reference of the same program, over awkward shapes: lengths 1 and tile +- 1, ragged, M != N,
GQA where the program allows it, both head dims."""
import pytest

import kdsl
from kdsl import reference
from kdsl.testing import ATTENTION_TOL, attention_inputs, rel_frobenius

from conftest import ROOT

pytestmark = pytest.mark.gpu

VARIANTS = kdsl.load(ROOT / "bench" / "variants.kd")
# (B, H, Hkv, M, N, D)
SHAPES = [(1, 2, 2, 1, 1, 64), (2, 4, 2, 127, 129, 128), (1, 4, 4, 129, 2000, 64), (2, 8, 4, 1000, 700, 128),
          (1, 2, 1, 4500, 4500, 128)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", list(VARIANTS.kernels))
def test_variant_matches_reference(name, shape):
    torch = pytest.importorskip("torch")
    kir = VARIANTS.ir[name]
    B, H, Hkv, M, N, D = shape
    if "Hkv" not in kir.dims:
        Hkv = H
    gen = torch.Generator(device="cuda").manual_seed(hash((name, shape)) % 2**31)
    q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, N, D, generator=gen)
    # Lengths drawn over the whole range, not the default small document ids.
    for cap in ("prefix", "kv_len"):
        if cap in caps:
            caps[cap] = torch.randint(0, N + 1, caps[cap].shape, device="cuda", generator=gen, dtype=torch.int32)
    out = torch.full_like(q, float("nan"))
    getattr(VARIANTS, name)(q, k, v, out=out, **caps)
    ref, _ = reference.attention(kir, q, k, v, caps)
    err = rel_frobenius(out, ref)
    assert err <= ATTENTION_TOL, f"{name} {shape}: rel err {err:.3e}"
