"""passes/key_table.py: a score's part read per key, which the Hopper kernel evaluates into a
table per tile (attr key_table): which scores have one, the identity score_log2 == score_keyed
with kt = key_part(kv), the tiling's default and refusals, and the build."""
import numpy as np
import pytest

from kdsl import ir
from kdsl.errors import KdslError
from kdsl.passes import key_table

from conftest import lowered

CAPS = "\n    qb: f32[B, H, M]\n    kb: f32[B, H, N]\n    g: f32[B, N]\n    bias: f32[H, 32]\n    t: f32[H]"


def program(score: str, mask: str | None = None) -> str:
    mask_line = f"\n    mask(b, h, i, j) = {mask}" if mask else ""
    return (f"attention x {{\n    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]{CAPS}\n"
            f"    score(s, b, h, i, j) = {score}{mask_line}\n}}\n")


KEYED = ["s + qb[b, h, i] * kb[b, h, j]",          # a rank-one bias
         "s + qb[b, h, i] - kb[b, h, j]",          # forgetting attention's gates
         "s + 4.0 * tanh(g[b, j])",                # a bounded gate per key
         "s * 0.7 + float(j) / 512.0 * g[b, j]",   # a key's position with its data
         "s * exp(t[h]) + g[b, j] * g[b, j]",      # the same load twice is one part
         # a select between s and s + 2 is s + a select (simplify.py): held-out set nine's
         # special keys loaded a bool per element and spilled 88 bytes at D=128
         "where(g[b, j] > 0.0, s + 2.0, s)",
         # a key temperature: the table holds the reciprocal, an element multiplies
         "s / (1.0 + g[b, j] * g[b, j])"]


@pytest.mark.parametrize("score,table", [
    *((s, True) for s in KEYED),
    ("s", False),                                  # nothing to gain
    ("s + float(j) * 0.5", False),                 # affine: affine_score.py's, cheaper
    ("s + bias[h, min(abs(i - j), 31)]", False),   # of q - kv: offset_score.py's table
    ("s * kb[b, h, j] + g[b, j]", False),          # two distinct key parts
    ("s + kb[b, h, j] * float(i)", True),          # the key's data times the query's position
    ("30.0 * tanh((s + g[b, j]) / 30.0)", False),  # a factor times a unit (exp2_fold.py)
])
def test_which_scores_take_a_key_table(score, table):
    assert key_table.applies(lowered(program(score))) == table


@pytest.mark.parametrize("score", KEYED)
@pytest.mark.parametrize("d", [64, 128])
def test_the_keyed_score_with_the_part_from_the_table_is_the_score(score, d):
    """The identity the kernel relies on, at random positions, heads and dot products."""
    from kdsl.semantics import eval_numpy
    k = lowered(program(score, "j <= i + 100"), d, key_table=1)
    part, keyed = k.func("key_part"), k.func("score_keyed")
    assert not any(ir.uses(part, v) for v in ("q", "qf", "qk", "dqkf")) and ir.uses(keyed, "kt")
    rng = np.random.default_rng()
    caps = {"qb": rng.standard_normal((2, 4, 2048)), "kb": rng.standard_normal((2, 4, 2048)),
            "g": rng.standard_normal((2, 2048)), "bias": rng.standard_normal((4, 32)), "t": rng.standard_normal(4)}
    for _ in range(40):
        q, kv, h, b = (int(rng.integers(0, n)) for n in (2048, 2048, 4, 2))
        env = {"B": 2, "H": 4, "M": 2048, "N": 2048, "D": d, "b": b, "h": h, "qk": float(rng.uniform(-30, 30)),
               "scale": 0.125, "scale_log2": 0.125 * 1.4426950408889634, "q": q, "kv": kv, "qf": float(q),
               "kvf": float(kv), "dqkf": float(q - kv)}
        want = float(eval_numpy(k.func("score_log2"), env, caps, np.float64))
        kt = float(eval_numpy(part, env, caps, np.float64))
        got = float(eval_numpy(keyed, {**env, "kt": kt}, caps, np.float64))
        assert got == pytest.approx(want, rel=1e-12, abs=1e-12), (ir.print_expr(part), q, kv)


def test_the_default_takes_the_table_where_it_fits():
    """Head dim 64: on, three stages. Head dim 128's three stages fill shared memory: on at two
    (measured faster than three without), unless the stages are given."""
    src = program(KEYED[0])
    k64 = lowered(src, 64)
    assert k64.attr("key_table") == 1 and k64.attr("stages") == 3
    k128 = lowered(src, 128)
    assert k128.attr("key_table") == 1 and k128.attr("stages") == 2 and k128.func("key_part") is not None
    assert lowered(src, 128, stages=3).attr("key_table") == 0
    assert lowered(src, 64, key_table=0).func("key_part") is None
    assert lowered(program("s + float(j) * 0.5"), 64).attr("key_table") == 0


def test_refusals_say_why():
    with pytest.raises(KdslError, match="key_table = 1 needs a score with one part read per key"):
        lowered(program("s + float(j) * 0.5"), key_table=1)
    with pytest.raises(KdslError, match="key_table = 1 needs .* not of q - kv"):  # the offset table's score
        lowered(program("s + bias[h, min(abs(i - j), 31)]"), key_table=1)


