"""Index bounds through float expressions (passes/index_intervals.py float_interval): an index such as
min(int(4.0 * log2(float(abs(i - j) + 1))), 31) is proved in bounds, and the float intervals
hold every value the expression takes, NaN included (then there is no interval)."""
import numpy as np
import pytest
from hypothesis import assume, example, given, settings, strategies as st

import kdsl
from kdsl import ir, reference
from kdsl.backends import Numpy, round_float32
from kdsl.check import ATTENTION_TOL, rel_frobenius
from kdsl.errors import LaunchError, SourceError
from kdsl.passes.index_intervals import float_interval
from kdsl.runtime.bounds import check_capture_indices
from kdsl.semantics import eval_array

from conftest import assert_index_verdict


def kernel(index: str, size: str = "L"):
    src = f"""attention t {{
        q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
        g: f32[H]; t8: u8[B, M]; s8: i8[B, M]; t32: i32[B, M]
        tbl: f32[H, {size}]
        score(s, b, h, i, j) = s + tbl[h, {index}]
    }}"""
    return kdsl.compile(src, "t.kd").ir["t"]


DIMS = {"B": 1, "H": 2, "M": 300, "N": 200, "D": 64}


@pytest.mark.parametrize("index, L, verdict", [
    # log-spaced distance buckets with only the upper clamp written: log2(x >= 1) >= 0
    ("min(int(4.0 * log2(float(abs(i - j) + 1))), 31)", 32, None),
    ("int(4.0 * log2(float(abs(i - j) + 1)))", 33, None),  # 4 log2(300) = 32.9
    ("int(4.0 * log2(float(abs(i - j) + 1)))", 32, "ranges over [0, 32]"),
    ("int(8.0 * sigmoid(float(i - j) / 64.0))", 8, None),
    ("int(3.0 + 2.0 * sin(float(i)))", 6, None),
    ("int(exp(float(i) / 100.0))", 20, None),  # e^2.99 = 19.9
    ("int(sqrt(float(i * j)))", 244, None),  # sqrt(299 * 199) = 243.9
    ("min(int(log2(float(i - j))), 7)", 8, "cannot be bounded"),  # log2 of a negative: NaN
    ("int(min(sqrt(float(i) - 2.0), 3.0))", 4, "cannot be bounded"),  # NaN when i < 2, then min is 3.0
    ("max(int(min(sqrt(float(i) - 2.0), 3.0)), 0)", 4, None),
    ("min(int(g[h] * 4.0), 7)", 8, "cannot be bounded"),  # a tensor's element: anything, NaN too
    ("max(min(int(g[h] * 4.0), 7), 0)", 8, None),
    ("int(float(i) / float(j))", 300, "cannot be bounded"),  # j = 0 divides by zero
    ("int(float(i) / float(j + 1))", 300, None),
    # integer elements: a u8 lies in [0, 255], an i8 in [-128, 127], an i32 anywhere; int() of an
    # integer is itself (a held-out program's `min(int(qtype[b, i]), 3)` was refused)
    ("min(int(t8[b, i]), 3)", 4, None),
    ("t8[b, i]", 256, None),
    ("t8[b, i]", 255, "ranges over [0, 255]"),
    ("min(int(s8[b, i]), 3)", 4, "ranges over [-128, 3]"),
    ("min(max(s8[b, i], 0), 3)", 4, None),
    ("min(int(t32[b, i]), 3)", 4, "cannot be bounded"),
    ("int(i + 1)", 301, None),
    ("int(float(t8[b, i]) / 64.0)", 4, None),
])
def test_float_index_bounds(index, L, verdict):
    k = kernel(index)
    dims = dict(DIMS, L=L)
    assert_index_verdict(k, dims, verdict)


