"""The judge: `kdsl check`. Runs a kernel on fresh random inputs over awkward shapes and
rejects anything that is not the program's function, computed honestly:

- outputs are poisoned (NaN) before each launch, so an unwritten element fails;
- guard bands around every output buffer must come back bit-identical (no stray writes);
- inputs must come back bit-identical (no scribbling on inputs);
- the output is snapshotted on the caller's stream right after the call, so work hidden on
  a side stream (which a timer on that stream would not see) is caught unfinished;
- the reference is the same program evaluated in float64 (kdsl.reference: torch on the
  GPU, numpy on the CPU);
- two launches on the same inputs must agree bitwise (determinism).

Candidates are black boxes (any callable with the kernel's signature), which is what lets
the tests feed it deliberately broken kernels.
"""
from __future__ import annotations

import inspect
import math
import random
from dataclasses import dataclass, field, replace

from . import ir, reference
from .backends import Numpy, Torch, backend_for, need
from .errors import LaunchError
from .cases import (AttentionCase, GemmCase, attention_inputs, attention_shapes, case_at, conform, fits,
                    gemm_inputs, gemm_shapes)

GUARD = 4096       # elements of guard band on each side of an output buffer (keeps 16-byte alignment)
GUARD_VALUE = 1232.0  # exact in bf16, f16 and f32, so the guard comparison is exact in every output type
ATTENTION_TOL = 2e-2   # relative Frobenius error, bf16/fp16 attention
# relative Frobenius error of each gradient (bf16 inputs; the backward rounds P and dS to bf16
# for its products, as FlashAttention's does)
GRAD_TOL = 2e-2
FP8_TOL = 1e-3         # 1 - 2 sum(xy) / sum(x^2 + y^2), FP8 GEMM vs dequantised product
ATTENTION_METRIC = "rel. error, whole and worst row"
FP8_METRIC = "1 - 2xy/(x^2+y^2), den. floored"
GRAD_METRIC = "grad rel. error, worst of dq dk dv"


def rel_frobenius(out, ref) -> float:
    be = backend_for(out)
    out, ref = be.float64(out), be.float64(ref)
    if not be.xp.isfinite(out).all():
        return float("inf")
    den = float(be.xp.sqrt((ref * ref).sum()))
    err = float(be.xp.sqrt(((out - ref) ** 2).sum()))
    return err / den if den > 0 else err


def worst_row_error(out, ref) -> float:
    """The largest relative error of one query row (over the head dim): a whole-output norm
    dilutes a few wrong rows (a kernel that drops the last key changes only the last rows of
    a causal mask). Rows whose reference is near zero are measured against 1% of the typical
    row norm instead of their own."""
    be = backend_for(out)
    out, ref = be.float64(out), be.float64(ref)
    if not be.xp.isfinite(out).all():
        return float("inf")
    num = be.xp.sqrt(((out - ref) ** 2).sum(-1))
    den = be.xp.sqrt((ref * ref).sum(-1))
    if math.prod(den.shape) == 0:
        return 0.0
    floor = 1e-2 * float(be.xp.sqrt((den * den).mean()))
    if floor == 0:  # every reference row is zero (all masked): the error is absolute
        return float(num.max())
    return float((num / be.clamp(den, floor, None)).max())


def fp8_difference(x, y, magnitude=None) -> float:
    """DeepGEMM's calc_diff, 1 - 2 sum(xy) / sum(x^2 + y^2), = sum((x - y)^2) / sum(x^2 + y^2).
    magnitude (reference.fp8_gemm_magnitude): a floor for the denominator, the sum of the
    squared terms the kernel added up. Over a large output the floor never binds (for random
    inputs sum(y^2) is about the floor itself); over a handful of elements whose terms cancel
    (M = N = 1, seen: a product of 128 terms summing to ~0.1) calc_diff measures how much they
    cancelled, not the kernel, and the floor measures the error against what it scales with."""
    be = backend_for(x)
    x, y = be.float64(x), be.float64(y)
    if not be.xp.isfinite(x).all():
        return float("inf")
    den = float((x * x + y * y).sum())
    if magnitude is not None:
        den = max(den, float(be.float64(magnitude).sum()))
    return float(((x - y) ** 2).sum() / den) if den > 0 else float(((x - y) ** 2).sum())


