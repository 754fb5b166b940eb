"""The judge: `kdsl check`. Runs a kernel on fresh random inputs over awkward shapes and
rejects anything that is not the program's function, computed honestly:

- outputs are poisoned (NaN) before each launch, so an unwritten element fails;
- guard bands around every output buffer must come back bit-identical (no stray writes);
- inputs must come back bit-identical (no scribbling on inputs);
- the output is snapshotted on the caller's stream right after the call, so work hidden on
  a side stream (which a timer on that stream would not see) is caught unfinished;
- the reference is the same program evaluated by torch in float64;
- two launches on the same inputs must agree bitwise (determinism).

Candidates are black boxes (any callable with the kernel's signature), which is what lets
the tests feed it deliberately broken kernels.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from . import ir, reference
from .testing import ATTENTION_TOL, FP8_TOL, attention_inputs, fp8_difference, rel_frobenius

GUARD = 4096  # elements of guard band on each side of an output buffer (keeps 16-byte alignment)


@dataclass
class CaseResult:
    kernel: str
    shape: str
    metric: str
    error: float
    tolerance: float
    problems: list = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems and self.error <= self.tolerance


def attention_shapes(k: ir.Kernel, tile_m: int = 128, tile_n: int = 64):
    """(B, H, Hkv, M, N, D) cases: 1, tile +- 1, ragged, M != N, GQA where declared."""
    gqa = "Hkv" in k.dims
    d = k.tensor("q").shape[3]
    ds = (d.value,) if isinstance(d, ir.Const) else (64, 128)
    shapes = []
    for i, (m, n) in enumerate([(1, 1), (1, 300), (tile_m - 1, tile_n + 1), (tile_m + 1, tile_n - 1),
                                (2 * tile_m + 3, 3 * tile_n + 5), (1000, 700), (64, 1000), (257, 257)]):
        h, hkv = (8, 2) if gqa and i % 2 else (4, 4)
        shapes.append((1 + i % 2, h, hkv, m, n, ds[i % len(ds)]))
    return shapes


def _guarded(torch, shape, dtype, device):
    """An output view inside a buffer whose guard bands hold a known pattern."""
    numel = 1
    for s in shape:
        numel *= s
    buf = torch.empty(numel + 2 * GUARD, dtype=dtype, device=device)
    buf[:GUARD].fill_(1234.5)
    buf[GUARD + numel:].fill_(-1234.5)
    view = buf[GUARD:GUARD + numel].view(shape)
    view.fill_(float("nan"))
    return buf, view


def _guards_intact(torch, buf, numel) -> bool:
    return bool((buf[:GUARD] == 1234.5).all() and (buf[GUARD + numel:] == -1234.5).all())


def _sync(torch, device):
    if device != "cpu":
        torch.cuda.synchronize()


def check_attention(kernel: ir.Kernel, fn, trials: int = 5, seed: int = 0, shapes=None,
                    device: str = "cuda") -> list[CaseResult]:
    import torch
    shapes = shapes or attention_shapes(kernel)
    rng = random.Random(seed)
    results = []
    for t, shape in _progress([(t, s) for t in range(trials) for s in shapes], kernel.name):
        gen = torch.Generator(device=device).manual_seed(rng.randrange(2**62))
        results.append(_attention_case(torch, kernel, fn, shape, gen, device))
    return results


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


def _attention_case(torch, kernel, fn, shape, gen, device) -> CaseResult:
    B, H, Hkv, M, N, D = shape
    q, k, v, caps = attention_inputs(kernel, B, H, Hkv, M, N, D, device=device, generator=gen)
    before = [x.clone() for x in (q, k, v, *caps.values())]
    has_lse = kernel.tensor("lse") is not None
    res = CaseResult(kernel.name, f"B={B} H={H} Hkv={Hkv} M={M} N={N} D={D}", "rel. Frobenius", float("inf"),
                     ATTENTION_TOL)
    outs = []
    for _ in range(2):  # the second launch checks determinism
        buf, out = _guarded(torch, q.shape, q.dtype, q.device)
        lbuf, lse = _guarded(torch, (B, H, M), torch.float32, q.device) if has_lse else (None, None)
        kwargs = {"out": out, **caps}
        if has_lse:
            kwargs["lse"] = lse
        fn(q, k, v, **kwargs)
        snap = out.clone()  # on the caller's stream: work on a hidden side stream is caught unfinished
        lsnap = lse.clone() if has_lse else None
        _sync(torch, device)
        if not _guards_intact(torch, buf, out.numel()) or (has_lse and not _guards_intact(torch, lbuf, lse.numel())):
            res.problems.append("wrote outside its output")
        outs.append((snap, lsnap))
    if not all(torch.equal(a, b) for a, b in zip(before, (q, k, v, *caps.values()))):
        res.problems.append("modified an input")
    (out, lse), (out2, lse2) = outs
    if torch.isnan(out).any():
        res.problems.append(f"{int(torch.isnan(out).sum())} output elements unwritten (NaN)")
    if not torch.equal(out.nan_to_num(0), out2.nan_to_num(0)):
        res.problems.append("not deterministic")
    ref, ref_lse = reference.attention(kernel, q, k, v, caps)
    res.error = rel_frobenius(out.nan_to_num(float("inf")), ref)
    if has_lse:
        finite = torch.isfinite(ref_lse)
        if not (torch.isneginf(lse[~finite]).all() and
                torch.allclose(lse[finite].double(), ref_lse[finite], rtol=1e-4, atol=1e-3)):
            res.problems.append("lse wrong")
    return res


def gemm_shapes(grouping: str):
    if grouping == "masked":
        return [(4, 256, 384, 256), (2, 129, 2112, 128), (3, 1, 129, 384)]
    if grouping == "contiguous":
        return [(4, 300, 384, 256), (2, 128, 2112, 128), (3, 1, 129, 384)]
    return [(1, 1, 1, 128), (1, 127, 129, 256), (1, 128, 2112, 128), (1, 129, 127, 384), (1, 300, 7168, 128),
            (1, 1, 2112, 7168)]


def check_gemm(kernel: ir.Kernel, fn, trials: int = 5, seed: int = 0, shapes=None,
               device: str = "cuda") -> list[CaseResult]:
    import torch
    from . import fp8
    grouping = kernel.attr("grouping")
    rng = random.Random(seed)
    out_dtype = torch.float32 if kernel.tensor("out").dtype == "f32" else torch.bfloat16
    results = []
    for _, (G, M, N, K) in _progress([(t, s) for t in range(trials) for s in shapes or gemm_shapes(grouping)],
                                     kernel.name):
        gen = torch.Generator(device=device).manual_seed(rng.randrange(2**62))
        a_shape = (G, M, K) if grouping == "masked" else (M, K)
        b_shape = (N, K) if grouping == "dense" else (G, N, K)
        a, sa = fp8.quantize_1x128(torch.randn(a_shape, device=device, generator=gen))
        b, sb = fp8.quantize_128x128(torch.randn(b_shape, device=device, generator=gen))
        extra, valid = (), None
        if grouping == "contiguous":
            group = torch.randint(-1, G, (M,), device=device, generator=gen, dtype=torch.int32)
            extra, valid = (group,), group >= 0
        elif grouping == "masked":
            count = torch.randint(0, M + 1, (G,), device=device, generator=gen, dtype=torch.int32)
            extra = (count,)
            valid = torch.arange(M, device=device).view(1, M, 1) < count.view(G, 1, 1)
        out_shape = (G, M, N) if grouping == "masked" else (M, N)
        res = CaseResult(kernel.name, f"G={G} M={M} N={N} K={K}" if G > 1 else f"M={M} N={N} K={K}",
                         "1 - 2xy/(x^2+y^2)", float("inf"), FP8_TOL)
        before = [x.clone() for x in (a, sa, b, sb, *extra)]
        snaps = []
        for _ in range(2):
            buf, out = _guarded(torch, out_shape, out_dtype, a.device)
            fn(a, sa, b, sb, *extra, out=out)
            snaps.append(out.clone())
            _sync(torch, device)
            if not _guards_intact(torch, buf, out.numel()):
                res.problems.append("wrote outside its output")
        out, out2 = snaps
        if not all(torch.equal(x, y) for x, y in zip(before, (a, sa, b, sb, *extra))):
            res.problems.append("modified an input")
        ref = reference.fp8_gemm(a, sa, b, sb, *(() if grouping == "dense" else
                                                  ((extra[0], None) if grouping == "contiguous" else (None, extra[0]))))
        if valid is not None:
            valid = valid.expand(out_shape) if grouping == "masked" else valid.view(M, 1).expand(out_shape)
            if not torch.isnan(out[~valid].float()).all():
                res.problems.append("wrote rows it must leave untouched")
            out_v, ref_v, out2_v = out[valid], ref[valid], out2[valid]
        else:
            out_v, ref_v, out2_v = out, ref, out2
        if torch.isnan(out_v.float()).any():
            res.problems.append(f"{int(torch.isnan(out_v.float()).sum())} output elements unwritten (NaN)")
        if not torch.equal(out_v, out2_v):
            res.problems.append("not deterministic")
        res.error = fp8_difference(out_v, ref_v) if out_v.numel() else 0.0
        results.append(res)
    return results


def check_module(mod, kernel: str | None = None, trials: int = 5, seed: int | None = None,
                 interpret: bool = False):
    """{kernel name: [CaseResult]} for every (or one) kernel of a loaded module; with
    interpret=True the candidate is the CPU interpreter of the tiled program."""
    if not interpret:
        from .errors import NoGpuError
        from .runtime.launch import _driver
        import torch
        _driver()  # NoGpuError with the reason when CuPy cannot reach a GPU
        if not torch.cuda.is_available():
            raise NoGpuError("kdsl check runs kernels and the torch reference on a CUDA GPU; torch sees none "
                             "(use --interpret to check the tiled program on the CPU)")
    seed = random.randrange(2**31) if seed is None else seed
    names = [kernel] if kernel else list(mod.kernels)
    device = "cpu" if interpret else "cuda"
    out = {}
    for name in names:
        k = mod.ir[name]
        fn = interpreted(k) if interpret else getattr(mod, name)
        shapes = (small_attention_shapes(k) if k.kind == "attention" else None) if interpret else None
        out[name] = (check_attention if k.kind == "attention" else check_gemm)(k, fn, trials, seed, shapes, device)
    return out, seed


def small_attention_shapes(k: ir.Kernel):
    """The awkward cases at sizes the CPU interpreter runs in well under a second."""
    return [s for s in attention_shapes(k) if s[3] * s[4] <= 300_000]


def interpreted(kernel: ir.Kernel):
    """A candidate with the kernel's calling convention that runs kdsl.interp on the CPU."""
    import torch
    from . import interp
    np_of = lambda x: x.detach().float().numpy() if x.dtype != torch.int32 else x.numpy()

    if kernel.kind == "attention":
        def run(q, k, v, out, lse=None, scale=None, **caps):
            o, l = interp.attention(kernel, np_of(q), np_of(k), np_of(v), {n: np_of(c) for n, c in caps.items()},
                                    scale)
            out.copy_(torch.from_numpy(o))
            if lse is not None:
                lse.copy_(torch.from_numpy(l))
            return (out, lse) if lse is not None else out
        return run

    def run_gemm(a, sa, b, sb, *extra, out):
        grouping = kernel.attr("grouping")
        kw = {"group": extra[0].numpy()} if grouping == "contiguous" else \
             {"count": extra[0].numpy()} if grouping == "masked" else {}
        r = torch.from_numpy(interp.fp8_gemm(kernel, np_of(a), np_of(sa), np_of(b), np_of(sb), **kw))
        out.copy_(torch.where(torch.isnan(r), out.float(), r).to(out.dtype))  # NaN = rows left alone
        return out
    return run_gemm


def format_table(name: str, results: list[CaseResult]) -> str:
    lines = [f"{name}: {sum(r.passed for r in results)}/{len(results)} cases pass "
             f"(metric {results[0].metric}, tolerance {results[0].tolerance:g})" if results else f"{name}: no cases",
             f"  {'shape':<36} {'error':>10} {'tol':>8}  result"]
    for r in results:
        verdict = "pass" if r.passed else "FAIL " + "; ".join(r.problems or ["error above tolerance"])
        lines.append(f"  {r.shape:<36} {r.error:>10.2e} {r.tolerance:>8.0e}  {verdict}")
    return "\n".join(lines)
