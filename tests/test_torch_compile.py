"""kdsl kernels under torch.compile (issue 9 point 5), on the CPU through the interpreter:
each kernel is a torch custom op with a fake implementation, so a module that calls one
compiles to a single graph (fullgraph=True) and computes what it computes eagerly.
tests/gpu/test_torch_compile_gpu.py does the same on CUDA, with Inductor and CUDA graphs.

The backend here is aot_eager: Dynamo's graph, then AOTAutograd's fake-tensor tracing and
functionalisation (what the ops' fake implementations and declared mutations are for),
without Inductor's C++ code generation, which would cost CI tens of seconds."""
import random

import pytest

torch = pytest.importorskip("torch")

import kdsl  # noqa: E402
from kdsl.cases import GemmCase, gemm_inputs  # noqa: E402
from kdsl.backends import Torch  # noqa: E402
from kdsl.interpreted import Interpreted  # noqa: E402
from kdsl.runtime import torch_ops  # noqa: E402
from kdsl.testing import attention_inputs  # noqa: E402
from torch._dynamo.testing import CompileCounterWithBackend, EagerAndRecordGraphs  # noqa: E402

from conftest import ROOT  # noqa: E402

NO_SUMMARY = (None, None, None)  # an attention op's tile summary arguments, for a call without one
ALIBI_LSE = """
attention alibi_lse {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    lse: f32[B, H, M]
    slopes: f32[H]
    score(s, b, h, i, j) = s - slopes[h] * float(abs(i - j))
    mask(b, h, i, j) = j <= i
}
"""


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class Attention(torch.nn.Module):
    """A small attention block: q/k/v projections, a kdsl kernel with a captured tensor and a
    softmax scale given at call time, an output projection."""

    def __init__(self, kernel, width=128, heads=2):
        super().__init__()
        self.kernel, self.heads = kernel, heads
        self.qkv = torch.nn.Linear(width, 3 * width, dtype=torch.bfloat16)
        self.proj = torch.nn.Linear(width, width, dtype=torch.bfloat16)

    def forward(self, x, slopes):
        B, M, W = x.shape
        q, k, v = (t.transpose(1, 2).contiguous() for t in self.qkv(x).view(B, M, 3, self.heads, -1).unbind(2))
        o = self.kernel(q, k, v, slopes=slopes, scale=0.1)
        return self.proj(o.transpose(1, 2).reshape(B, M, W))


def _inputs(M=None):
    M = M or random.randint(1, 70)
    return torch.randn(2, M, 128, dtype=torch.bfloat16), torch.rand(2)


def _ops_called(graph_module):
    return [n.target for n in graph_module.graph.nodes if n.op == "call_function"]


def test_attention_module_compiles_to_one_graph_that_equals_eager():
    mod = kdsl.load(ROOT / "samples" / "alibi.kd", interpret=True)
    model = Attention(mod.alibi)
    explained = torch._dynamo.explain(model)(*_inputs())
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    recorder = EagerAndRecordGraphs()
    torch.compile(model, fullgraph=True, backend=recorder)(*_inputs())
    assert mod.alibi.torch_ops[0] in _ops_called(recorder.graphs[0])  # the kernel is one node, not inlined
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(model, fullgraph=True, backend=counter)
    M = random.randint(1, 70)
    for _ in range(3):
        x, slopes = _inputs(M)
        assert torch.equal(compiled(x, slopes), model(x, slopes))
    assert counter.frame_count == 1


def test_out_and_lse_under_compile_are_written_like_eager():
    mod = kdsl.compile(ALIBI_LSE, "alibi_lse.kd", interpret=True)
    q, k, v, caps = attention_inputs(mod.ir["alibi_lse"], 1, 2, 2, random.randint(1, 70), random.randint(1, 70),
                                     64, device="cpu")
    B, H, M, _ = q.shape

    def call(out, lse):
        return mod.alibi_lse(q, k, v, caps["slopes"], out=out, lse=lse)

    compiled = torch.compile(call, fullgraph=True, backend="aot_eager")
    for given in ("none", "out", "lse", "both"):
        buffers = []
        for run in (call, compiled):
            out = torch.full_like(q, float("nan")) if given in ("out", "both") else None
            lse = torch.full((B, H, M), float("nan")) if given in ("lse", "both") else None
            got = run(out, lse)
            assert (out is None or got[0] is out) and (lse is None or got[1] is lse), given
            buffers.append(got)
        (eager_out, eager_lse), (out, lse) = buffers
        assert torch.equal(out, eager_out) and torch.equal(lse, eager_lse), given