@pytest.mark.parametrize("index, side, hint", [
    # held-out 43's log_bucket_bias: causal, buckets of log2(i - j + 1) clamped above only: where the
    # kernel evaluates j > i (dropped by the mask) the log is NaN, so the index has no lower bound
    ("min(int(log2(float(i - j) + 1.0) * 3.0), 31)", "cannot be bounded below (at most 31)", "max(..., 0)"),
    ("max(int(log2(float(i + 1)) * 9.0), 0)", "ranges over [0, 74]", "min(..., 31)"),
    ("max(int(g[h]), 0)", "cannot be bounded above (at least 0)", "min(..., 31)"),
    ("int(g[h])", "cannot be bounded for", "max(min(..., 31), 0)"),
])
def test_a_refused_index_names_the_side_and_the_clamp(index, side, hint):
    """The refusal says which side of the axis the index may leave and the clamp for it: one
    clamped above only and told to "clamp it, e.g. with min(...)/max(...)" left its writer guessing."""
    with pytest.raises(LaunchError) as e:
        check_capture_indices(kernel(index), dict(DIMS, L=32), "t")
    assert side in str(e.value) and hint in str(e.value), str(e.value)


LEAVES = ["float(i)", "float(j)", "float(i - j)", "float(abs(i - j) + 1)", "0.5", "3.0", "-2.0", "1e30"]
UNARY = ["log2({a})", "log({a})", "exp({a})", "exp2({a})", "sqrt({a})", "tanh({a})", "sigmoid({a})",
         "sin({a})", "cos({a})", "abs({a})", "-{a}", "({a} / 16.0)"]
BINARY = ["({a} + {b})", "({a} - {b})", "({a} * {b})", "({a} / {b})", "min({a}, {b})", "max({a}, {b})",
          "where(i < j, {a}, {b})"]


def float_texts():
    leaf = st.sampled_from(LEAVES)
    return st.recursive(leaf, lambda sub: st.one_of(
        st.builds(lambda f, a: f.format(a=a), st.sampled_from(UNARY), sub),
        st.builds(lambda f, a, b: f.format(a=a, b=b), st.sampled_from(BINARY), sub, sub)), max_leaves=6)


@settings(max_examples=150, deadline=None)
@given(float_texts())
@example("(float(i) * (1e30 * 1e30))")  # CI found it: the constant is inf in f32, 0 * inf is NaN
@example("log2((float(i) * (0.5 - 0.5)))")  # CI found it: the log of an interval [0, 0] raised ValueError
def test_a_float_interval_holds_every_value(text):
    """Soundness: evaluated in float32 at every (i, j) of a small grid (including 0, where
    logs, divisions and square roots leave their domains), each value lies in the interval,
    and where some value is NaN there is no interval."""
    try:
        k = kernel(f"int({text})", size="1")
    except SourceError:  # a constant part with no value in its type: int(1e30)
        assume(False)
    (load,) = [n for n in ir.walk(k.func("score")) if isinstance(n, ir.Load) and n.tensor == "tbl"]
    assume(isinstance(load.indices[1], ir.Op))  # not folded to a constant
    expr = load.indices[1].args[0]  # the index after the compiler's rewrites (float(i) -> qf, ...)
    M, N = 24, 17
    ranges = {"b": (0, 0), "h": (0, 1), "q": (0, M - 1), "kv": (0, N - 1)}
    bound = float_interval(expr, ranges)
    i, j = (a.astype(np.int64) for a in np.meshgrid(np.arange(M), np.arange(N), indexing="ij"))
    env = {"q": i, "kv": j, "b": 0, "h": 0, "qf": i.astype(np.float32), "kvf": j.astype(np.float32),
           "dqkf": (i - j).astype(np.float32), **DIMS, "M": M, "N": N}
    with np.errstate(all="ignore"):
        # as the kernel holds it: f32 (numpy keeps a where() of two constants in float64)
        got = np.broadcast_to(eval_array(expr, env, {}, Numpy(np.float32)), i.shape).astype(np.float32)
    if bound is None:
        return
    assert not np.isnan(got).any(), f"{text}: NaN at some (i, j) but the interval is {bound}"
    lo, hi = bound
    assert (got >= lo).all() and (got <= hi).all(), f"{text}: values in [{got.min()}, {got.max()}], " \
        f"interval [{lo}, {hi}]"


