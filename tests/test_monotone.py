"""passes/monotone.py: how far an integer expression can move per unit step of a position, the
ground of the mask analysis' monotone corners (a comparison decided at a tile's four corners)."""
import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from kdsl import ir
from kdsl.grammar import parse
from kdsl.passes import monotone, pipeline
from kdsl.semantics import eval_numpy

from exprgen import int_expr, program
from conftest import dev_tool

tile_exactness = dev_tool("tile_exactness")


def int_of(text: str, caps: tuple[str, ...] = ()) -> ir.Expr | None:
    """The IR of an integer expression of i, j, b, h and the dims, as the checker leaves it on
    the left of a comparison (None where it folded the comparison away: `1 >= 0`)."""
    mask = pipeline.check(parse(program(None, f"{text} >= 0", decls=caps), "t.kd"))[0].func("mask")
    return mask.args[0] if isinstance(mask, ir.Op) and mask.op == "ge" else None


@pytest.mark.parametrize("text,var,want", [
    ("i - i // 4", "q", (0, 1)),
    ("i - j", "kv", (-1, -1)),
    ("3 * i - 2 * (i // 2)", "q", (1, 3)),
    ("-i + j", "q", (-1, -1)),
    ("max(i, j) - min(i, 5)", "q", (-1, 1)),
    ("i // (h + 1)", "q", (0, 1)),          # a divisor of the item: >= 1, the sign kept
    ("(2 * i) // 4", "q", (0, 1)),
    ("i * h", "q", None),                   # a varying factor of unknown size
    ("i % 4", "q", None),                   # wraps back
    ("abs(i - 100)", "q", None),
    ("i // max(lim[b], 1)", "q", (0, 1)),   # a divisor of data read elsewhere, >= 1: constant along i
    ("i // max(lim[i], 1)", "q", None),     # ... but not one read at the position
    ("lim[b] + j", "q", (0, 0)),            # data not read at the position
    ("lim[b] + j", "kv", (1, 1)),
])
def test_steps(text, var, want):
    assert monotone.step(int_of(text, ("lim: i32[B]",)), var) == want


@settings(max_examples=150, deadline=None)
@given(int_expr(depth=3), st.sampled_from(["q", "kv"]), st.integers(0, 2**32 - 1))
def test_a_step_bound_holds_at_every_point(text, var, seed):
    """Wherever step() gives a bound, e(var + 1) - e(var) lies inside it at random positions,
    heads and sizes (Python's floor division, as the kernel's)."""
    e = int_of(text)
    bound = None if e is None else monotone.step(e, var)
    assume(bound is not None)
    rng = np.random.default_rng(seed)
    n = 400
    env = {"B": 3, "H": 8, "Hkv": 8, "M": int(rng.integers(1, 5000)), "N": int(rng.integers(1, 5000)), "D": 64,
           "b": rng.integers(0, 3, n), "h": rng.integers(0, 8, n), "q": rng.integers(0, 5000, n),
           "kv": rng.integers(0, 5000, n)}
    with np.errstate(all="ignore"):
        here = np.broadcast_to(eval_numpy(e, env, {}), (n,))
        there = np.broadcast_to(eval_numpy(e, {**env, var: env[var] + 1}, {}), (n,))
    diff = there.astype(np.int64) - here.astype(np.int64)
    assert diff.min() >= bound[0] and diff.max() <= bound[1], (text, var, bound, diff.min(), diff.max())


@pytest.mark.parametrize("mask", [
    "j <= i and i - j <= 64 + i // 4",                # 772 of 788 empty tiles, 72 of 84 full by intervals
    "j <= i and j >= i - i // 2",                     # 676 of 704, 168 of 196
    "j <= i and (i - j) * 4 <= i + 256 * (h + 1)",    # 734 of 747, 113 of 128
])
def test_windows_growing_with_the_query_are_exact_on_every_tile(mask):
    """Each reads i twice: intervals left the tiles along the window's edge partial (counts at
    2048², 4 heads); the corners decide all, at ragged shapes too."""
    k = pipeline.check(parse(program(None, mask), "t.kd"))[0]
    for rows, keys in ((2048, 2048), (1000, 3000), (3000, 1000)):
        got = tile_exactness.exactness(k, rows, keys)
        assert got.exact and got.empty and got.full, (rows, keys, got)


def test_corners_are_taken_only_where_they_can_decide_more():
    """Not where abs turns back (`abs(i - 2 * j) <= 64 + i // 8` reads i twice), nor where each
    position is read once (`i - j <= 64`: the intervals are exact already)."""
    from kdsl.passes.tile_corners import monotone_corners
    for mask in ("abs(i - 2 * j) <= 64 + i // 8", "i - j <= 64"):
        e = pipeline.check(parse(program(None, mask), "t.kd"))[0].func("mask")
        assert monotone_corners(e) is None, mask


def test_the_corners_switch_off_for_timing(monkeypatch):
    """KDSL_MONOTONE_CORNERS=0 leaves the tile classes as the intervals alone make them."""
    monkeypatch.setenv("KDSL_MONOTONE_CORNERS", "0")
    k = pipeline.check(parse(program(None, "j <= i and i - j <= 64 + i // 4"), "t.kd"))[0]
    got = tile_exactness.exactness(k)
    assert not got.unsound and not got.exact, got
