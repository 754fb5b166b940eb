"""Programs as IR text, as `kdsl tune` writes them: schedule attributes and derived blocks
given in the IR reach the generated code (legal ones) or are refused with the attribute
named; .ir files load through kdsl.load and the CLI like .kd files; the IR parser refuses
hostile text with located errors instead of tracebacks."""
import numpy as np
import pytest

import kdsl
from conftest import ROOT
from kdsl import ir
from kdsl.cli import main
from kdsl.codegen import emit
from kdsl.errors import KdslError, LaunchError, SourceError
from kdsl.passes import gemm_tiles, pipeline, tiling
from kdsl.passes.target import get_target

H100 = get_target("sm_90a")


def _ir(sample: str) -> ir.Kernel:
    return next(iter(kdsl.load(ROOT / "samples" / f"{sample}.kd", interpret=True).ir.values()))


def test_given_schedule_reaches_codegen_and_derived_attrs_follow():
    k = _ir("relpos").with_attrs(tile_n=80, consumers=1, stages=4, schedule="grid", math="exact")
    for d in (64, 128):
        low = pipeline.lower(k, H100, d)
        assert (low.attr("tile_m"), low.attr("tile_n"), low.attr("stages"), low.attr("threads")) == (64, 80, 4, 256)
        assert low.attr("smem_bytes") == tiling.attention_wgmma_smem_bytes(d, d, 80, 1, 4)
        src = emit.generate(low).source
        assert f"attention_fwd_wgmma<kdsl::bf16_t, {d}, {d}, 80, 1, 4," in src and "#define KDSL_EXACT_MATH 1" in src
    g = _ir("fp8_gemm").with_attrs(tile_m=64, tile_n=160, stages=3, cluster=1)
    src = emit.generate(pipeline.lower(g, H100)).source
    smem = gemm_tiles.smem_bytes(64, 160, 3, 2, True)
    assert "Fp8Config<64, 160, 3, 1," in src and f"Config::kSmemBytes == {smem}" in src


def test_given_schedule_compiles_with_nvrtc():
    """The header's static_asserts agree with tiling's legality on a non-default schedule."""
    from kdsl.runtime.compiler import build
    k = _ir("causal").with_attrs(tile_n=64, consumers=1, stages=2, schedule="persistent")
    built = build(k, "sm_90a", 64)
    assert built.kernel.attr("schedule") == "persistent" and built.compiled.cubin
    # a kv tile other than the default one issues its wgmmas through the per-step wrappers
    assert '#include "kdsl/wgmma_ops_steps.cuh"' in built.generated.source


def test_without_given_attrs_lowering_is_unchanged():
    k = _ir("causal")
    low = pipeline.lower(k, H100, 128)
    assert (low.attr("tile_n"), low.attr("consumers"), low.attr("stages"), low.attr("schedule")) == \
        (*tiling.WGMMA_ATTENTION_TILES[128], "persistent")
    # Lowering a lowered kernel again changes nothing (its attrs are all legal and kept).
    assert pipeline.lower(low, H100, 128) == low


