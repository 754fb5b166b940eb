"""Attention kernels on the GPU against the float64 reference of the same program."""

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import kdsl
from kdsl import reference
from kdsl.testing import ATTENTION_TOL, attention_inputs, rel_frobenius

from conftest import ROOT
from exprgen import bool_expr, float_expr, program

pytestmark = pytest.mark.gpu

ATTENTION_SAMPLES = ["relpos", "alibi", "softcap", "causal", "sliding_window", "document_mask", "natten2d", "prefix_lm",
                     "padded_causal"]
# (B, H, Hkv, M, N, D): ragged lengths, 1, tile +- 1, M != N, GQA and MQA, both head dims.
SHAPES = [
    (2, 4, 4, 256, 256, 128), (1, 2, 2, 1, 1, 64), (1, 3, 3, 1, 300, 128), (2, 2, 2, 129, 127, 64),
    (1, 8, 2, 127, 65, 128), (1, 4, 1, 200, 513, 64), (3, 2, 2, 64, 63, 128), (1, 2, 2, 1000, 1000, 128),
    (4, 16, 16, 130, 70, 64),  # B*H = 64
]


def _check(mod, name, shape, seed, kernel=None, **call):
    """Run mod.name (or `kernel`, the same program under another schedule) on fresh inputs
    against the float64 reference."""
    torch = pytest.importorskip("torch")
    gen = torch.Generator(device="cuda").manual_seed(seed)
    k_ir = mod.ir[name]
    B, H, Hkv, M, N, D = shape
    if "Hkv" not in k_ir.dims:  # k declared with q's head count: no GQA for this program
        Hkv = H
    q, k, v, caps = attention_inputs(k_ir, B, H, Hkv, M, N, D, generator=gen)
    out = torch.full_like(q, float("nan"))
    res = (kernel or getattr(mod, name))(q, k, v, out=out, **caps, **call)
    got = res[0] if isinstance(res, tuple) else res
    assert got.data_ptr() == out.data_ptr()
    ref, ref_lse = reference.attention(k_ir, q, k, v, caps, call.get("scale"))
    err = rel_frobenius(got, ref)
    assert err <= ATTENTION_TOL, f"{name} {shape}: rel err {err:.3e}"
    return got, ref, (res[1] if isinstance(res, tuple) else None), ref_lse


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", ATTENTION_SAMPLES)
def test_sample_matches_reference(name, shape):
    mod = kdsl.load(ROOT / "samples" / f"{name}.kd")
    _check(mod, name, shape, seed=hash((name, shape)) % 2**31)


@pytest.mark.parametrize("name", ["causal", "alibi", "prefix_lm"])
def test_items_ordered_in_head_groups_of_unequal_size(name):
    """20 heads of 32 q tiles fall into two head groups (9 and 11 heads, AttnArgs::head_group)
    on an H100 or H200: every item of both groups, the remainder's included, is computed."""
    torch = pytest.importorskip("torch")
    from kdsl.runtime import geometry
    props = torch.cuda.get_device_properties(0)
    B, H, S, D = 4, 5, 4096, 128
    group = geometry.attention_head_group(B * H, S // 128, props.multi_processor_count, S * 2 * D * 2,
                                          props.L2_cache_size)
    assert 1 < group and B * H // group >= 2 and B * H % group != 0, group
    mod = kdsl.load(ROOT / "samples" / f"{name}.kd")
    _check(mod, name, (B, H, H, S, S, D), seed=hash(name) % 2**31)


# Schedules other than the defaults: three consumer warpgroups taking turns round-robin, wide
# kv tiles with two stages, one warpgroup, grid launches, half the exponentials by polynomial;
# masked, streamed and ragged cases.
SCHEDULES = [dict(consumers=3, stages=2), dict(consumers=3, stages=3, tile_n=112), dict(tile_n=176, stages=2),
             dict(tile_n=192, stages=2), dict(consumers=1, tile_n=96, stages=4), dict(schedule="grid"), dict(poly_exp2=2)]


