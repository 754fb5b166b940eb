"""The CPU path on numpy alone: after the README's first install command (no torch, no
Hypothesis) every sample checks through the interpreter, interpreted kernels take numpy
arrays, and what truly needs torch or Hypothesis says which extra to install."""
import random
import re
import subprocess
import sys

import numpy as np
import pytest

import kdsl
from kdsl import cli, reference
from kdsl.backends import Numpy, round_float32
from kdsl.check import ATTENTION_TOL, rel_frobenius
from kdsl.errors import KdslError, LaunchError
from kdsl.runtime.bounds import check_capture_indices

from conftest import ROOT, SAMPLES, assert_index_verdict

# Run as if torch and Hypothesis were not installed: importing either fails.
WITHOUT = "import sys; sys.modules['torch'] = None; sys.modules['hypothesis'] = None\n"


def run_without_torch(code: str):
    return subprocess.run([sys.executable, "-c", WITHOUT + code], capture_output=True, text=True, cwd=ROOT)


def test_check_interpret_passes_every_sample_without_torch():
    argv = ["check", *map(str, SAMPLES), "--interpret", "--trials", "1", "--seed", str(random.randrange(2**31))]
    r = run_without_torch(f"from kdsl.cli import main; rc = main({argv!r}); "
                          "assert 'torch' not in {m.split('.')[0] for m, v in sys.modules.items() if v}; "
                          "sys.exit(rc)")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "all kernels pass" in r.stdout and "internal error" not in r.stderr
    assert r.stdout.count("cases pass") == sum(len(kdsl.load(p).kernels) for p in SAMPLES)


NUMPY_CALLS = """
import numpy as np, kdsl
from kdsl import fp8, reference
from kdsl.backends import round_float32
rng = np.random.default_rng()
mod = kdsl.load("samples/alibi.kd", interpret=True)
q, k, v = (rng.standard_normal((1, 2, 100, 64), dtype=np.float32) for _ in range(3))
slopes = rng.random(2, dtype=np.float32)
out = mod.alibi(q, k, v, slopes)
assert "kdsl.check" not in sys.modules                # the runtime does not import the judge
from kdsl.check import rel_frobenius, fp8_difference, ATTENTION_TOL, FP8_TOL
assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == q.shape
assert (round_float32(out, "bf16") == out).all()      # bf16 values, held in float32
bf = lambda x: round_float32(x, "bf16")               # what the kernel read
ref, _ = reference.attention(mod.ir["alibi"], bf(q), bf(k), bf(v), {"slopes": slopes})
assert rel_frobenius(out, ref) <= ATTENTION_TOL, rel_frobenius(out, ref)
g = kdsl.load("samples/fp8_grouped_masked.kd", interpret=True)
a, sa = fp8.quantize_1x128(rng.standard_normal((2, 64, 256), dtype=np.float32))
b, sb = fp8.quantize_128x128(rng.standard_normal((2, 130, 256), dtype=np.float32))
count = np.array([10, 64], dtype=np.int32)
out = g.fp8_grouped_masked(a, sa, b, sb, count)
assert np.isnan(out[0, 10:]).all() and not np.isnan(out[0, :10]).any() and not np.isnan(out[1]).any()
assert fp8_difference(out[0, :10], reference.fp8_gemm(a, sa, b, sb, count=count)[0, :10]) < FP8_TOL
print("ok")
"""


def test_interpreted_kernels_take_numpy_arrays_without_torch():
    r = run_without_torch(NUMPY_CALLS)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


def test_hypothesis_search_without_hypothesis_names_the_extra():
    r = run_without_torch("from kdsl.cli import main; sys.exit(main(['check', 'samples/causal.kd', "
                          "'--interpret', '--hypothesis', '5']))")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "needs hypothesis" in r.stderr and "kdsl[testing]" in r.stderr