@pytest.mark.parametrize("sample", ["fp8_gemm", "fp8_grouped_contiguous", "fp8_grouped_masked"])
def test_fp8_gemm_under_compile_equals_eager_with_and_without_out(sample):
    mod = kdsl.load(ROOT / "samples" / f"{sample}.kd", interpret=True)
    kernel = getattr(mod, sample)
    case = GemmCase(random.randint(1, 140), random.randint(1, 140), 128 * random.randint(1, 2), 2,
                    random.randrange(2**31))
    a, sa, b, sb, extra = gemm_inputs(mod.ir[sample], case, Torch("cpu"))
    out_shape = kernel(a, sa, b, sb, *extra).shape

    def call(out):
        return kernel(a, sa, b, sb, *extra, out=out)

    compiled = torch.compile(call, fullgraph=True, backend="aot_eager")
    # a grouped kernel leaves padding rows alone: a given out keeps its values there
    before = torch.randn(out_shape).to(torch.bfloat16)
    eager_out, compiled_out = before.clone(), before.clone()
    assert compiled(compiled_out) is compiled_out
    assert torch.equal(compiled_out, call(eager_out))
    fresh, eager = compiled(None), call(None)
    rows = ~eager.isnan() if sample != "fp8_gemm" else torch.ones_like(eager, dtype=torch.bool)
    assert torch.equal(fresh[rows], eager[rows]) and fresh.shape == eager.shape and fresh.dtype == eager.dtype


def test_ops_pass_torchs_custom_op_checks():
    """torch.library.opcheck: schema (declared mutations only), fake outputs matching real
    ones in shape, dtype and strides, and AOT dispatch with static and dynamic shapes."""
    mod = kdsl.compile(ALIBI_LSE, "alibi_lse.kd", interpret=True)
    q, k, v, caps = attention_inputs(mod.ir["alibi_lse"], 1, 2, 2, random.randint(1, 40), random.randint(1, 40),
                                     64, device="cpu")
    op, op_out = mod.alibi_lse.torch_ops
    torch.library.opcheck(op, (q, k, v, [caps["slopes"]], 0.2, *NO_SUMMARY))
    torch.library.opcheck(op_out, (q, k, v, [caps["slopes"]], None, *NO_SUMMARY, torch.empty_like(q),
                                   torch.empty(q.shape[:3])))
    gemm = kdsl.load(ROOT / "samples" / "fp8_grouped_masked.kd", interpret=True)
    case = GemmCase(random.randint(1, 40), random.randint(1, 140), 256, 2, random.randrange(2**31))
    a, sa, b, sb, _ = gemm_inputs(gemm.ir["fp8_grouped_masked"], case, Torch("cpu"))
    count = torch.full((2,), case.M, dtype=torch.int32)  # every row written: opcheck compares them all
    # test_schema compares inputs before and after with allclose, which CPU torch lacks for e4m3
    utils = ("test_faketensor", "test_aot_dispatch_dynamic")
    op, op_out = gemm.fp8_grouped_masked.torch_ops
    torch.library.opcheck(op, (a, sa, b, sb, count), test_utils=utils)
    torch.library.opcheck(op_out, (a, sa, b, sb, count, torch.empty(2, case.M, case.N, dtype=torch.bfloat16)),
                          test_utils=utils)


def test_each_program_gets_its_own_op_and_reloading_reuses_it():
    source = "attention t {{ q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]\n" \
             "score(s, b, h, i, j) = {} }}"
    plain = kdsl.compile(source.format("s"), "a.kd", interpret=True)
    biased = kdsl.compile(source.format("s + float(i - j)"), "b.kd", interpret=True)
    assert plain.t.torch_ops[0] != biased.t.torch_ops[0]
    assert kdsl.compile(source.format("s"), "again.kd", interpret=True).t.torch_ops == plain.t.torch_ops
    on_gpu = kdsl.compile(source.format("s"), "a.kd")  # compiled kernels are ops of their own
    assert on_gpu.t.torch_ops[0] not in (plain.t.torch_ops[0], biased.t.torch_ops[0])
    q, k, v, _ = attention_inputs(plain.ir["t"], 1, 2, 2, random.randint(2, 70), random.randint(2, 70), 64,
                                  device="cpu")  # one query and one key: i - j = 0, so no bias to tell

    def both(q, k, v):
        return plain.t(q, k, v), biased.t(q, k, v)

    got = torch.compile(both, fullgraph=True, backend="aot_eager")(q, k, v)
    want = both(q, k, v)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert not torch.equal(want[0], want[1])