@pytest.mark.parametrize("attrs", SCHEDULES, ids=lambda a: ",".join(f"{k}={v}" for k, v in a.items()))
@pytest.mark.parametrize("name", ["relpos", "causal", "document_mask", "softcap"])
def test_schedules_match_reference(name, attrs):
    mod = kdsl.load(ROOT / "samples" / f"{name}.kd")
    kern = getattr(mod, name).with_attrs(**attrs)
    d = 64 if attrs.get("consumers") == 3 or attrs.get("tile_n") == 192 else 128  # what fits shared memory
    for i, shape in enumerate([(2, 4, 2, 700, 700, d), (1, 3, 3, 129, 1000, d), (3, 2, 1, 1, 200, d)]):
        _check(mod, name, shape, seed=11 + i, kernel=kern)


def test_persistent_launches_on_concurrent_streams_each_take_their_own_items():
    """Persistent CTAs take work items from a counter per stream (runtime/launch.py
    Loaded.work_counter): two streams running the same program at once must not share one."""
    torch = pytest.importorskip("torch")
    mod = kdsl.load(ROOT / "samples" / "document_mask.kd")
    kern = mod.document_mask.with_attrs(schedule="persistent")
    kir = mod.ir["document_mask"]
    cases = [attention_inputs(kir, 4, 8, 8, 1000, 1000, 128, generator=torch.Generator(device="cuda").manual_seed(s))
             for s in (1, 2)]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    torch.cuda.synchronize()
    outs = [[], []]
    for _ in range(4):
        for i, ((q, k, v, caps), stream) in enumerate(zip(cases, streams)):
            with torch.cuda.stream(stream):
                outs[i].append(kern(q, k, v, **caps))
    torch.cuda.synchronize()
    for (q, k, v, caps), got in zip(cases, outs):
        ref, _ = reference.attention(kir, q, k, v, caps)
        for o in got:
            assert rel_frobenius(o, ref) <= ATTENTION_TOL


def test_graphs_captured_on_one_stream_replay_at_once_on_two():
    """Two graphs captured on torch.cuda.graph's default capture stream, each holding a
    persistent launch, replayed at the same time on two streams: a captured launch must not
    share a work counter with another graph's (runtime/launch.py _work_counter)."""
    torch = pytest.importorskip("torch")
    mod = kdsl.load(ROOT / "samples" / "document_mask.kd")
    kern, kir = mod.document_mask, mod.ir["document_mask"]
    cases = [attention_inputs(kir, 4, 8, 8, 1000, 1000, 128, generator=torch.Generator(device="cuda").manual_seed(s))
             for s in (3, 4)]
    for q, k, v, caps in cases:  # built and planned before capture
        kern(q, k, v, **caps)
    torch.cuda.synchronize()
    graphs, outs = [], []
    for q, k, v, caps in cases:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            outs.append(kern(q, k, v, **caps))
        graphs.append(g)
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    torch.cuda.synchronize()
    refs = [reference.attention(kir, q, k, v, caps)[0] for q, k, v, caps in cases]
    for _ in range(4):
        for g, out, stream in zip(graphs, outs, streams):
            with torch.cuda.stream(stream):
                out.fill_(float("nan"))  # an item a replay skipped would stay NaN
                g.replay()
        torch.cuda.synchronize()
        for got, ref in zip(outs, refs):
            assert rel_frobenius(got, ref) <= ATTENTION_TOL


def test_natten_on_image_shape():
    mod = kdsl.load(ROOT / "samples" / "natten2d.kd")
    _check(mod, "natten2d", (1, 4, 4, 64 * 128, 64 * 128, 128), seed=7)


LSE_SRC = """
attention with_lse {
    q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]
    lse: f32[B, H, M]
    mask(b, h, i, j) = j <= i - 5       # rows 0..4 see no key at all
}
"""


