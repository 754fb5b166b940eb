"""passes/int_signs.py: a divisor proved positive by its form must be at least 1 in every kernel
that runs, which the runtime ensures by refusing a call where it would be 0 (or wrap); the key
bounds and tile classes that rely on it are exact for such divisors (`i // (8 * H) == j // (8 *
H)`, chunks of a size set by the head count; `j // (16 * (h + 1))`, blocks growing per head)."""
import random

import numpy as np
import pytest

import kdsl
from hypothesis import given, settings, strategies as st

from kdsl import ir
from kdsl.errors import LaunchError
from kdsl.passes import mask_analysis
from kdsl.passes.int_signs import positive_divisor

from conftest import lowered
from exprgen import ITEM_DIVISORS, program
from test_kv_bounds import assert_exact
from test_passes import _check_tiles


def _expr(text: str) -> ir.Expr:
    return lowered(program(None, f"j <= {text}")).func("mask").args[1]


@pytest.mark.parametrize("text, positive", [
    ("7", True), ("max(h - 3, 1)", True), ("min(max(h, 1), 4)", True),
    ("(8 * H)", True), ("(16 * (h + 1))", True), ("(H // Hkv)", True), ("((b + h) * N)", True),
    ("H", True),             # 0 only where there are no heads; else the call is refused
    ("(H - h)", False),      # at least 1 for every head, but not by its form
    ("(h - 1)", False), ("abs(h - 1)", False),
    ("(i + 1)", False),      # a position's: a `where` may guard it where it is 0
    ("max(i, 0)", False), ("-4", False), ("0", False),
])
def test_positive_divisors_by_their_form(text, positive):
    assert positive_divisor(_expr(text)) == positive


@pytest.mark.parametrize("mask, shape", [
    ("j // (16 * h) <= i // (16 * h)", dict(B=1, H=2)),  # head 0 divides by 0
    ("j // (H // 4) == i // (H // 4)", dict(B=1, H=3)),  # H // 4 is 0 for 3 heads
    ("j // (b * H) == i // (b * H)", dict(B=2, H=2)),    # batch 0
])
def test_a_divisor_positive_by_form_that_is_zero_is_refused(mask, shape):
    """What the passes' trust in positive_divisor rests on: where such a divisor is 0 for a
    call's shapes, the call never reaches a kernel."""
    mod = kdsl.compile(program(None, mask, name="t"), "t.kd", interpret=True)
    divisor = next(n for n in ir.walk(mod.ir["t"].func("mask")) if isinstance(n, ir.Op) and n.op == "floordiv").args[1]
    assert positive_divisor(divisor)
    rng = np.random.default_rng()
    B, H, M, N = shape["B"], shape["H"], *(int(x) for x in rng.integers(2, 40, 2))
    q, k, v = (rng.standard_normal((B, H, n, 32), dtype=np.float32) for n in (M, N, N))
    with pytest.raises(LaunchError, match="divides by"):
        mod.t(q, k, v)


@pytest.mark.parametrize("mask", [
    "j <= i and i // (8 * H) == j // (8 * H)",                # chunks of 8 H keys
    "j // (16 * (h + 1)) <= i // (16 * (h + 1))",             # blocks growing per head
    "abs(i // (h + 1) - j // (h + 1)) <= 40",                 # a window over blocks of h + 1
    "(j - i) // (2 * H) >= -3 and j <= i",                    # a window of whole groups
])
def test_masks_dividing_by_sizes_solve_and_skip_tiles(mask):
    k = lowered(program(None, mask), 128)
    assert k.attr("kv_bounds") == "interval", k.attr("kv_bounds")
    for heads, length in ((3, 700), (16, 2048)):
        dims = {"B": 2, "H": heads, "Hkv": heads, "M": length, "N": length - 50, "D": 64}
        assert_exact(k, dims, {}, random.Random(heads), tiles=24)
        _check_tiles(k, dims, random.Random(length), trials=30)
    visited = mask_analysis.visited_tiles(k, length=4096, heads=4)
    assert visited is not None and visited < 4096 // 128, visited  # some tiles are skipped


@settings(max_examples=120, deadline=None)
@given(st.sampled_from(ITEM_DIVISORS), st.sampled_from(ITEM_DIVISORS), st.sampled_from(["<=", ">=", "==", "<", "!="]),
       st.integers(-3, 3), st.sampled_from([64, 128]), st.integers(0, 2**32 - 1))
def test_masks_over_blocks_of_item_sizes_are_exact(d1, d2, cmp, c, d, seed):
    """Any comparison of two positions' blocks, each of a size of the item: key bounds exact
    where they solve, tile classes sound."""
    k = lowered(program(None, f"j // {d1} {cmp} i // {d2} + {c}"), d)
    rng = random.Random(seed)
    dims = {"B": 2, "H": rng.choice([1, 3, 5]), "M": rng.choice([300, 700]), "N": rng.choice([250, 650]), "D": d}
    dims["Hkv"] = dims["H"]
    if k.attr("kv_bounds") != "per-element":
        assert_exact(k, dims, {}, rng, tiles=10)
    _check_tiles(k, dims, rng, trials=15)


def test_a_value_of_the_item_is_exact_over_a_block():
    """`h // (H // Hkv) % 2`, the same on every element of a block, bounds as itself: the tile
    classes compare it once, with no remainder's interval around it (and item_warm takes its
    division: tests/test_item_divisions.py)."""
    k = lowered(program(None, "(h // (H // Hkv)) % 2 == 0 or j <= i"))
    assert ir.format_expr(k.func("tile_full")) == "h // (H // Hkv) % 2 == 0 or k1 <= q0"


@pytest.mark.parametrize("mask", [
    "abs(i - j) <= 32 * (h % 4 + 1) * (h % 4 + 1)",  # a window per head, quadratic in it
    "j <= ((i + 1) * N) // M - 1",                    # causal from the top left for M != N
    "j * 3 <= (i * N) // M + H * (h + 1)",
])
def test_values_the_runtime_keeps_within_i32_solve(mask):
    """Products of sizes count as below 2^31 (the runtime refuses a call where one would leave
    i32), not as the product of their leaves' bounds (2^62 and more: left per element before);
    a product by a size >= 0 keeps its factor's order over a block, so the tiles skip."""
    k = lowered(program(None, mask), 128)
    assert k.attr("kv_bounds") == "interval", k.attr("kv_bounds")
    for heads, m, n in ((3, 700, 650), (5, 300, 1100), (16, 2048, 1000)):
        dims = {"B": 2, "H": heads, "Hkv": heads, "M": m, "N": n, "D": 64}
        assert_exact(k, dims, {}, random.Random(m), tiles=24)
        _check_tiles(k, dims, random.Random(n), trials=30)
    assert k.func("tile_empty") != ir.Const("bool", False)


def test_data_is_not_taken_within_i32():
    """A product of data has no such guarantee: its key bound could pass 2^62 in 64 bits."""
    k = lowered(program(None, "j <= lim[b] * 65536 * 65536 + i", decls=("lim: i32[B]",)), 128)
    assert k.attr("kv_bounds") == "per-element"


def test_the_score_is_not_a_value_of_the_item():
    """int(s) reads the score, which changes from element to element: not a size."""
    s = ir.Var("f32", "qk")
    assert not positive_divisor(ir.Op("i32", "max", (ir.Op("i32", "int", (s,)), ir.Const("i32", 0))))
    from kdsl.passes.int_signs import item_level
    assert not item_level(ir.Op("i32", "int", (s,))) and item_level(ir.Var("i32", "H"))
