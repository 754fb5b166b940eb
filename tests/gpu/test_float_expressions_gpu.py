"""Float expressions at their edges on the GPU against the float64 reference: an index through
int() of a float function, proved in bounds without a lower clamp (runtime/bounds.py
float_interval), and min / max of a NaN, which yield the other operand in the kernel (fminf),
the interpreter and the reference alike."""
import pytest

import kdsl
from kdsl import reference
from kdsl.testing import ATTENTION_TOL, attention_inputs, rel_frobenius

pytestmark = pytest.mark.gpu

SRC = """
attention log_buckets {
    q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]
    tbl: f32[H, 32]
    score(s, b, h, i, j) = s + tbl[h, min(int(4.0 * log2(float(abs(i - j) + 1))), 31)]
}
attention nan_min {
    q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]
    score(s, b, h, i, j) = s + max(min(log(float(i - j) + 0.5), 2.0), -2.0)
}
"""
MOD = kdsl.compile(SRC, "edges.kd")


@pytest.mark.parametrize("shape", [(1, 2, 2, 1, 1, 64), (2, 4, 2, 129, 127, 128), (1, 4, 1, 700, 3000, 64)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", ["log_buckets", "nan_min"])
def test_float_edges_match_the_reference(name, shape):
    torch = pytest.importorskip("torch")
    kir = MOD.ir[name]
    gen = torch.Generator(device="cuda").manual_seed(hash((name, shape)) % 2**31)
    q, k, v, caps = attention_inputs(kir, *shape, generator=gen)
    out = torch.full_like(q, float("nan"))
    getattr(MOD, name)(q, k, v, out=out, **caps)
    ref, _ = reference.attention(kir, q, k, v, caps)
    assert torch.isfinite(ref).all()
    err = rel_frobenius(out, ref)
    assert err <= ATTENTION_TOL, f"{name} {shape}: rel err {err:.3e}"
