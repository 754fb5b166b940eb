"""The tiled program, executed on the CPU, against the float64 reference: the passes
(exp2 folding, mask analysis' tile classes, tiling) are tested here with no GPU."""

import math
import re

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import kdsl
from kdsl import cases, interp, ir, reference
from kdsl.passes import affine_score, mask_analysis, pipeline, score_bounds, tiling
from kdsl.passes.target import get_target
from kdsl.runtime import bounds
from kdsl.errors import LaunchError
from kdsl.testing import ATTENTION_TOL, attention_inputs, rel_frobenius

from conftest import ROOT
from exprgen import bool_expr, float_expr, program

torch = pytest.importorskip("torch")

SHAPES = [(1, 2, 2, 1, 1, 64), (2, 2, 1, 129, 63, 64), (1, 4, 2, 127, 65, 128), (1, 1, 1, 300, 257, 64),
          (2, 3, 3, 64, 200, 128)]


def _run(kir, shape, seed, **kw):
    gen = torch.Generator().manual_seed(seed)
    B, H, Hkv, M, N, D = shape
    if "Hkv" not in kir.dims:
        Hkv = H
    # the sizes the declarations fix (self-attention's q: [B, H, N, D] makes M = N)
    fixed = cases.conform(kir, cases.AttentionCase(B, H, Hkv, M, N, D))
    M, N = fixed.M, fixed.N
    q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, N, D, device="cpu", generator=gen)
    f = lambda x: x.float().numpy() if x.dtype != torch.int32 else x.numpy()
    out, lse = interp.attention(kir, f(q), f(k), f(v), {n: f(c) for n, c in caps.items()}, **kw)
    ref, ref_lse = reference.attention(kir, q, k, v, caps)
    return torch.from_numpy(out), torch.from_numpy(lse), ref, ref_lse


@pytest.mark.parametrize("name", ["relpos", "alibi", "softcap", "causal", "sliding_window", "document_mask", "natten2d",
                                  "prefix_lm", "padded_causal"])
def test_samples_interpreted(name):
    kir = kdsl.load(ROOT / "samples" / f"{name}.kd").ir[name]
    for i, shape in enumerate(SHAPES):
        out, lse, ref, ref_lse = _run(kir, shape, seed=i)
        assert rel_frobenius(out, ref) <= ATTENTION_TOL, (name, shape)
        fin = torch.isfinite(ref_lse)
        assert torch.isneginf(lse[~fin]).all()
        # these samples return no lse; where their row sums are by P V (tiling.TENSOR_ROW_SUM)
        # the interpreter's carries P's rounding, within the bound tiling documents
        low = pipeline.lower(kir, get_target("sm_90a"), shape[5])
        slack = math.log1p(tiling.ROW_SUM_LSE_ERROR["bf16"]) if low.attr("tensor_row_sum") else 0.0
        assert torch.allclose(lse[fin].double(), ref_lse[fin], atol=1e-3 + slack)


HELDOUT = [ROOT / "tools" / "dev" / f"heldout{n}.kd" for n in ("", *map(str, range(2, 68)))]
# Self-attention written with one tensor for queries and keys (`img[b, i] == img[b, j]`, img:
# [B, N]): the launcher refuses a call with M > N, naming the index, and such a shape is not run
ONE_AXIS_FOR_BOTH = {"image_text_bidir": "'img' (i)"}


@pytest.mark.parametrize("path,name", [(p, n) for p in HELDOUT for n in kdsl.load(p).ir],
                         ids=lambda x: x if isinstance(x, str) else x.stem)
