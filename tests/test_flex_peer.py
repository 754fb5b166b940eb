"""The bench's FlexAttention peer compiles every variant in one process (CPU inductor here).
Regression: with automatic dynamic shapes, the variants after the first recompiled with
symbolic sizes and those indexing captured tensors failed to lower ("unbacked_bindings"),
so four variant rows of the H100 suite had no peer."""
import pytest

import kdsl
from kdsl import flex, reference
from kdsl.testing import attention_inputs, rel_frobenius

from conftest import ROOT

torch = pytest.importorskip("torch")
pytest.importorskip("torch.nn.attention.flex_attention")


def test_flex_peer_compiles_variants_one_after_another():
    from torch.nn.attention.flex_attention import create_block_mask
    mod = kdsl.load(ROOT / "bench" / "variants.kd")
    fa = flex.compiled_flex_attention()
    for name in ("gemma2_local", "periodic_bias", "temperature_padding", "alibi_softcap_gqa", "gated_rows"):
        kir = mod.ir[name]
        B, H, M, N, D = 1, 2, 256, 256, 64
        Hkv = 1 if name == "alibi_softcap_gqa" else H
        q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, N, D, device="cpu")
        dims = {"B": B, "H": H, "Hkv": Hkv, "M": M, "N": N, "D": D, "Dv": D}
        scale = D ** -0.5
        sm, mm = flex.score_mod(kir, dims, caps, scale), flex.mask_mod(kir, dims, caps)
        bm = create_block_mask(mm, B, H, M, N, device="cpu") if mm else None
        gqa = {"enable_gqa": True} if Hkv != H else {}
        out = fa(q.float(), k.float(), v.float(), score_mod=sm, block_mask=bm, scale=scale, **gqa)
        ref, _ = reference.attention(kir, q, k, v, caps)
        assert rel_frobenius(out, ref) <= 1e-4, name


def test_flex_mods_trace_without_a_graph_break():
    """Regression: IR evaluation entered np.errstate, which Dynamo cannot trace: every
    score_mod / mask_mod broke the graph and FlexAttention ran eagerly (12 ms instead of 0.2 on
    the H200, a peer 70-90x slower than it is). Each sample's and variant's mods trace whole
    inside flex_attention (fullgraph; Dynamo's eager backend, so no kernel is generated)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    from conftest import SAMPLES
    for path in [*SAMPLES, ROOT / "bench" / "variants.kd"]:
        mod = kdsl.load(path)
        for name, kir in mod.ir.items():
            if kir.kind != "attention":
                continue
            B, H, M, N, D = 1, 2, 128, 128, 64
            q, k, v, caps = attention_inputs(kir, B, H, H, M, N, D, device="cpu")
            dims = {"B": B, "H": H, "Hkv": H, "M": M, "N": N, "D": D, "Dv": D}
            scale = D ** -0.5
            sm, mm = flex.score_mod(kir, dims, caps, scale), flex.mask_mod(kir, dims, caps)
            bm = create_block_mask(mm, B, H, M, N, device="cpu") if mm else None
            torch._dynamo.reset()
            traced = torch.compile(flex_attention, fullgraph=True, backend="eager", dynamic=False)
            out = traced(q.float(), k.float(), v.float(), score_mod=sm, block_mask=bm, scale=scale)
            ref, _ = reference.attention(kir, q, k, v, caps, scale)
            assert rel_frobenius(out, ref) <= 1e-4, (path.stem, name)


def test_a_long_benchmark_compiles_every_rows_peer():
    """Regression: Dynamo stops compiling a function after 8 recompiles, and a `kdsl bench` of
    eleven programs at two shapes ran its last rows' FlexAttention eagerly (24 ms, 64x its compiled
    time, H200). The peer is compiled whole (fullgraph: the limit raises rather than runs eagerly)
    and afresh for each row (bench.flex_attend calls flex.fresh_flex_compile)."""
    src = "\n".join(f"attention k{n} {{\n    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]\n"
                    f"    score(s, b, h, i, j) = s + {n}.0 * float(j) / 1024.0\n}}" for n in range(12))
    mod = kdsl.compile(src, "twelve.kd")
    B, H, M, N, D = 1, 2, 128, 128, 64
    dims = {"B": B, "H": H, "Hkv": H, "M": M, "N": N, "D": D, "Dv": D}

    def run_all(fresh: bool):
        fa = flex.compiled_flex_attention("eager")  # Dynamo alone: the limit is Dynamo's
        for kir in mod.ir.values():
            if fresh:
                flex.fresh_flex_compile()
            q, k, v, caps = attention_inputs(kir, B, H, H, M, N, D, device="cpu")
            out = fa(q.float(), k.float(), v.float(), score_mod=flex.score_mod(kir, dims, caps, D ** -0.5),
                     scale=D ** -0.5)
            ref, _ = reference.attention(kir, q, k, v, caps)
            assert rel_frobenius(out, ref) <= 1e-4, kir.name
    flex.fresh_flex_compile()
    with pytest.raises(torch._dynamo.exc.FailOnRecompileLimitHit):
        run_all(fresh=False)
    run_all(fresh=True)


def test_the_bench_peer_and_flop_count_read_the_programs_own_dim_names():
    """Regression: `kdsl bench` bound the program's dims as B, H, Hkv, M, N, D whatever the program
    called them, and a grouped program whose k/v head count is G had no row (KeyError: 'G', H200,
    held-out set 37's kv_group_parity). Here every dim has a name of its own."""
    from kdsl.bench import flex_attend, kept_pairs
    src = """attention parity {
    q: bf16[Z, Hq, L, E]; k: bf16[Z, G, S, E]; v: bf16[Z, G, S, E]
    mask(b, h, i, j) = (h // (Hq // G)) % 2 == 0 or j <= i + (S - L)
}"""
    kir = kdsl.compile(src, "parity.kd").ir["parity"]
    B, H, Hkv, M, N, D = 1, 4, 2, 128, 256, 64
    q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, N, D, device="cpu")
    q, k, v = q.float(), k.float(), v.float()
    out = flex_attend(kir, q, k, v, caps)(q, k, v)
    ref, _ = reference.attention(kir, q, k, v, caps)
    assert rel_frobenius(out, ref) <= 1e-4
    dims = reference.dims_of(kir, q, k, v, caps)
    causal = sum(min(N, i + (N - M) + 1) for i in range(M))
    # heads 0-1 read k/v head 0 (even: every key), heads 2-3 read head 1 (causal)
    assert kept_pairs(kir, dims, caps, B, H, M, N, device="cpu") == B * (2 * M * N + 2 * causal)