@dataclass
class CaseResult:
    kernel: str
    shape: str
    metric: str
    error: float
    tolerance: float
    problems: list = field(default_factory=list)
    case: object = None  # the AttentionCase / GemmCase, to replay it
    kept: float | None = None  # the share of (b, h, q, kv) the mask kept (attention with a mask)
    decisions: dict | None = None  # reference.decisions: which way each decision on data went

    @property
    def passed(self) -> bool:
        return not self.problems and self.error <= self.tolerance


def _guarded(be, shape, dtype: str):
    """An output view inside a buffer whose guard bands hold a known pattern."""
    numel = math.prod(shape)
    buf = be.empty((numel + 2 * GUARD,), dtype)
    buf[:GUARD] = GUARD_VALUE
    buf[GUARD + numel:] = -GUARD_VALUE
    view = buf[GUARD:GUARD + numel].reshape(shape)
    view[...] = float("nan")
    return buf, view


def _guards_intact(buf, numel) -> bool:
    return bool((buf[:GUARD] == GUARD_VALUE).all() and (buf[GUARD + numel:] == -GUARD_VALUE).all())


def check_attention(kernel: ir.Kernel, fn, trials: int = 5, seed: int = 0, shapes=None,
                    backend=None) -> list[CaseResult]:
    """shapes: AttentionCases or (B, H, Hkv, M, N, D) tuples; backend: kdsl.backends (torch
    on the GPU by default)."""
    be = backend or Torch("cuda")
    cases = [c if isinstance(c, AttentionCase) else conform(kernel, AttentionCase(*c))
             for c in shapes or attention_shapes(kernel)]
    if any(c.scale is not None for c in cases) and not _takes_keyword(fn, "scale"):
        raise TypeError(f"check_attention: {getattr(fn, '__name__', fn)!r} takes no scale= keyword; the "
                        "checks call at other softmax scales too, as a kdsl kernel's calling convention "
                        "allows (docs/testing.md). Accept **kwargs and pass them on.")
    rng = random.Random(seed)
    trials_cases = [(t, c) for t in range(trials) for c in cases]
    return [_unless_refused(attention_case, be, kernel, fn, replace(c, seed=rng.randrange(2**62)),
                            ATTENTION_METRIC, ATTENTION_TOL)
            for _, c in _progress(trials_cases, kernel.name)]


def _unless_refused(judge, be, kernel: ir.Kernel, fn, case, metric: str, tolerance: float) -> CaseResult:
    """judge(be, kernel, fn, case), or a failed case where the call was refused (LaunchError: a
    captured tensor's index that can leave its axis at this shape, a limit the shape crosses):
    the program cannot run there, which is what a check is for, and the other cases and
    kernels still get judged."""
    try:
        return judge(be, kernel, fn, case)
    except LaunchError as e:
        label = case.label() + (" grad" if judge is gradient_case else "")
        return CaseResult(kernel.name, label, metric, float("inf"), tolerance, [f"refused the call: {e}"], case)


