"""kdsl check's FP8 metric (DeepGEMM's calc_diff with a floored denominator): a regression
test for a one-element case whose 128 terms cancel. On the H100 (`kdsl check
samples/fp8_gemm_accumulate.kd`, M=N=1, K=128) the kernel's error was what its FP8 tensor-core
accumulation leaves, yet calc_diff read 1.2e-3 > 1e-3 because the sum was small."""
import numpy as np
import pytest

from kdsl import fp8, reference
from kdsl.check import FP8_TOL, fp8_difference


def _inputs(rng, m, n, k):
    a, sa = fp8.quantize_1x128(rng.standard_normal((m, k)).astype(np.float32))
    b, sb = fp8.quantize_128x128(rng.standard_normal((n, k)).astype(np.float32))
    return a, sa, b, sb


def _cancelling_case():
    """M = N = 1, K = 128 with a product near zero: the last term made to cancel the rest."""
    rng = np.random.default_rng(5)
    for _ in range(200):
        a, sa, b, sb = _inputs(rng, 1, 1, 128)
        ref = reference.fp8_gemm(a, sa, b, sb)
        mag = reference.fp8_gemm_magnitude(a, sa, b, sb)
        if abs(float(ref[0, 0])) < 0.02 * float(np.sqrt(mag[0, 0])):
            return ref, mag
    raise AssertionError("no cancelling draw")


def test_rounding_at_the_terms_scale_passes_where_their_sum_cancels():
    ref, mag = _cancelling_case()
    # an error of 1e-3 of the terms' size: FP8 accumulation leaves about this much
    out = ref + 1e-3 * np.sqrt(mag)
    assert fp8_difference(out, ref) > FP8_TOL  # calc_diff alone: fails, measuring the cancellation
    assert fp8_difference(out, ref, mag) < FP8_TOL


def test_a_wrong_result_still_fails_with_the_floor():
    ref, mag = _cancelling_case()
    assert fp8_difference(ref + 0.1 * np.sqrt(mag), ref, mag) > FP8_TOL  # 10 % of the terms' size
    rng = np.random.default_rng(7)
    a, sa, b, sb = _inputs(rng, 64, 96, 512)
    ref = reference.fp8_gemm(a, sa, b, sb)
    mag = reference.fp8_gemm_magnitude(a, sa, b, sb)
    wrong_scale = reference.fp8_gemm(a, sa * 1.05, b, sb)
    assert fp8_difference(wrong_scale, ref, mag) > FP8_TOL
    dropped_block = ref - reference.fp8_gemm(a[:, :128], sa[:, :1], b[:, :128], sb[:, :1])
    assert fp8_difference(dropped_block, ref, mag) > FP8_TOL


def test_the_floor_does_not_bind_on_a_large_random_output():
    rng = np.random.default_rng(9)
    a, sa, b, sb = _inputs(rng, 128, 256, 1024)
    ref = reference.fp8_gemm(a, sa, b, sb)
    mag = reference.fp8_gemm_magnitude(a, sa, b, sb)
    out = ref * (1 + 1e-2 * rng.standard_normal(ref.shape))
    assert fp8_difference(out, ref, mag) == fp8_difference(out, ref)


def test_masked_groups_check_catches_written_padding_and_wrong_rows():
    torch = pytest.importorskip("torch")
    from kdsl.testing import assert_masked_groups_right
    count = torch.tensor([0, 2, 4])
    ref = torch.randn(3, 4, 8, dtype=torch.float64)
    out = torch.full((3, 4, 8), float("nan"))
    for g, c in enumerate(count.tolist()):
        out[g, :c] = ref[g, :c].float()
    assert_masked_groups_right(out, ref, count)
    written = out.clone()
    written[0, 0] = 0.0  # group 0 has no rows
    with pytest.raises(AssertionError, match="group 0: rows past its count 0 were written"):
        assert_masked_groups_right(written, ref, count)
    wrong = out.clone()
    wrong[2, 3] += 1.0
    with pytest.raises(AssertionError, match="group 2"):
        assert_masked_groups_right(wrong, ref, count)
