"""The diagnostics contract: every bad-input kind exits 1 with FILE:LINE:COL, the source
line and a caret, and never a Python traceback."""
import re
import subprocess
import sys

import pytest

from conftest import ROOT

GOOD_HEAD = "attention t {\n    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]\n"


def run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "kdsl.cli", *args], capture_output=True, text=True, cwd=cwd or ROOT)


def compile_text(tmp_path, text, name="bad.kd", mode="w"):
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    return run("compile", str(p), "-o", str(tmp_path / "out"), "--emit", "cuda")


CASES = {
    "empty file": ("", 1, 1, "no kernels"),
    "unknown function": (GOOD_HEAD + "    score(s, b, h, i, j) = s + sqr(s)\n}\n", 3, 32, "unknown function 'sqr'"),
    "type error": (GOOD_HEAD + "    score(s, b, h, i, j) = s + (i - j)\n}\n", 3, 28, "cannot add float and int"),
    "wrong arity": (GOOD_HEAD + "    score(s, b, h, i, j) = max(s)\n}\n", 3, 28, "max() takes 2 arguments, got 1"),
    "wrong parameter count": (GOOD_HEAD + "    mask(b, i, j) = j <= i\n}\n", 3, 5, "mask() takes 4 parameters"),
    "unknown variable": (GOOD_HEAD + "    mask(b, h, i, j) = j <= window\n}\n", 3, 29, "unknown variable 'window'"),
    "bad shape": ("attention t {\n    q: bf16[B, H, M]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]\n}\n", 2, 5,
                  "must have 4 dimensions"),
    "syntax error": (GOOD_HEAD + "    mask(b, h, i, j) = j <= \n}\n", 4, 1, "unexpected '}'"),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_bad_input_diagnostics(tmp_path, case):
    text, line, col, needle = CASES[case]
    r = compile_text(tmp_path, text)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    first = r.stderr.splitlines()[0]
    assert re.match(rf".*bad\.kd:{line}:{col}: error: ", first), r.stderr
    assert needle in first
    if text:
        src_line, caret = r.stderr.splitlines()[1:3]
        assert src_line == text.splitlines()[line - 1]
        assert caret.startswith(" " * (col - 1) + "^")


def test_caret_underlines_whole_span(tmp_path):
    r = compile_text(tmp_path, GOOD_HEAD + "    score(s, b, h, i, j) = s + (i - j)\n}\n")
    assert r.stderr.splitlines()[2] == " " * 27 + "^" * 11


def test_binary_junk(tmp_path):
    r = compile_text(tmp_path, bytes(range(256)) * 4)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert re.match(r".*bad\.kd:\d+:\d+: error: ", r.stderr)


def test_nul_bytes_in_utf8_text(tmp_path):
    r = compile_text(tmp_path, "attention a {\x00}")
    assert r.returncode == 1 and "NUL byte" in r.stderr and "Traceback" not in r.stderr


def test_missing_file(tmp_path):
    r = run("compile", str(tmp_path / "nope.kd"))
    assert r.returncode == 1 and "cannot read" in r.stderr and "Traceback" not in r.stderr


def test_help():
    r = run("--help")
    assert r.returncode == 0 and "compile" in r.stdout
    r = run("compile", "--help")
    assert r.returncode == 0 and "--emit" in r.stdout and "--arch" in r.stdout


def test_unknown_arch(tmp_path):
    r = run("compile", str(ROOT / "samples" / "causal.kd"), "--arch", "sm_70", "-o", str(tmp_path))
    assert r.returncode == 1 and "unsupported architecture" in r.stderr


def test_emit_ir_prints_parseable_ir(tmp_path):
    from kdsl import ir
    r = run("compile", str(ROOT / "samples" / "causal.kd"), "--emit", "ir", "-o", str(tmp_path))
    assert r.returncode == 0, r.stderr
    text = "".join(line + "\n" for line in r.stdout.splitlines() if not line.startswith("causal["))
    kernels = ir.parse_ir(text)
    assert [k.attr("head_dim") for k in kernels] == [64, 128]
    assert kernels[0].func("tile_empty") is not None
    assert (tmp_path / "causal_d128.cu").exists()


def test_emit_ir_shows_the_fp8_tiles_for_a_shape_and_takes_overrides(tmp_path):
    from kdsl import ir
    from kdsl.passes.gemm_tiles import CONFIG_ATTRS, Problem, choose
    from kdsl.passes.target import get_target
    sample = str(ROOT / "samples" / "fp8_gemm.kd")
    r = run("compile", sample, "--emit", "ir", "--shape", "M=128,N=2112,K=7168", "--sms", "114", "-o", str(tmp_path))
    assert r.returncode == 0, r.stderr
    k = ir.parse_ir("".join(line + "\n" for line in r.stdout.splitlines() if not line.startswith("fp8_gemm:")))[0]
    want = choose(Problem(128, 2112, 7168, 1, "dense", 2), 114, get_target("sm_90a").smem_per_block)
    assert {a: k.attr(a) for a in CONFIG_ATTRS} == want and k.attr("shape") == (128, 2112, 7168, 1)
    assert f"tile {want['tile_m']}x{want['tile_n']}" in r.stdout and "for M=128 N=2112 K=7168 G=1 on 114 SMs" in r.stdout
    r = run("compile", sample, "--emit", "ir", "--attr", "tile_n=112", "--attr", "multicast=none", "-o", str(tmp_path))
    assert r.returncode == 0 and "attr tile_n = 112" in r.stdout and 'attr multicast = "none"' in r.stdout, r.stderr
    masked = str(ROOT / "samples" / "fp8_grouped_masked.kd")
    r = run("compile", masked, "--emit", "ir", "--shape", "M=4096,N=4096,K=4096,G=32", "--attr", "expected_rows=20",
            "-o", str(tmp_path))
    assert r.returncode == 0 and "attr tile_m = 64" in r.stdout and "attr expected_rows = 20" in r.stdout, r.stderr
    r = run("compile", sample, "--emit", "ir", "--attr", "expected_rows=20", "-o", str(tmp_path))
    assert r.returncode == 1 and "masked groupings only" in r.stderr and "Traceback" not in r.stderr, r.stderr
    for args, needle in ((["--shape", "M=1,N=2"], "--shape: expected M=..,N=..,K=..[,G=..]"),
                         (["--attr", "tiles=3"], "--attr: expected NAME=VALUE with NAME one of b_scale_load, cluster, consumers"),
                         (["--attr", "tile_n=176"], "tile_n = 176 is not supported"),
                         (["--shape", "M=100,N=300,K=256", "--attr", "store=tma"], "multiple of 16 bytes (N = 300)")):
        r = run("compile", sample, "--emit", "ir", *args, "-o", str(tmp_path))
        assert r.returncode == 1 and needle in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)