def _takes_keyword(fn, name: str) -> bool:
    """Whether fn(..., name=x) binds; a callable whose signature cannot be read is given the benefit."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.kind is p.VAR_KEYWORD or (p.name == name and p.kind is not p.POSITIONAL_ONLY) for p in params)


def _progress(items, name):
    """A progress bar on a terminal (checks of big programs take a while); silent otherwise."""
    import sys
    if not sys.stderr.isatty():
        return items
    try:
        from tqdm import tqdm
    except ImportError:
        return items
    return tqdm(items, desc=f"check {name}", unit="case", leave=False)


def attention_case(be, kernel: ir.Kernel, fn, case: AttentionCase) -> CaseResult:
    """One case judged: fresh inputs from the case's seed, two guarded calls, the reference."""
    xp = be.xp
    q, k, v, caps = attention_inputs(kernel, case, be)
    before = [be.copy(x) for x in (q, k, v, *caps.values())]
    has_lse = kernel.tensor("lse") is not None
    B, H, M, _ = q.shape
    res = CaseResult(kernel.name, case.label(), ATTENTION_METRIC, float("inf"), ATTENTION_TOL, case=case)
    outs = []
    for _ in range(2):  # the second launch checks determinism
        buf, out = _guarded(be, (*q.shape[:3], v.shape[3]), kernel.tensor("q").dtype)
        lbuf, lse = _guarded(be, (B, H, M), "f32") if has_lse else (None, None)
        kwargs = {"out": out, **caps}
        if has_lse:
            kwargs["lse"] = lse
        if case.scale is not None:
            kwargs["scale"] = case.scale
        fn(q, k, v, **kwargs)
        snap = be.copy(out)  # on the caller's stream: work on a hidden side stream is caught unfinished
        lsnap = be.copy(lse) if has_lse else None
        be.sync()
        if not _guards_intact(buf, math.prod(out.shape)) or (has_lse and not _guards_intact(lbuf, B * H * M)):
            res.problems.append("wrote outside its output")
        outs.append((snap, lsnap))
    if not all(be.equal(a, b) for a, b in zip(before, (q, k, v, *caps.values()))):
        res.problems.append("modified an input")
    (out, lse), (out2, _) = outs
    if xp.isnan(out).any():
        nan_scores = reference.nan_scores(kernel, q, k, v, caps, scale=case.scale)
        res.problems.append(f"{nan_scores}: a log or square root of a negative, 0 / 0 or inf - inf in the program; "
                            f"its rows are NaN" if nan_scores else
                            f"{int(xp.isnan(out).sum())} output elements unwritten (NaN)")
    if not be.equal(xp.nan_to_num(out, nan=0.0), xp.nan_to_num(out2, nan=0.0)):
        res.problems.append("not deterministic")
    ref, ref_lse = reference.attention(kernel, q, k, v, caps, scale=case.scale)
    keep = reference.mask_of(kernel, q, k, v, caps, scale=case.scale)
    res.kept = None if keep is None else float(keep.sum()) / math.prod(keep.shape)
    res.decisions = reference.decisions(kernel, q, k, v, caps, scale=case.scale)
    res.error = max(rel_frobenius(xp.nan_to_num(out, nan=float("inf")), ref),
                    worst_row_error(xp.nan_to_num(out, nan=float("inf")), ref))
    if has_lse:
        finite = xp.isfinite(ref_lse)
        if not (xp.isneginf(lse[~finite]).all() and
                xp.allclose(be.float64(lse[finite]), ref_lse[finite], rtol=1e-4, atol=1e-3)):
            res.problems.append("lse wrong")
    return res


def check_gemm(kernel: ir.Kernel, fn, trials: int = 5, seed: int = 0, shapes=None,
               backend=None) -> list[CaseResult]:
    """shapes: GemmCases or (G, M, N, K) tuples; backend as in check_attention."""
    be = backend or Torch("cuda")
    cases = [c if isinstance(c, GemmCase) else GemmCase(c[1], c[2], c[3], c[0])
             for c in shapes or gemm_shapes(kernel.attr("grouping"))]
    rng = random.Random(seed)
    trials_cases = [(t, c) for t in range(trials) for c in cases]
    return [_unless_refused(gemm_case, be, kernel, fn, replace(c, seed=rng.randrange(2**62)), FP8_METRIC, FP8_TOL)
            for _, c in _progress(trials_cases, kernel.name)]


