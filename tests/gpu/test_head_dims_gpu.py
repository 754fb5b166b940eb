"""Every head dim the Hopper kernel takes (multiples of 16 up to 256, and through zero padding
any other up to 256) and a value head dim of its own (MLA's 192 / 128, and v wider or narrower than q), on the GPU against the float64
reference: ragged lengths, GQA, a mask, lse, split-KV decode (the combine step reads v's
head dim), torch.compile and a CUDA graph."""
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import kdsl
from kdsl import reference
from kdsl.testing import ATTENTION_TOL, attention_inputs, rel_frobenius

from conftest import ROOT
from exprgen import bool_expr, float_expr

pytestmark = pytest.mark.gpu

SOURCE = """
attention hd {
    q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, Dv]
    lse: f32[B, H, M]
    score(s, b, h, i, j) = s + 0.01 * float(i - j)
    mask(b, h, i, j) = j <= i + 100
}
"""
PAIRS = [(d, d) for d in range(16, 257, 16)] + [(192, 128), (64, 128), (128, 64), (256, 32), (32, 256), (96, 160)]


def _run(mod, shape, d, dv, seed):
    torch = pytest.importorskip("torch")
    kir = mod.ir["hd"]
    B, H, Hkv, M, N = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, N, d, generator=gen, Dv=dv)
    out = torch.full((B, H, M, dv), float("nan"), dtype=q.dtype, device=q.device)
    _, lse = mod.hd(q, k, v, out=out)
    ref, ref_lse = reference.attention(kir, q, k, v, caps)
    err = rel_frobenius(out, ref)
    assert err <= ATTENTION_TOL, f"D={d} Dv={dv} {shape}: rel err {err:.3e}"
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    assert torch.allclose(lse[finite], ref_lse[finite].float(), atol=2e-3, rtol=1e-3)


@pytest.fixture(scope="module")
def mod():
    return kdsl.compile(SOURCE, "hd.kd")


@pytest.mark.parametrize("d,dv", PAIRS, ids=lambda x: str(x))
def test_head_dims_prefill_ragged_gqa(mod, d, dv):
    _run(mod, (2, 4, 2, 200, 333), d, dv, seed=d * 1000 + dv)


@pytest.mark.parametrize("d,dv", [(72, 72), (40, 40), (8, 8), (24, 120), (250, 250), (64, 72)], ids=lambda x: str(x))
def test_head_dims_off_the_multiples_of_16_are_padded(mod, d, dv):
    """runtime/head_pad.py: zero-padded copies, the output sliced; out= and lse as at other dims."""
    _run(mod, (2, 4, 2, 200, 333), d, dv, seed=d * 1000 + dv)
    _run(mod, (1, 8, 2, 1, 5000), d, dv, seed=d + dv)  # split-KV decode


def test_gradients_at_a_padded_head_dim():
    """dq, dk and dv at head dim 72 are those of padding by hand (up to the order of the atomic
    sums of dq), and the forward that of the reference."""
    torch = pytest.importorskip("torch")
    mod = kdsl.load(ROOT / "samples" / "alibi.kd")
    base = [torch.randn(2, 4, n, 72, device="cuda", dtype=torch.bfloat16) for n in (300, 500, 500)]
    slopes = torch.rand(4, device="cuda")
    dout = torch.randn(2, 4, 300, 72, device="cuda", dtype=torch.bfloat16)
    grads = []
    for by_hand in (False, True):
        q, k, v = (x.clone().requires_grad_() for x in base)
        pad = (lambda x: torch.nn.functional.pad(x, (0, 8)))
        out = mod.alibi(pad(q), pad(k), pad(v), slopes, scale=72 ** -0.5)[..., :72] if by_hand else \
            mod.alibi(q, k, v, slopes)
        grads.append(torch.autograd.grad(out, (q, k, v), dout))
        if not by_hand:
            want = reference.attention(mod.ir["alibi"], *base, {"slopes": slopes})[0]
            assert rel_frobenius(out, want) <= ATTENTION_TOL
    for g, w in zip(*grads):
        assert torch.allclose(g.float(), w.float(), rtol=2 ** -7, atol=1e-3)


