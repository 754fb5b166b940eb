"""Property-test your own kdsl program: Hypothesis strategies for any program's cases, and
one assertion that judges a kernel, on the GPU or through the CPU interpreter, against the
float64 reference of its program (docs/testing.md has the whole example):

    mod = kdsl.compile(SOURCE, interpret=True)        # without interpret=True: the GPU kernel
    @given(kdsl.testing.cases(mod.my_variant))
    def test_my_variant(case):
        kdsl.testing.assert_matches_reference(mod.my_variant, case)

The strategies need Hypothesis (pip install 'kdsl[testing]'); everything else here needs
only numpy on the CPU.
"""
from __future__ import annotations

import random
from dataclasses import replace

from . import ir
from .backends import Numpy, Torch, need
from .cases import (CHECK_SCALES, AttentionCase, GemmCase, attention_dims, conform, free_dims, gemm_inputs,
                    head_dim_pairs, tiles, attention_inputs as _case_inputs)
from .check import (ATTENTION_TOL, FP8_TOL, GRAD_TOL, CaseResult, attention_case, fp8_difference, format_table,
                    gemm_case, gpu_backend, gradient_case, rel_frobenius, resolve_seed)
from .errors import KdslError, LaunchError
from .interpreted import Interpreted
from .runtime.bounds import check_capture_indices

__all__ = ["cases", "attention_cases", "gemm_cases", "assert_matches_reference", "assert_gradients_match",
           "find_failure", "search_module",
           "AttentionCase", "GemmCase", "attention_inputs", "gemm_inputs", "rel_frobenius", "fp8_difference",
           "ATTENTION_TOL", "FP8_TOL", "GRAD_TOL", "assert_masked_groups_right"]


def _hypothesis():
    return need("hypothesis", "testing", "searching cases (kdsl.testing's strategies, kdsl check --hypothesis)")


def _ir(kernel) -> ir.Kernel:
    """An ir.Kernel from itself or from a kernel callable (mod.NAME)."""
    return kernel if isinstance(kernel, ir.Kernel) else kernel.ir


def cases(kernel, **limits):
    """A Hypothesis strategy of cases for any kernel (attention or FP8 GEMM), given as
    mod.NAME or its ir.Kernel; limits go to attention_cases / gemm_cases."""
    k = _ir(kernel)
    return attention_cases(k, **limits) if k.kind == "attention" else gemm_cases(k, **limits)


def lengths(tile: int, max_len: int):
    """Any length up to max_len (ragged), or one at a tile's edge: 1, tile +- 1, two tiles + 1.
    Plain integers come first so that a failing length shrinks to the smallest one."""
    st = _hypothesis().strategies
    special = sorted({n for n in (1, tile - 1, tile, tile + 1, 2 * tile + 1) if 1 <= n <= max_len})
    return st.one_of(st.integers(1, max_len), st.sampled_from(special))


def attention_cases(kernel, max_len: int | None = None, max_batch: int = 2, max_kv_heads: int = 2,
                    gqa_ratios=(1, 2, 4)):
    """AttentionCases: lengths 1 and tile +- 1, ragged lengths, M != N (and M = N), GQA ratios
    (where k's head count is its own dim), head dims (cases.head_dim_pairs: the program's own,
    or 64, 128, 32, 96, 192, 256, and v's own where it has one), sizes of dims only
    captured tensors use (kept where every index stays in bounds), integer captures within
    the index range they are used in, and a seed for the values. Shrinks toward one batch,
    one head, length 1."""
    st = _hypothesis().strategies
    k = _ir(kernel)
    tile = {pair: tiles(k, pair[0], value_dim=pair[1]) for pair in head_dim_pairs(k)}
    max_len = max_len or 2 * max(max(t) for t in tile.values()) + 2
    gqa = k.tensor("k").shape[1] != k.tensor("q").shape[1]
    free = free_dims(k)

    @st.composite
    def draw(draw):
        D, Dv = draw(st.sampled_from(list(tile)))  # shrinks toward the first: 64, the prebuilt one
        tm, tn = tile[D, Dv]
        M = draw(lengths(tm, max_len))
        N = draw(lengths(tn, max_len))  # independent of M: each shrinks on its own
        Hkv = draw(st.integers(1, max_kv_heads))
        H = Hkv * (draw(st.sampled_from(gqa_ratios)) if gqa else 1)
        B = draw(st.integers(1, max_batch))
        sizes = tuple((n, draw(st.integers(1, 2 * max(M, N)))) for n in free if draw(st.booleans()))
        scale = draw(st.sampled_from((None,) + CHECK_SCALES + (0.05,)))  # shrinks toward the kernel's own
        case = conform(k, AttentionCase(B, H, Hkv, M, N, D, draw(st.integers(0, 2**32 - 1)), sizes,
                                        draw(st.integers(1, 4)), Dv, scale))
        return _within_bounds(k, case)
    return draw()


