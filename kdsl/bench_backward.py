"""`kdsl bench --backward`: an attention kernel's forward + backward against its peers', timed
as kdsl.bench times forwards (in turns, L2 flushed, CUDA events).

One timed call is a forward and the gradients of q, k and v for a random dout
(torch.autograd.grad: nothing accumulates between calls). TFLOPS count FlashAttention's
convention: 3.5 times the forward's work (the backward's five products at 2.5 times the
forward's two, recomputation not counted). The error is the worst relative error of dq, dk
and dv against the reference's (kdsl.check.reference_grads), on batch 0 and the query heads of
the first k/v head (two heads without GQA), whose gradients that slice holds whole.
"""
from __future__ import annotations

from .bench import SDPA_FORMS, Case, Row, _record, cudnn_attend, document_mask, flex_attend, kept_pairs

FWD_BWD_FLOPS = 3.5  # times the forward's (FlashAttention's convention)


def run_attention_backward(case: Case, mod, timer, peers: set) -> Row:
    import torch
    from . import reference
    from .check import gradient_error, reference_grads, worst
    from .testing import attention_inputs
    kir = mod.ir[case.kernel]
    s = case.shape
    B, H, M, N, D = s["B"], s["H"], s["M"], s["N"], s["D"]
    Hkv, Dv = s.get("Hkv", H), s.get("Dv", D)
    gqa = f" Hkv={Hkv}" if Hkv != H else ""
    dv = f" Dv={Dv}" if Dv != D else ""
    row = Row(case.kernel, f"B={B} H={H}{gqa} M={M} N={N} D={D}{dv} fwd+bwd", "backward")
    q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, N, D, Dv=Dv, seed=case.seed)
    for name, (lo, hi) in case.ints.items():
        caps[name] = torch.randint(lo, hi + 1, tuple(caps[name].shape), device=q.device, dtype=torch.int32)
    for name, mean in case.documents.items():  # a bool mask holding packed documents, as the forward's rows
        caps[name] = document_mask(torch, B, M, N, mean, q.device)
        row.shape += f" documents~{mean}"
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    dout = torch.randn((B, H, M, Dv), device=q.device).to(q.dtype)
    fn = getattr(mod, case.kernel)

    def fwd_bwd(attend):
        def call():
            out = attend(q, k, v)
            return torch.autograd.grad(out[0] if isinstance(out, tuple) else out, (q, k, v), dout)  # (out, lse)
        return call

    timed = {"kdsl": fwd_bwd(lambda q, k, v: fn(q, k, v, **caps))}
    got = timed["kdsl"]()
    # the reference's gradients on a slice that holds them whole: batch 0, the query heads of k/v head 0
    qh = slice(0, H // Hkv) if Hkv != H else slice(0, min(H, 2))
    kvh = slice(0, 1) if Hkv != H else qh
    sub = {n: (c[:1] if c.dim() > 1 and c.shape[0] == B else c) for n, c in caps.items()}
    with torch.no_grad():
        out = fn(q, k, v, **caps)
    out = out[0] if isinstance(out, tuple) else out
    want = reference_grads(kir, q[:1, qh], k[:1, kvh], v[:1, kvh], sub, None, out[:1, qh], dout[:1, qh],
                           dims=reference.dims_of(kir, q, k, v, caps))  # the whole problem's H
    row.error = worst(gradient_error(g[:1, sl], w) for g, w, sl in zip(got, want, (qh, kvh, kvh)))
    del want
    dims = reference.dims_of(kir, q, k, v, caps)  # by the program's own names
    flops = FWD_BWD_FLOPS * 2 * (D + Dv) * kept_pairs(kir, dims, caps, B, H, M, N)
    if "flex" in peers:
        try:
            timed["flex"] = fwd_bwd(flex_attend(kir, q, k, v, caps))
            timed["flex"]()
        except Exception as e:
            timed.pop("flex", None)
            row.peers["flex"] = {"error": f"{type(e).__name__}: {e}"[:160]}
    if "cudnn" in peers and case.kernel in SDPA_FORMS:
        try:
            timed["cudnn"] = fwd_bwd(cudnn_attend(SDPA_FORMS[case.kernel], Hkv != H))
            timed["cudnn"]()
        except Exception as e:
            timed.pop("cudnn", None)
            row.peers["cudnn"] = {"error": f"{type(e).__name__}: {e}"[:160]}
    _record(row, timer.in_turns_by_block(timed), flops)
    return row