def test_check_without_gpu_is_a_clear_error():
    from conftest import gpu_available
    if gpu_available():
        pytest.skip("checks the no-GPU path")
    r = run("check", str(ROOT / "samples" / "causal.kd"), "--trials", "1")
    assert r.returncode == 1 and "GPU" in r.stderr and "Traceback" not in r.stderr


def test_compile_builds_every_head_dim_in_parallel_and_reports_in_order(tmp_path, monkeypatch):
    import kdsl
    from kdsl.runtime import cache, compiler
    r = run("compile", str(ROOT / "samples" / "relpos.kd"), "-o", str(tmp_path))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["relpos[D=64]", "relpos[D=128]"]
    assert all("HGMMA x" in ln and " regs" in ln for ln in lines)
    monkeypatch.setenv("KDSL_CACHE_DIR", str(tmp_path / "fresh"))  # compile again here, not from the CLI's cache
    cache.clear_memory()
    k = kdsl.load(ROOT / "samples" / "relpos.kd").ir["relpos"]
    for d in (64, 128):  # the same cubins a build in this process makes
        assert (tmp_path / f"relpos_d{d}.cubin").read_bytes() == compiler.build(k, "sm_90a", d).compiled.cubin


def test_compile_reports_and_writes_the_spill_fallback(tmp_path):
    """A trial tile ptxas spills (head dim 256, 80 keys, relpos' score): the report names the
    fallback tile and the trial, and the .cu and .ir written beside the cubin are the fallback's."""
    p = tmp_path / "rel256.kd"
    p.write_text("attention rel256 {\n    q: bf16[B, H, M, 256]; k: bf16[B, H, N, 256]; v: bf16[B, H, N, 256]\n"
                 "    score(s, b, h, i, j) = s + float(i - j)\n}\n")
    r = run("compile", str(p), "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert "tile 128x64 (ptxas spilled the 80-key trial tile)" in r.stdout and "spill/local 0 B" in r.stdout
    assert "kTileKV = 64;" in (tmp_path / "out" / "rel256_d256.cu").read_text()
    assert "attr tile_n = 64" in (tmp_path / "out" / "rel256_d256.ir").read_text()
    ir_only = run("compile", str(p), "-o", str(tmp_path / "ir"), "--emit", "ir")  # before a build: the trial
    assert "attr tile_n = 80" in ir_only.stdout and "attr spill_fallback = [64, 2, 2]" in ir_only.stdout


def test_compile_reports_the_tensor_cores_work_and_a_dropped_row_sum_trial(tmp_path):
    """The report names the per-element work the tensor cores took over; a kernel whose trial row
    sums by P V ptxas spilled (a windowed relative bias at D=64) reports and writes the build
    without them, not the trial (the report once showed the trial's files and shared memory)."""
    p = tmp_path / "w.kd"
    p.write_text("attention w {\n    q: bf16[B, H, M, 64]; k: bf16[B, H, N, 64]; v: bf16[B, H, N, 64]\n"
                 "    score(s, b, h, i, j) = s + 0.01 * float(i - j)\n    mask(b, h, i, j) = abs(i - j) < 1024\n}\n")
    r = run("compile", str(p), "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert "(ptxas spilled the trial row sums by P V)" in r.stdout and "slope step" in r.stdout
    assert "row sums by P V," not in r.stdout.replace("trial row sums by P V)", "")
    assert "spill/local 0 B" in r.stdout
    assert "attr tensor_row_sum = 0" in (tmp_path / "out" / "w_d64.ir").read_text()
    plain = run("compile", str(ROOT / "samples" / "plain.kd"), "-o", str(tmp_path / "plain"))
    assert "plain[D=64]: tile 192x128, 512 threads, row sums by P V," in plain.stdout


def test_compile_reports_streamed_tensors_and_key_blocks_by_tile(tmp_path):
    """The report names the tensors copied with the K tiles (passes/streaming.py: here two rings)
    and a key block read by tile (passes/tile_blocks.py)."""
    p = tmp_path / "r.kd"
    p.write_text("attention r {\n    q: bf16[B, H, M, 64]; k: bf16[B, H, N, 64]; v: bf16[B, H, N, 64]\n"
                 "    bucket: u8[B, M, N]; keep: bool[B, M, N]; blk: f32[H, 64]\n"
                 "    score(s, b, h, i, j) = s + 0.1 * float(bucket[b, i, j]) + blk[h, min(j // 128, 63)]\n"
                 "    mask(b, h, i, j) = keep[b, i, j]\n}\n")
    r = run("compile", str(p), "-o", str(tmp_path / "out"), "--emit", "ptx")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("streamed bucket and keep, key blocks by tile") == 1, r.stdout  # head dim 64 only


def test_an_ir_file_of_one_head_dim_builds_that_head_dim(tmp_path):
    """Regression: `kdsl compile plain_d64.ir` (a kernel lowered at head dim 64, its symbolic D
    kept) also built head dim 128 with the 64's tile attrs and failed there ("tensor_row_sum
    needs value head dim 64"), and so did `kdsl tune` of the file. The file's attr head_dim says
    which head dim its schedule is for (pipeline.head_dims)."""
    r = run("compile", str(ROOT / "samples" / "plain.kd"), "--emit", "ir", "-o", str(tmp_path / "ir"))
    assert r.returncode == 0, r.stderr
    again = run("compile", str(tmp_path / "ir" / "plain_d64.ir"), "--emit", "cuda", "-o", str(tmp_path / "cu"))
    assert again.returncode == 0, again.stderr
    assert "plain[D=64]: tile 192x128" in again.stdout and "D=128" not in again.stdout


def _attention_programs():
    from kdsl.grammar import parse
    from kdsl.passes import pipeline
    files = sorted((ROOT / "samples").glob("*.kd")) + [ROOT / "bench" / "variants.kd"] + \
        sorted((ROOT / "tools" / "dev").glob("heldout*.kd"))
    return [(f.stem, k) for f in files for k in pipeline.check(parse(f.read_text(), str(f))) if k.kind == "attention"]


def test_every_lowered_attention_program_loads_back_from_its_ir(tmp_path):
    """`kdsl compile` writes each lowered kernel as IR text (`--emit ir`), which kdsl.load reads
    as a program. Regression: a kernel with an offset table (def score_offset) was refused
    ("unknown function 'score_offset'"); likewise a key table's (key_part, ...), and float() of a
    bool ("'float:f32' does not apply to (bool)"), both found when the held-out sets joined. Every
    attention program of samples/, variants and the held-out sets, at head dims 64 and 128, loads
    back and generates the same CUDA."""
    import kdsl
    from kdsl import ir
    from kdsl.codegen import emit
    from kdsl.passes import pipeline
    from kdsl.passes.target import get_target
    target = get_target("sm_90a")
    with_table = 0
    for stem, k in _attention_programs():
        for d in pipeline.head_dims(k) if len(pipeline.head_dims(k)) == 1 else (64, 128):
            lowered = pipeline.lower(k, target, d)
            with_table += lowered.func("score_offset") is not None
            path = tmp_path / f"{stem}_{k.name}_{d}.ir"
            path.write_text(ir.print_ir(lowered))
            (back,) = kdsl.load(path, interpret=True).ir.values()
            again = pipeline.lower(back, target, d)
            body = lambda g: g.source.split("\n", 1)[1]  # noqa: E731 - the first line names the source file
            assert body(emit.generate(again)) == body(emit.generate(lowered)), (stem, k.name, d)
    assert with_table, "no program took the offset table: the regression is not covered"


def test_a_file_after_the_shapes_is_a_file_not_a_shape():
    """`kdsl bench --shapes A B prog.kd` (or tune's): --shapes takes one or more values, so the
    program was read as a shape and the command said it had no file; it is moved before --shapes."""
    from kdsl.cli import _files_before_shapes
    assert _files_before_shapes(["bench", "--shapes", "B=1,H=2,M=3,N=4,D=64", "p.kd", "--reps", "3"]) == \
        ["bench", "p.kd", "--shapes", "B=1,H=2,M=3,N=4,D=64", "--reps", "3"]
    assert _files_before_shapes(["tune", "--shapes", "M=1,N=2,K=128", "g.ir"]) == \
        ["tune", "g.ir", "--shapes", "M=1,N=2,K=128"]
    assert _files_before_shapes(["bench", "p.kd", "--shapes", "B=1,H=2,M=3,N=4,D=64"]) == \
        ["bench", "p.kd", "--shapes", "B=1,H=2,M=3,N=4,D=64"]
    r = run("bench", "--shapes", "B=2,H=x", str(ROOT / "samples" / "plain.kd"))
    assert r.returncode == 1 and "shape 'B=2,H=x'" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_compile_takes_one_kernel_by_name_as_check_does(tmp_path):
    """`kdsl compile FILE --kernel NAME` builds that kernel alone; a name not in the file is a
    one-line error naming the kernels there (check's --kernel says the same)."""
    held = str(ROOT / "tools" / "dev" / "heldout66.kd")
    r = run("compile", held, "--kernel", "u8_levels", "--emit", "cuda", "-o", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert [ln.split(":")[0] for ln in r.stdout.splitlines()] == ["u8_levels[D=64]", "u8_levels[D=128]"]
    assert sorted(p.name for p in tmp_path.glob("*.cu")) == ["u8_levels_d128.cu", "u8_levels_d64.cu"]
    for command, rest in (("compile", ["-o", str(tmp_path)]), ("check", ["--trials", "1"])):
        r = run(command, held, "--kernel", "u8_level", *rest)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert "no kernel 'u8_level' in" in r.stderr and "kernels: computed_slopes_docs, " in r.stderr, r.stderr


def test_bench_takes_kernel_as_compile_and_check_do(tmp_path):
    """`kdsl bench FILE --kernel NAME` is --only NAME; an unknown name lists the kernels there
    (checked before any GPU work, so it runs here)."""
    held = str(ROOT / "tools" / "dev" / "heldout66.kd")
    for flag in ("--only", "--kernel"):
        r = run("bench", held, flag, "u8_level", "-o", str(tmp_path))
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert "no case for kernel(s) ['u8_level']; kernels: computed_slopes_docs, " in r.stderr, r.stderr