def test_the_heldout_buckets_program_runs_on_the_interpreter():
    """Regression: log-spaced buckets clamped above only were refused as "cannot be bounded"
    at every shape (tools/dev/heldout3.kd log_buckets_gqa)."""
    src = """attention lb {
        q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]
        tbl: f32[H, 32]
        score(s, b, h, i, j) = s + tbl[h, min(int(4.0 * log2(float(abs(i - j) + 1))), 31)]
    }"""
    _assert_matches_reference(kdsl.compile(src, "lb.kd", interpret=True), "lb", (1, 4, 2, 70, 90))


def _assert_matches_reference(mod, name: str, shape, size: int = 32) -> None:
    """The interpreted kernel against the reference at random bf16 q, k, v and an f32 table tbl[H, size]."""
    B, H, Hkv, M, N = shape
    rng = np.random.default_rng()
    q = round_float32(rng.standard_normal((B, H, M, 32), dtype=np.float32), "bf16")
    k, v = (round_float32(rng.standard_normal((B, Hkv, N, 32), dtype=np.float32), "bf16") for _ in range(2))
    tbl = rng.standard_normal((H, size), dtype=np.float32)
    out = getattr(mod, name)(q, k, v, tbl)
    ref, _ = reference.attention(mod.ir[name], q, k, v, {"tbl": tbl})
    assert rel_frobenius(out, ref) <= ATTENTION_TOL


def _masked_program(index: str, mask: str, size: int = 32) -> str:
    return f"""attention t {{
        q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
        tbl: f32[H, {size}]
        score(s, b, h, i, j) = s + tbl[h, {index}]
        mask(b, h, i, j) = {mask}
    }}"""


def test_an_index_in_range_wherever_the_mask_keeps_runs():
    """Held-out 43's log_bucket_bias as first written: `min(int(log2(float(i - j) + 1.0) * 3.0), 31)`
    under causal, NaN (so unbounded below) only at j > i + 1, which the mask drops, was refused at
    every call. passes/masked_index.py clamps it in the kernel (attr masked_index) and the runtime
    proves it over q - kv >= 0: it runs, and matches the reference (the program as written)."""
    mod = kdsl.compile(_masked_program("min(int(log2(float(i - j) + 1.0) * 3.0), 31)", "j <= i"), "t.kd",
                       interpret=True)
    assert mod.ir["t"].attr("masked_index") == ("tbl:1",)
    _assert_matches_reference(mod, "t", (1, 4, 4, 300, 300))


@pytest.mark.parametrize("index, mask, size, verdict", [
    # in range where the mask keeps only up to M = 255: refused past it, the message says where
    ("int(log2(float(i - j) + 1.0))", "j <= i", 8, "ranges over [0, 8] where the mask keeps the element"),
    ("min(int(log2(float(j - i) + 1.0) * 3.0), 31)", "j >= i", 32, None),  # the mirror
    # no sign from the mask (a band both ways): not clamped, refused as written
    ("min(int(log2(float(i - j) + 1.0) * 3.0), 31)", "abs(i - j) < 64", 32, "cannot be bounded below"),
    # the positions not only through i - j: not clamped
    ("min(int(log2(float(i - 2 * j) + 1.0)), 31)", "j <= i", 32, "cannot be bounded below"),
])
def test_which_indices_the_mask_keeps_in_range(index, mask, size, verdict):
    k = kdsl.compile(_masked_program(index, mask, size), "t.kd").ir["t"]
    assert bool(k.attr("masked_index")) == (verdict is None or "where the mask" in verdict)
    dims = {"B": 1, "H": 2, "M": 300, "N": 300, "D": 64}
    assert_index_verdict(k, dims, verdict)