def gemm_case(be, kernel: ir.Kernel, fn, case: GemmCase) -> CaseResult:
    """A kernel whose out accumulates starts from random values (c) in the rows it may
    write, and is compared with c + the product."""
    xp = be.xp
    grouping = kernel.attr("grouping")
    a, sa, b, sb, extra = gemm_inputs(kernel, case, be)
    G, M, N = case.G, case.M, case.N
    out_shape = (G, M, N) if grouping == "masked" else (M, N)
    res = CaseResult(kernel.name, case.label(), FP8_METRIC, float("inf"), FP8_TOL, case=case)
    valid = None
    if grouping == "contiguous":
        valid = xp.broadcast_to((extra[0] >= 0).reshape(M, 1), out_shape)
    elif grouping == "masked":
        valid = xp.broadcast_to(be.arange(M).reshape(1, M, 1) < extra[0].reshape(G, 1, 1), out_shape)
    c = be.randn(out_shape, be.rng(case.seed + 1)) if kernel.attr("accumulate") else None
    before = [be.copy(x) for x in (a, sa, b, sb, *extra)]
    snaps = []
    for _ in range(2):
        buf, out = _guarded(be, out_shape, kernel.tensor("out").dtype)
        if c is not None:
            out[...] = c if valid is None else xp.where(valid, c, float("nan"))
        fn(a, sa, b, sb, *extra, out=out)
        snaps.append(be.copy(out))
        be.sync()
        if not _guards_intact(buf, math.prod(out_shape)):
            res.problems.append("wrote outside its output")
    out, out2 = snaps
    if not all(be.equal(x, y) for x, y in zip(before, (a, sa, b, sb, *extra))):
        res.problems.append("modified an input")
    groups = () if grouping == "dense" else ((extra[0], None) if grouping == "contiguous" else (None, extra[0]))
    ref = reference.fp8_gemm(a, sa, b, sb, *groups, c=c)
    mag = reference.fp8_gemm_magnitude(a, sa, b, sb, groups[0] if groups else None, c=c)
    if valid is not None:
        if not xp.isnan(be.float32(out[~valid])).all():
            res.problems.append("wrote rows it must leave untouched")
        out, ref, out2, mag = out[valid], ref[valid], out2[valid], mag[valid]
    if xp.isnan(be.float32(out)).any():
        res.problems.append(f"{int(xp.isnan(be.float32(out)).sum())} output elements unwritten (NaN)")
    if not be.equal(out, out2):
        res.problems.append("not deterministic")
    res.error = fp8_difference(out, ref, mag) if math.prod(out.shape) else 0.0
    return res


def gradient_case(be, kernel: ir.Kernel, fn, case: AttentionCase) -> CaseResult:
    """One case's gradients judged: dq, dk, dv (and, where fn computes them, captured float
    tensors') of sum(out * dout) by torch autograd through fn against reference_grads, dout
    fresh from the case's seed. The error is the worst gradient's
    relative Frobenius error (qkv_grad_errors: where the true dq and dk are zeros, as at one
    key, theirs is measured against 2^-7 of their natural size)."""
    torch = need("torch", "torch", "checking gradients (autograd)")
    q, k, v, caps = attention_inputs(kernel, case, be)
    gen = torch.Generator(device=q.device).manual_seed(case.seed % 2**63)
    dout = torch.randn((*q.shape[:3], v.shape[3]), generator=gen, device=q.device).to(q.dtype)
    kw = dict(caps) if case.scale is None else {**caps, "scale": case.scale}
    got = autograd_grads(lambda q, k, v: fn(q, k, v, **kw), q, k, v, dout)
    with torch.no_grad():
        out = fn(q, k, v, **kw)
    out = out[0] if isinstance(out, tuple) else out
    # a backend that computes captured float tensors' gradients (the interpreter) is judged on
    # them too, except at one key, where every score's gradient is zero and a kernel leaves
    # rounding (judged for q and k against their floor)
    of_captures = getattr(fn, "computes_capture_grads", False) and any(c.is_floating_point() for c in caps.values())
    metric = GRAD_METRIC + (" and captured tensors" if of_captures else "")
    res = CaseResult(kernel.name, case.label() + " grad", metric, 0.0, GRAD_TOL, case=case)
    errors = qkv_grad_errors(kernel, q, k, v, caps, case.scale, out, dout, got)
    if of_captures and case.N > 1:
        got_c = capture_grads(lambda q, k, v, c: fn(q, k, v, **{**kw, **c}), q, k, v, caps, dout)
        errors.update(capture_grad_errors(kernel, q, k, v, caps, case.scale, out, dout, got_c))
    for name, error in errors.items():
        if error == float("inf"):
            res.problems.append(f"{name} not finite")
        elif math.isnan(error):
            res.problems.append(f"{name}: the float64 reference's gradient is NaN")
    res.error = worst(errors.values())  # (NaN where any is: shown as inf)
    res.error = float("inf") if math.isnan(res.error) else res.error
    if not res.passed:
        note = recompute_note(kernel, q, k, v, caps, case.scale)
        if note:
            res.problems.append(note)
    return res