def test_heldout_variants_interpreted(path, name):
    """The variants written as held-out checks (tools/dev/heldout*.kd: sinks, bands, per-head masks,
    padding on both sides, a 2-D bias table, a value head dim of its own; token trees, frames,
    segment rules; Longformer, rank-one and forgetting scores, log-distance buckets; KV-cache
    causal, RetNet, chunked prefill; language corners; dense masks with their backward, integer
    captures compared with each other and with constants; strided, dilated and per-head windows,
    type-pair tables, gates; float and negated data masks, uniform and multi-query scores; piecewise
    penalties, key ranges per head, head-dependent strides, sinks as a bias; sub-documents, float
    key limits, data decay rates, the smaller of two windows, damped scores; Swin windows, dilations
    per head, growing blocks; BigBird's blocks, stripes and chunks by the head count, top-left causal
    by integer scaling, quadratic windows per head; local and global heads, prefixes per head, block
    phases per k/v group, Sparse Transformer's fixed pattern; FIRE and KERPLE, a growing stride,
    a ring-buffer cache; a periodic band, a shared document prefix, head-interleaved keys; T5
    buckets, video frames, a dilation per k/v group; two-sided log buckets, block distances; a
    scalable-softmax temperature, images inside causal text, Sparse Transformer's fixed pattern; a
    window clipped at a start, prefix-LM as a where(), a block table per head; a KV cache's tail,
    anti-causal heads, a dilation read from a table; a distance times a per-head stride, causal at
    half the query rate, a key interval per (batch, head); blocks of a per-batch size, two
    segments split at a separator, a band at twice the query rate; keys at 1.5 times the query
    rate, local heads counted by a captured scalar, padding on both sides; a quadratic distance
    penalty, token types choosing mask and bias, a cosine-modulated score; a Gaussian kernel on the
    score, a dilated 2-D grid, a bf16 key bias that also masks, a modular lattice), through
    the tiled program with the tiles the pass picks for them (most sets found a compiler gap when
    they were written)."""
    kir = kdsl.load(path).ir[name]
    for i, shape in enumerate(SHAPES):
        B, H, Hkv, M, N, D = shape
        if name in ONE_AXIS_FOR_BOTH and M > N:
            dims = {"B": B, "H": H, "Hkv": Hkv, "M": M, "N": N, "D": D}
            with pytest.raises(LaunchError, match=re.escape(ONE_AXIS_FOR_BOTH[name])):
                bounds.check_capture_indices(kir, dims, name)
            continue
        out, _, ref, _ = _run(kir, shape, seed=i)
        assert rel_frobenius(out, ref) <= ATTENTION_TOL, (name, shape)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(st.none(), float_expr(depth=2)), st.one_of(st.none(), bool_expr(depth=2)),
       st.sampled_from(SHAPES), st.integers(0, 2**31 - 1))
def test_generated_programs_interpreted(score, mask, shape, seed):
    kir = kdsl.compile(program(score, mask), "gen.kd").ir["gen"]
    out, _, ref, _ = _run(kir, shape, seed)
    assert rel_frobenius(out, ref) <= ATTENTION_TOL


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(st.none(), float_expr(depth=2)), st.one_of(st.none(), bool_expr(depth=2)),
       st.sampled_from(SHAPES), st.integers(0, 2**31 - 1))
def test_generated_programs_with_lse_interpreted(score, mask, shape, seed):
    """lse as the kernel returns it (kdsl check's tolerance), under the defaults a kernel that
    declares lse gets (fp32 row sums, a fixed reference where the range allows)."""
    src = program(score, mask).replace("v: bf16[B, Hkv, N, D]", "v: bf16[B, Hkv, N, D]; lse: f32[B, H, M]")
    kir = kdsl.compile(src, "gen.kd").ir["gen"]
    out, lse, ref, ref_lse = _run(kir, shape, seed)
    assert rel_frobenius(out, ref) <= ATTENTION_TOL
    fin = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), fin)
    assert torch.allclose(lse[fin].double(), ref_lse[fin], rtol=1e-4, atol=1e-3)


def test_interpreter_catches_an_unsound_tile_classification(monkeypatch):
    """Not vacuous: if mask analysis wrongly called partial tiles 'full', results break."""
    kir = kdsl.load(ROOT / "samples" / "causal.kd").ir["causal"]
    real = mask_analysis.run

    def unsound(k):
        k = real(k)
        return k.with_func("tile_full", ir.Op("bool", "not", (k.func("tile_empty"),)))
    monkeypatch.setattr(mask_analysis, "run", unsound)
    out, _, ref, _ = _run(kir, (1, 2, 2, 300, 300, 64), seed=0)
    assert rel_frobenius(out, ref) > ATTENTION_TOL