def test_gpu_check_without_torch_names_the_extra(monkeypatch, capsys):
    import kdsl.runtime.launch as launch
    monkeypatch.setattr(launch, "_driver", lambda: None)  # as if CuPy saw a GPU
    monkeypatch.setitem(sys.modules, "torch", None)
    assert cli.main(["check", str(ROOT / "samples" / "causal.kd")]) == 1
    err = capsys.readouterr().err
    assert "needs torch" in err and "kdsl[torch]" in err and "internal error" not in err


UNBOUNDABLE = """
attention lookup {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    ids: i32[B, M]
    tbl: f32[5]
    score(s, b, h, i, j) = s + tbl[ids[b, i]]
}
"""


def test_interpreter_refuses_an_unboundable_index_like_the_gpu_path():
    """Regression: the interpreter raised a bare IndexError; now the shared bounds check
    refuses the call with the GPU path's message."""
    mod = kdsl.compile(UNBOUNDABLE, "lookup.kd", interpret=True)
    q = np.zeros((1, 2, 8, 64), np.float32)
    ids = np.full((1, 8), 1000, np.int32)
    tbl = np.zeros(5, np.float32)
    with pytest.raises(LaunchError) as e:
        mod.lookup(q, q, q, ids, tbl)
    with pytest.raises(LaunchError) as direct:
        check_capture_indices(mod.ir["lookup"], {"B": 1, "H": 2, "M": 8, "D": 64, "N": 8}, "lookup")
    assert str(e.value) == str(direct.value)
    assert "'tbl'" in str(e.value) and "cannot be bounded" in str(e.value)


SHAPE_DEPENDENT = """
attention frames {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    tbl: f32[H, 32]
    score(s, b, h, i, j) = s + tbl[h, min(i // 256 - j // 256, 31)]
    mask(b, h, i, j) = j // 256 >= i // 256
}
attention plain {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
}
"""


def test_cli_check_fails_a_refused_case_and_goes_on(tmp_path):
    """A call the launch refuses (here an index that leaves its axis where a query and a key
    lie in different 256-blocks, which the mask keeps: keys of later blocks; under block-causal
    it would be clamped where dropped and run, passes/masked_index.py) is a failed case with the message, not an abort: the cases
    where the index stays in bounds, and the file's other kernels, are still judged and
    printed (before, one refusal ended the whole check with only that message)."""
    p = tmp_path / "frames.kd"
    p.write_text(UNBOUNDABLE + SHAPE_DEPENDENT)
    r = subprocess.run([sys.executable, "-m", "kdsl.cli", "check", str(p), "--interpret", "--trials", "1",
                        "--seed", "3"], capture_output=True, text=True)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    tables = {line.split(":")[0]: line for line in r.stdout.splitlines() if "cases pass" in line}
    assert set(tables) == {"lookup", "frames", "plain"}, r.stdout
    assert tables["lookup"].startswith("lookup: 0/")
    assert not tables["frames"].startswith("frames: 0/") and not tables["frames"].startswith("frames: 7/7")
    assert tables["plain"].startswith("plain: 7/7"), r.stdout
    assert "FAIL refused the call: lookup: in score(), index 0 of 'tbl'" in r.stdout
    assert "index 1 of 'tbl' (min(i // 256 - j // 256, 31)) ranges over" in r.stdout
    assert r.stdout.rstrip().endswith("FAILED")