def recompute_note(kernel: ir.Kernel, q, k, v, caps: dict, scale) -> str:
    """Why a backward's gradients are not defined to fp32 at these inputs, where they are not: a
    backward that recomputes the scores (FlashAttention's, kdsl's) in fp32, in another summation
    and operation order than its forward's, is off by a few ulps of the largest, ~|score| 2^-21,
    in P's exponent. Held-out 19's cosine attention over norms drawn near 0 reaches 1e9: P was off
    by exp(500), its dv 40-80 % (H200). '' where the scores stay small enough."""
    s = reference.scores(kernel, q, k, v, caps, scale).double()
    finite = s[s.isfinite()]
    top = float(finite.abs().max()) if finite.numel() else 0.0
    drift = top * 2.0 ** -21
    if drift < GRAD_TOL:
        return ""
    return (f"scores reach {top:.1e} at these inputs: recomputed in fp32 by a backward, P = exp(score - lse) "
            f"is off by a factor up to exp({drift:.2g}); gradients are defined to fp32 for scores below "
            f"~{GRAD_TOL * 2 ** 21:.0e}")


def qkv_grad_errors(kernel: ir.Kernel, q, k, v, caps: dict, scale, out, dout, got, dlse=None) -> dict:
    """{"dq", "dk", "dv": gradient_error} of a backward's gradients `got` against reference_grads
    (delta from its forward's output `out`; inf where not finite). Where the true gradient of
    q or k is zero (one key a row, by N = 1 or by the mask; a score that does not depend on s),
    a backward leaves only the rounding of P and O: it is judged against 2^-7 of the natural
    norm (the floor, scaled so that the tolerance is that bound), times the score's slope where
    it magnifies s (slope_factor). Whether it is zero is asked of
    the exact output's gradients: with out's rounding in delta the reference holds that
    rounding too (a mask keeping only j == i at f16: 2.7e-8 of the natural norm, judged 3.3 %
    off a right backward; tools/gpu_fuzz.py's interpreter run, seed 5656)."""
    import torch
    want = reference_grads(kernel, q, k, v, caps, scale, out, dout, dlse)
    sc = abs(scale) if scale is not None else q.shape[3] ** -0.5
    sc *= slope_factor(kernel, q, k, v, caps, scale)
    exact, errors = None, {}
    for i, (name, g, w, other) in enumerate(zip(("dq", "dk", "dv"), got, want, (k, q, None))):
        if not bool(torch.isfinite(g).all()):
            errors[name] = float("inf")
            continue
        floor = 0.0
        if other is not None:
            natural = natural_norm(g, dout, v, other, sc)
            bound = 2 ** -7 * natural / GRAD_TOL
            if float(w.double().pow(2).sum().sqrt()) < bound:  # the floor would bind: is the truth zero?
                if exact is None:
                    exact = reference_grads(kernel, q, k, v, caps, scale, None, dout, dlse)
                floor = bound if zero_to_rounding(exact[i], natural) else 0.0
        errors[name] = gradient_error(g, w, floor)
    return errors


def capture_grad_errors(kernel: ir.Kernel, q, k, v, caps: dict, scale, out, dout, got: dict, dlse=None) -> dict:
    """{name: gradient_error} of each captured tensor's gradient `got` against
    reference_capture_grads (inf where not finite). A captured tensor's gradient sums the
    scores' gradients over many elements and can cancel to far below their size; rounding
    the output to bf16 / f16 then moves the reference itself: |want - exact| (delta from the
    kernel's rounded output, against the exact output's) measures it, and a backward, which
    rounds P and dS as finely, may be off by as much: it is judged against that (the error is
    at most GRAD_TOL when |got - want| <= |want - exact|). Where the exact gradient is zero (a
    bias constant along each row, which the softmax cancels) that is its own size. Found by
    tools/gpu_fuzz.py's interpreter runs: a right backward flagged 6 % off on such a bias (`s +
    0.5 * qb[b, h, i]`), and 3.2 % off on a gain (`sigmoid(s) * (0.5 + sigmoid(gain[h]))` at 15 x 2,
    whose gain gradient the output's rounding moved 8 %)."""
    import torch
    want = reference_capture_grads(kernel, q, k, v, caps, scale, out, dout, dlse)
    exact = reference_capture_grads(kernel, q, k, v, caps, scale, None, dout, dlse)
    norm = lambda x: float(x.double().pow(2).sum().sqrt())  # noqa: E731
    errors = {}
    for name, g in got.items():
        w = want[name]
        floor = norm(w.double() - exact[name].double()) / GRAD_TOL
        errors[name] = gradient_error(g, w, floor) if bool(torch.isfinite(g).all()) else float("inf")
    return errors


