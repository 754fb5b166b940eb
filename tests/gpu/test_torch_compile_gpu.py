"""kdsl kernels under torch.compile on CUDA (issue 9 point 5): one graph with Inductor, results
equal to eager, and capture in CUDA graphs, by hand and through mode="reduce-overhead".
tests/test_torch_compile.py covers the same ops on the CPU through the interpreter."""
import random

import pytest

import kdsl
from kdsl import fp8
from kdsl.testing import attention_inputs

from conftest import ROOT

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch = pytest.importorskip("torch")
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _sizes():
    return random.randint(1, 300), random.randint(1, 300), random.choice([64, 128])


def _alibi_inputs(mod, M, N, D):
    q, k, v, caps = attention_inputs(mod.ir["alibi"], 2, 4, 4, M, N, D)
    return q, k, v, caps["slopes"]


def _attention_block(kernel):
    import torch

    class Block(torch.nn.Module):
        """kdsl's attention with a captured tensor and a call-time scale, then exact
        elementwise work, so that Inductor's fusions cannot change a bit of the result."""

        def forward(self, q, k, v, slopes):
            return kernel(q, k, v, slopes=slopes, scale=0.1).float() * 2

    return Block()


def test_attention_block_compiles_with_inductor_to_one_graph_equal_to_eager():
    import torch
    mod = kdsl.load(ROOT / "samples" / "alibi.kd")
    block = _attention_block(mod.alibi)
    sizes = _sizes()
    explained = torch._dynamo.explain(block)(*_alibi_inputs(mod, *sizes))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    compiled = torch.compile(block, fullgraph=True)
    for _ in range(3):
        args = _alibi_inputs(mod, *sizes)
        assert torch.equal(compiled(*args), block(*args))


def test_out_and_lse_under_inductor_equal_eager():
    import torch
    mod = kdsl.compile("""attention causal_lse {
        q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]; lse: f32[B, H, M]
        mask(b, h, i, j) = j <= i
    }""", "causal_lse.kd")
    q, k, v, _ = attention_inputs(mod.ir["causal_lse"], 2, 8, 2, random.randint(1, 300), random.randint(1, 300), 128)

    def call(out):
        return mod.causal_lse(q, k, v, out=out)

    compiled = torch.compile(call, fullgraph=True)
    for given in (False, True):
        outs = [torch.full_like(q, float("nan")) if given else None for _ in range(2)]
        got, want = compiled(outs[0]), call(outs[1])
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        assert not given or got[0].data_ptr() == outs[0].data_ptr()


def test_fp8_gemm_under_inductor_equals_eager():
    import torch
    gemm = kdsl.load(ROOT / "samples" / "fp8_gemm.kd").fp8_gemm
    M, N, K = random.randint(1, 600), random.randint(1, 600), 128 * random.randint(1, 8)
    a, sa = fp8.quantize_1x128(torch.randn(M, K, device="cuda"))
    b, sb = fp8.quantize_128x128(torch.randn(N, K, device="cuda"))
    compiled = torch.compile(lambda a, sa, b, sb: gemm(a, sa, b, sb).float() * 2, fullgraph=True)
    assert torch.equal(compiled(a, sa, b, sb), gemm(a, sa, b, sb).float() * 2)


def test_a_compiled_call_is_captured_in_a_cuda_graph_by_hand():
    import torch
    mod = kdsl.load(ROOT / "samples" / "alibi.kd")
    sizes = _sizes()
    q, k, v, slopes = _alibi_inputs(mod, *sizes)
    compiled = torch.compile(lambda q, k, v, s: mod.alibi(q, k, v, slopes=s, scale=0.1), fullgraph=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up (compile, plan) outside the capture
        compiled(q, k, v, slopes)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = compiled(q, k, v, slopes)
    for _ in range(2):
        fresh = _alibi_inputs(mod, *sizes)
        for buffer, x in zip((q, k, v, slopes), fresh):
            buffer.copy_(x)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static_out, mod.alibi(q, k, v, slopes=slopes, scale=0.1))


def test_reduce_overhead_mode_captures_kdsl_in_cuda_graphs():
    import torch
    mod = kdsl.load(ROOT / "samples" / "alibi.kd")
    block = _attention_block(mod.alibi)
    compiled = torch.compile(block, fullgraph=True, mode="reduce-overhead")
    sizes = _sizes()
    for _ in range(4):  # warm-up, recording, then replays of the recorded graph
        args = _alibi_inputs(mod, *sizes)
        got = compiled(*args).clone()  # a replay reuses the graph's output memory
        assert torch.equal(got, block(*args))


def test_tile_summary_made_outside_a_compiled_call_is_used_inside_it():
    import torch
    mod = kdsl.load(ROOT / "samples" / "document_mask.kd")
    q, k, v, caps = attention_inputs(mod.ir["document_mask"], 2, 4, 4, random.randint(200, 2000),
                                     random.randint(200, 2000), 128)
    summary = mod.document_mask.tile_summary(q, k, v, **caps)

    def layer(q, k, v, summary):
        return mod.document_mask(q, k, v, **caps, tile_summary=summary).float() * 2

    compiled = torch.compile(layer, fullgraph=True)
    assert torch.equal(compiled(q, k, v, summary), layer(q, k, v, summary))
    assert torch.equal(compiled(q, k, v, None), layer(q, k, v, None))  # each call computes its own
    inside = torch.compile(lambda q, k, v: mod.document_mask.tile_summary(q, k, v, **caps), fullgraph=True)
    with pytest.raises(Exception, match="tile_summary\\(\\) cannot run inside torch.compile; call it before"):
        inside(q, k, v)