def test_interpreter_shares_the_gpu_paths_argument_checks():
    mod = kdsl.load(ROOT / "samples" / "causal.kd", interpret=True)
    x = np.zeros((1, 2, 8, 64), np.float32)
    with pytest.raises(LaunchError, match=r"argument 'q' must be float32 \(numpy has no bf16"):
        mod.causal(x.astype(np.float64), x, x)
    with pytest.raises(LaunchError, match="head dimension 272 of q and k is not supported: it must be from 1 to 256"):
        z = np.zeros((1, 2, 8, 272), np.float32)
        mod.causal(z, z, z)
    with pytest.raises(LaunchError, match="head dimension 300 of q and k is not supported: it must be from 1 to 256"):
        z = np.zeros((1, 2, 8, 300), np.float32)  # (a head dim off the multiples of 16 is padded: test_head_pad)
        mod.causal(z, z, z)
    with pytest.raises(LaunchError, match="argument 'out' must be contiguous"):  # (an input is copied: test_layouts)
        mod.causal(x, x, x, out=x.transpose(0, 1, 3, 2).copy().transpose(0, 1, 3, 2))
    with pytest.raises(LaunchError, match=r"out must have shape \[1, 2, 8, 64\] \(q's batch, heads and length, v's"):
        mod.causal(x, x, x, out=np.zeros((1, 2, 7, 64), np.float32))


def test_interpreter_writes_into_a_given_numpy_out():
    mod = kdsl.load(ROOT / "samples" / "relpos.kd", interpret=True)
    rng = np.random.default_rng()
    q, k, v = (round_float32(rng.standard_normal((1, 1, 70, 64), dtype=np.float32), "bf16") for _ in range(3))
    out = np.full_like(q, np.nan)
    assert mod.relpos(q, k, v, out=out) is out
    ref, _ = reference.attention(mod.ir["relpos"], q, k, v)
    assert rel_frobenius(out, ref) <= ATTENTION_TOL


def test_mixed_numpy_and_torch_arguments_are_refused():
    torch = pytest.importorskip("torch")
    mod = kdsl.load(ROOT / "samples" / "causal.kd", interpret=True)
    x = np.zeros((1, 2, 8, 64), np.float32)
    with pytest.raises(LaunchError, match="mix of numpy arrays and torch tensors"):
        mod.causal(x, torch.zeros(1, 2, 8, 64, dtype=torch.bfloat16), x)


def test_need_names_the_extra():
    from kdsl.backends import need
    with pytest.raises(KdslError, match=r"pip install 'kdsl\[x\]'"):
        need("kdsl_no_such_module", "x", "this")
    assert Numpy().logsumexp(np.full((2, 3), -np.inf))[0] == -np.inf


def test_a_clamped_data_dependent_index_is_accepted_and_correct():
    """Regression: interval arithmetic gave up on any value read from a tensor, so even the
    clamp the message recommends was refused; unknown sides are now infinite."""
    src = UNBOUNDABLE.replace("tbl[ids[b, i]]", "tbl[min(max(ids[b, i], 0), 4)]")
    mod = kdsl.compile(src, "lookup.kd", interpret=True)
    rng = np.random.default_rng()
    q, k, v = (round_float32(rng.standard_normal((1, 2, 40, 64), dtype=np.float32), "bf16") for _ in range(3))
    ids = rng.integers(-1000, 1000, (1, 40), dtype=np.int32)
    tbl = rng.standard_normal(5, dtype=np.float32)
    out = mod.lookup(q, k, v, ids, tbl)
    ref, _ = reference.attention(mod.ir["lookup"], q, k, v, {"ids": ids, "tbl": tbl})
    assert rel_frobenius(out, ref) <= ATTENTION_TOL


@pytest.mark.parametrize("index, size, verdict", [
    ("q - kv + N - 1", "M + N - 1", None),
    ("q - kv + N - 1", "M + N - 2", "ranges over [0, 10] for these shapes, but that axis has size 10"),
    ("min(ids[b, q], L - 1)", "M", "cannot be bounded"), ("max(min(ids[b, q], L - 1), 0)", "M", None),
    ("(ids[b, q] % L)", "M", None), ("abs(ids[b, q]) // 2", "M", "cannot be bounded")])
def test_capture_index_bounds(index, size, verdict):
    src = f"""attention t {{
        q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
        ids: i32[B, M]
        bias: f32[H, L]
        score(s, b, h, q, kv) = s + bias[h, {index}]
    }}"""
    k_ir = kdsl.compile(src, "t.kd").ir["t"]
    dims = {"B": 1, "H": 2, "M": 5, "N": 7, "D": 64}
    dims["L"] = eval(size, {}, dims)
    assert_index_verdict(k_ir, dims, verdict)


