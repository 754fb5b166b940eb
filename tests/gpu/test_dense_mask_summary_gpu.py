"""Whole-block tile summaries on the GPU (mask_analysis.whole_tiles): dense masks shared by the
heads (torch's attn_mask as bool, u8 or i32, a gather through a table of rules) whose blocks are
empty, full or partial: block-diagonal documents, padded keys, a band, a few stray elements,
rows with no key at all, and random masks (beside a bias per head too); forward and backward against the float64
reference, a precomputed summary, a CUDA graph replayed on new mask values. A bool key-padding
vector (valid[b, j], bounded per key tile as 0 / 1) too."""
import pytest

import kdsl
from kdsl import ir, reference
from kdsl.passes import mask_analysis
from kdsl.testing import ATTENTION_TOL, rel_frobenius

from conftest import assert_summarised_call_matches
from gradcheck import check_grads

pytestmark = pytest.mark.gpu

SOURCE = """
attention dense_bool {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    keep: bool[B, M, N]
    mask(b, h, i, j) = keep[b, i, j]
}
attention dense_i32_causal {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    keep: i32[B, M, N]
    mask(b, h, i, j) = j <= i + (N - M) and keep[b, i, j] != 0
}
attention dense_u8_gqa {
    q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]
    keep: u8[B, M, N]
    mask(b, h, i, j) = keep[b, i, j] > 0
}
attention segment_rules {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    seg_q: i32[B, M]
    seg_kv: i32[B, N]
    rules: i32[4, 4]
    mask(b, h, i, j) = rules[min(max(seg_q[b, i], 0), 3), min(max(seg_kv[b, j], 0), 3)] != 0
}
attention head_bool_causal {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    keep: bool[B, H, M, N]
    mask(b, h, i, j) = j <= i + (N - M) and keep[b, h, i, j]
}
attention bias_bool {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    bias: bf16[B, H, M, N]; keep: bool[B, M, N]
    score(s, b, h, i, j) = s + bias[b, h, i, j]
    mask(b, h, i, j) = keep[b, i, j]
}
attention key_padding {
    q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]
    valid: bool[B, N]
    mask(b, h, i, j) = valid[b, j] and j <= i + (N - M)
}
"""
KINDS = ("documents", "padded", "band", "random")


@pytest.fixture(scope="module", autouse=True)
def whole_block_summaries():
    """The switches on for every plan this module makes (read when a kernel is lowered): per-head
    data too (KDSL_TILE_SUMMARY_HEADS), for head_bool_causal; beside a score that loads in the
    backward too (KDSL_SUMMARY_BESIDE_LOADS=1; the forward alone by default), for bias_bool."""
    mp = pytest.MonkeyPatch()
    mp.setenv("KDSL_TILE_SUMMARY_2D", "1")
    mp.setenv("KDSL_TILE_SUMMARY_HEADS", "1")
    mp.setenv("KDSL_SUMMARY_BESIDE_LOADS", "1")
    yield
    mp.undo()


@pytest.fixture(scope="module")
def mod(whole_block_summaries):
    return kdsl.compile(SOURCE)


def _segments(torch, B, L, gen, mean):
    ends = torch.cumsum(torch.randint(1, 2 * mean, (B, L), generator=gen, device="cuda"), 1)
    return torch.searchsorted(ends, torch.arange(L, device="cuda").expand(B, L).contiguous(), right=True)


def structured_keep(torch, kind, B, M, N, gen):
    """A [B, M, N] bool mask of the given kind; queries are aligned with the last M keys."""
    i = torch.arange(M, device="cuda")[:, None] + (N - M)
    j = torch.arange(N, device="cuda")[None, :]
    if kind == "random":
        return torch.rand(B, M, N, device="cuda", generator=gen) < 0.5
    if kind == "band":
        keep = ((i - j).abs() <= 300).expand(B, M, N)
    else:
        seg = _segments(torch, B, N, gen, mean=400)
        keep = seg[:, N - M:, None] == seg[:, None, :] if M <= N else \
            torch.zeros(B, M, N, dtype=torch.bool, device="cuda")
        if kind == "padded":  # keys past each sequence's length masked, and the rows past it
            lens = torch.randint(N // 2, N + 1, (B, 1, 1), generator=gen, device="cuda")
            keep = keep & (j[None] < lens) & (i[None] < lens)
    keep = keep.contiguous()
    # a few stray elements flipped: partial blocks among the empty and full ones
    flat = keep.view(B, M * N)
    at = torch.randint(0, M * N, (B, 8), generator=gen, device="cuda")
    flat.scatter_(1, at, ~flat.gather(1, at))
    return keep


def _inputs(torch, B, H, Hkv, M, N, D, gen):
    q = torch.randn(B, H, M, D, device="cuda", generator=gen).bfloat16()
    k, v = (torch.randn(B, Hkv, N, D, device="cuda", generator=gen).bfloat16() for _ in range(2))
    return q, k, v


def _captures(torch, name, kind, B, M, N, gen, H=1):
    if name == "head_bool_causal":  # a mask of its own per head
        return {"keep": structured_keep(torch, kind, B * H, M, N, gen).view(B, H, M, N)}
    keep = structured_keep(torch, kind, B, M, N, gen)
    if name == "dense_bool":
        return {"keep": keep}
    if name == "bias_bool":  # a bias per head beside the mask, both streamed with the K tiles
        return {"keep": keep, "bias": torch.randn(B, H, M, N, device="cuda", generator=gen).bfloat16()}
    if name == "dense_i32_causal":
        return {"keep": keep.int() * torch.randint(1, 9, keep.shape, generator=gen, device="cuda", dtype=torch.int32)}
    if name == "dense_u8_gqa":
        return {"keep": keep.to(torch.uint8)}
    seg_kv = _segments(torch, B, N, gen, mean=300).remainder(4).int()
    seg_q = seg_kv[:, N - M:].contiguous() if M <= N else torch.randint(0, 4, (B, M), generator=gen, device="cuda").int()
    rules = torch.eye(4, dtype=torch.int32, device="cuda") if kind != "random" else \
        torch.randint(0, 2, (4, 4), generator=gen, device="cuda", dtype=torch.int32)
    return {"seg_q": seg_q, "seg_kv": seg_kv, "rules": rules}


def _case(torch, name, shape, kind, salt=""):
    """q, k, v and the captures of one case (u8 with GQA takes the shape's k/v heads, the others
    H), and the generator that drew them."""
    B, H, Hkv, M, N, D = shape
    gen = torch.Generator(device="cuda").manual_seed(hash((name, shape, kind, salt)) % 2**31)
    q, k, v = _inputs(torch, B, H, Hkv if name == "dense_u8_gqa" else H, M, N, D, gen)
    return q, k, v, _captures(torch, name, kind, B, M, N, gen, H), gen


SHAPES = [(2, 4, 4, 1000, 1200, 128), (1, 2, 2, 129, 127, 64), (2, 4, 2, 2048, 2048, 64), (1, 2, 2, 1, 700, 128),
          (1, 2, 2, 300, 300, 256), (1, 4, 4, 513, 1000, 192)]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", ["dense_bool", "dense_i32_causal", "dense_u8_gqa", "segment_rules",
                                  "head_bool_causal", "bias_bool"])