def test_lse_and_fully_masked_rows():
    torch = pytest.importorskip("torch")
    mod = kdsl.compile(LSE_SRC, "lse.kd")
    got, ref, lse, ref_lse = _check(mod, "with_lse", (2, 4, 2, 300, 300, 128), seed=3)
    assert torch.all(got[:, :, :5] == 0)
    assert torch.all(torch.isneginf(lse[:, :, :5]))
    finite = torch.isfinite(ref_lse)
    assert torch.allclose(lse[finite].double(), ref_lse[finite], atol=1e-3, rtol=1e-4)


NO_KEYS_SRC = """
attention late_start {
    q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]
    lse: f32[B, H, M]
    mask(b, h, i, j) = j <= i - 200     # rows 0..199 see no key: whole q tiles without one
}
"""


@pytest.mark.parametrize("d", [64, 128])
def test_q_tiles_that_see_no_key_write_zeros_and_neg_inf(d):
    torch = pytest.importorskip("torch")
    mod = kdsl.compile(NO_KEYS_SRC, "late.kd")
    got, ref, lse, ref_lse = _check(mod, "late_start", (2, 4, 2, 333, 300, d), seed=d)
    assert torch.all(got[:, :, :200] == 0)
    assert torch.all(torch.isneginf(lse[:, :, :200]))
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    assert torch.allclose(lse[finite].double(), ref_lse[finite], atol=1e-3, rtol=1e-4)


SCORE_AT_KV_SRC = """
attention rel_bias {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    bias: f32[H, M + N]
    score(s, b, h, i, j) = s + bias[h, i - j + N - 1]
    mask(b, h, i, j) = j <= i + 7
}
"""


@pytest.mark.parametrize("shape", [(2, 3, 3, 300, 300, 128), (1, 2, 2, 77, 200, 64)], ids=lambda s: "x".join(map(str, s)))
def test_score_that_loads_at_kv_on_ragged_and_masked_tiles(shape):
    """Its loads at kv stay below N on ragged tiles (the kernel keeps a clamped copy of the
    score for them; every other score is evaluated once, unclamped, for all tiles)."""
    mod = kdsl.compile(SCORE_AT_KV_SRC, "rel_bias.kd")
    _check(mod, "rel_bias", shape, seed=sum(shape))


KEY_BOUNDS_SRC = """
attention limits {
    q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]
    lim: i32[B]
    mask(b, h, i, j) = (j < lim[b] or j <= i - 3) and j // 48 >= i // 96 - 2 and abs(i % 128 - j % 128) <= 40
}
"""


def test_key_bounds_do_not_wrap_at_the_i32_limits():
    """passes/kv_bounds.py turns j < lim[b] into j <= lim[b] - 1: the kernel computes it in 64
    bits, so lim = -2^31 keeps no key there instead of wrapping to every key. The mask also
    mixes a union of rays, a floor division narrower than the tile and a modulus by it."""
    torch = pytest.importorskip("torch")
    mod = kdsl.compile(KEY_BOUNDS_SRC, "limits.kd")
    assert mod.ir["limits"] is not None
    q, k, v, _ = attention_inputs(mod.ir["limits"], 4, 2, 2, 700, 650, 128)
    lim = torch.tensor([-2**31, 2**31 - 1, 0, 300], dtype=torch.int32, device="cuda")
    got = mod.limits(q, k, v, lim=lim)
    ref, _ = reference.attention(mod.ir["limits"], q, k, v, {"lim": lim})
    assert rel_frobenius(got, ref) <= ATTENTION_TOL


def test_scale_override_and_fp16():
    pytest.importorskip("torch")
    src = (ROOT / "samples" / "softcap.kd").read_text().replace("bf16", "f16")
    mod = kdsl.compile(src, "softcap_f16.kd")
    _check(mod, "softcap", (1, 4, 4, 200, 333, 64), seed=11, scale=0.3)


def test_deterministic():
    torch = pytest.importorskip("torch")
    mod = kdsl.load(ROOT / "samples" / "alibi.kd")
    q, k, v, caps = attention_inputs(mod.ir["alibi"], 2, 4, 4, 500, 700, 128)
    a, b = mod.alibi(q, k, v, **caps), mod.alibi(q, k, v, **caps)
    assert torch.equal(a, b)