def reference_grads(kernel: ir.Kernel, q, k, v, caps, scale, out, dout, dlse=None, dims=None):
    """float64 (dq, dk, dv) of sum(out * dout) [+ sum(lse * dlse)], by autograd of the reference,
    as a backward computes them from its forward's output `out`: its softmax gradient is
    P (dP - delta) with delta = rowsum(dout * out) taken from the bf16 out the forward wrote, not
    from the exact one. Where a row's softmax is peaked, dP - delta is a small difference and
    out's rounding (2^-9 relative) is as large as it: the exact gradient is then not what any
    backward with a bf16 forward (FlashAttention's included) can compute. Autograd's own delta
    uses the exact output, so the difference, rowsum(dout * (exact - out)), enters as a
    gradient of the lse (d lse / d s = P, the same shift of delta). out=None: the exact
    output's gradients (autograd's own delta). dims: reference.attention's."""
    def ref(q, k, v):
        return reference.attention(kernel, q, k, v, caps, scale=scale, dims=dims)

    if out is None:
        return autograd_grads(ref, q, k, v, dout, dlse)
    with backend_for(q).xp.no_grad():
        exact, _ = ref(q, k, v)
    shift = (dout.double() * (exact - out.double())).sum(-1)
    return autograd_grads(ref, q, k, v, dout, shift if dlse is None else shift + dlse.double())


def autograd_grads(fn, q, k, v, dout, dlse=None):
    """(dq, dk, dv) of sum(out * dout) [+ sum(lse * dlse)] by autograd through fn (which returns
    out or (out, lse)); zeros for an input the loss does not depend on."""
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    res = fn(q, k, v)
    out, lse = res if isinstance(res, tuple) else (res, None)
    loss = (out.double() * dout.double()).sum()
    if dlse is not None:
        loss = loss + (lse.double().nan_to_num(neginf=0.0) * dlse.double()).sum()
    loss.backward()
    return tuple(x.grad if x.grad is not None else x.detach() * 0 for x in (q, k, v))


def reference_capture_grads(kernel: ir.Kernel, q, k, v, caps: dict, scale, out, dout, dlse=None) -> dict:
    """float64 gradients of the float captured tensors, by autograd of the reference, with the
    delta a backward takes from its forward's output `out` (as reference_grads; None: the
    exact output's)."""
    def ref(q, k, v, caps):
        return reference.attention(kernel, q, k, v, caps, scale=scale)

    # float64 leaves (holding the same values): autograd sums a leaf's gradient in its own
    # dtype, and a bf16 table's, summed over thousands of elements in bf16, was off by ~2 %
    wide = {n: c.double() if c.is_floating_point() else c for n, c in caps.items()}
    if out is None:
        return capture_grads(ref, q, k, v, wide, dout, None if dlse is None else dlse.double())
    with backend_for(q).xp.no_grad():
        exact, _ = ref(q, k, v, caps)
    shift = (dout.double() * (exact - out.double())).sum(-1)
    return capture_grads(ref, q, k, v, wide, dout, shift if dlse is None else shift + dlse.double())


def capture_grads(fn, q, k, v, caps: dict, dout, dlse=None) -> dict:
    """{name: d loss / d caps[name]} for each float captured tensor, the loss autograd_grads',
    by autograd through fn(q, k, v, caps); zeros for one the loss does not depend on."""
    leaves = {n: c.detach().requires_grad_() if c.is_floating_point() else c for n, c in caps.items()}
    res = fn(q.detach(), k.detach(), v.detach(), leaves)
    out, lse = res if isinstance(res, tuple) else (res, None)
    loss = (out.double() * dout.double()).sum()
    if dlse is not None:
        loss = loss + (lse.double().nan_to_num(neginf=0.0) * dlse.double()).sum()
    if loss.requires_grad:  # not when every capture is read only where no gradient flows (a mask)
        loss.backward()
    return {n: c.grad if c.grad is not None else c.detach() * 0 for n, c in leaves.items() if c.requires_grad}