def _within_bounds(k: ir.Kernel, case: AttentionCase) -> AttentionCase:
    """Drawn capture-only sizes that would make an index leave its axis fall back to the
    generous default (a refused call is no kernel bug)."""
    try:
        check_capture_indices(k, attention_dims(k, case), k.name)
    except LaunchError:
        return replace(case, sizes=())
    return case


def gemm_cases(kernel, max_m: int | None = None, max_n: int = 300, max_k_blocks: int = 3, max_groups: int = 3):
    """GemmCases: M around the tile, N around the 128-row blocks of b's scales, K a whole
    number of 128-deep blocks, 1 to max_groups experts for grouped GEMMs, and a seed."""
    st = _hypothesis().strategies
    k = _ir(kernel)
    tm, _ = tiles(k)
    grouped = k.attr("grouping") != "dense"

    @st.composite
    def draw(draw):
        M = draw(lengths(tm, max_m or 2 * tm + 1))
        N = draw(lengths(128, max_n))
        K = 128 * draw(st.integers(1, max_k_blocks))
        G = draw(st.integers(1, max_groups)) if grouped else 1
        return GemmCase(M, N, K, G, draw(st.integers(0, 2**32 - 1)))
    return draw()


def _backend_for_kernel(fn):
    return Numpy() if isinstance(fn, Interpreted) else gpu_backend()


def _judge(be, k: ir.Kernel, fn, case) -> CaseResult:
    if k.kind == "attention":
        return attention_case(be, k, fn, conform(k, case))
    return gemm_case(be, k, fn, case)


def assert_matches_reference(fn, case, *, kernel: ir.Kernel | None = None, backend=None) -> CaseResult:
    """Judge one case as `kdsl check` does (poisoned outputs, guard bands, inputs unchanged,
    determinism, the float64 reference of the program) and raise AssertionError on failure.

    fn: mod.NAME from kdsl.load / kdsl.compile (interpret=True: the CPU interpreter, judged
    with numpy; otherwise the CUDA kernel, judged with torch on the GPU), or any callable with
    the kernel's calling convention together with kernel= and backend= (kdsl.backends)."""
    k = kernel or _ir(fn)
    res = _judge(backend or _backend_for_kernel(fn), k, fn, case)
    if not res.passed:
        raise AssertionError(f"{k.name} fails on {res.case!r}: {res.metric} {res.error:.3e} "
                             f"(tolerance {res.tolerance:g}){'; ' if res.problems else ''}{'; '.join(res.problems)}")
    return res


def assert_gradients_match(fn, case, *, kernel: ir.Kernel | None = None, backend=None) -> CaseResult:
    """Judge one case's gradients as `kdsl check --grad` does (dq, dk and dv of a random
    sum(out * dout) by torch autograd through fn, against float64 autograd of the reference)
    and raise AssertionError on failure. fn: an attention kernel (interpret=True: on CPU
    tensors), or any callable with its calling convention together with kernel= and backend=."""
    k = kernel or _ir(fn)
    if k.kind != "attention":
        raise KdslError(f"{k.name}: gradients are an attention kernel's; this is an FP8 GEMM")
    res = gradient_case(backend or (Torch("cpu") if isinstance(fn, Interpreted) else gpu_backend()), k, fn,
                        conform(k, case))
    if not res.passed:
        raise AssertionError(f"{k.name}'s gradients fail on {res.case!r}: {res.metric} {res.error:.3e} "
                             f"(tolerance {res.tolerance:g}){'; ' if res.problems else ''}{'; '.join(res.problems)}")
    return res


