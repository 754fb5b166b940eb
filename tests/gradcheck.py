"""The backward tests' comparison (GPU kernel or interpreter against float64 autograd of the
reference, kdsl/reference.py), with kdsl check's measures (kdsl/check.py)."""
from kdsl import ir
from kdsl.check import GRAD_TOL, autograd_grads, capture_grad_errors, capture_grads, qkv_grad_errors


def _nest(leaf: str, form: str, depth: int) -> str:
    for _ in range(depth):
        leaf = form.format(leaf)
    return leaf


# Programs whose scores read captured float tensors that are learned: a relative-position
# table read twice, a per-head gain on s, learned ALiBi slopes, a bf16 table, a bias only the
# mask reads (its gradient is 0), a bias under a nonlinearity
LEARNED = {
    "table": ("bias: f32[H, 64]", "s + bias[h, (i - j) % 64] - 0.5 * bias[h, (j + 3 * i) % 64]", "j <= i + 9"),
    "gain": ("gain: f32[H]", "s * gain[h]", None),
    "slopes": ("slopes: f32[H]", "s - slopes[h] * float(abs(i - j))", "j <= i"),
    "bf16_table": ("t: bf16[32]", "s + t[(i * 7 + j) % 32]", None),
    "mask_only": ("w: f32[H]", "s", "float(j) <= float(i) + w[h] * 40.0"),
    "softcap_bias": ("bias: f32[H, 16]", "30.0 * tanh((s + bias[h, (i - j) % 16]) / 30.0)", None),
    # min / max nested deep enough for kdsl::opaque_value (cexpr.OPAQUE_EVERY): the index is
    # i - 13 * j, the mask j <= i + 9, as 13 and 6 levels the optimizer may not see through
    "deep_min": ("bias: f32[64]", "s + bias[" + _nest("i", "min(({}) - j, i)", 13) + " % 64]",
                 _nest("j", "max(({}) - i, j)", 6) + " <= i + 9"),
}


def fit(kir: ir.Kernel, shape):
    """The shape (B, H, Hkv, M, N, D, Dv) as the program allows it: one head count where k/v
    share q's, head dims the program fixes as written, v's own head dim only where it has one."""
    B, H, Hkv, M, N, D, Dv = shape
    dq, dv = kir.tensor("q").shape[3], kir.tensor("v").shape[3]
    Hkv = Hkv if kir.tensor("k").shape[1] != kir.tensor("q").shape[1] else H
    D = dq.value if isinstance(dq, ir.Const) else D
    Dv = dv.value if isinstance(dv, ir.Const) else (D if dv == dq else Dv)
    return B, H, Hkv, M, N, D, Dv


def check_grads(label, kern, kir, q, k, v, caps, dout, dlse=None, of_captures=False):
    """Assert that kern's gradients match the reference's (with the lse's when dlse is given),
    taken from kern's own output (kdsl.check.reference_grads); of_captures: the float captured
    tensors' too (a backend that computes them: the interpreter)."""
    import torch
    got = autograd_grads(lambda q, k, v: kern(q, k, v, **caps), q, k, v, dout, dlse)
    with torch.no_grad():
        out = kern(q, k, v, **caps)
    errors = qkv_grad_errors(kir, q, k, v, caps, None, out[0] if isinstance(out, tuple) else out, dout, got, dlse)
    for n, g, x in zip(("dq", "dk", "dv"), got, (q, k, v)):
        assert g.dtype == q.dtype and g.shape == x.shape, f"{label}: {n} {g.dtype} {tuple(g.shape)}"
        assert errors[n] <= GRAD_TOL, f"{label}: {n} rel err {errors[n]:.3e}"  # (a zero truth: the rounding bound)
    if of_captures:
        out = out[0] if isinstance(out, tuple) else out
        got = capture_grads(lambda q, k, v, c: kern(q, k, v, **c), q, k, v, caps, dout, dlse)
        errors = capture_grad_errors(kir, q, k, v, caps, None, out, dout, got, dlse)
        assert got.keys() == errors.keys() == {n for n, c in caps.items() if c.is_floating_point()}
        for n in got:
            assert got[n].dtype == caps[n].dtype and got[n].shape == caps[n].shape, f"{label}: d{n}"
            assert errors[n] <= GRAD_TOL, f"{label}: d{n} rel err {errors[n]:.3e}"