@pytest.mark.parametrize("score", ["0.0", "s - 0.25 * float(D) / 64.0 + -1.5 * float(i < j)"])
def test_a_constant_score_and_arithmetic_of_the_dims_trace_whole(score):
    """Regression (held-out sets 25 and 8, found running every held-out program through the peer):
    a constant score returned a Python float, which FlexAttention refuses ("HOP body output"), and
    `float(D) / 64.0` divided Python numbers through numpy's errstate, which Dynamo cannot trace:
    neither program had a Flex peer. Parts of the dims and constants are now computed before the
    trace (flex._constants_folded) and a constant score is a tensor of it."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    src = f"""attention t {{
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    score(s, b, h, i, j) = {score}
    mask(b, h, i, j) = j <= i + (N - M) or 2 * H < 0
}}"""
    kir = kdsl.compile(src, "t.kd").ir["t"]
    B, H, M, N, D = 1, 2, 128, 256, 64
    q, k, v, caps = attention_inputs(kir, B, H, H, M, N, D, device="cpu")
    q, k, v = q.float(), k.float(), v.float()
    dims = reference.dims_of(kir, q, k, v, caps)
    sm, mm = flex.score_mod(kir, dims, caps, D ** -0.5), flex.mask_mod(kir, dims, caps)
    bm = create_block_mask(mm, B, H, M, N, device="cpu")
    torch._dynamo.reset()
    traced = torch.compile(flex_attention, fullgraph=True, backend="eager", dynamic=False)
    out = traced(q, k, v, score_mod=sm, block_mask=bm, scale=D ** -0.5)
    ref, _ = reference.attention(kir, q, k, v, caps)
    assert rel_frobenius(out, ref) <= 1e-4


@pytest.mark.parametrize("score", ["0.0", "-0.5 * float(j)", "s - 1.0"])
def test_a_score_that_ignores_s_is_still_differentiable_by_it(score):
    """Regression (H200, eighty-second session): FlexAttention's backward differentiates the
    score_mod by its score, and a mod that never read it had no gradient there (eager: vmap "must
    only return Tensors, got NoneType"); its compiled forward failed on a constant (Triton). The
    mod now depends on the score in every case, with the values unchanged."""
    src = f"""attention t {{
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    score(s, b, h, i, j) = {score}
}}"""
    kir = kdsl.compile(src, "t.kd").ir["t"]
    sm = flex.score_mod(kir, {"B": 1, "H": 1, "M": 8, "N": 8, "D": 64}, {}, 0.125)
    s = torch.randn(8, 8, requires_grad=True)
    i, j = torch.arange(8).view(8, 1), torch.arange(8).view(1, 8)
    out = sm(s, torch.tensor(0), torch.tensor(0), i, j)
    (grad,) = torch.autograd.grad(out.sum(), s)  # raises where out does not depend on s
    want = {"0.0": torch.zeros(8, 8), "-0.5 * float(j)": (-0.5 * j.float()).expand(8, 8), "s - 1.0": s.detach() - 1}
    assert torch.equal(out.detach(), want[score])
    assert torch.equal(grad, torch.full((8, 8), 1.0 if score == "s - 1.0" else 0.0))