def find_failure(fn, examples: int = 100, seed: int | None = None, *, kernel: ir.Kernel | None = None,
                 backend=None, **limits) -> CaseResult | None:
    """Search `examples` Hypothesis cases for one the kernel fails; returns the judged,
    shrunk failing case (a crash counts as a failure), or None if every case passed."""
    hyp = _hypothesis()
    k = kernel or _ir(fn)
    be = backend or _backend_for_kernel(fn)

    def judged(case) -> CaseResult:
        try:
            return _judge(be, k, fn, case)
        except LaunchError as e:  # refused at this shape: the program's problem, shrunk like a wrong answer
            return CaseResult(k.name, case.label(), "refused", float("inf"), 0.0, [f"refused the call: {e}"], case)
        except KdslError:
            raise  # no GPU, a kernel that cannot be built: nothing to search
        except Exception as e:
            return CaseResult(k.name, case.label(), "crash", float("inf"), 0.0, [f"raised {type(e).__name__}: {e}"],
                              case)

    options = hyp.settings(max_examples=examples, database=None, deadline=None,
                           suppress_health_check=list(hyp.HealthCheck))
    try:
        shrunk = hyp.find(cases(k, **limits), lambda c: not judged(c).passed, settings=options,
                          random=random.Random(seed))
    except hyp.errors.NoSuchExample:
        return None
    return judged(shrunk)


def search_module(mod, kernel: str | None = None, examples: int = 100, seed: int | None = None,
                  interpret: bool = False):
    """`kdsl check --hypothesis`: ({kernel name: shrunk failing CaseResult or None}, seed)."""
    _hypothesis()
    be = Numpy() if interpret else gpu_backend()
    seed = resolve_seed(seed)
    out = {}
    for name in [kernel] if kernel else list(mod.kernels):
        k = mod.ir[name]
        fn = Interpreted(k) if interpret else getattr(mod, name)
        out[name] = find_failure(fn, examples, seed, kernel=k, backend=be)
    return out, seed


def format_search(name: str, examples: int, result: CaseResult | None) -> str:
    if result is None:
        return f"{name}: {examples} Hypothesis examples pass"
    return f"{name}: FAIL; shrunk counterexample: {result.case!r}\n" + format_table(name, [result])


def attention_inputs(kernel: ir.Kernel, B, H, Hkv, M, N, D, device="cuda", generator=None, Dv=0,
                     seed: int | None = None):
    """Random q, k, v and captured tensors as torch tensors on `device`, fresh on each call
    (or drawn from a torch generator, or from `seed`: bool captures sorted along their last axis
    on odd seeds); v's head dim is Dv (0: D). kdsl.cases.attention_inputs takes any backend."""
    if seed is None and generator is None:
        seed = random.randrange(2**62)
    elif seed is None:
        torch = need("torch", "torch", "attention_inputs with a torch generator")
        seed = int(torch.randint(2**62, (1,), generator=generator, device=generator.device))
    return _case_inputs(kernel, AttentionCase(B, H, Hkv, M, N, D, seed, Dv=Dv), Torch(device))


def assert_masked_groups_right(out, ref, count) -> None:
    """A masked grouped FP8 GEMM's out (NaN-filled before the call) against its reference:
    rows past each group's count left untouched, the rest within FP8_TOL."""
    import torch
    for g, c in enumerate(count.tolist()):
        assert torch.isnan(out[g, c:].float()).all(), f"group {g}: rows past its count {c} were written"
        if c:
            assert fp8_difference(out[g, :c], ref[g, :c]) < FP8_TOL, f"group {g}"