def test_dense_masks_match_the_reference_and_a_precomputed_summary(mod, name, shape, kind):
    torch = pytest.importorskip("torch")
    q, k, v, caps, _ = _case(torch, name, shape, kind)
    assert_summarised_call_matches(mod, name, q, k, v, caps, (name, shape, kind))


@pytest.mark.parametrize("kind", ["documents", "padded", "random"])
@pytest.mark.parametrize("shape", [(2, 4, 4, 300, 400, 64), (1, 2, 2, 700, 700, 128), (1, 2, 1, 200, 333, 256)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", ["dense_bool", "dense_i32_causal", "dense_u8_gqa", "segment_rules",
                                  "head_bool_causal", "bias_bool"])
def test_dense_mask_gradients_match_the_reference(mod, name, shape, kind):
    torch = pytest.importorskip("torch")
    q, k, v, caps, gen = _case(torch, name, shape, kind, "grad")
    dout = torch.randn(q.shape, device="cuda", generator=gen).bfloat16()
    check_grads(f"{name} {shape} {kind}", getattr(mod, name), mod.ir[name], q, k, v, caps, dout)


def test_a_captured_dense_mask_call_recomputes_its_summary_on_replay(mod):
    torch = pytest.importorskip("torch")
    gen = torch.Generator(device="cuda").manual_seed(11)
    B, H, L, D = 2, 4, 1500, 128
    q, k, v = _inputs(torch, B, H, H, L, L, D, gen)
    keep = structured_keep(torch, "documents", B, L, L, gen)
    out = torch.empty_like(q)
    mod.dense_bool(q, k, v, keep=keep, out=out)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        mod.dense_bool(q, k, v, keep=keep, out=out)
    keep.copy_(structured_keep(torch, "padded", B, L, L, gen))  # other empty and full blocks
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    ref, _ = reference.attention(mod.ir["dense_bool"], q, k, v, {"keep": keep})
    assert rel_frobenius(out, ref) <= ATTENTION_TOL


@pytest.mark.parametrize("shape", [(2, 4, 2, 1000, 1200, 128), (1, 2, 2, 129, 127, 64), (1, 2, 1, 1, 700, 128)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("kind", ["padded", "random"])
def test_a_bool_key_padding_mask_takes_a_key_summary(mod, shape, kind):
    """valid[b, j] as a bool element (0 / 1) bounded over each key tile: padded keys' tiles skipped."""
    torch = pytest.importorskip("torch")
    B, H, Hkv, M, N, D = shape
    gen = torch.Generator(device="cuda").manual_seed(hash((shape, kind)) % 2**31)
    q, k, v = _inputs(torch, B, H, Hkv, M, N, D, gen)
    if kind == "padded":
        lens = torch.randint(1, N + 1, (B, 1), generator=gen, device="cuda")
        valid = torch.arange(N, device="cuda")[None] < lens
    else:
        valid = torch.rand(B, N, generator=gen, device="cuda") < 0.7
    out = mod.key_padding(q, k, v, valid=valid)
    low = next(iter(mod.key_padding._loaded.values()))[0].kernel
    assert "kv" in {ir.TILE_REDUCTIONS[s.op][0] for s in mask_analysis.summary_slots(low)}
    ref, _ = reference.attention(mod.ir["key_padding"], q, k, v, {"valid": valid})
    assert rel_frobenius(out, ref) <= ATTENTION_TOL
    dout = torch.randn((B, H, M, D), device="cuda", generator=gen).bfloat16()
    check_grads(f"key_padding {shape} {kind}", mod.key_padding, mod.ir["key_padding"], q, k, v, {"valid": valid}, dout)