@pytest.mark.parametrize("sample, arch, attrs, message", [
    ("relpos", "sm_90a", dict(tile_n=100), "tile_n must be one of"),
    ("relpos", "sm_90a", dict(tile_n=None), "tile_n must be an integer"),
    ("relpos", "sm_90a", dict(tile_n=True), "tile_n must be an integer"),
    ("relpos", "sm_90a", dict(consumers=4), "consumers must be 1, 2 or 3"),
    ("relpos", "sm_90a", dict(stages=1), "stages must be in"),
    ("relpos", "sm_90a", dict(tile_n=256, stages=4), "shared memory"),
    # ptxas could not build it (C7602: 128 registers a thread in a CTA of four warpgroups; s37 GPU fuzz)
    ("plain", "sm_90a", dict(tile_n=256, consumers=3, stages=2),
     "3 consumers with tile_n 256: one m64n256 wgmma of Q K"),
    ("relpos", "sm_90a", dict(schedule="fastest"), "schedule must be one of"),
    ("relpos", "sm_90a", dict(tile_m=192), "tile_m = 192 disagrees with consumers = 2"),
    ("relpos", "sm_90a", dict(math="approx"), "attr math = 'approx'"),
    ("relpos", "sm_80", dict(tile_n=256), "tile_n must be one of (32, 64, 128)"),
    ("relpos", "sm_80", dict(tile_m=128, tile_n=128), "would not fit in registers"),
    ("relpos", "sm_80", dict(warps=3), "rows per warp"),
    ("fp8_gemm", "sm_90a", dict(tile_m=512), "tile_m = 512 is not supported"),
    ("fp8_gemm", "sm_90a", dict(stages=1), "no FP8 GEMM tiling agrees with stages = 1 .*: stages = 1 is too few"),
    ("fp8_gemm", "sm_90a", dict(multicast="a", cluster=1), "multicast = 'a' shares an operand"),
    ("fp8_grouped_contiguous", "sm_90a", dict(tile_m=256, tile_n=176), "tile_n = 176 is not supported"),
])
def test_illegal_schedules_are_refused_naming_the_attribute(sample, arch, attrs, message):
    k = _ir(sample).with_attrs(**attrs)
    with pytest.raises(KdslError, match=message.replace("(", r"\(").replace(")", r"\)")):
        pipeline.lower(k, get_target(arch), 128 if k.kind == "attention" else 0)



def test_three_consumers_refused_where_ptxas_cannot_build_the_p_v_wgmma():
    """Value head dims 208-256 under three consumer warpgroups: ptxas could not build their
    m64nDV wgmma of P V in 128 registers a thread (C7602, tools/dev/config_fuzz.py --build-only,
    s37); 192 builds. Refused by the tiling pass, naming what to change."""
    k = _ir("plain").with_attrs(tile_n=64, consumers=3, stages=2)
    for d in (208, 256):
        with pytest.raises(KdslError, match=f"3 consumers with value head dim {d}: one m64n{d} wgmma of P V holds "
                                            f"{d // 2} accumulator registers a thread, {d // 2 + 30} with"):
            pipeline.lower(k, H100, d)
    assert pipeline.lower(k, H100, 192).attr("consumers") == 3
    assert pipeline.lower(k.with_attrs(consumers=2), H100, 256).attr("consumers") == 2

def test_every_attention_schedule_refusal_says_why():
    """Random schedule attrs (legal values and others) on every attention sample at random head
    dims: each lowers, or is refused with a reason after the call it names (the FP8 tiling
    once ended such messages at "...: "; tools/dev/config_fuzz.py, s37)."""
    import random
    from kdsl.tune.protocol import offered
    rng = random.Random(3708)
    kernels = [k for path in sorted((ROOT / "samples").glob("*.kd"))
               for k in kdsl.load(path, interpret=True).ir.values() if k.kind == "attention"]
    beyond = {"tile_n": (48, 100), "consumers": (4,), "stages": (1,), "schedule": ("dynamic",), "poly_exp2": (5,),
              "lazy_rescale": (3,)}
    values = {a: (*v, *beyond.get(a, ())) for a, v in offered(kernels[0], H100)[1].items()}
    refused = lowered = 0
    for _ in range(400):
        k = rng.choice(kernels).with_attrs(**{a: rng.choice(list(v)) for a, v in values.items() if rng.random() < 0.25})
        d = rng.choice((32, 64, 96, 128, 192, 256))
        try:
            pipeline.lower(k, H100, d)
            lowered += 1
        except KdslError as e:
            refused += 1
            assert str(e).rsplit(": ", 1)[-1].strip(), str(e)
    assert refused > 50 and lowered > 50

TUNED = """# written by hand, as kdsl tune would
attention causal {
  input q: bf16[B, H, M, D]
  input k: bf16[B, H, N, D]
  input v: bf16[B, H, N, D]
  output out: bf16[B, H, M, D]
  def scale = (rsqrt:f32 (float:f32 D))
  def mask = (le:bool kv q)
  def score_log2 = (mul:f32 qk scale_log2)
  def tile_full = false
  attr tile_n = 64
  attr consumers = 1
}
"""


