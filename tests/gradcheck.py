"""Gradients of attention calls by autograd, and the comparison the backward tests make: the
kernel's (GPU or interpreter) against float64 autograd of the reference (kdsl/reference.py,
which evaluates the program's own score and mask)."""
from kdsl import ir, reference

# q, k and v are bf16 and the kernel rounds P and dS to bf16 for its products (as
# FlashAttention's backward does): relative Frobenius error of each gradient.
GRAD_TOL = 2e-2


def grads(fn, q, k, v, dout, dlse=None):
    """(out, dq, dk, dv) of sum(out * dout) [+ sum(lse * dlse)] by autograd through fn."""
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    res = fn(q, k, v)
    out, lse = res if isinstance(res, tuple) else (res, None)
    loss = (out.double() * dout.double()).sum()
    if dlse is not None:
        loss = loss + (lse.double().nan_to_num(neginf=0.0) * dlse.double()).sum()
    loss.backward()
    # None: the loss does not depend on it (a score that ignores s); zeros are its gradient
    return (out, *(x.grad if x.grad is not None else x.detach() * 0 for x in (q, k, v)))


def fit(kir: ir.Kernel, shape):
    """The shape (B, H, Hkv, M, N, D, Dv) as the program allows it: one head count where k/v
    share q's, head dims the program fixes as written, v's own head dim only where it has one."""
    B, H, Hkv, M, N, D, Dv = shape
    dq, dv = kir.tensor("q").shape[3], kir.tensor("v").shape[3]
    Hkv = Hkv if kir.tensor("k").shape[1] != kir.tensor("q").shape[1] else H
    D = dq.value if isinstance(dq, ir.Const) else D
    Dv = dv.value if isinstance(dv, ir.Const) else (D if dv == dq else Dv)
    return B, H, Hkv, M, N, D, Dv


def check_grads(label, kern, kir, q, k, v, caps, dout, dlse=None):
    """Assert that kern's gradients match the reference's (with the lse's when dlse is given)."""
    def ref(q, k, v):
        out, lse = reference.attention(kir, q, k, v, caps)
        return out if dlse is None else (out, lse)

    _, *got = grads(lambda q, k, v: kern(q, k, v, **caps), q, k, v, dout, dlse)
    _, *want = grads(ref, q, k, v, dout, dlse)
    D, Dv, N = q.shape[3], v.shape[3], k.shape[2]
    for n, g, w, other in zip(("dq", "dk", "dv"), got, want, (k, q, None)):
        assert g.dtype == q.dtype and g.shape == w.shape, f"{label}: {n} {g.dtype} {tuple(g.shape)}"
        err = float((g.double() - w.double()).pow(2).sum().sqrt())
        if N == 1 and other is not None:
            # One key: its softmax is constant, so the true gradients of q and k are zeros; what
            # a kernel leaves is the forward's bf16 rounding of P and O (2^-8 relative each)
            bound = 2 ** -7 * natural_norm(g, dout, v, other, D, Dv)
            assert err <= bound, f"{label}: {n} = {err:.3e}, above the rounding bound {bound:.3e}"
            continue
        den = float(w.double().pow(2).sum().sqrt())
        rel = err / den if den > 0 else err  # every key masked: the gradients are zeros
        assert rel <= GRAD_TOL, f"{label}: {n} rel err {rel:.3e}"


def natural_norm(g, dout, v, other, D, Dv) -> float:
    """The norm a gradient of q or k has when each dS element is one unit of dP (rms(dO) rms(v)
    sqrt(Dv)) times the scale and a row of the other operand."""
    scale = 1.0 / (D ** 0.5)
    rms = lambda x: float(x.double().pow(2).mean().sqrt())  # noqa: E731
    return scale * rms(dout) * rms(v) * Dv ** 0.5 * rms(other) * D ** 0.5 * g.numel() ** 0.5
