"""FP8 block-scaled GEMMs on the GPU against the float64 product of the dequantised inputs."""
import pytest

import kdsl
from kdsl import fp8, reference
from kdsl.testing import FP8_TOL, fp8_difference

from conftest import ROOT

pytestmark = pytest.mark.gpu


def _mod(name):
    return kdsl.load(ROOT / "samples" / f"{name}.kd")


@pytest.mark.parametrize("M,N,K", [(1, 2112, 7168), (127, 129, 128), (128, 256, 256), (129, 2112, 512),
                                   (300, 7168, 1024), (4096, 512, 384), (77, 1, 128)])
def test_dense(M, N, K):
    torch = pytest.importorskip("torch")
    a, sa = fp8.quantize_1x128(torch.randn(M, K, device="cuda"))
    b, sb = fp8.quantize_128x128(torch.randn(N, K, device="cuda"))
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    _mod("fp8_gemm").fp8_gemm(a, sa, b, sb, out=out)
    diff = fp8_difference(out, reference.fp8_gemm(a, sa, b, sb))
    assert diff < FP8_TOL, diff


@pytest.mark.parametrize("aligned", [True, False])
def test_grouped_contiguous(aligned):
    torch = pytest.importorskip("torch")
    G, N, K = 4, 384, 512
    if aligned:
        sizes = [128, 256, 0, 384]
        group = torch.cat([torch.full((s,), g, dtype=torch.int32) for g, s in enumerate(sizes)]).cuda()
        group[-40:] = -1  # padding rows
    else:
        group = torch.randint(-1, G + 2, (333,), dtype=torch.int32, device="cuda")  # unsorted, mixed, ids >= G are padding
    M = group.numel()
    a, sa = fp8.quantize_1x128(torch.randn(M, K, device="cuda"))
    b, sb = fp8.quantize_128x128(torch.randn(G, N, K, device="cuda"))
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    _mod("fp8_grouped_contiguous").fp8_grouped_contiguous(a, sa, b, sb, group, out=out)
    ref = reference.fp8_gemm(a, sa, b, sb, group=group)
    valid = (group >= 0) & (group < G)
    assert torch.isnan(out[~valid].float()).all(), "padding rows must be left untouched"
    assert fp8_difference(out[valid], ref[valid]) < FP8_TOL


def test_grouped_masked():
    torch = pytest.importorskip("torch")
    G, Mmax, N, K = 4, 256, 512, 768
    count = torch.tensor([0, 1, 200, 256], dtype=torch.int32, device="cuda")
    a, sa = fp8.quantize_1x128(torch.randn(G, Mmax, K, device="cuda"))
    b, sb = fp8.quantize_128x128(torch.randn(G, N, K, device="cuda"))
    out = torch.full((G, Mmax, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    _mod("fp8_grouped_masked").fp8_grouped_masked(a, sa, b, sb, count, out=out)
    ref = reference.fp8_gemm(a, sa, b, sb, count=count)
    for g, c in enumerate(count.tolist()):
        assert torch.isnan(out[g, c:].float()).all()
        if c:
            assert fp8_difference(out[g, :c], ref[g, :c]) < FP8_TOL


def test_bad_fp8_arguments():
    torch = pytest.importorskip("torch")
    from kdsl.errors import LaunchError
    mod = _mod("fp8_gemm")
    a, sa = fp8.quantize_1x128(torch.randn(64, 256, device="cuda"))
    b, sb = fp8.quantize_128x128(torch.randn(128, 256, device="cuda"))
    cases = [
        (lambda: mod.fp8_gemm(a[:, :200].contiguous(), sa, b, sb), "multiple of 128"),
        (lambda: mod.fp8_gemm(a, sa.contiguous(), b, sb), "a_scale must have shape [64, 2] with strides [1, 64]"),
        (lambda: mod.fp8_gemm(a, sa, b, sb[:, :1]), "b_scale must have shape [1, 2]"),
        (lambda: mod.fp8_gemm(a.float(), sa, b, sb), "must be torch.float8_e4m3fn"),
        (lambda: mod.fp8_gemm(a, sa, b, sb, torch.zeros(3)), "extra arguments"),
    ]
    for fn, needle in cases:
        with pytest.raises(LaunchError) as e:
            fn()
        assert needle in str(e.value), (needle, str(e.value))