@pytest.mark.parametrize("mask, dims, verdict", [
    ("img[b, i] == img[b, j]", {"M": 9, "N": 7}, "the position i indexes an axis of N keys, so the kernel takes "
     "calls with M <= N only; for self-attention alone declare q: bf16[B, H, N, D], so every call has M = N; for "
     "others give that position a tensor of its own (img_i: i32[B, M]), or clamp it, e.g. min(i, N - 1)"),
    ("img[b, i] == img[b, j]", {"M": 7, "N": 7}, None),
    ("tq[h, j] > 0", {"M": 5, "N": 7}, "the position j indexes an axis of M queries, so the kernel takes calls "
     "with N <= M only; for self-attention alone declare k: bf16[B, H, M, D]; v: bf16[B, H, M, D], so every call "
     "has M = N; for others give that position a tensor of its own (tq_j: i32[H, N])"),
    ("img[b, i + 1] > 0", {"M": 7, "N": 7}, "clamp it above, e.g. min(..., 6)")])
def test_a_position_indexing_the_other_positions_axis_is_refused_with_what_to_declare(mask, dims, verdict):
    """Self-attention written with one tensor for queries and keys (`img[b, i] == img[b, j]`, img:
    [B, N]) takes calls with M <= N; a call past that is refused by a message that says so, and
    what to declare: the operands at one length (the declaration the hint names compiles, and
    its calls all have M = N), or a tensor of the position's own (held-out set 46's
    image_text_bidir); an index that is not the position itself gets the plain clamp hint."""
    src = f"""attention t {{
        q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
        img: i32[B, N]; tq: i32[H, M]
        mask(b, h, i, j) = {mask}
    }}"""
    k_ir = kdsl.compile(src, "t.kd").ir["t"]
    dims = {"B": 2, "H": 2, "D": 64, **dims}
    assert_index_verdict(k_ir, dims, verdict)
    if verdict and "self-attention alone" in verdict:
        declared = verdict.split("declare ")[1].split(", so every call")[0]
        for decl in declared.split("; "):
            name = decl.split(":")[0]
            src = re.sub(rf"\b{name}: bf16\[[^]]*\]", decl, src)
        same = kdsl.compile(src, "t.kd").ir["t"]
        assert_index_verdict(same, {**dims, "M": 7, "N": 7}, None)


def test_launch_errors_quote_shapes_and_indices_as_written_not_as_ir():
    """Regression: a wrong capture shape or an unbounded index was quoted in IR text,
    '(sub:i32 (mul:i32 2 N) 1)' or '(load:i32 ids b q)'; now as the program writes it, with
    the user's parameter names, and the sizes a shape uses say which argument gave them."""
    src = """attention t {
        q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
        ids: i32[B, M]
        bias: f32[H, 2 * N - 1]
        tbl: f32[5]
        score(s, b, h, i, j) = s + bias[h, i - j + N - 1] + tbl[ids[b, i]]
    }"""
    mod = kdsl.compile(src, "t.kd", interpret=True)
    rng = np.random.default_rng()
    H, N = (int(x) for x in rng.integers(1, 9, 2))
    M = int(rng.integers(1, N + 1))  # bias's index i - j + N - 1 stays in bounds
    q, kv = np.zeros((1, H, M, 64), np.float32), np.zeros((1, H, N, 64), np.float32)
    ids, tbl = np.zeros((1, M), np.int32), np.zeros(5, np.float32)
    with pytest.raises(LaunchError) as e:
        mod.t(q, kv, kv, ids, np.zeros((H, 2 * N), np.float32), tbl)
    assert str(e.value) == (f"t: argument 'bias' dimension 1 (2 * N - 1) must be {2 * N - 1}, got {2 * N} "
                            f"(shape [{H}, {2 * N}]); N = {N} is k's dimension 2")
    with pytest.raises(LaunchError) as e:
        mod.t(q, kv, kv, ids, np.zeros((H, 2 * N - 1), np.float32), tbl)
    assert str(e.value).startswith("t: in score(), index 0 of 'tbl' (ids[b, i]) cannot be bounded")


