"""Integer division by zero: a divisor of the positions and sizes that is 0 for a call's shapes
is refused before launch, naming it (Python raises there; the kernel used to compute the
hardware's unspecified value, and the numpy reference 0, so `(i - j) % h` at head 0 was a
silent wrong answer); one in a `where` branch not taken, or read from data, gives 0 in the
kernel and in every reference (torch raised on a guarded one)."""
import numpy as np
import pytest

import kdsl
from kdsl import reference
from kdsl.backends import round_float32
from kdsl.check import ATTENTION_TOL, rel_frobenius
from kdsl.errors import LaunchError


def _program(mask: str, captures: str = "") -> str:
    return f"""attention t {{
        q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
        {captures}
        mask(b, h, i, j) = {mask}
    }}"""


def _inputs(rng, B, H, M, N):
    q = round_float32(rng.standard_normal((B, H, M, 32), dtype=np.float32), "bf16")
    k, v = (round_float32(rng.standard_normal((B, H, N, 32), dtype=np.float32), "bf16") for _ in range(2))
    return q, k, v


def _floor(op, a, b):
    """Python's // and %, and 0 for a zero divisor: the oracle, element by element."""
    if b == 0:
        return 0
    return a // b if op == "//" else a % b


@pytest.mark.parametrize("mask, shape, said", [
    ("j <= i and (i - j) % h == 0", dict(B=1, H=3), "(i - j) % h divides by h, which is 0 at h = 0"),
    ("j <= i and (i - j) // (b - 1) < 3", dict(B=3, H=2), "divides by b - 1, which is 0 at b = 1"),
    ("j <= i and (i - j) % (h - H + 2) == 0", dict(B=2, H=5), "which is 0 at h = 3"),
    ("j <= i and (i - j) % (H - 4) == 0", dict(B=1, H=4), "which is 0 at every (b, h)"),
    # the branch is taken at h = 0 too: no guard
    ("j <= i and where(h >= 0, (i - j) // h, 0) < 4", dict(B=1, H=2), "(i - j) // h divides by h"),
    # j - i + 1 spans [2 - M, N]: 0 lies inside (at its lower end when M = 2)
    ("i % (j - i + 1) == 0", dict(B=1, H=1), "divides by j - i + 1, which ranges over [{lo}, {N}]"),
    # the guard chooses it at h = 3 only: named there
    ("j <= i and where(h > 2, (i - j) // (H - 4), 0) < 4", dict(B=2, H=4), "divides by H - 4, which is 0 at h = 3"),
])
def test_a_divisor_that_is_zero_for_the_call_s_shapes_is_refused(mask, shape, said):
    mod = kdsl.compile(_program(mask), "t.kd", interpret=True)
    rng = np.random.default_rng()
    M, N = (int(x) for x in rng.integers(2, 40, 2))
    with pytest.raises(LaunchError) as e:
        mod.t(*_inputs(rng, shape["B"], shape["H"], M, N))
    said = said.format(lo=2 - M, N=N)
    assert said in str(e.value) and "in mask()" in str(e.value) and "ZeroDivisionError" in str(e.value)


@pytest.mark.parametrize("mask, oracle", [
    # guarded by the where: h = 0 never divides
    ("j <= i and where(h > 0, (i - j) // h, 0) < 4",
     lambda b, h, i, j, blk: j <= i and (_floor("//", i - j, h) if h > 0 else 0) < 4),
    ("j <= i and (i - j) % (h + 1) == 0", lambda b, h, i, j, blk: j <= i and (i - j) % (h + 1) == 0),
    ("j <= i and (i - j) % (H - 4) == 0", None),  # H = 5 here: the divisor is 1
    ("i % (j + 1) == 0", lambda b, h, i, j, blk: i % (j + 1) == 0),
    # read from data, 0 included: the caller's; x % 0 is 0
    ("i % blk[b] == 0 or j == 0", lambda b, h, i, j, blk: _floor("%", i, blk[b]) == 0 or j == 0),
])
def test_a_divisor_never_zero_or_guarded_or_from_data_runs_as_python_with_zero_for_x_by_0(mask, oracle):
    mod = kdsl.compile(_program(mask, "blk: i32[B]"), "t.kd", interpret=True)
    rng = np.random.default_rng()
    B, H, M, N = 2, 5, *(int(x) for x in rng.integers(2, 40, 2))
    q, k, v = _inputs(rng, B, H, M, N)
    blk = np.array([0, int(rng.integers(1, 5))], np.int32)[rng.permutation(2)]
    out = mod.t(q, k, v, blk)
    ir = mod.ir["t"]
    ref, _ = reference.attention(ir, q, k, v, {"blk": blk})
    assert rel_frobenius(out, ref) <= ATTENTION_TOL
    if oracle is not None:
        want = np.array([[[[oracle(b, h, i, j, blk) for j in range(N)] for i in range(M)] for h in range(H)]
                         for b in range(B)])
        assert np.array_equal(reference.mask_of(ir, q, k, v, {"blk": blk}), want)


def test_torch_s_reference_takes_a_guarded_division_and_a_zero_divisor_from_data():
    """Regression: torch raised ZeroDivisionError evaluating `N // h` at h = 0 in a `where`
    branch not taken (it evaluates both), where numpy computed 0."""
    torch = pytest.importorskip("torch")
    mod = kdsl.compile(_program("where(h > 0, (i - j) // h, 0) < 4 and i % blk[b] != 1", "blk: i32[B]"),
                       "t.kd", interpret=True)
    rng = np.random.default_rng()
    q, k, v = _inputs(rng, 2, 3, 17, 23)
    blk = np.array([0, 3], np.int32)
    ir = mod.ir["t"]
    want = reference.mask_of(ir, q, k, v, {"blk": blk})
    got = reference.mask_of(ir, *map(torch.from_numpy, (q, k, v)), {"blk": torch.from_numpy(blk)})
    assert np.array_equal(got.numpy(), want)
