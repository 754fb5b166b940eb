"""passes/offset_score.py: score_log2 == scale_log2 * c * qk + g(b, h, q - kv), the offset part
the Hopper kernel evaluates into a table per tile (attr offset_table)."""

import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kdsl import ir
from kdsl.errors import KdslError
from kdsl.passes import offset_score, tiling
from kdsl.semantics import eval_numpy

from conftest import ROOT, lowered
from exprgen import float_expr, program as gen_program

CAPS = "\n    bias: f32[H, 32]\n    w: f32[N]\n    freq: f32[H]"
T5 = ("s + bias[h, where(j > i, 16, 0) + max(0, min(15, where(abs(i - j) < 8, abs(i - j), "
      "8 + int(log(float(max(abs(i - j), 1)) / 8.0) / log(16.0) * 8.0))))]")


def program(score: str, mask: str | None = None) -> str:
    mask_line = f"\n    mask(b, h, i, j) = {mask}" if mask else ""
    return (f"attention x {{\n    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]{CAPS}\n"
            f"    score(s, b, h, i, j) = {score}{mask_line}\n}}\n")


@pytest.mark.parametrize("score,offset,table", [
    (T5, True, True),                                            # T5's buckets
    ("s + bias[h, min(max(i - j, -15), 16) + 15]", True, True),  # a clamped learned table
    ("s * 0.5 + cos(freq[h] * float(i - j))", True, True),       # periodic, a scaled dot product
    ("s + where(j > i, 1.5, 0.0)", True, True),                  # a comparison of the two positions
    # -(-s) is s (simplify.py): held-out set eight's gather by the sign of i - j spilled 32 bytes
    # per element and takes the table
    ("-(-s) + bias[h, where(j < i, 0, where(j == i, 1, 2))]", True, True),
    ("s + float(i - j)", True, False),                           # affine: affine_score.py's, cheaper
    ("s", False, False),                                         # nothing to gain
    ("s * float(i - j)", False, False),                          # the offset multiplies the dot product
    ("s + w[j]", False, False),                                  # a key's own data
    ("s + float(i) * 0.5 + bias[h, 0]", False, False),           # the row alone
    ("tanh((s + bias[h, min(abs(i - j), 31)]) / 5.0)", False, False),  # not added to the dot product
])
def test_which_scores_have_the_offset_form(score, offset, table):
    k = lowered(program(score))
    assert (offset_score.decompose(k.func("score_log2")) is not None) == offset
    assert offset_score.applies(k) == table


@pytest.mark.parametrize("score", [T5, "s * 0.5 + cos(freq[h] * float(i - j))", "s + where(j > i, 1.5, 0.0)"])
def test_the_offset_part_is_the_score_less_its_dot_product_term(score):
    """The identity the kernel relies on, at random positions, heads and dot products."""
    k = lowered(program(score), offset_table=1)
    g, c = k.func("score_offset"), k.attr("offset_factor")
    rng = np.random.default_rng()
    caps = {"bias": rng.standard_normal((4, 32)), "w": rng.standard_normal(3000), "freq": rng.standard_normal(4)}
    for _ in range(40):
        q, kv, h = int(rng.integers(0, 2048)), int(rng.integers(0, 2048)), int(rng.integers(0, 4))
        env = {"B": 2, "H": 4, "M": 2048, "N": 2048, "D": 64, "b": 1, "h": h, "qk": float(rng.uniform(-30, 30)),
               "scale": 0.125, "scale_log2": 0.125 * 1.4426950408889634, "q": q, "kv": kv, "qf": float(q),
               "kvf": float(kv), "dqkf": float(q - kv)}
        want = float(eval_numpy(k.func("score_log2"), env, caps, np.float64))
        got = env["scale_log2"] * c * env["qk"] + float(eval_numpy(g, {**env, offset_score.D.name: q - kv}, caps, np.float64))
        assert got == pytest.approx(want, rel=1e-9, abs=1e-9), (ir.print_expr(g), q, kv)