def test_the_build_reads_the_part_from_shared_memory():
    """key_gate at head dim 128: with the table the per-element tanh leaves the softmax (fewer
    MUFU instructions) and nothing spills."""
    from kdsl.runtime.compiler import build
    from kdsl.sass import find_cuobjdump, inspect
    if not find_cuobjdump():
        pytest.skip("cuobjdump is needed for the SASS check: pip install 'kdsl[sass]'")
    from kdsl.grammar import parse
    from kdsl.passes import pipeline
    k = pipeline.check(parse(program(KEYED[2]), "t.kd"))[0]
    mufu = {}
    for table in (0, 1):
        built = build(k.with_attrs(key_table=table), "sm_90a", 128)
        rep = inspect(built.compiled.cubin, built.generated.entry)
        assert rep.local_bytes == 0 and rep.spill_ops == 0, table
        mufu[table] = rep.other_ops.get("MUFU", 0)
    assert mufu[1] < mufu[0], mufu


@pytest.mark.parametrize("score,raw", [(KEYED[0], True),  # the rank-one bias: a gain per row
                                       (KEYED[1], False), (KEYED[2], False), (KEYED[3], False),  # constant gains
                                       (KEYED[4], False),  # exp(t[h]) times the dot product
                                       ("s * 0.5 + float(i) * g[b, j] + qb[b, h, i]", True)])
def test_the_raw_form_is_the_keyed_score(score, raw):
    """score_keyed == scale_log2 * c * qk + key_gain * kt + key_base (the kernel keeps qk + gain *
    kt / F per element, F = scale_log2 * c, and takes the row max on it); a call with scale <= 0
    then runs the score as written (affine_score.needs_positive_scale)."""
    from kdsl.passes import affine_score
    from kdsl.semantics import eval_numpy
    k = lowered(program(score), 64)
    assert (k.func("key_gain") is not None) == raw == affine_score.needs_positive_scale(k)
    if not raw:
        return
    c = k.attr("key_factor")
    rng = np.random.default_rng()
    caps = {"qb": rng.standard_normal((2, 4, 2048)), "kb": rng.standard_normal((2, 4, 2048)),
            "g": rng.standard_normal((2, 2048)), "bias": rng.standard_normal((4, 32)), "t": rng.standard_normal(4)}
    for _ in range(40):
        q, kv, h, b = (int(rng.integers(0, n)) for n in (2048, 2048, 4, 2))
        env = {"B": 2, "H": 4, "M": 2048, "N": 2048, "D": 64, "b": b, "h": h, "qk": float(rng.uniform(-30, 30)),
               "scale": 0.125, "scale_log2": 0.125 * 1.4426950408889634, "q": q, "kv": kv, "qf": float(q),
               "kvf": float(kv), "dqkf": float(q - kv), "kt": float(rng.standard_normal())}
        want = float(eval_numpy(k.func("score_keyed"), env, caps, np.float64))
        gain, base = (float(eval_numpy(k.func(n), env, caps, np.float64)) for n in ("key_gain", "key_base"))
        got = env["scale_log2"] * c * env["qk"] + gain * env["kt"] + base
        assert got == pytest.approx(want, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("score", KEYED)
def test_the_interpreter_runs_key_scores(score):
    """Regression: the interpreter took a key table's raw form (affine_score.needs_positive_scale)
    for the affine form and read its missing score_slope (AttributeError in `kdsl check --interpret`
    of the rank-one bias). Against the reference at a ragged shape, with a positive and a zero scale."""
    import kdsl
    from kdsl import reference
    from kdsl.backends import Numpy
    from kdsl.cases import AttentionCase, attention_inputs
    from kdsl.check import ATTENTION_TOL, rel_frobenius
    mod = kdsl.compile(program(score), "x.kd", interpret=True)
    for scale in (None, 0.0):
        q, k, v, caps = attention_inputs(mod.ir["x"], AttentionCase(1, 2, 2, 70, 150, 64, seed=3), Numpy())
        out = mod.x(q, k, v, **caps, **({} if scale is None else {"scale": scale}))
        ref, _ = reference.attention(mod.ir["x"], q, k, v, caps, scale=scale)
        assert rel_frobenius(out, ref) <= ATTENTION_TOL


def test_exact_math_keeps_the_part_per_element():
    """Under exact math the table is not taken by default, and asking for it says why."""
    src = program(KEYED[2])
    assert lowered(src, 64).attr("key_table") == 1
    exact = lowered(src, 64, math="exact")
    assert exact.attr("math") == "exact" and exact.attr("key_table") == 0
    with pytest.raises(KdslError, match="not under exact math"):
        lowered(src, 64, math="exact", key_table=1)


def test_a_division_by_the_key_part_multiplies_by_its_reciprocal():
    """`s / (1 + knorm[b, j])`: the table holds 1 / (1 + knorm) and an element multiplies (no
    reciprocal per element on the MUFU unit the exp2 needs); where kt is read beside the
    division too, the table keeps the part itself."""
    k = lowered(program("s / (1.0 + g[b, j] * g[b, j])"), 64)
    assert k.func("key_part").op == "div" and not any(
        isinstance(n, ir.Op) and n.op == "div" for n in ir.walk(k.func("score_keyed")))
    k = lowered(program("s / (1.0 + g[b, j] * g[b, j]) * (1.0 + g[b, j] * g[b, j])"), 64)
    assert k.func("key_part").op == "add" and any(
        isinstance(n, ir.Op) and n.op == "div" for n in ir.walk(k.func("score_keyed")))