def test_interpreter_takes_an_affine_score_from_its_slope_and_base(monkeypatch):
    """relpos runs as F * (qk + slope * col) + base (passes/affine_score.py), as the Hopper kernel
    does: a wrong slope breaks the interpreter's results, so the decomposition is what it ran."""
    kir = kdsl.load(ROOT / "samples" / "relpos.kd").ir["relpos"]
    assert pipeline.lower(kir, get_target("sm_90a"), 64).func("score_slope") is not None
    out, _, ref, _ = _run(kir, (1, 2, 2, 200, 300, 64), seed=0)
    assert rel_frobenius(out, ref) <= ATTENTION_TOL
    real = affine_score.decompose

    def wrong_slope(score):
        form = real(score)
        return form and (form[0], ir.Op("f32", "mul", (form[1], ir.Const("f32", 0.5))), form[2])
    monkeypatch.setattr(affine_score, "decompose", wrong_slope)
    out, _, ref, _ = _run(kir, (1, 2, 2, 200, 300, 64), seed=0)
    assert rel_frobenius(out, ref) > ATTENTION_TOL


@pytest.mark.parametrize("name", ["relpos", "alibi"])
@pytest.mark.parametrize("scale", [-0.7, 0.0, 0.05])
def test_affine_scores_take_any_scale(name, scale):
    """Regression: the affine form divides the slope by F = scale_log2 * c and takes the row max
    on qk + slope * col, so a scale <= 0 gave NaN or a wrong reference (on the GPU too); such
    calls run the score as written (runtime/launch.py, affine_score.needs_positive_scale)."""
    kir = kdsl.load(ROOT / "samples" / f"{name}.kd").ir[name]
    gen = torch.Generator().manual_seed(5)
    q, k, v, caps = attention_inputs(kir, 1, 2, 2, 150, 170, 64, device="cpu", generator=gen)
    f = lambda x: x.float().numpy()
    out, lse = interp.attention(kir, f(q), f(k), f(v), {n: f(c) for n, c in caps.items()}, scale=scale)
    ref, ref_lse = reference.attention(kir, q, k, v, caps, scale=scale)
    assert rel_frobenius(torch.from_numpy(out), ref) <= ATTENTION_TOL
    fin = torch.isfinite(ref_lse)
    slack = math.log1p(tiling.ROW_SUM_LSE_ERROR["bf16"])  # these samples' row sums are by P V at D=64
    assert torch.allclose(torch.from_numpy(lse)[fin].double(), ref_lse[fin], rtol=1e-4, atol=1e-3 + slack)


def test_interpreter_keeps_a_fixed_reference(monkeypatch):
    """softcap's range fixes the softmax reference (passes/score_bounds.py) and the interpreter
    exponentiates against it, never a row max: a reference 200 log2 units too high underflows
    every weight, so the rows come out empty."""
    kir = kdsl.load(ROOT / "samples" / "softcap.kd").ir["softcap"].with_attrs(tensor_row_sum=0)
    assert pipeline.lower(kir, get_target("sm_90a"), 64).attr("score_ref") is not None
    out, lse, ref, ref_lse = _run(kir, (1, 2, 2, 100, 130, 64), seed=1)
    assert rel_frobenius(out, ref) <= ATTENTION_TOL
    assert torch.allclose(lse.double(), ref_lse, atol=1e-3)
    real = score_bounds.fixed_reference
    monkeypatch.setattr(score_bounds, "fixed_reference", lambda b, dtype: None if real(b, dtype) is None
                        else real(b, dtype) + 200.0)
    out, lse, ref, _ = _run(kir, (1, 2, 2, 100, 130, 64), seed=1)
    assert torch.isneginf(lse).all() and not out.any()


def test_row_sums_by_p_v_carry_p_rounding_within_the_documented_bound():
    """With the row sums by P V (tiling.TENSOR_ROW_SUM) the sum adds P as rounded to bf16. Under
    softcap's fixed reference even a lone key's weight is rounded, so lse moves by more than the
    judge's 1e-3 (what kept the row sums off kernels that return lse), and by no more than
    tiling.ROW_SUM_LSE_ERROR; out, normalised by the weights it averaged, stays exact."""
    kir = kdsl.load(ROOT / "samples" / "softcap.kd").ir["softcap"]
    bound = math.log1p(tiling.ROW_SUM_LSE_ERROR["bf16"])
    worst = 0.0
    for seed in range(4):
        out, lse, ref, ref_lse = _run(kir.with_attrs(tensor_row_sum=1), (2, 4, 4, 1, 1, 64), seed=seed)
        assert rel_frobenius(out, ref) <= 1e-5
        worst = max(worst, (lse.double() - ref_lse).abs().max().item())
        exact = _run(kir.with_attrs(tensor_row_sum=0), (2, 4, 4, 1, 1, 64), seed=seed)[1]
        assert torch.allclose(exact.double(), ref_lse, atol=1e-5)
    assert 1e-3 < worst <= bound + 1e-6