@pytest.mark.parametrize("bad, message", [
    (lambda m, q, s: m.alibi(q, q, q, s[:1]), "alibi: argument 'slopes' dimension 0 (H) must be 2, got 1"),
    (lambda m, q, s: m.alibi(q, q, q), "alibi: missing captured tensor(s) ['slopes']"),
    (lambda m, q, s: m.alibi(q, q, q, s, scale="0.1"), "alibi: scale must be a real number"),
    (lambda m, q, s: m.alibi(q, q.float(), q, s), "alibi: argument 'k' must be torch.bfloat16, got torch.float32"),
])
def test_a_bad_call_is_refused_while_tracing_with_the_eager_message(bad, message):
    mod = kdsl.load(ROOT / "samples" / "alibi.kd", interpret=True)
    q, slopes = torch.randn(1, 2, 8, 64, dtype=torch.bfloat16), torch.rand(2)
    with pytest.raises(kdsl.LaunchError) as eager:
        bad(mod, q, slopes)
    assert str(eager.value).startswith(message)
    with pytest.raises(Exception) as traced:
        torch.compile(lambda q, s: bad(mod, q, s), fullgraph=True, backend="eager")(q, slopes)
    assert message in str(traced.value)


def test_eager_calls_do_not_go_through_the_dispatcher(monkeypatch):
    """A custom op costs ~20 us of host time per call: eager calls take the direct path,
    compiled graphs the op (whose implementation is torch_ops._eager)."""
    calls = []
    run_op = torch_ops._eager
    monkeypatch.setattr(torch_ops, "_eager", lambda *a, **kw: calls.append(a[0]) or run_op(*a, **kw))
    mod = kdsl.load(ROOT / "samples" / "causal.kd", interpret=True)
    q = torch.randn(1, 2, 8, 64, dtype=torch.bfloat16)
    compiled = torch.compile(lambda q: mod.causal(q, q, q), fullgraph=True, backend="eager")
    assert torch.equal(compiled(q), mod.causal(q, q, q))
    assert len(calls) == 1 and calls[0].startswith("causal_")


def test_an_ops_implementation_runs_the_kernel_eagerly_even_while_torch_compiles(monkeypatch):
    """Regression guard: the op's implementation calls the kernel, which would take the op
    again (and recurse) if torch.compile were running meanwhile (constant folding, another
    thread): it runs the kernel eagerly."""
    mod = kdsl.load(ROOT / "samples" / "causal.kd", interpret=True)
    q = torch.randn(1, 2, 8, 64, dtype=torch.bfloat16)
    want = mod.causal(q, q, q)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    out, lse = mod.causal.torch_ops[0](q, q, q, [], None, *NO_SUMMARY)  # the op returns lse for the backward
    assert torch.equal(out, want) and lse.shape == q.shape[:3]


def test_a_kernel_made_without_torch_says_to_import_torch_first():
    mod = kdsl.load(ROOT / "samples" / "causal.kd", interpret=True)
    unregistered = Interpreted(mod.ir["causal"])  # as a module loaded before torch was imported
    q = torch.randn(1, 2, 8, 64, dtype=torch.bfloat16)
    with pytest.raises(Exception, match="import torch before kdsl.load"):
        torch.compile(lambda q: unregistered(q, q, q), fullgraph=True, backend="eager")(q)


def test_ops_do_not_keep_a_dropped_module_alive():
    """torch keeps an op for the life of the process; the op must not keep the module's
    kernel (its loaded cubins and plans) alive with it."""
    import gc
    import weakref
    source = f"attention t {{ q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]\n" \
             f"score(s, b, h, i, j) = s * {random.randint(2, 10**6)}.0 }}"
    mod = kdsl.compile(source, "once.kd", interpret=True)
    kernel, (op, _) = weakref.ref(mod.t), mod.t.torch_ops
    q = torch.randn(1, 1, 4, 64, dtype=torch.bfloat16)
    assert torch.equal(op(q, q, q, [], None, *NO_SUMMARY)[0], mod.t(q, q, q))
    del mod
    gc.collect()
    assert kernel() is None
    with pytest.raises(kdsl.KdslError, match="keep the module alive"):
        op(q, q, q, [], None, *NO_SUMMARY)
    again = kdsl.compile(source, "again.kd", interpret=True)  # the same program: the op finds its kernel again
    assert again.t.torch_ops[0] == op and torch.equal(op(q, q, q, [], None, *NO_SUMMARY)[0], again.t(q, q, q))