@pytest.mark.parametrize("d,dv", [(32, 32), (96, 96), (192, 128), (256, 256), (80, 208)], ids=lambda x: str(x))
def test_head_dims_split_kv_decode(mod, d, dv):
    _run(mod, (1, 8, 2, 1, 5000), d, dv, seed=d + dv)


def test_mla_sample_and_plain_at_other_head_dims():
    torch = pytest.importorskip("torch")
    mla = kdsl.load(ROOT / "samples" / "mla.kd")
    q, k, v, caps = attention_inputs(mla.ir["mla"], 1, 4, 4, 300, 300, 192, Dv=128)
    out = mla.mla(q, k, v)
    assert out.shape == (1, 4, 300, 128)
    assert rel_frobenius(out, reference.attention(mla.ir["mla"], q, k, v)[0]) <= ATTENTION_TOL
    plain = kdsl.load(ROOT / "samples" / "plain.kd")
    for d in (96, 256):
        q, k, v, _ = attention_inputs(plain.ir["plain"], 2, 8, 8, 1000, 1000, d)
        assert rel_frobenius(plain.plain(q, k, v), reference.attention(plain.ir["plain"], q, k, v)[0]) <= ATTENTION_TOL
    with pytest.raises(kdsl.LaunchError, match="head dimension 288 of q and k is not supported: .* to 256"):
        x = torch.randn(1, 1, 8, 288, device="cuda", dtype=torch.bfloat16)
        plain.plain(x, x, x)


def test_value_head_dim_under_torch_compile_and_cuda_graph(mod):
    torch = pytest.importorskip("torch")
    kir = mod.ir["hd"]
    q, k, v, _ = attention_inputs(kir, 1, 4, 2, 130, 260, 192, Dv=128)
    eager, _ = mod.hd(q, k, v)
    compiled = torch.compile(lambda a, b, c: mod.hd(a, b, c)[0], fullgraph=True)
    assert torch.equal(compiled(q, k, v), eager)
    out = torch.empty_like(eager)
    mod.hd(q, k, v, out=out)  # plan and build outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        mod.hd(q, k, v, out=out)
    out.zero_()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)


# Generated scores and masks (tests/exprgen.py) at the head dims beyond 64 / 128 and with v's
# head dim of its own: the same property test as test_attention_gpu.py's, over head dims.
HYPOTHESIS_PAIRS = [(32, 32), (96, 96), (192, 192), (256, 256), (192, 128), (64, 128), (128, 64), (96, 160)]
HYPOTHESIS_SHAPES = [(1, 2, 2, 1, 300), (2, 4, 2, 129, 127), (1, 3, 1, 200, 513), (2, 2, 2, 64, 64)]


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(st.none(), float_expr(depth=2)), st.one_of(st.none(), bool_expr(depth=2)),
       st.sampled_from(HYPOTHESIS_PAIRS), st.sampled_from(HYPOTHESIS_SHAPES), st.integers(0, 2**31 - 1))
def test_generated_programs_at_other_head_dims(score, mask, dims, shape, seed):
    torch = pytest.importorskip("torch")
    d, dv = dims
    lines = ["attention gen {", "    q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, Dv]"]
    lines += [f"    score(s, b, h, i, j) = {score}"] if score else []
    lines += [f"    mask(b, h, i, j) = {mask}"] if mask else []
    mod = kdsl.compile("\n".join(lines + ["}"]) + "\n", "generated.kd")
    kir = mod.ir["gen"]
    B, H, Hkv, M, N = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, N, d, generator=gen, Dv=dv)
    out = torch.full((B, H, M, dv), float("nan"), dtype=q.dtype, device=q.device)
    mod.gen(q, k, v, out=out, **caps)
    ref, _ = reference.attention(kir, q, k, v, caps)
    err = rel_frobenius(out, ref)
    assert err <= ATTENTION_TOL, f"D={d} Dv={dv} {shape} score={score} mask={mask}: rel err {err:.3e}"
