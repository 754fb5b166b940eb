"""The FP8 GEMM's compiled launch path (runtime/fast_launch.py) on the GPU: once a plan is
adopted, its calls are launched from C++ (the Python path's Plan.launch never runs) and stay
right, for every grouping, out given or allocated, on a side stream, in a CUDA graph, from
threads, and across tensor-map encodings dropped and made again; calls it declines take the
Python path, which raises or copies as before."""
import threading

import pytest

import kdsl
from kdsl import fp8, reference
from kdsl.errors import LaunchError
from kdsl.runtime import fast_launch, tma
from kdsl.runtime.launch import Plan
from kdsl.testing import FP8_TOL, assert_masked_groups_right, fp8_difference

from conftest import ROOT

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


@pytest.fixture(scope="module", autouse=True)
def built():
    fast_launch.start()
    assert fast_launch.wait(), "the compiled launch path did not build (see the warning)"


@pytest.fixture
def python_launches(monkeypatch):
    """Counts launches made by the Python path."""
    count = []
    real = Plan.launch
    monkeypatch.setattr(Plan, "launch", lambda self, pointers: count.append(1) or real(self, pointers))
    return count


def _kernel(name, **attrs):
    fn = getattr(kdsl.load(ROOT / "samples" / f"{name}.kd"), name)
    return fn.with_attrs(**attrs) if attrs else fn


def _dense(m, n, k):
    a, sa = fp8.quantize_1x128(torch.randn(m, k, device="cuda"))
    b, sb = fp8.quantize_128x128(torch.randn(n, k, device="cuda"))
    return a, sa, b, sb


@pytest.mark.parametrize("attrs", [{}, {"tile_m": 128, "tile_n": 128, "cluster": 2, "multicast": "b"}],
                         ids=["picked", "cluster2"])
@pytest.mark.parametrize("given", [True, False])
def test_adopted_dense_calls_launch_from_cpp_and_are_right(given, attrs, python_launches):
    fn = _kernel("fp8_gemm", **attrs)
    m, n, k = 500, 384, 512  # ragged M, in an even number of 128-row tiles (cluster 2 pairs them)
    args = _dense(m, n, k)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16) if given else None
    fn(*args, out=out)  # plans and adopts
    assert [p.fast for p in fn._plans.values()] == [True]
    before = len(python_launches)
    for _ in range(3):  # new values each call, in the same buffers (given) or new ones
        args = _dense(m, n, k)
        if given:
            out.fill_(float("nan"))
        got = fn(*args, out=out)
        assert got is out if given else got.shape == (m, n)
        torch.cuda.synchronize()
        assert fp8_difference(got, reference.fp8_gemm(*args)) < FP8_TOL
    assert len(python_launches) == before, "every adopted call launched from C++"


def test_stream_k_plans_stay_on_the_python_path(python_launches):
    fn = _kernel("fp8_gemm", stream_k=True, cluster=1, tile_m=128, tile_n=128)
    args = _dense(2000, 1500, 1280)
    first = fn(*args)
    (plan,) = fn._plans.values()
    assert plan.sk_tiles > 0 and plan.fast is False
    before = len(python_launches)
    assert torch.equal(fn(*args), first) and len(python_launches) == before + 1
    assert fp8_difference(first, reference.fp8_gemm(*args)) < FP8_TOL