def test_bad_arguments_are_kdsl_errors():
    torch = pytest.importorskip("torch")
    from kdsl.errors import LaunchError
    mod = kdsl.load(ROOT / "samples" / "alibi.kd")
    q = torch.randn(1, 4, 64, 128, device="cuda", dtype=torch.bfloat16)
    slopes = torch.rand(4, device="cuda")
    cases = [
        (lambda: mod.alibi(q.float(), q, q, slopes), "must be torch.bfloat16"),
        (lambda: mod.alibi(q[0], q, q, slopes), "must have 4 dimensions"),
        (lambda: mod.alibi(q, q[:, :3], q[:, :3], slopes), "dimension 1 (H) must be 4, got 3"),
        (lambda: mod.alibi(*[torch.randn(1, 4, 64, 300, device="cuda", dtype=torch.bfloat16)] * 3, slopes),
         "head dimension 300 of q and k is not supported: it must be from 1 to 256"),
        (lambda: mod.alibi(*[torch.randn(1, 4, 64, 272, device="cuda", dtype=torch.bfloat16)] * 3, slopes),
         "head dimension 272 of q and k is not supported: it must be from 1 to 256"),
        # inputs in any layout are copied (test_inputs_in_any_layout); an out is written where it is
        (lambda: mod.alibi(q, q, q, slopes, out=torch.empty(1, 4, 128, 64, device="cuda", dtype=q.dtype).transpose(2, 3)),
         "argument 'out' must be contiguous"),
        (lambda: mod.alibi(q.cpu(), q, q, slopes), "is on the CPU"),
        (lambda: mod.alibi(q, q, q), "missing captured tensor(s) ['slopes']"),
        (lambda: mod.alibi(q, q, q, slopes[:3]), "'slopes' dimension 0 (H) must be 4, got 3"),
        (lambda: mod.alibi(q, q, q, slopes.int()), "'slopes' must be torch.float32"),
        (lambda: mod.alibi(q, q, q, slopes, out=q[:, :, :10]),
         "out must have shape [1, 4, 64, 128] (q's batch, heads and length, v's head dim)"),
        (lambda: mod.alibi(q, q, q, slopes, bias=slopes), "unexpected argument 'bias'"),
        # an out that aliases an input: other CTAs would read what one has written
        (lambda: mod.alibi(q, q.clone(), (v := q.clone()), slopes, out=v), "out= shares memory with v"),
        (lambda: mod.alibi(torch.empty(q.numel() + 1, device="cuda", dtype=q.dtype)[1:].view(q.shape), q, q, slopes),
         "must be 16-byte aligned"),
    ]
    for fn, needle in cases:
        with pytest.raises(LaunchError) as e:
            fn()
        assert needle in str(e.value), (needle, str(e.value))


@pytest.mark.parametrize("key_strides", [False, True])
def test_inputs_in_any_layout(key_strides, monkeypatch):
    """q, k and v as a model makes them (a projection viewed [B, N, H, D], transposed) and a
    captured tensor expanded (stride 0) give what their row-major copies give, gradients too,
    k and v copied or (KDSL_KEY_STRIDES) read in place."""
    torch = pytest.importorskip("torch")
    from kdsl.runtime import attention_launch
    monkeypatch.setattr(attention_launch, "KEY_STRIDES", key_strides)
    mod = kdsl.load(ROOT / "samples" / "alibi.kd")
    B, N, H, D = 2, 300, 4, 64
    x = torch.randn(B, N, 3, H, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    slope = torch.rand(1, device="cuda", requires_grad=True)
    q, k, v = (x[:, :, n].transpose(1, 2) for n in range(3))
    assert not q.is_contiguous()
    out = mod.alibi(q, k, v, slope.expand(H))
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (x, slope), dout)
    xc, sc = x.detach().clone().requires_grad_(), slope.detach().clone().requires_grad_()
    qc, kc, vc = (xc[:, :, n].transpose(1, 2).contiguous() for n in range(3))
    want = mod.alibi(qc, kc, vc, sc.expand(H).contiguous())
    assert torch.equal(out, want)
    # (dq and the slope's gradient are summed by atomics, in no fixed order: a bf16 rounding apart)
    for g, w in zip(grads, torch.autograd.grad(want, (xc, sc), dout)):
        assert torch.allclose(g.float(), w.float(), rtol=2 ** -7, atol=1e-3)