def test_gpu_kernels_fake_implementations_on_fake_cuda_tensors():
    """The compiled (GPU) kernels' ops, traced on fake CUDA tensors, which need no GPU: their
    outputs' shapes, dtypes and device, and the eager path's checks."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    mod = kdsl.compile(ALIBI_LSE, "alibi_lse.kd")
    gemms = {s: kdsl.load(ROOT / "samples" / f"{s}.kd") for s in ("fp8_gemm", "fp8_grouped_contiguous",
                                                                    "fp8_grouped_masked")}
    B, H, M, N, G = (random.randint(1, 300) for _ in range(5))
    D, K = random.choice([64, 128]), 128 * random.randint(1, 4)
    with FakeTensorMode():
        def empty(*shape, dtype=torch.float32):
            return torch.empty(shape, dtype=dtype, device="cuda")
        q, kv, slopes = empty(B, H, M, D, dtype=torch.bfloat16), empty(B, H, N, D, dtype=torch.bfloat16), empty(H)
        out, lse = mod.alibi_lse.torch_ops[0](q, kv, kv, [slopes], None, *NO_SUMMARY)
        assert (out.shape, out.dtype, out.device.type) == (q.shape, torch.bfloat16, "cuda")
        assert (lse.shape, lse.dtype) == ((B, H, M), torch.float32)
        with pytest.raises(kdsl.LaunchError, match="argument 'slopes' dimension 0 \\(H\\) must be"):
            mod.alibi_lse.torch_ops[0](q, kv, kv, [empty(H + 1)], None, *NO_SUMMARY)
        with pytest.raises(kdsl.LaunchError, match=f"argument 'k' dimension 3 \\(D\\) must be {D}, got {D + 32}"):
            other = empty(B, H, N, D + 32, dtype=torch.bfloat16)
            mod.alibi_lse.torch_ops[0](q, other, other, [slopes], None, *NO_SUMMARY)
        e4m3 = torch.float8_e4m3fn
        a, b = empty(M, K, dtype=e4m3), empty(N, K, dtype=e4m3)
        sa, sb = empty(K // 128, M).t(), empty(-(-N // 128), K // 128)
        assert gemms["fp8_gemm"].fp8_gemm.torch_ops[0](a, sa, b, sb, None).shape == (M, N)
        bg, sbg = empty(G, N, K, dtype=e4m3), empty(G, -(-N // 128), K // 128)
        group = empty(M, dtype=torch.int32)
        assert gemms["fp8_grouped_contiguous"].fp8_grouped_contiguous.torch_ops[0](a, sa, bg, sbg, group).shape \
            == (M, N)
        ag, sag, count = empty(G, M, K, dtype=e4m3), empty(G, K // 128, M).transpose(1, 2), empty(G, dtype=torch.int32)
        got = gemms["fp8_grouped_masked"].fp8_grouped_masked.torch_ops[0](ag, sag, bg, sbg, count)
        assert (got.shape, got.dtype) == ((G, M, N), torch.bfloat16)
        with pytest.raises(kdsl.LaunchError, match="a_scale must have shape"):
            gemms["fp8_gemm"].fp8_gemm.torch_ops[0](a, empty(K // 128, M + 1).t(), b, sb, None)  # M + 1 rows


def test_dynamic_shapes_compile_once_and_check_each_call_when_it_runs():
    mod = kdsl.load(ROOT / "samples" / "alibi.kd", interpret=True)

    def call(q, k, v, slopes):
        return mod.alibi(q, k, v, slopes) * 2

    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(call, fullgraph=True, dynamic=True, backend=counter)
    for _ in range(3):
        # torch specialises sizes 0 and 1 and gives equal sizes one symbol (M = N, or M = H = 2,
        # or M = D = 64, would be a graph of its own): distinct lengths, clear of the others
        M, N = random.sample(range(3, 64), 2)
        q, k, v, caps = attention_inputs(mod.ir["alibi"], 1, 2, 2, M, N, 64, device="cpu")
        assert torch.equal(compiled(q, k, v, caps["slopes"]), call(q, k, v, caps["slopes"]))
    assert counter.frame_count == 1
    with pytest.raises(kdsl.LaunchError, match=r"argument 'slopes' dimension 0 \(H\) must be 2, got 3"):
        compiled(q, k, v, torch.rand(3))


def test_a_tile_summary_passes_through_a_compiled_call(monkeypatch):
    """tile_summary= (a TileSummary: buffer, kernel, layout) crosses the op's fixed schema and
    reaches the kernel's call rebuilt; anything else is refused with the eager message."""
    from kdsl.runtime.summary import Layout, TileSummary
    received = []
    run_op = torch_ops._eager
    monkeypatch.setattr(torch_ops, "_eager", lambda *a, **kw: received.append(kw["tile_summary"]) or run_op(*a, **kw))
    mod = kdsl.load(ROOT / "samples" / "document_mask.kd", interpret=True)
    q, k, v, caps = attention_inputs(mod.ir["document_mask"], 1, 2, 2, random.randint(1, 70), random.randint(1, 70),
                                     64, device="cpu")
    entries = tuple(random.randint(1, 9) for _ in range(random.randint(1, 4)))
    summary = TileSummary("document_mask", Layout(entries, 128, 64), torch.randint(0, 9, (2 * sum(entries),),
                                                                                  dtype=torch.int32))

    def call(q, k, v, summary):
        return mod.document_mask(q, k, v, **caps, tile_summary=summary)

    compiled = torch.compile(call, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(q, k, v, summary), call(q, k, v, summary))
    got = received[-1]
    assert (got.kernel, got.layout) == (summary.kernel, summary.layout) and torch.equal(got.buffer, summary.buffer)
    with pytest.raises(Exception, match=r"tile_summary must be what document_mask.tile_summary\(q, k, v, ...\) "
                                        r"returns, got tuple"):
        compiled(q, k, v, (1, 2))