def worst(errors) -> float:
    """The largest error, NaN where any is NaN: max() keeps whichever comes first of a NaN and a
    number (max(0.0, nan) is 0.0), and a NaN reference once passed so."""
    errors = list(errors)
    return float("nan") if any(math.isnan(e) for e in errors) else max(errors)


def gradient_error(g, w, floor: float = 0.0) -> float:
    """|g - w| / max(|w|, floor) in the Frobenius norm; |g - w| where both are 0 (every key
    masked: the gradients are zeros)."""
    err = float((g.double() - w.double()).pow(2).sum().sqrt())
    den = max(float(w.double().pow(2).sum().sqrt()), floor)
    return err / den if den > 0 else err


def zero_to_rounding(w, natural: float) -> bool:
    """Whether an exact-output reference gradient of q or k is zero but for float64 rounding: one
    key a row, or a score that does not depend on s (4 s - 4 s). Its relative error is meaningless (the float64
    reference leaves ~1e-15 where a kernel's is exactly 0), so it is judged against the bf16
    rounding bound, 2^-7 of the natural norm, as one key's are."""
    return float(w.double().pow(2).sum().sqrt()) <= 1e-9 * natural


def slope_factor(kernel: ir.Kernel, q, k, v, caps: dict, scale) -> float:
    """max(1, the rms of d score / d s weighted by the exact softmax P): how much the score
    magnifies each dS element, and with it a backward's rounding of dS, beyond the plain s's
    that natural_norm assumes. Cosine attention's s / (max(qn kn, 1e-6) max(tau, 0.01)) over
    norms drawn near 0 has slopes ~1e8: its rows are one-hot, the true dq and dk zeros, and a
    right backward leaves dP - delta's fp32 rounding times that slope (held-out 19, H200)."""
    if kernel.func("score") is None:
        return 1.0
    s, slope = reference.scores_and_slope(kernel, q, k, v, caps, scale)
    lse = s.logsumexp(-1, keepdim=True)
    p = (s - lse.nan_to_num(neginf=0.0)).exp().nan_to_num(nan=0.0)
    weight = float(p.sum())
    if weight <= 0:
        return 1.0
    mean_square = float((p * slope.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0).pow(2)).where(p > 0, 0.0).sum())
    return max(1.0, (mean_square / weight) ** 0.5)


def natural_norm(g, dout, v, other, scale: float) -> float:
    """The norm a gradient of q or k has when each dS element is one unit of dP (rms(dO) rms(v)
    sqrt(Dv)) times the scale and a row of the other operand."""
    rms = lambda x: float(x.double().pow(2).mean().sqrt())  # noqa: E731
    return scale * rms(dout) * rms(v) * v.shape[3] ** 0.5 * rms(other) * other.shape[3] ** 0.5 * g.numel() ** 0.5


def check_gradients(kernel: ir.Kernel, fn, trials: int = 1, seed: int = 0, shapes=None,
                    backend=None) -> list[CaseResult]:
    """gradient_case over the awkward shapes (as check_attention's), on torch tensors."""
    be = backend or Torch("cuda")
    cases = [c if isinstance(c, AttentionCase) else conform(kernel, AttentionCase(*c))
             for c in shapes or attention_shapes(kernel)]
    rng = random.Random(seed ^ 0x9E3779B9)
    trials_cases = [(t, c) for t in range(trials) for c in cases]
    return [_unless_refused(gradient_case, be, kernel, fn, replace(c, seed=rng.randrange(2**62)), GRAD_METRIC, GRAD_TOL)
            for _, c in _progress(trials_cases, kernel.name + " grad")]


def resolve_seed(seed: int | None) -> int:
    """The seed a check runs with: the one given, or a fresh one to print for reproduction."""
    return random.randrange(2**31) if seed is None else seed


def check_module(mod, kernel: str | None = None, trials: int = 5, seed: int | None = None,
                 interpret: bool = False, grad: bool = False):
    """({kernel name: [CaseResult]}, seed) for every (or one) kernel of a loaded module; with
    interpret=True the candidate is the CPU interpreter of the tiled program, judged with
    numpy (no torch needed). grad=True: an attention kernel's gradients too (torch autograd:
    on the GPU, or on CPU tensors with interpret=True)."""
    seed = resolve_seed(seed)
    return dict(iter_check_module(mod, kernel, trials, seed, interpret, grad)), seed