def test_grouped_calls_launch_from_cpp_and_are_right(python_launches):
    G, N, K = 4, 384, 512
    contiguous = _kernel("fp8_grouped_contiguous")
    masked = _kernel("fp8_grouped_masked")
    b, sb = fp8.quantize_128x128(torch.randn(G, N, K, device="cuda"))
    group = torch.randint(-1, G + 1, (300,), dtype=torch.int32, device="cuda")
    count = torch.tensor([0, 1, 130, 256], dtype=torch.int32, device="cuda")
    for turn in range(3):
        a, sa = fp8.quantize_1x128(torch.randn(300, K, device="cuda"))
        out = contiguous(a, sa, b, sb, group=group)  # the extra argument by name here, by position below
        ref = reference.fp8_gemm(a, sa, b, sb, group=group)
        valid = (group >= 0) & (group < G)
        assert fp8_difference(out[valid], ref[valid]) < FP8_TOL
        am, sam = fp8.quantize_1x128(torch.randn(G, 256, K, device="cuda"))
        outm = torch.full((G, 256, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        masked(am, sam, b, sb, count, out=outm)
        assert_masked_groups_right(outm, reference.fp8_gemm(am, sam, b, sb, count=count), count)
        if turn == 0:
            launched = len(python_launches)
    assert len(python_launches) == launched
    assert all(p.fast for f in (contiguous, masked) for p in f._plans.values())


def test_declined_calls_take_the_python_path(python_launches):
    """A misaligned a_scale gets the copying plan; a misaligned out, an unknown argument name
    and a wrong shape get the Python path's errors."""
    fn = _kernel("fp8_gemm")
    m, n, k = 64, 256, 512
    a, sa, b, sb = _dense(m, n, k)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    fn(a, sa, b, sb, out=out)
    base = torch.empty(k // 128 * m + 1, device="cuda")
    shifted = base[1:].view(k // 128, m).t()  # 4- but not 16-byte aligned
    shifted.copy_(sa)
    before = len(python_launches)
    out.fill_(float("nan"))
    fn(a, shifted, b, sb, out=out)
    assert len(python_launches) == before + 1
    torch.cuda.synchronize()
    assert fp8_difference(out, reference.fp8_gemm(a, sa, b, sb)) < FP8_TOL
    bad_out = torch.empty(m * n + 1, device="cuda", dtype=torch.bfloat16)[1:].view(m, n)
    with pytest.raises(LaunchError, match="out"):
        fn(a, sa, b, sb, out=bad_out)
    with pytest.raises(LaunchError, match="extra arguments"):
        fn(a, sa, b, sb, group=torch.zeros(m, dtype=torch.int32, device="cuda"), out=out)
    with pytest.raises(LaunchError):
        fn(a, sa, b[:-1], sb, out=out)


def test_on_a_side_stream_and_in_a_cuda_graph():
    fn = _kernel("fp8_gemm")
    m, n, k = 256, 512, 1024
    a, sa, b, sb = _dense(m, n, k)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    fn(a, sa, b, sb, out=out)  # adopted
    a2, sa2 = fp8.quantize_1x128(torch.randn(m, k, device="cuda"))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # a launch on another stream would read a before the copy
        torch.cuda._sleep(50_000_000)
        a.copy_(a2)
        sa.copy_(sa2)
        got = fn(a, sa, b, sb)
        copy = got.clone()
    torch.cuda.synchronize()
    assert fp8_difference(copy, reference.fp8_gemm(a2, sa2, b, sb)) < FP8_TOL
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn(a, sa, b, sb, out=out)
    out.fill_(float("nan"))
    a2, sa2 = fp8.quantize_1x128(torch.randn(m, k, device="cuda"))
    a.copy_(a2)
    sa.copy_(sa2)
    g.replay()
    torch.cuda.synchronize()
    assert fp8_difference(out, reference.fp8_gemm(a, sa, b, sb)) < FP8_TOL


def test_dropped_encodings_are_made_again(monkeypatch):
    """More outs in turn than a map keeps encodings of: each call still writes its own out."""
    monkeypatch.setattr(tma.TensorMap, "ENCODINGS_KEPT", 3)
    fn = _kernel("fp8_gemm")
    m, n, k = 128, 256, 512
    a, sa, b, sb = _dense(m, n, k)
    ref = reference.fp8_gemm(a, sa, b, sb)
    outs = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(7)]
    fn(a, sa, b, sb, out=outs[0])
    for turn in range(3):
        for o in outs:
            o.fill_(float("nan"))
            fn(a, sa, b, sb, out=o)
        torch.cuda.synchronize()
        for o in outs:
            assert fp8_difference(o, ref) < FP8_TOL, turn


def test_threads_sharing_a_kernel_stay_right():
    fn = _kernel("fp8_gemm")
    m, n, k = 128, 256, 512
    sets = [_dense(m, n, k) for _ in range(4)]
    refs = [reference.fp8_gemm(*s) for s in sets]
    fn(*sets[0])
    errors = []

    def work(i):
        try:
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                for _ in range(50):
                    got = fn(*sets[i])
                    stream.synchronize()
                    if fp8_difference(got, refs[i]) >= FP8_TOL:
                        errors.append(i)
                        return
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