@pytest.mark.parametrize("index, mask, size", [
    # a relative bias up to 63 under causal: -N + 1 where j > i, dropped (held-out 45's doc_relbias)
    ("min(i - j, 63)", "j <= i", 64),
    # a bias by blocks' distance under block-causal: the mask's comparison bounds the difference it
    # reads (held-out 45's block_distance_bias)
    ("min(i // 128 - j // 128, 31)", "j // 128 <= i // 128", 32),
    # a table as wide as a causal window, read at the distance: the window's bound is its top
    ("i - j", "j <= i and i - j < 256", 256),
])
def test_an_index_bounded_by_the_masks_comparisons_runs(index, mask, size):
    """Refused at every call before (the index leaves its axis only where the mask drops the
    element); clamped in the kernel and proved where kept, as passes/masked_index.py's docstring
    says, and as written where the mask keeps (the reference's)."""
    mod = kdsl.compile(_masked_program(index, mask, size), "t.kd", interpret=True)
    assert mod.ir["t"].attr("masked_index") == ("tbl:1",)
    _assert_matches_reference(mod, "t", (1, 4, 4, 300, 517), size)
    _assert_matches_reference(mod, "t", (2, 2, 2, 700, 300), size)


def test_an_index_bounded_as_written_is_left_alone():
    """An index the plain proof bounds (a relative bias clamped both ways) is not clamped again:
    the kernel stays as it was."""
    k = kdsl.compile(_masked_program("max(min(i - j, 15), -16) + 16", "j <= i"), "t.kd").ir["t"]
    assert k.attr("masked_index") is None and "max" in ir.print_expr(k.func("score"))


@pytest.mark.parametrize("interpret", [True, False])
def test_min_of_a_nan_yields_the_other_operand_as_on_the_gpu(interpret):
    """Regression: the interpreter and the float64 reference took min / max with numpy's and
    torch's minimum, which pass a NaN on, while the kernel's fminf (and constant folding) yield
    the other operand: min(log(float(i) - 2.5), 1.0) is 1.0 in rows 0-2, not NaN."""
    src = """attention nanmin {
        q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
        score(s, b, h, i, j) = s + max(min(log(float(i) - 2.5), 1.0), -1.0)
    }"""
    mod = kdsl.compile(src, "nanmin.kd", interpret=True)
    rng = np.random.default_rng()
    q, k, v = (round_float32(rng.standard_normal((1, 2, 9, 32), dtype=np.float32), "bf16") for _ in range(3))
    got = mod.nanmin(q, k, v) if interpret else reference.attention(mod.ir["nanmin"], q, k, v, {})[0]
    i = np.arange(9)[:, None]
    with np.errstate(invalid="ignore"):
        bias = np.fmax(np.fmin(np.log(i - 2.5), 1.0), -1.0)
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(32) + bias
    p = np.exp(s - s.max(-1, keepdims=True))
    want = np.einsum("bhij,bhjd->bhid", p / p.sum(-1, keepdims=True), v.astype(np.float64))
    assert np.isfinite(got).all()
    assert rel_frobenius(np.asarray(got, np.float64), want) <= ATTENTION_TOL


def test_check_names_nan_scores_instead_of_unwritten_outputs(tmp_path):
    """A score that is NaN for some inputs (sqrt of a negative where j > i) gives NaN rows, in the
    interpreter as on the GPU (O times 1 / l, l NaN). `kdsl check` said "output elements unwritten"
    on the GPU (and passed it in the interpreter, whose rows were 0); it now names the NaN scores."""
    from kdsl import cli
    path = tmp_path / "nan.kd"
    path.write_text("attention bad_sqrt {\n    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]\n"
                    "    score(s, b, h, i, j) = s + sqrt(float(i - j))\n}\n")
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = cli.main(["check", str(path), "--interpret", "--trials", "1", "--seed", "1"])
    text = buf.getvalue()
    assert rc == 1 and "scores are NaN for these inputs, the first at (b, h, i, j) = (0, 0, 0, 1)" in text
    assert "unwritten" not in text