HASHED = """
attention hashed {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    mask(b, h, i, j) = (i * 7919 + j * 104729 + h * 31) % 10 != 0
}
"""


@pytest.mark.parametrize("n, verdict", [(4096, None), (20506, None), (20507, "j * 104729 ranges over [0, 2147572874]")])
def test_an_integer_beyond_i32_for_the_call_s_shapes_is_refused(n, verdict):
    """Regression: the kernel computes ints in 32 bits and the reference exactly, so a hashed
    mask at N = 32768 wrapped on the GPU alone, a silent wrong answer; now the call is refused,
    naming the innermost value that leaves i32 (j < 20506: 20505 * 104729 still fits)."""
    mod = kdsl.compile(HASHED, "hashed.kd", interpret=True)
    rng = np.random.default_rng()
    q = round_float32(rng.standard_normal((1, 1, 1, 64), dtype=np.float32), "bf16")
    kv = round_float32(rng.standard_normal((1, 1, n, 64), dtype=np.float32), "bf16")
    if verdict is None:
        out = mod.hashed(q, kv, kv)
        ref, _ = reference.attention(mod.ir["hashed"], q, kv, kv, {})
        assert rel_frobenius(out, ref) <= ATTENTION_TOL
    else:
        with pytest.raises(LaunchError, match=re.escape(verdict)) as e:
            mod.hashed(q, kv, kv)
        assert "in mask()" in str(e.value) and "32-bit" in str(e.value)


@pytest.mark.parametrize("score, refused", [
    ("s + float(bucket[b, i, j] * 20000000) * 1e-9", "bucket[b, i, j] * 20000000 ranges over [0, 5100000000]"),
    ("s + float(bucket[b, i, j] * 8000000) * 1e-9", None),  # 255 * 8e6 fits
    ("s + float(ids[b, i] * 20000000) * 1e-9", None),       # an i32 element: its range is the caller's
])
def test_integer_range_of_a_byte_element_is_known_and_of_an_i32_one_the_caller_s(score, refused):
    src = f"""attention t {{
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    bucket: u8[B, M, N]; ids: i32[B, M]
    score(s, b, h, i, j) = {score}
}}"""
    mod = kdsl.compile(src, "t.kd", interpret=True)
    rng = np.random.default_rng()
    q = round_float32(rng.standard_normal((1, 1, 8, 64), dtype=np.float32), "bf16")
    bucket = rng.integers(0, 256, (1, 8, 8), dtype=np.uint8)
    ids = rng.integers(0, 3, (1, 8), dtype=np.int32)
    if refused:
        with pytest.raises(LaunchError, match=re.escape(refused)):
            mod.t(q, q, q, bucket, ids)
    else:
        out = mod.t(q, q, q, bucket, ids)
        ref, _ = reference.attention(mod.ir["t"], q, q, q, {"bucket": bucket, "ids": ids})
        assert rel_frobenius(out, ref) <= ATTENTION_TOL


