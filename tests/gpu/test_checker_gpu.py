"""The checker must accept honest kernels and reject each kind of broken one."""
import pytest

import kdsl
from kdsl.check import check_attention, check_gemm

from conftest import ROOT

pytestmark = pytest.mark.gpu

CAUSAL = (ROOT / "samples" / "causal.kd").read_text()


def _causal():
    mod = kdsl.compile(CAUSAL, "causal.kd")
    return mod.ir["causal"], mod.causal


def _rejected(fn, trials=2):
    spec, _ = _causal()
    results = check_attention(spec, fn, trials=trials, seed=1)
    return not all(r.passed for r in results)


def test_honest_kernels_pass():
    spec, fn = _causal()
    assert all(r.passed for r in check_attention(spec, fn, trials=2, seed=0))
    gmod = kdsl.load(ROOT / "samples" / "fp8_grouped_contiguous.kd")
    assert all(r.passed for r in check_gemm(gmod.ir["fp8_grouped_contiguous"], gmod.fp8_grouped_contiguous, 1, 0))


def test_rejects_dropped_mask():
    nomask = kdsl.compile(CAUSAL.replace("mask(b, h, i, j) = j <= i", ""), "nomask.kd").causal
    assert _rejected(nomask)


def test_rejects_off_by_one_kv_bound():
    _, fn = _causal()
    def broken(q, k, v, out, **kw):  # forgets the last key
        n = max(k.shape[2] - 1, 1)
        return fn(q, k[:, :, :n].contiguous(), v[:, :, :n].contiguous(), out=out, **kw)
    assert _rejected(broken)


def test_rejects_skipped_last_partial_tile():
    _, fn = _causal()

    def broken(q, k, v, out, **kw):
        n = k.shape[2] - k.shape[2] % 64 or k.shape[2]
        return fn(q, k[:, :, :n].contiguous(), v[:, :, :n].contiguous(), out=out, **kw)
    assert _rejected(broken)


def test_rejects_rows_left_unwritten():
    _, fn = _causal()

    def broken(q, k, v, out, **kw):
        m = max(q.shape[2] - 1, 1)
        tmp = fn(q[:, :, :m].contiguous(), k, v, **kw)
        out[:, :, :m].copy_(tmp)
    assert _rejected(broken)


def test_rejects_input_copied_to_output():
    assert _rejected(lambda q, k, v, out, **kw: out.copy_(q))


def test_rejects_output_reused_from_previous_call():
    _, fn = _causal()
    cache = {}

    def broken(q, k, v, out, **kw):
        key = (tuple(q.shape), tuple(k.shape))
        if key not in cache:
            cache[key] = fn(q, k, v, **kw).clone()
        out.copy_(cache[key])
    assert _rejected(broken)


def test_rejects_lower_precision_than_declared():
    import torch
    _, fn = _causal()

    def broken(q, k, v, out, **kw):  # computes with e4m3 inputs while the program declares bf16
        lo = lambda x: x.to(torch.float8_e4m3fn).to(x.dtype)
        fn(lo(q), lo(k), lo(v), out=out, **kw)
    assert _rejected(broken)


def test_rejects_work_on_a_side_stream():
    import torch
    _, fn = _causal()
    side = torch.cuda.Stream()

    def broken(q, k, v, out, **kw):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(50_000_000)  # the real work starts late, where the caller's timer cannot see it
            fn(q, k, v, out=out, **kw)
    assert _rejected(broken, trials=1)


def test_rejects_writes_outside_the_output():
    _, fn = _causal()

    def broken(q, k, v, out, **kw):
        fn(q, k, v, out=out, **kw)
        import torch
        big = torch.as_strided(out, (out.numel() + 8,), (1,))
        big[-1] = 0  # one element past the end
    assert _rejected(broken)


def test_rejects_modified_input():
    _, fn = _causal()

    def broken(q, k, v, out, **kw):
        fn(q, k, v, out=out, **kw)
        q.view(-1)[0] = 0
    assert _rejected(broken)


def test_cli_check_passes_on_a_sample_and_fails_on_a_broken_program(tmp_path):
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "kdsl.cli", "check", str(ROOT / "samples" / "sliding_window.kd"),
                        "--trials", "1", "--seed", "5"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "seed 5" in r.stdout and "cases pass" in r.stdout