@pytest.mark.parametrize("sample,B,H,Hkv,M,N,D,Dv", [
    ("plain", 2, 8, 2, 1, 999, 128, 128),     # a GQA decode step (split keys; query heads folded into rows)
    ("plain", 1, 4, 4, 300, 777, 64, 64),
    ("causal", 2, 8, 8, 300, 1000, 128, 128),
    ("alibi", 2, 4, 4, 129, 513, 128, 128),
    ("document_mask", 1, 2, 2, 600, 600, 64, 64),  # a mask over data: the tile summary beside strided keys
    ("mla", 1, 4, 4, 200, 333, 192, 128),
])
def test_keys_in_any_layout_are_read_in_place(sample, B, H, Hkv, M, N, D, Dv, monkeypatch):
    """k and v sliced from caches longer than N and kept [B, N, Hkv, D] (FlashAttention's and
    paged caches' layout), passed transposed: under KDSL_KEY_STRIDES the Hopper kernel's 4-D
    tensor maps read them where they are (no copy: the plan's maps carry their strides) and the
    result equals that of row-major copies, bit for bit (the same kernel on the same values)."""
    torch = pytest.importorskip("torch")
    from kdsl.runtime import attention_launch
    monkeypatch.setattr(attention_launch, "KEY_STRIDES", True)
    mod = kdsl.load(ROOT / "samples" / f"{sample}.kd")
    kernel = getattr(mod, sample)
    q, _, _, caps = attention_inputs(mod.ir[sample], B, H, Hkv, M, N, D, Dv=Dv)
    k_cache = torch.randn(B, N + 37, Hkv, D, device="cuda", dtype=q.dtype)
    v_cache = torch.randn(B, N + 37, Hkv, Dv, device="cuda", dtype=q.dtype)
    k, v = k_cache[:, 5:N + 5].transpose(1, 2), v_cache[:, 5:N + 5].transpose(1, 2)
    assert not k.is_contiguous() and not v.is_contiguous()
    out = kernel(q, k, v, **caps)
    plan = kernel._plan_for(q, k, v, list(caps.values()), None, None, None)
    if plan.maps:  # (the sm_80 kernel copies them: Plan.copy_keys)
        # (an axis of one batch has no stride to honour: the map gives it the span of the rest, tma.key_strides)
        batch_rows = N + 37 if B > 1 else N
        assert not plan.copy_keys and list(plan.maps[1].strides) == [Hkv * D * 2, D * 2, batch_rows * Hkv * D * 2]
    assert torch.equal(out, kernel(q, k.contiguous(), v.contiguous(), **caps))


def test_unprovable_capture_index_is_refused():
    torch = pytest.importorskip("torch")
    from kdsl.errors import LaunchError
    mod = kdsl.compile("""attention rb {
        q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
        bias: f32[H, T]
        score(s, b, h, i, j) = s + bias[h, i - j + N - 1]
    }""", "rb.kd")
    q = torch.randn(1, 2, 64, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(LaunchError, match="index 1 of 'bias'"):
        mod.rb(q, q, q, bias=torch.randn(2, 100, device="cuda"))
    out = mod.rb(q, q, q, bias=torch.randn(2, 127, device="cuda"))  # i - j + N - 1 in [0, 126]
    assert torch.isfinite(out).all()


def test_cupy_arrays_work_and_return_cupy():
    cupy = pytest.importorskip("cupy")
    torch = pytest.importorskip("torch")
    src = (ROOT / "samples" / "causal.kd").read_text().replace("bf16", "f16")
    mod = kdsl.compile(src, "causal_f16.kd")
    q = cupy.random.standard_normal((1, 2, 100, 64)).astype(cupy.float16)
    out = mod.causal(q, q, q)
    assert isinstance(out, cupy.ndarray)
    qt = torch.as_tensor(q, device="cuda")
    ref, _ = reference.attention(mod.ir["causal"], qt, qt, qt)
    assert rel_frobenius(torch.as_tensor(out, device="cuda"), ref) <= ATTENTION_TOL


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(st.none(), float_expr(depth=2)), st.one_of(st.none(), bool_expr(depth=2)),
       st.sampled_from(SHAPES), st.integers(0, 2**31 - 1))
