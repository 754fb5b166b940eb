"""passes/index_intervals.interval, with which runtime/bounds.py proves a call's capture indices in
bounds, its ints within i32 and its divisors off zero: every value an integer expression takes at points of the call's
ranges lies in the interval it gives (Hypothesis: random expressions over the positions, the
batch and head and sizes, with // and % by constants and by sizes and heads)."""
import math

from hypothesis import given, settings, strategies as st

from kdsl import ir
from kdsl.runtime.bounds import interval

VARS = ("b", "h", "q", "kv", "W", "L")


def _op(name, *args):
    return ir.Op("i32", name, tuple(args))


leaves = st.one_of(st.sampled_from([ir.Var("i32", n) for n in VARS]),
                   st.integers(-40, 40).map(lambda c: ir.Const("i32", c)))
exprs = st.recursive(leaves, lambda sub: st.one_of(
    st.tuples(st.sampled_from(["add", "sub", "mul", "min", "max", "floordiv", "mod"]), sub, sub)
    .map(lambda t: _op(*t)),
    sub.map(lambda x: _op("abs", x)), sub.map(lambda x: _op("neg", x)),
    st.tuples(sub, sub, sub).map(lambda t: _op("where", ir.Op("bool", "lt", (t[0], t[1])), t[1], t[2])),
    # a comparison's sides narrowed in each branch (index_intervals._branch_ranges), read there
    st.tuples(st.sampled_from(["lt", "le", "gt", "ge", "eq", "ne"]), sub, sub, sub, sub)
    .map(lambda t: _op("where", ir.Op("bool", t[0], (t[1], t[2])), _op("add", t[1], t[3]), _op("sub", t[4], t[2])))),
    max_leaves=12)


def _value(e, point):
    """e at a point, Python's ints, with 0 for a zero divisor (the kernel's)."""
    if isinstance(e, ir.Const):
        return e.value
    if isinstance(e, ir.Var):
        return point[e.name]
    a = [_value(x, point) for x in e.args]
    if e.op in ("floordiv", "mod"):
        return 0 if a[1] == 0 else (a[0] // a[1] if e.op == "floordiv" else a[0] % a[1])
    return {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y, "min": min, "max": max,
            "abs": abs, "neg": lambda x: -x, "lt": lambda x, y: x < y, "le": lambda x, y: x <= y,
            "gt": lambda x, y: x > y, "ge": lambda x, y: x >= y, "eq": lambda x, y: x == y, "ne": lambda x, y: x != y,
            "where": lambda c, x, y: x if c else y}[e.op](*a)


@settings(max_examples=400, deadline=None)
@given(exprs, st.lists(st.integers(1, 9), min_size=6, max_size=6), st.data())
def test_every_value_lies_in_the_interval(e, sizes, data):
    B, H, M, N, W, L = sizes
    ranges = {"b": (0, B - 1), "h": (0, H - 1), "q": (0, M - 1), "kv": (0, N - 1), "W": (W, W), "L": (L, L)}
    lo, hi = interval(e, ranges)
    for _ in range(20):
        point = {n: data.draw(st.integers(*ranges[n])) for n in VARS}
        v = _value(e, point)
        assert lo <= v <= hi, (ir.format_expr(e), point, v, (lo, hi))
    assert not (math.isnan(lo) or math.isnan(hi))


def _parse(text):
    from kdsl.grammar import parse
    from kdsl.passes import pipeline
    src = f"""attention t {{
        q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
        tw: f32[W]
        score(s, b, h, i, j) = s + float({text}) + tw[0]
    }}"""
    score = pipeline.check(parse(src, "t.kd"))[0].func("score")
    return next(n for n in ir.walk(score) if isinstance(n, ir.Op) and n.op == "float").args[0]


def test_a_quotient_by_a_range_of_divisors_is_bounded_at_its_corners_exactly():
    """Floor division by a divisor that is not a constant (h + 1, a size W): the interval is the
    exact range over a call, for dividends of either sign (a quotient of a negative dividend is
    largest at the largest divisor, of a positive one smallest there)."""
    ranges = {"b": (0, 1), "h": (0, 5), "q": (0, 9), "kv": (0, 7), "W": (3, 3)}
    for text in ["(i + 5) // (h + 1)", "(-5 - i) // (h + 1)", "(i - j) // (h + 1)", "(i - j) % (h + 2)",
                 "i % W", "(i - j) // W", "j // (h + W)"]:
        e = _parse(text)
        values = [_value(e, {"b": 0, "h": h, "q": q, "kv": kv, "W": 3})
                  for h in range(6) for q in range(10) for kv in range(8)]
        assert interval(e, ranges) == (min(values), max(values)), text


def test_a_table_read_at_a_remainder_by_its_size_needs_no_clamp():
    """Regression: `tw[(i - j) % W]` was refused ("cannot be bounded") for want of a clamp the
    remainder already makes; it runs now and matches the reference."""
    import numpy as np

    import kdsl
    from kdsl import reference
    from kdsl.backends import round_float32
    from kdsl.check import ATTENTION_TOL, rel_frobenius
    src = """attention t {
        q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
        tw: f32[H, W]
        score(s, b, h, i, j) = s + tw[h, (i - j) % W] + float(j // (h + 1) % 3)
    }"""
    mod = kdsl.compile(src, "t.kd", interpret=True)
    rng = np.random.default_rng()
    H, W, M, N = 3, *(int(x) for x in rng.integers(1, 30, 3))
    q = round_float32(rng.standard_normal((2, H, M, 32), dtype=np.float32), "bf16")
    k, v = (round_float32(rng.standard_normal((2, H, N, 32), dtype=np.float32), "bf16") for _ in range(2))
    tw = rng.standard_normal((H, W), dtype=np.float32)
    ref, _ = reference.attention(mod.ir["t"], q, k, v, {"tw": tw})
    assert rel_frobenius(mod.t(q, k, v, tw), ref) <= ATTENTION_TOL


def test_a_where_branch_is_bounded_by_what_its_condition_says_there():
    """T5's two-sided buckets as written: the log branch only where abs(i - j) >= 8, so its log
    is of at least 1 and its bucket at least 8; the exact branch only where abs(i - j) < 8.
    Before, the log of 0 left the index unbounded below and the exact branch reached 272."""
    ranges = {"b": (0, 1), "h": (0, 3), "q": (0, 4095), "kv": (0, 4095)}
    t5 = _parse("where(i > j, 16, 0) + where(abs(i - j) < 8, abs(i - j), "
                "min(8 + int(log(float(abs(i - j)) / 8.0) / log(16.0) * 8.0), 15))")
    assert interval(t5, ranges) == (0, 31)
    # the key's side chosen by where(): the log branches see j - i >= 1 and i - j >= 0
    # (held-out 45's side_buckets)
    sides = _parse("where(j > i, 16 + min(int(log2(float(j - i))), 15), min(int(log2(float(i - j) + 1.0)), 15))")
    assert interval(sides, ranges) == (0, 16 + 12)  # log2(4095) < 12
    # a branch no value takes adds nothing: abs(i - j) + 100 is never below 50
    assert interval(_parse("where(abs(i - j) + 100 < 50, 1000, 3)"), ranges) == (3, 3)