def test_making_a_tile_summary_inside_a_compiled_region_is_refused_with_the_way_out():
    mod = kdsl.load(ROOT / "samples" / "document_mask.kd")  # a GPU kernel: refused before it needs the GPU
    q = torch.randn(1, 2, 8, 64, dtype=torch.bfloat16)
    ids = torch.zeros(1, 8, dtype=torch.int32)
    inside = torch.compile(lambda q: mod.document_mask.tile_summary(q, q, q, doc_q=ids, doc_kv=ids), fullgraph=True,
                           backend="eager")
    with pytest.raises(Exception, match=r"document_mask: tile_summary\(\) cannot run inside torch.compile; call it "
                                        r"before the compiled code and pass its result in"):
        inside(q)


def test_kernels_made_with_attrs_are_ops_as_their_parents():
    """Regression: with_attrs made kernels that torch.compile refused ("loaded before torch was
    imported"); a masked call's expected_rows= goes through one such kernel, made once per value."""
    attention = kdsl.load(ROOT / "samples" / "causal.kd").causal
    masked = kdsl.load(ROOT / "samples" / "fp8_grouped_masked.kd").fp8_grouped_masked
    for parent, child in ((attention, attention.with_attrs(stages=2)), (masked, masked.with_attrs(tile_m=128)),
                          (masked, masked._hinted(32))):
        assert child.torch_ops is not None and child.torch_ops[0] != parent.torch_ops[0]
    assert masked._hinted(32) is masked._hinted(32)


def test_expected_rows_under_compile_equals_eager():
    mod = kdsl.load(ROOT / "samples" / "fp8_grouped_masked.kd", interpret=True)
    kernel = mod.fp8_grouped_masked
    case = GemmCase(random.randint(1, 140), random.randint(1, 140), 128, 2, random.randrange(2**31))
    a, sa, b, sb, extra = gemm_inputs(mod.ir["fp8_grouped_masked"], case, Torch("cpu"))
    compiled = torch.compile(lambda: kernel(a, sa, b, sb, *extra, expected_rows=8), fullgraph=True,
                             backend="aot_eager")
    eager = kernel(a, sa, b, sb, *extra)
    assert torch.equal(compiled().nan_to_num(3.0), eager.nan_to_num(3.0))


