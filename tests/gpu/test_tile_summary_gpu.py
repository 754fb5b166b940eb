"""Runtime tile summaries on the GPU: masks over captured ids skip the tiles the summary
proves empty and still match the float64 reference; a precomputed summary gives the same
result as the per-call one, is checked against the call's shapes, and a call with a summary
step is capturable in a CUDA graph."""
import pytest

import kdsl
from kdsl import reference
from kdsl.errors import LaunchError
from kdsl.testing import ATTENTION_TOL, rel_frobenius

pytestmark = pytest.mark.gpu

SOURCE = """
attention docs {
    q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]
    doc_q: i32[B, M]
    doc_kv: i32[B, N]
    mask(b, h, i, j) = doc_q[b, i] == doc_kv[b, j] and j <= i + (N - M)
}
attention head_blocks {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    key_group: i32[H, N]
    query_group: i32[B, M]
    mask(b, h, i, j) = key_group[h, j] <= query_group[b, i]
}
attention plain_causal {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    mask(b, h, i, j) = j <= i
}
"""


def _documents(torch, B, L, gen, mean=300):
    """Sorted document ids with random lengths (mean `mean` tokens) per sequence."""
    ends = torch.cumsum(torch.randint(1, 2 * mean, (B, L), generator=gen, device="cuda"), 1)
    return torch.searchsorted(ends, torch.arange(L, device="cuda").expand(B, L).contiguous(), right=True).int()


@pytest.fixture(scope="module")
def mod():
    return kdsl.compile(SOURCE)


@pytest.mark.parametrize("shape", [(2, 4, 2, 1000, 1200, 128), (1, 2, 2, 129, 127, 64), (3, 4, 4, 4096, 4096, 64),
                                   (1, 2, 1, 1, 700, 128)], ids=lambda s: "x".join(map(str, s)))
def test_document_ids_match_reference_and_precomputed_summary(mod, shape):
    torch = pytest.importorskip("torch")
    B, H, Hkv, M, N, D = shape
    gen = torch.Generator(device="cuda").manual_seed(sum(shape))
    q = torch.randn(B, H, M, D, device="cuda", generator=gen).bfloat16()
    k, v = (torch.randn(B, Hkv, N, D, device="cuda", generator=gen).bfloat16() for _ in range(2))
    doc_kv = _documents(torch, B, N, gen)
    doc_q = doc_kv[:, N - M:].contiguous() if M <= N else _documents(torch, B, M, gen)
    out = mod.docs(q, k, v, doc_q=doc_q, doc_kv=doc_kv)
    ref, _ = reference.attention(mod.ir["docs"], q, k, v, {"doc_q": doc_q, "doc_kv": doc_kv})
    assert rel_frobenius(out, ref) <= ATTENTION_TOL
    summary = mod.docs.tile_summary(q, k, v, doc_q=doc_q, doc_kv=doc_kv)
    again = mod.docs(q, k, v, doc_q=doc_q, doc_kv=doc_kv, tile_summary=summary)
    assert torch.equal(again, out)


def test_per_head_key_groups(mod):
    torch = pytest.importorskip("torch")
    gen = torch.Generator(device="cuda").manual_seed(7)
    B, H, M, N, D = 2, 3, 777, 1500, 64
    q = torch.randn(B, H, M, D, device="cuda", generator=gen).bfloat16()
    k, v = (torch.randn(B, H, N, D, device="cuda", generator=gen).bfloat16() for _ in range(2))
    caps = {"key_group": torch.sort(torch.randint(0, 9, (H, N), generator=gen, device="cuda"), 1)[0].int(),
            "query_group": torch.randint(0, 9, (B, M), generator=gen, device="cuda").int()}
    out = mod.head_blocks(q, k, v, **caps)
    ref, _ = reference.attention(mod.ir["head_blocks"], q, k, v, caps)
    assert rel_frobenius(out, ref) <= ATTENTION_TOL


def test_summary_is_checked_against_the_call(mod):
    torch = pytest.importorskip("torch")
    q, k, v = (torch.randn(1, 2, 300, 64, device="cuda").bfloat16() for _ in range(3))
    ids = torch.zeros(1, 300, dtype=torch.int32, device="cuda")
    summary = mod.docs.tile_summary(q, k, v, doc_q=ids, doc_kv=ids)
    q2, k2, v2 = (torch.randn(1, 2, 600, 64, device="cuda").bfloat16() for _ in range(3))
    ids2 = torch.zeros(1, 600, dtype=torch.int32, device="cuda")
    with pytest.raises(LaunchError, match="other shapes"):
        mod.docs(q2, k2, v2, doc_q=ids2, doc_kv=ids2, tile_summary=summary)
    with pytest.raises(LaunchError, match="needs no tile summary"):
        mod.plain_causal(q, k, v, tile_summary=summary)
    with pytest.raises(LaunchError, match="tile_summary must be"):
        mod.docs(q, k, v, doc_q=ids, doc_kv=ids, tile_summary=ids)
    with pytest.raises(LaunchError, match="has no tile summary"):
        mod.plain_causal.tile_summary(q, k, v)


def test_summary_step_is_captured_in_a_cuda_graph(mod):
    torch = pytest.importorskip("torch")
    gen = torch.Generator(device="cuda").manual_seed(3)
    B, H, L, D = 2, 4, 2000, 128
    q, k, v = (torch.randn(B, H, L, D, device="cuda", generator=gen).bfloat16() for _ in range(3))
    ids = _documents(torch, B, L, gen)
    out = torch.empty_like(q)
    mod.docs(q, k, v, doc_q=ids, doc_kv=ids, out=out)  # plan and load outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        mod.docs(q, k, v, doc_q=ids, doc_kv=ids, out=out)
    # new values in the captured buffers: the replay recomputes the summary from them
    ids.copy_(_documents(torch, B, L, gen, mean=150))
    for x in (q, k, v):
        x.copy_(torch.randn(x.shape, device="cuda", generator=gen).bfloat16())
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    ref, _ = reference.attention(mod.ir["docs"], q, k, v, {"doc_q": ids, "doc_kv": ids})
    assert rel_frobenius(out, ref) <= ATTENTION_TOL