def test_ir_file_loads_runs_and_checks(tmp_path, capsys):
    path = tmp_path / "causal.tuned.ir"
    path.write_text(TUNED)
    mod = kdsl.load(path, interpret=True)
    low = pipeline.lower(mod.ir["causal"], H100, 64)
    assert low.func("tile_full") == ir.Const("bool", False) and low.attr("tile_m") == 64
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 2, 70, 64), np.float32) for _ in range(3))
    from kdsl.reference import attention
    ref, _ = attention(mod.ir["causal"], q, k, v)
    assert np.abs(mod.causal(q, k, v) - ref).max() < 2e-2
    assert main(["check", str(path), "--interpret", "--trials", "1"]) == 0
    assert main(["compile", str(path), "--emit", "cuda", "-o", str(tmp_path / "out")]) == 0
    assert "kdsl::attention_fwd_wgmma<kdsl::bf16_t, 64, 64, 64, 1, 3," in (tmp_path / "out" / "causal_d64.cu").read_text()
    capsys.readouterr()


@pytest.mark.parametrize("edit, message", [
    (("def score_log2 = (mul:f32 qk scale_log2)", "def score_log2 = (mul:f32 qk q)"), "does not apply to (f32, i32)"),
    (("def tile_full = false", "def tile_full = (le:bool kv q)"), "'kv' is not available here"),
    (("attr consumers = 1", "attr consumers = {1"), "attribute value is not JSON"),
    (("input v: bf16[B, H, N, D]", "input v: bf16[B, H, M, D]"), "v k's batch, heads and length"),
    (("input v: bf16[B, H, N, D]", "input v: bf16[B, H, N]"), "4-D inputs"),
    (("attr consumers = 1", "attr consumers = 1\n}\nattention causal {\n  input q: bf16[B, H, M, D]"),
     "defined twice"),
    (("def mask = (le:bool kv q)", "def mask = (le:bool kv q"), "malformed IR"),
])
def test_ir_file_mistakes_are_located_and_exit_1(tmp_path, capsys, edit, message):
    path = tmp_path / "bad.ir"
    path.write_text(TUNED.replace(*edit))
    with pytest.raises(SourceError) as e:
        kdsl.load(path, interpret=True)
    assert message in str(e.value) and str(path) in str(e.value)
    assert main(["compile", str(path), "--emit", "ir", "-o", str(tmp_path / "o")]) == 1
    assert message in capsys.readouterr().err


def test_an_ir_file_cannot_read_out_of_bounds(tmp_path):
    """Loads in a given score_log2 are proven in bounds at call time like score's."""
    text = _ir_text("alibi").replace("  def mask", "  def score_log2 = (mul:f32 qk (load:f32 slopes (add:i32 h 1)))\n"
                                     "  def mask")
    path = tmp_path / "alibi.ir"
    path.write_text(text)
    mod = kdsl.load(path, interpret=True)
    x = np.zeros((1, 2, 8, 64), np.float32)
    with pytest.raises(LaunchError, match=r"in score_log2\(\), index 0 of 'slopes'"):
        mod.alibi(x, x, x, np.zeros(2, np.float32))


def _ir_text(sample: str) -> str:
    return ir.print_ir(_ir(sample))


@pytest.mark.parametrize("text, message", [
    ("attention a {\n  attr x = [1,\n}", "attribute value is not JSON"),        # was a JSONDecodeError traceback
    ("attention a {\n  attr x = 1" + "0" * 5000 + "\n}", "attribute value is not JSON"),
    ("attention a {\n  def score = (add:i32 1" + "0" * 5000 + " q)\n}", "out of range"),
    ("attention a {\n  def score = (add:i32 2147483648 q)\n}", "does not fit in i32"),
    ("attention a {\n  def score = " + "(neg:f32 " * 500 + "s" + ")" * 500 + "\n}", "nests deeper than"),
    ("attention a {\n  def score = (load:f32)\n}", "a load names its tensor first"),
])
def test_ir_parser_refuses_hostile_text_with_a_located_error(text, message):
    with pytest.raises(SourceError) as e:
        ir.parse_ir(text, "x.ir")
    assert message in e.value.message and e.value.span is not None and e.value.span.line == 2


def test_ir_comments_and_round_trip():
    k = _ir("alibi")
    text = "# header\n" + ir.print_ir(k).replace("\n  def", "\n  # a comment line\n  def", 1)
    assert ir.parse_ir(text) == [k]