def _identity_holds(k, rng, trials=10):
    form = offset_score.decompose(k.func("score_log2"))
    if form is None:
        return False
    c, g = form
    for _ in range(trials):
        q, kv = int(rng.integers(0, 2048)), int(rng.integers(0, 2048))
        env = {"B": 2, "H": 4, "Hkv": 4, "M": 2048, "N": 2048, "D": 64, "b": int(rng.integers(0, 2)),
               "h": int(rng.integers(0, 4)), "qk": float(rng.uniform(-30, 30)), "scale": 0.125,
               "scale_log2": 0.125 * 1.4426950408889634, "q": q, "kv": kv, "qf": float(q), "kvf": float(kv),
               "dqkf": float(q - kv)}
        want = float(eval_numpy(k.func("score_log2"), env, {}, np.float64))
        got = env["scale_log2"] * c * env["qk"] + float(eval_numpy(g, {**env, offset_score.D.name: q - kv}, {}, np.float64))
        assert got == pytest.approx(want, rel=1e-9, abs=1e-9), (ir.print_expr(k.func("score_log2")), q, kv)
    return True


@settings(max_examples=150, deadline=None)
@given(float_expr(depth=3), st.integers(0, 2**32 - 1))
def test_generated_scores_decompose_exactly_or_not_at_all(expr, seed):
    """Soundness over generated scores: wherever decompose finds the offset form, the identity
    holds at random positions (the rewrite never misreads a dependence on q or kv alone)."""
    rng = np.random.default_rng(seed)
    for score in (expr, f"s + ({expr})"):
        _identity_holds(lowered(gen_program(score, None)), rng)


def test_the_table_is_the_default_where_the_offset_part_is_costly():
    """T5's buckets (a log, divisions, a gather), a gathered clamp and a cosine take the table by
    default; a cheap part (a select on the sign of i - j), an affine score and a kernel that
    asked for no table keep the score per element."""
    for score in (T5, "s + bias[h, min(max(i - j, -15), 16) + 15]", "s * 0.5 + cos(freq[h] * float(i - j))",
                  # five ops of arithmetic on the offset (TABLE_LOAD_OPS)
                  "s + where(abs(i - j) < 4, 2.0, where(abs(i - j) < 32, 1.0, 0.0))"):
        k = lowered(program(score))
        assert k.attr("offset_table") == 1 and k.attr("stages") == 3, score
    # the table's own kv tile at 128, not the wide one its arithmetic alone would take
    steps = lowered(program("s + where(abs(i - j) < 4, 2.0, where(abs(i - j) < 32, 1.0, 0.0))"), 128)
    assert (steps.attr("offset_table"), steps.attr("tile_n")) == (1, 128)
    # at head dim 128 the tables take a stage
    k128 = lowered(program(T5), 128)
    assert (k128.attr("offset_table"), k128.attr("stages")) == (1, 2)
    for score in ("s + where(j > i, -2.5, 0.5)", "s + float(i - j)", "s"):
        k = lowered(program(score))
        assert not k.attr("offset_table"), score
    k = lowered(program(T5), offset_table=0)
    assert k.attr("offset_table") == 0 and k.func("score_offset") is None
    # where the tables do not fit beside two stages (head dim 256) the default is per element
    k256 = lowered(program(T5), 256)
    assert not k256.attr("offset_table") and k256.attr("stages") == lowered(program(T5), 256, offset_table=0).attr("stages")


def test_the_table_is_asked_for_and_refused_where_it_does_not_apply():
    k = lowered(program(T5), offset_table=1)
    assert k.attr("offset_table") == 1 and k.func("score_offset") is not None
    assert k.attr("smem_bytes") == tiling.attention_wgmma_smem_bytes(
        64, 64, k.attr("tile_n"), k.attr("consumers"), k.attr("stages"), offset_table=1)
    for score in ("s + float(i - j)", "s"):
        with pytest.raises(KdslError, match="offset_table = 1 needs a score that sees the positions only"):
            lowered(program(score), offset_table=1)
    # at head dim 128 the tables' few KB do not fit beside three stages: two, unless stages are given
    k128 = lowered(program(T5), 128, offset_table=1)
    assert k128.attr("stages") == 2 and lowered(program(T5), 128, offset_table=0).attr("stages") == 3
    with pytest.raises(KdslError, match="shared memory"):
        lowered(program(T5), 128, offset_table=1, stages=3)