def iter_check_module(mod, kernel: str | None, trials: int, seed: int, interpret: bool = False,
                      grad: bool = False, shapes: tuple = ()):
    """check_module's (name, [CaseResult]) pairs one kernel at a time, as each is judged (so
    that `kdsl check` prints a kernel's table before it starts on the next). shapes: `kdsl
    check --shapes` (bench.parse_shape's dicts): each kernel at those of its kind instead of the
    awkward cases; a kernel none fits keeps the awkward ones."""
    from .interpreted import Interpreted
    be = Numpy() if interpret else gpu_backend()
    for name in [kernel] if kernel else list(mod.kernels):
        k = mod.ir[name]
        fn = Interpreted(k) if interpret else getattr(mod, name)
        given = [case_at(k, s) for s in shapes if fits(k, s)]
        shapes_k = given or (small_attention_shapes(k) if interpret and k.kind == "attention" else None)
        yield name, (check_attention if k.kind == "attention" else check_gemm)(k, fn, trials, seed, shapes_k, be)
        if grad and k.kind == "attention":  # a table of its own
            yield f"{name} (gradients)", check_gradients(k, fn, 1, seed, shapes_k, Torch("cpu") if interpret else be)


def gpu_backend():
    """The torch CUDA backend the GPU judge uses, or a clear error saying what is missing."""
    from .errors import NoGpuError
    from .runtime.launch import _driver
    _driver()  # NoGpuError with the reason when CuPy cannot reach a GPU
    torch = need("torch", "torch", "checking kernels on the GPU (the inputs and the reference)")
    if not torch.cuda.is_available():
        raise NoGpuError("kdsl check runs kernels and the torch reference on a CUDA GPU; torch sees none "
                         "(use --interpret to check the tiled program on the CPU)")
    return Torch("cuda")


def small_attention_shapes(k: ir.Kernel) -> list[AttentionCase]:
    """The awkward cases at sizes the CPU interpreter runs in well under a second."""
    return [c for c in attention_shapes(k) if c.M * c.N <= 300_000]


def format_table(name: str, results: list[CaseResult]) -> str:
    lines = [f"{name}: {sum(r.passed for r in results)}/{len(results)} cases pass "
             f"(metric {results[0].metric}, tolerance {results[0].tolerance:g})" if results else f"{name}: no cases",
             f"  {'shape':<36} {'error':>10} {'tol':>8}  result"]
    said = set()
    for r in results:
        verdict = "pass" if r.passed else "FAIL " + "; ".join(r.problems or ["error above tolerance"])
        # a failure a row above gave word for word (a call refused at a shape each trial draws) said once
        shown = "FAIL, as above" if verdict in said and r.problems else verdict
        lines.append(f"  {r.shape:<36} {r.error:>10.2e} {r.tolerance:>8.0e}  {shown}")
        said.add(verdict)
    return "\n".join(lines + one_sided(results) + one_way_decisions(results))


def one_way_decisions(results: list[CaseResult]) -> list[str]:
    """A note for each decision on data (reference.decisions) that went the same way at every
    element of every case: the other way was never judged."""
    held: dict = {}
    for r in results:
        for text, (true, false) in (r.decisions or {}).items():
            was = held.get(text, (False, False))
            held[text] = (was[0] or true, was[1] or false)
    short = lambda text: text if len(text) <= 100 else text[:97] + "..."  # noqa: E731
    return [f"  note: `{short(text)}` was {'true' if true else 'false'} at every element of every case, so what it decides "
            f"when {'false' if true else 'true'} was never judged (kdsl.cases.attention_inputs draws the inputs)"
            for text, (true, false) in held.items() if true != false]


def one_sided(results: list[CaseResult]) -> list[str]:
    """A note where the mask kept every pair in every case, or none: then what it would drop
    (or keep) was never judged, and a pass says nothing about it."""
    kept = [r.kept for r in results]
    if not kept or None in kept or not (all(x == 1.0 for x in kept) or all(x == 0.0 for x in kept)):
        return []
    every = kept[0] == 1.0
    return [f"  note: the mask kept {'every' if every else 'no'} (q, kv) pair in every case, so what it would "
            f"{'drop' if every else 'keep'} was never judged at these shapes and inputs "
            f"(kdsl.cases.attention_inputs draws them)"]