def test_cli_check_takes_the_users_shapes(tmp_path):
    """`kdsl check --shapes`: each kernel at the shapes of its kind instead of the awkward ones
    (an attention shape taking what the declarations fix: k declared with q's heads has Hkv = H),
    with gradients too; a kernel none fits keeps the awkward cases; a shape the kernel cannot run
    at is a refused case, not an abort; a malformed shape, or one beside --hypothesis, a one-line
    error."""
    p = tmp_path / "two.kd"
    p.write_text(SHAPE_DEPENDENT + (ROOT / "samples" / "fp8_gemm.kd").read_text())
    argv = ["check", str(p), "--interpret", "--trials", "1", "--seed", "4", "--grad", "--kernel"]
    r = subprocess.run([sys.executable, "-m", "kdsl.cli", *argv, "plain", "--shapes", "B=1,H=2,Hkv=1,M=70,N=333,D=32",
                        "B=2,H=1,M=1,N=5,D=64"], capture_output=True, text=True)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    rows = [line.split()[:6] for line in r.stdout.splitlines() if line.startswith("  B=")]
    assert rows == [["B=1", "H=2", "Hkv=2", "M=70", "N=333", "D=32"], ["B=2", "H=1", "Hkv=1", "M=1", "N=5", "D=64"]] * 2
    assert "plain: 2/2 cases pass" in r.stdout and "plain (gradients): 2/2 cases pass" in r.stdout
    r = subprocess.run([sys.executable, "-m", "kdsl.cli", *argv, "fp8_gemm", "--shapes", "B=1,H=2,M=7,N=3,D=32"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "fp8_gemm: 6/6 cases pass" in r.stdout, r.stdout + r.stderr  # its awkward cases
    r = subprocess.run([sys.executable, "-m", "kdsl.cli", *argv, "fp8_gemm", "--shapes", "M=3,N=129,K=256"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "fp8_gemm: 1/1 cases pass" in r.stdout and "  M=3 N=129 K=256" in r.stdout, r.stdout
    # a kernel whose index leaves its axis at the shape: refused there, judged elsewhere
    p.write_text(UNBOUNDABLE)
    r = subprocess.run([sys.executable, "-m", "kdsl.cli", *argv[:-1], "--shapes", "B=1,H=2,M=64,N=64,D=64"],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "FAIL refused the call: lookup" in r.stdout and "Traceback" not in r.stderr
    for bad, said in ((["B=1,H=2,M=64"], "--shapes: shape 'B=1,H=2,M=64' lacks N, D"),
                      (["B=1,H=2,M=64,N=64,D=64", "--hypothesis", "3"], "does not combine with --hypothesis")):
        r = subprocess.run([sys.executable, "-m", "kdsl.cli", "check", str(p), "--interpret", "--shapes", *bad],
                           capture_output=True, text=True)
        assert r.returncode != 0 and said in r.stderr and "Traceback" not in r.stderr, r.stderr


GOOD_HEAD_S = "attention on_s {\n    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]\n"


def test_cli_check_notes_a_decision_on_data_that_went_one_way(tmp_path):
    """A comparison or `where` condition that reads data and came out the same at every element
    of every case gets a note (check.one_way_decisions): what it decides the other way was never
    judged, whatever the pass says. One that went both ways gets none."""
    p = tmp_path / "gate.kd"
    p.write_text("""attention gate {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    w: f32[H]; lens: i32[B]
    score(s, b, h, i, j) = where(w[h] * w[h] < -1.0, s * 2.0, s)
    mask(b, h, i, j) = j < lens[b] or j <= i
}""")
    r = subprocess.run([sys.executable, "-m", "kdsl.cli", "check", str(p), "--interpret", "--trials", "1", "--seed", "2"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    notes = [line for line in r.stdout.splitlines() if "note:" in line]
    # a decision on the score itself and data (regression: the first version had no s to evaluate
    # it with and ended the check with an internal error)
    p2 = tmp_path / "on_s.kd"
    p2.write_text(GOOD_HEAD_S + "    bias: f32[H]\n    score(s, b, h, i, j) = where(s > bias[h], s, s * 0.5)\n}\n")
    r2 = subprocess.run([sys.executable, "-m", "kdsl.cli", "check", str(p2), "--interpret", "--trials", "1"],
                        capture_output=True, text=True)
    assert r2.returncode == 0 and "note:" not in r2.stdout and "internal error" not in r2.stderr, r2.stdout + r2.stderr
    assert notes == ["  note: `w[h] * w[h] < -1.0` was false at every element of every case, so what it decides when "
                     "true was never judged (kdsl.cases.attention_inputs draws the inputs)"], r.stdout