def test_the_table_takes_the_per_element_work_out_of_t5_bias():
    """SASS, no GPU: with the table t5_bias at head dim 64 has no local memory (104 bytes of
    spills without it) and fewer MUFU and global loads (the buckets' log and the gather run
    once per offset of a tile, not per element)."""
    from kdsl.runtime.compiler import build
    from kdsl.sass import find_cuobjdump, inspect
    if not find_cuobjdump():
        pytest.skip("cuobjdump is needed for the SASS check: pip install 'kdsl[sass]'")
    import kdsl
    k = kdsl.load(ROOT / "bench" / "variants.kd").ir["t5_bias"]
    per_element, table = build(k.with_attrs(offset_table=0), "sm_90a", 64), build(k, "sm_90a", 64)
    assert table.kernel.attr("offset_table") == 1  # the default for t5_bias
    a = inspect(per_element.compiled.cubin, per_element.generated.entry)
    b = inspect(table.compiled.cubin, table.generated.entry)
    assert b.local_bytes == 0 and b.spill_ops == 0
    assert b.other_ops.get("MUFU", 0) < a.other_ops.get("MUFU", 0) / 2
    assert b.other_ops.get("LDG", 0) < a.other_ops.get("LDG", 0) / 10


def test_kdsl_compile_takes_and_reports_the_table(tmp_path):
    import subprocess
    import sys
    p = tmp_path / "t5.kd"
    p.write_text(program(T5).replace(", D]", ", 64]"))
    r = subprocess.run([sys.executable, "-m", "kdsl.cli", "compile", str(p), "-o", str(tmp_path / "out"),
                        "--attr", "offset_table=1", "--emit", "ir"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    ir_text = (tmp_path / "out" / "x_d64.ir").read_text()
    assert "attr offset_table = 1" in ir_text and "def score_offset" in ir_text
    bad = tmp_path / "plain.kd"
    bad.write_text(program("s"))
    r = subprocess.run([sys.executable, "-m", "kdsl.cli", "compile", str(bad), "-o", str(tmp_path / "o2"),
                        "--attr", "offset_table=1", "--emit", "ir"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode != 0 and "offset_table = 1 needs a score" in r.stderr + r.stdout
    assert "Traceback" not in r.stderr


def test_a_dimension_named_d_is_not_the_offset():
    """Regression: the offset part's variable was the IR name `d`, which a user's dimension may
    also be: `bias[h, (i - j) % d]` then read the offset where it meant the dimension (the
    generated score_offset computed floormod(d, d), a silent wrong score). The offset is now
    the reserved `dqk`, and the dimension keeps its own name."""
    from kdsl.grammar import parse
    from kdsl.passes import pipeline
    from kdsl.runtime import compiler
    from kdsl.runtime.programs import Program
    text = ("attention x {\n    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]\n    bias: f32[H, d]\n"
            "    score(s, b, h, i, j) = s + bias[h, (i - j) % d]\n}\n")
    k = pipeline.check(parse(text, "t.kd"))[0]
    src = compiler._generate(k, "sm_90a", 128, None, Program())[1].source
    # by the size prepared once an item (kdsl/divisor.cuh) or divided as written, the operands are these
    assert re.search(r"kdsl::floormod(_by<true, false>)?\(d, c\.dim_d\)", src) and "(d, d)" not in src


def test_dqk_is_reserved_as_a_dimension_name():
    from kdsl.errors import SourceError
    from kdsl.grammar import parse
    from kdsl.passes import pipeline
    text = "attention x {\n    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]\n    w: f32[dqk]\n}\n"
    with pytest.raises(SourceError, match="'dqk' is reserved"):
        pipeline.check(parse(text, "t.kd"))