def test_kernels_that_return_lse_keep_fp32_row_sums():
    """Regression: softcap with lse at head dim 64 (three consumer warpgroups) took its row sums
    by P V by default, and `kdsl check --interpret` failed 'lse wrong' on single-key rows."""
    src = """attention sc {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    lse: f32[B, H, M]
    score(s, b, h, i, j) = 30 * tanh(s / 30)
}
"""
    kir = kdsl.compile(src, "sc.kd").ir["sc"]
    low = pipeline.lower(kir, get_target("sm_90a"), 64)
    assert low.attr("consumers") == 3 and low.attr("tensor_row_sum") == 0
    assert pipeline.lower(kir.with_attrs(tensor_row_sum=1), get_target("sm_90a"), 64).attr("tensor_row_sum") == 1
    for seed in range(4):
        _, lse, _, ref_lse = _run(kir, (2, 4, 4, 1, 1, 64), seed=seed)
        assert torch.allclose(lse.double(), ref_lse, atol=1e-3)


def test_interpreter_folds_grouped_heads_as_the_kernel_does(monkeypatch):
    """A score blind to the query row and head runs the query heads of a k/v head as rows of
    one problem (pipeline.heads_fold_into_rows); one that reads h must not: with the rule forced
    open, the interpreter's ALiBi-with-GQA results break, so the fold is what it ran."""
    src = """attention g {
    q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]
    slopes: f32[H]
    score(s, b, h, i, j) = s - slopes[h] * float(abs(i - j))
}
attention p {
    q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]
    score(s, b, h, i, j) = 30.0 * tanh(s / 30.0)
}
"""
    kirs = kdsl.compile(src, "g.kd").ir
    shape = (1, 4, 2, 50, 60, 64)
    calls = []
    real = pipeline.heads_fold_into_rows
    monkeypatch.setattr(pipeline, "heads_fold_into_rows", lambda low: calls.append(real(low)) or real(low))
    for name in ("g", "p"):
        out, _, ref, _ = _run(kirs[name], shape, seed=3)
        assert rel_frobenius(out, ref) <= ATTENTION_TOL
    assert calls == [False, True]
    monkeypatch.setattr(pipeline, "heads_fold_into_rows", lambda low: True)
    out, _, ref, _ = _run(kirs["g"], shape, seed=3)
    assert rel_frobenius(out, ref) > ATTENTION_TOL


def test_interpreter_skips_empty_tiles(monkeypatch):
    """The sliding window has empty tiles, and the interpreter meets (and skips) them."""
    kir = kdsl.load(ROOT / "samples" / "sliding_window.kd").ir["sliding_window"]
    calls = []
    real = interp._classify

    def spy(*a):
        cls = real(*a)
        calls.append((cls == "empty").all())
        return cls
    monkeypatch.setattr(interp, "_classify", spy)
    _run(kir, (1, 1, 1, 300, 300, 64), seed=0)
    assert any(calls) and not all(calls)


def test_fp8_interpreter_promotes_per_128_block():
    """Per-128-block promotion with per-block scales reproduces the dequantised product, with
    activations spanning four decades across K blocks."""
    from kdsl import fp8
    kir = kdsl.load(ROOT / "samples" / "fp8_gemm.kd").ir["fp8_gemm"]
    a, sa = fp8.quantize_1x128(torch.randn(130, 384) * torch.logspace(-2, 2, 384))
    b, sb = fp8.quantize_128x128(torch.randn(200, 384))
    out = interp.fp8_gemm(kir, a.float().numpy(), sa.numpy(), b.float().numpy(), sb.numpy())
    ref = reference.fp8_gemm(a, sa, b, sb)
    from kdsl.testing import fp8_difference
    assert fp8_difference(torch.from_numpy(out), ref) < 1e-6


