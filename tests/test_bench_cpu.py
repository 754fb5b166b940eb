"""The benchmark's bookkeeping, without a GPU: the suite covers what the issue asks for,
and the table states its convention and shows failed peers instead of dropping them."""
from kdsl import bench


def test_standard_suite_shapes():
    cases = bench.standard_suite()
    attn = [c for c in cases if c.kind == "attention"]
    assert {c.kernel for c in attn} == set(bench.ATTN)
    for c in attn:
        if c.shape["M"] > 1 and c.kernel != "natten2d" and c.shape["D"] == 128:
            assert c.shape["B"] * c.shape["M"] == 16384 and c.shape["H"] == 16
    decode = [c for c in attn if c.shape["M"] == 1]
    assert sorted((c.kernel, c.shape["N"]) for c in decode) == [("plain", 4096), ("plain", 32768),
                                                                 ("relpos", 4096), ("relpos", 32768)]
    gemm = [(c.shape["M"], c.shape["N"], c.shape["K"]) for c in cases if c.kernel == "fp8_gemm"]
    assert len(gemm) == 12 and (128, 2112, 7168) in gemm and (4096, 7168, 16384) in gemm


def test_markdown_shows_failed_peers_and_convention():
    rows = [bench.Row("relpos", "B=1", ms=1.0, tflops=100.0, gbps=10.0, error=1e-3,
                      peers={"flex": {"ms": 2.0, "tflops": 50.0}, "cudnn": {"error": "not supported"}}),
            bench.Row("causal", "B=2", failure="RuntimeError: boom")]
    md = bench.markdown(rows, "GPU")
    assert "4·D per kept (q, kv) pair" in md
    assert "| 1000.0 | 100.0 |" in md and "| 2000.0 | 50.0 | 2.00 |" in md and "could not run: not supported" in md and "FAILED: RuntimeError: boom" in md