def test_generated_programs_match_reference(score, mask, shape, seed):
    mod = kdsl.compile(program(score, mask), "generated.kd")
    _check(mod, "gen", shape, seed)


def test_capturable_in_cuda_graph():
    torch = pytest.importorskip("torch")
    mod = kdsl.load(ROOT / "samples" / "relpos.kd")
    q, k, v, _ = attention_inputs(mod.ir["relpos"], 1, 4, 4, 200, 300, 128)
    out = torch.empty_like(q)
    mod.relpos(q, k, v, out=out)  # compile and plan outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        mod.relpos(q, k, v, out=out)
    out.fill_(float("nan"))
    q.copy_(torch.randn_like(q))  # new inputs, same buffers
    g.replay()
    torch.cuda.synchronize()
    ref, _ = reference.attention(mod.ir["relpos"], q, k, v)
    assert rel_frobenius(out, ref) <= ATTENTION_TOL


FIXED_REF_SRC = """
attention capped {
    q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]
    lse: f32[B, H, M]
    score(s, b, h, i, j) = 50.0 * tanh(s / 50.0)
    mask(b, h, i, j) = j <= i - 3 or j > i + 1000     # rows 0..2 see no key
}
"""


@pytest.mark.parametrize("extreme", [False, True])
def test_fixed_reference_at_both_ends_of_the_score_range(extreme):
    """A capped score takes a fixed softmax reference (passes/score_bounds.py: 50 tanh(s / 50)
    spans 144 log2 units, the reference 110 above the bottom). With q and k scaled up and
    anti-aligned every score sits at -50, the bottom of the range: the weights are ~2^-110
    and must still average V; at random inputs the top must not overflow. Fully masked rows
    stay 0 with lse -inf."""
    torch = pytest.importorskip("torch")
    mod = kdsl.compile(FIXED_REF_SRC, "capped.kd")
    assert mod.capped._lowered(128, 128).attr("score_ref") is not None
    gen = torch.Generator(device="cuda").manual_seed(11)
    B, H, M, N, D = 2, 4, 300, 300, 128
    q = torch.randn(B, H, M, D, device="cuda", generator=gen).to(torch.bfloat16)
    k = torch.randn(B, H, N, D, device="cuda", generator=gen).to(torch.bfloat16)
    v = torch.randn(B, H, N, D, device="cuda", generator=gen).to(torch.bfloat16)
    if extreme:  # s = q.k / sqrt(D) ~ -1e4 for every pair: tanh saturates at -1
        base = torch.randn(D, device="cuda", generator=gen)
        q = (base.abs() * 10).expand(B, H, M, D).to(torch.bfloat16).contiguous()
        k = (-base.abs() * 10).expand(B, H, N, D).to(torch.bfloat16).contiguous()
    out, lse = mod.capped(q, k, v)
    ref, ref_lse = reference.attention(mod.ir["capped"], q, k, v, {})
    assert rel_frobenius(out, ref) <= ATTENTION_TOL
    assert torch.all(out[:, :, :3] == 0) and torch.all(torch.isneginf(lse[:, :, :3]))
    finite = torch.isfinite(ref_lse)
    assert torch.allclose(lse[finite].double(), ref_lse[finite], atol=1e-3, rtol=1e-4)