def test_python_api_interpret_switch():
    mod = kdsl.load(ROOT / "samples" / "alibi.kd", interpret=True)
    q, k, v, caps = attention_inputs(mod.ir["alibi"], 1, 2, 2, 100, 90, 64, device="cpu")
    out = mod.alibi(q, k, v, caps["slopes"])
    ref, _ = reference.attention(mod.ir["alibi"], q, k, v, caps)
    assert out.dtype == q.dtype and rel_frobenius(out, ref) <= ATTENTION_TOL
    from kdsl import fp8
    g = kdsl.load(ROOT / "samples" / "fp8_grouped_masked.kd", interpret=True)
    a, sa = fp8.quantize_1x128(torch.randn(2, 64, 256))
    b, sb = fp8.quantize_128x128(torch.randn(2, 130, 256))
    count = torch.tensor([10, 64], dtype=torch.int32)
    out = g.fp8_grouped_masked(a, sa, b, sb, count)
    assert torch.isnan(out[0, 10:].float()).all() and not torch.isnan(out[1].float()).any()


def test_judge_rejects_a_kernel_that_drops_the_last_key():
    """Regression: under a causal mask only the last rows see the last key, so a whole-output
    norm diluted the error below tolerance; the judge now also bounds the worst row."""
    import numpy as np
    from kdsl.backends import Numpy
    from kdsl.check import check_attention
    mod = kdsl.load(ROOT / "samples" / "causal.kd", interpret=True)

    def broken(q, k, v, out, **kw):
        n = max(k.shape[2] - 1, 1)
        return mod.causal(q, np.ascontiguousarray(k[:, :, :n]), np.ascontiguousarray(v[:, :, :n]), out=out)

    shapes = [(1, 2, 2, 129, 127, 64), (1, 2, 2, 257, 257, 64)]
    honest = check_attention(mod.ir["causal"], mod.causal, 1, 0, shapes, Numpy())
    assert all(r.passed for r in honest), honest
    assert not any(r.passed for r in check_attention(mod.ir["causal"], broken, 1, 0, shapes, Numpy()))


def test_check_calls_at_other_scales_and_judges_them():
    """kdsl check's fixed cases include the scales of cases.CHECK_SCALES (0 and a negative one),
    passed to the call and to the reference: a kernel that ignores the call's scale fails them."""
    from kdsl.backends import Numpy
    from kdsl.cases import CHECK_SCALES, attention_shapes
    from kdsl.check import check_attention
    mod = kdsl.load(ROOT / "samples" / "relpos.kd", interpret=True)
    kir = mod.ir["relpos"]
    scaled = [c for c in attention_shapes(kir) if c.scale is not None]
    assert sorted(c.scale for c in scaled) == sorted(CHECK_SCALES)

    def ignores_scale(q, k, v, out, scale=None, **kw):
        return mod.relpos(q, k, v, out=out, **kw)
    assert all(r.passed for r in check_attention(kir, mod.relpos, 1, 0, scaled, Numpy()))
    assert not any(r.passed for r in check_attention(kir, ignores_scale, 1, 0, scaled, Numpy()))


def test_check_names_a_callable_that_cannot_take_the_scale():
    """Regression: a wrapped kernel without scale= met the scaled cases as a bare TypeError from
    inside the judge; it is now refused up front with what to change."""
    import pytest
    from kdsl.backends import Numpy
    from kdsl.check import check_attention
    mod = kdsl.load(ROOT / "samples" / "causal.kd", interpret=True)

    def no_scale(q, k, v, out):
        return mod.causal(q, k, v, out=out)
    with pytest.raises(TypeError, match="no_scale.*scale= keyword"):
        check_attention(mod.ir["causal"], no_scale, 1, 0, None, Numpy())
    # without scaled cases the same callable is judged as before
    assert all(r.passed for r in check_attention(mod.ir["causal"], no_scale, 1, 0, [(1, 2, 2, 65, 70, 64)], Numpy()))