def test_gradients_under_compile_equal_eager(monkeypatch):
    """A compiled module trains: the attention op's registered autograd formula runs the
    backward (kdsl::NAME_HASH_backward, the kernel's _backward) and gives eager's gradients."""
    methods = []
    run_op = torch_ops._eager
    monkeypatch.setattr(torch_ops, "_eager", lambda *a, **kw: methods.append(kw.get("method")) or run_op(*a, **kw))
    mod = kdsl.load(ROOT / "samples" / "alibi.kd", interpret=True)
    model = Attention(mod.alibi)
    x, slopes = _inputs(M=37)

    def step(fn):
        model.zero_grad()
        xg = x.detach().requires_grad_()
        fn(xg, slopes).float().square().sum().backward()
        return [xg.grad] + [p.grad.clone() for p in model.parameters()]

    eager = step(model)
    assert methods == []  # eager calls record their own autograd function, not the op
    compiled = step(torch.compile(model, fullgraph=True, backend="aot_eager"))
    assert methods == ["_run", "_backward"]
    for e, c in zip(eager, compiled):
        torch.testing.assert_close(c, e, rtol=1e-2, atol=1e-3)


def test_a_compiled_call_refuses_a_captured_tensor_that_requires_grad():
    mod = kdsl.load(ROOT / "samples" / "alibi.kd", interpret=True)
    q = torch.randn(1, 2, 8, 64, dtype=torch.bfloat16, requires_grad=True)
    slopes = torch.rand(2, requires_grad=True)
    with pytest.raises(Exception, match="captured tensor 'slopes' requires grad"):
        torch.compile(lambda q, s: mod.alibi(q, q, q, s), fullgraph=True, backend="aot_eager")(q, slopes)


def test_attention_op_with_gradients_passes_torchs_custom_op_checks():
    """opcheck on inputs that require grad: the autograd registration too, and the backward op."""
    mod = kdsl.compile(ALIBI_LSE, "alibi_lse.kd", interpret=True)
    q, k, v, caps = attention_inputs(mod.ir["alibi_lse"], 1, 2, 2, random.randint(2, 40), random.randint(2, 40),
                                     64, device="cpu")
    op, _ = mod.alibi_lse.torch_ops
    torch.library.opcheck(op, (q.requires_grad_(), k.requires_grad_(), v, [caps["slopes"]], 0.2, *NO_SUMMARY))
    out, lse = op(q, k, v, [caps["slopes"]], 0.2, *NO_SUMMARY)
    backward = getattr(torch.ops.kdsl, op.name().split("::")[1].split(".")[0] + "_backward").default
    torch.library.opcheck(backward, (q.detach(), k.detach(), v, out.detach(), lse.detach(), torch.randn_like(out),
                                     torch.randn_like(lse), [caps["slopes"]], 0.2))


def test_a_traced_call_finds_torch_without_reading_sys_modules(monkeypatch):
    """Dynamo traces torch_ops.compiling(); reading sys.modules there made Dynamo copy that dict
    while another thread imported (a GPU run's "dictionary changed size during iteration").
    Once a kernel is registered, compiling() takes torch from its own global."""
    mod = kdsl.load(ROOT / "samples" / "alibi.kd", interpret=True)
    assert torch_ops._torch is torch

    class NoLookups(dict):
        def get(self, *args):
            raise AssertionError("compiling() read sys.modules")

    import types
    monkeypatch.setattr(torch_ops, "sys", types.SimpleNamespace(modules=NoLookups(torch_ops.sys.modules)))
    kir = mod.ir["alibi"]
    q, k, v, caps = attention_inputs(kir, 1, 2, 2, 8, 8, 64, device="cpu")
    out = torch.compile(lambda q, k, v, s: mod.alibi(q, k, v, slopes=s), backend="aot_eager", fullgraph=True)(
        q, k, v, caps["slopes"])
    assert out.shape == q.shape


def test_a_traced_call_refuses_a_captured_tensor_that_requires_grad():
    """The compiled op's backward computes q, k and v's gradients only: a learned table reaching
    a traced call is refused (eagerly the interpreter computes its gradient)."""
    mod = kdsl.load(ROOT / "samples" / "alibi.kd", interpret=True)
    kir = mod.ir["alibi"]
    q, k, v, caps = attention_inputs(kir, 1, 2, 2, 8, 8, 64, device="cpu")
    slopes = caps["slopes"].detach().requires_grad_()
    q.requires_grad_()
    with pytest.raises(Exception, match=r"captured tensor 'slopes' requires grad, but under torch.compile, kdsl "
                                        r"computes gradients for q, k and v only; pass slopes.detach\(\)"):
        torch.compile(lambda q, k, v, s: mod.alibi(q, k, v, slopes=s), backend="aot_eager", fullgraph=True)(
            q, k, v, slopes)
    mod.alibi(q, k, v, slopes=slopes).float().sum().backward()  # eagerly: computed
    assert slopes.grad is not None and bool(slopes.grad.abs().sum() > 0)
