"""The backward kernel (attention_bwd.cuh) under torch autograd against float64 autograd of
the reference (kdsl/reference.py, which evaluates the program's own score and mask): every
attention program of samples/ and bench/variants.kd over awkward shapes (length 1, tile +- 1,
M != N, GQA, v's head dim other than q's), and the gradient of a declared lse output."""
import pytest

import kdsl
from kdsl import ir, reference
from kdsl.testing import attention_inputs

from conftest import ROOT, SAMPLES

pytestmark = pytest.mark.gpu

# q, k and v are bf16 and the kernel rounds P and dS to bf16 for its products (as
# FlashAttention's backward does): relative Frobenius error of each gradient.
GRAD_TOL = 2e-2

# (B, H, Hkv, M, N, D, Dv)
SHAPES = [(1, 2, 2, 1, 1, 64, 64), (2, 4, 2, 127, 129, 128, 128), (1, 4, 4, 200, 333, 64, 64),
          (1, 2, 1, 700, 1000, 256, 256), (1, 4, 2, 257, 300, 192, 128), (2, 2, 2, 65, 64, 32, 32)]


def _modules():
    return {p: kdsl.load(p) for p in [*SAMPLES, ROOT / "bench" / "variants.kd"]}


MODULES = _modules()
CASES = [(p, name) for p, mod in MODULES.items() for name in mod.kernels if mod.ir[name].kind == "attention"]


def grads(fn, q, k, v, dout, dlse=None):
    """(out, dq, dk, dv) of sum(out * dout) [+ sum(lse * dlse)] by autograd through fn."""
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    res = fn(q, k, v)
    out, lse = res if isinstance(res, tuple) else (res, None)
    loss = (out.double() * dout.double()).sum()
    if dlse is not None:
        loss = loss + (lse.double().nan_to_num(neginf=0.0) * dlse.double()).sum()
    loss.backward()
    return out, q.grad, k.grad, v.grad


def _fit(kir, shape):
    """The shape as the program allows it: one head count where k/v share q's, head dims the
    program fixes as written, v's own head dim only where it declares one."""
    B, H, Hkv, M, N, D, Dv = shape
    dq, dv = kir.tensor("q").shape[3], kir.tensor("v").shape[3]
    Hkv = Hkv if kir.tensor("k").shape[1] != kir.tensor("q").shape[1] else H
    D = dq.value if isinstance(dq, ir.Const) else D
    Dv = dv.value if isinstance(dv, ir.Const) else (D if dv == dq else Dv)
    return B, H, Hkv, M, N, D, Dv


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].stem}.{c[1]}")
def test_backward_matches_reference(case, shape):
    torch = pytest.importorskip("torch")
    path, name = case
    mod, kir = MODULES[path], MODULES[path].ir[name]
    B, H, Hkv, M, N, D, Dv = _fit(kir, shape)
    gen = torch.Generator(device="cuda").manual_seed(hash((name, shape)) % 2**31)
    q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, N, D, generator=gen, Dv=Dv)
    dout = torch.randn((B, H, M, Dv), device="cuda", generator=gen).to(q.dtype)
    kern = getattr(mod, name)
    _, *got = grads(lambda q, k, v: kern(q, k, v, **caps), q, k, v, dout)
    _, *want = grads(lambda q, k, v: reference.attention(kir, q, k, v, caps)[0], q, k, v, dout)
    for n, g, w, other in zip(("dq", "dk", "dv"), got, want, (k, q, None)):
        assert g.dtype == q.dtype and g.shape == w.shape
        err = float((g.double() - w.double()).pow(2).sum().sqrt())
        if N == 1 and other is not None:
            # One key: its softmax is constant, so the true gradients of q and k are zeros; what
            # a kernel leaves is the forward's bf16 rounding of P and O (2^-8 relative each)
            bound = 2 ** -7 * _natural_norm(g, dout, v, other, D, Dv)
            assert err <= bound, f"{name} {shape}: {n} = {err:.3e}, above the rounding bound {bound:.3e}"
            continue
        den = float(w.double().pow(2).sum().sqrt())
        rel = err / den if den > 0 else err  # every key masked: the gradients are zeros
        assert rel <= GRAD_TOL, f"{name} {shape}: {n} rel err {rel:.3e}"


def _natural_norm(g, dout, v, other, D, Dv) -> float:
    """The norm a gradient of q or k has when each dS element is one unit of dP (rms(dO) rms(v)
    sqrt(Dv)) times the scale and a row of the other operand."""
    scale = 1.0 / (D ** 0.5)
    rms = lambda x: float(x.double().pow(2).mean().sqrt())  # noqa: E731
    return scale * rms(dout) * rms(v) * Dv ** 0.5 * rms(other) * D ** 0.5 * g.numel() ** 0.5