def test_accumulating_kernels_add_into_out_and_leave_padding_alone():
    """out += a . b^T (fp32) through the interpreter, dense and grouped contiguous with
    padding rows: those keep the values they had."""
    import numpy as np
    from kdsl import fp8
    from kdsl.testing import fp8_difference
    rng = np.random.default_rng(7)
    src = """gemm acc { a: e4m3[M, K] block(1, 128); b: e4m3[G, N, K] block(128, 128); group: i32[M]
                        out: f32[M, N] accumulate }"""
    g = kdsl.compile(src, "acc.kd", interpret=True).acc
    a, sa = fp8.quantize_1x128(rng.standard_normal((150, 256), dtype=np.float32))
    b, sb = fp8.quantize_128x128(rng.standard_normal((3, 130, 256), dtype=np.float32))
    group = rng.integers(-1, 3, 150).astype(np.int32)
    c = rng.standard_normal((150, 130), dtype=np.float32)
    out = c.copy()
    assert g(a, sa, b, sb, group, out=out) is out
    pad = group < 0
    assert pad.any() and (out[pad] == c[pad]).all()
    ref = reference.fp8_gemm(a, sa, b, sb, group=group, c=c)
    assert fp8_difference(out[~pad], ref[~pad]) < 1e-6
    dense = kdsl.load(ROOT / "samples" / "fp8_gemm_accumulate.kd", interpret=True).fp8_gemm_accumulate
    b2, sb2 = b[0], sb[0]
    out = c.copy()
    dense(a, sa, b2, sb2, out=out)
    assert fp8_difference(out, c + reference.fp8_gemm(a, sa, b2, sb2)) < 1e-6
    from kdsl.errors import LaunchError
    with pytest.raises(LaunchError, match="out is declared 'accumulate'.*pass the f32 array to add into as out="):
        dense(a, sa, b2, sb2)


def test_expected_rows_is_taken_and_checked_by_the_interpreter():
    """A call's expected_rows= only steers the GPU's tiles; the interpreter checks it and computes
    the same result (the runtime's call convention, one code path for both backends)."""
    from kdsl import fp8
    from kdsl.errors import KdslError
    g = kdsl.load(ROOT / "samples" / "fp8_grouped_masked.kd", interpret=True).fp8_grouped_masked
    a, sa = fp8.quantize_1x128(torch.randn(2, 64, 256))
    b, sb = fp8.quantize_128x128(torch.randn(2, 130, 256))
    count = torch.tensor([10, 64], dtype=torch.int32)
    plain, hinted = g(a, sa, b, sb, count), g(a, sa, b, sb, count, expected_rows=16)
    assert torch.equal(plain.float().nan_to_num(7.0), hinted.float().nan_to_num(7.0))
    with pytest.raises(KdslError, match="expected_rows must be a positive integer"):
        g(a, sa, b, sb, count, expected_rows=-1)


def test_a_scale_with_padded_rows_is_taken():
    """DeepGEMM's TMA-aligned a_scale pads its rows of M floats to a multiple of 4: taken (the
    GPU path checks the same way, runtime/gemm_launch.sa_pitch); other layouts are refused."""
    from kdsl import LaunchError, fp8
    from kdsl.runtime.arrays import info
    from kdsl.runtime.gemm_launch import sa_pitch
    g = kdsl.load(ROOT / "samples" / "fp8_gemm.kd", interpret=True).fp8_gemm
    a, sa = fp8.quantize_1x128(torch.randn(3, 256))
    b, sb = fp8.quantize_128x128(torch.randn(130, 256))
    rows = torch.zeros(2, 4)
    rows[:, :3] = sa.t()
    padded = rows[:, :3].t()  # shape [3, 2], strides [1, 4]
    assert torch.equal(g(a, padded, b, sb), g(a, sa, b, sb))
    with pytest.raises(LaunchError, match=r"or \[1, P\] with a pitch P >= M"):
        g(a, sa.contiguous(), b, sb)
    masked = torch.zeros(5, 2, 8)  # [G, K/128, P]: pitch 8 for M = 6
    view = masked[:, :, :6].transpose(1, 2)
    assert sa_pitch(info(view, "a_scale"), 5, 6, 2, True) == 8
    assert sa_pitch(info(masked[:, :, :6].transpose(1, 2)[:, :, :1], "a_scale"), 5, 6, 1, True) == 16  # one K block: by G
    assert sa_pitch(info(torch.zeros(2, 5).t(), "a_scale"), 1, 6, 2, False) is None  # a pitch under M
