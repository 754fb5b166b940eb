"""passes/kv_bounds.py: a partial tile's mask as one key interval per row must be exact, on
every key of every tile, for the samples and for generated masks."""
import random

import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

from kdsl import interp, ir
from kdsl.passes import block_bounds, kv_bounds
from kdsl.semantics import eval_numpy

from conftest import ROOT, lowered
from exprgen import bool_expr, int_expr, program

DIMS = {"B": 2, "H": 3, "Hkv": 3, "M": 700, "N": 650, "D": 64}


def assert_exact(k, dims, captures, rng, tiles=12, bn=0):
    """On random (b, h) and tiles (of bn keys, default the kernel's tile_n): mask == (kv_lo <= kv
    <= kv_hi) for every row and key of a tile of class keys (tile_keys holds, or there is no
    tile_keys). Elsewhere the kernel evaluates the mask and the interval means nothing."""
    bm, bn = k.attr("tile_m"), bn or k.attr("tile_n")
    for _ in range(tiles):
        q0, k0 = bm * rng.randrange(-(-dims["M"] // bm)), bn * rng.randrange(-(-dims["N"] // bn))
        q = np.arange(q0, min(q0 + bm, dims["M"])).reshape(-1, 1)
        kv = np.arange(k0, k0 + bn).reshape(1, -1)
        b, h = rng.randrange(dims["B"]), rng.randrange(dims["H"])
        env = {**dims, "b": b, "h": h, "k0": k0}
        keep = np.broadcast_to(eval_numpy(k.func("mask"), {**env, "q": q, "kv": np.minimum(kv, dims["N"] - 1)
                                                           if captures else kv}, captures), (len(q), bn))
        lo = np.broadcast_to(eval_numpy(k.func("kv_lo"), {**env, "q": q}, captures), q.shape)
        hi = np.broadcast_to(eval_numpy(k.func("kv_hi"), {**env, "q": q}, captures), q.shape)
        inside = (kv >= lo) & (kv <= hi)
        # Keys past N: captured data is read clamped there, and tile_keys is a statement about
        # the keys the kernel keeps at all (k1 <= N - 1); the kernel drops them anyway.
        if captures or k.func("tile_keys") is not None:
            keep, inside = keep[:, kv[0] < dims["N"]], inside[:, kv[0] < dims["N"]]
        by_keys = k.func("tile_keys") is None or interp._holds(
            k.func("tile_keys"), dims, captures, dims["B"], dims["H"], q0, int(q[-1, 0]), k0,
            min(k0 + bn, dims["N"]) - 1)[b, h]
        bad = np.argwhere(keep != inside) if by_keys else ()
        assert not len(bad), (ir.print_expr(k.func("mask")), ir.print_expr(k.func("kv_lo")),
                              ir.print_expr(k.func("kv_hi")), q0, k0, bad[:3])


@pytest.mark.parametrize("name,expected", [
    ("causal", "interval"), ("sliding_window", "interval"), ("natten2d", "interval"), ("alibi", "interval"),
    ("prefix_lm", "interval"), ("padded_causal", "interval"), ("document_mask", "interval where the rest holds")])
def test_samples_solve_exactly(name, expected):
    k = lowered((ROOT / "samples" / f"{name}.kd").read_text(), 128)
    assert k.attr("kv_bounds") == expected
    if expected == "per-element":
        assert k.func("kv_lo") is None
        return
    dims = {**DIMS, "M": 2048, "N": 2048}
    assert_exact(k, dims, _ids(k, dims), random.Random(1), tiles=16)


def _ids(k, dims, seed=0):
    """Captured i32 tensors: ids per position (sorted, a few long documents); per batch, any position."""
    rng = np.random.default_rng(seed)
    def data(t):
        shape = [dims[s.name] for s in t.shape]
        if len(shape) > 1:
            return np.sort(rng.integers(0, 6, size=shape), axis=-1).astype(np.int32)
        return rng.integers(-5, dims["N"] + 5, size=shape).astype(np.int32)
    return {t.name: data(t) for t in k.tensors if t.role == "capture"}


DOCS = "doc_q: i32[B, M]", "doc_kv: i32[B, N]"


@pytest.mark.parametrize("mask, d, dv, attrs", [
    # tools/gpu_fuzz.py's find: the forward's 128-key tiles solve kv % 128 as kv - k0, the wide
    # backward's CTAs take 64 keys
    ("doc_q[b, i] >= 0 and abs(i // 128 - j // 128) <= 1 and abs(i % 128 - j % 128) <= 2", 256, 64, {}),
    ("doc_q[b, i] == doc_kv[b, j] and abs(i % 128 - j % 128) <= 2", 192, 64, {}),
    # 64-key forward tiles, 128-key backward CTAs: an interval open above ends at the tile's end
    ("doc_q[b, i] == doc_kv[b, j] and j >= i - 100", 128, 128, {"tile_n": 64}),
])
def test_the_backward_solves_key_bounds_on_its_own_key_tiles(mask, d, dv, attrs):
    from kdsl.codegen import emit_backward
    from kdsl.grammar import parse
    from kdsl.passes import pipeline
    from kdsl.passes.target import get_target
    target = get_target("sm_90a")
    k = pipeline.check(parse(program(None, mask, decls=DOCS), "t.kd"))[0]
    forward = pipeline.lower(k.with_attrs(**attrs) if attrs else k, target, d, dv)
    keys = emit_backward.backward_plan(d, dv, target).keys
    assert forward.attr("kv_bounds") != "per-element" and keys != forward.attr("tile_n")
    dims = {**DIMS, "M": 1024, "N": 1024}
    captures = _ids(forward, dims)
    with pytest.raises(AssertionError):  # the forward's bounds on the backward's tiles: wrong (the bug)
        assert_exact(forward, dims, captures, random.Random(5), tiles=60, bn=keys)
    backward = emit_backward.backward_kernel(forward, target)
    assert backward.attr("tile_n") == forward.attr("tile_n")  # the forward's tiles stay as they are
    assert_exact(backward, dims, captures, random.Random(5), tiles=60, bn=keys)
    assert emit_backward.backward_kernel(backward, target) == backward


@settings(max_examples=60, deadline=None)
@given(bool_expr(depth=3), st.sampled_from([(64, 64), (128, 64), (256, 64), (192, 128)]),
       st.sampled_from([64, 80, 96, 112, 128]), st.integers(0, 2**32 - 1))
def test_generated_masks_solve_exactly_on_the_backwards_key_tiles(mask, dims_pair, tile_n, seed):
    """Any mask beside one that reads data, its forward built on any key tile width: the bounds
    the backward reads (emit_backward.backward_kernel) are exact on the backward's own key tiles."""
    from kdsl.codegen import emit_backward
    from kdsl.grammar import parse
    from kdsl.passes import pipeline
    from kdsl.passes.target import get_target
    target = get_target("sm_90a")
    d, dv = dims_pair
    k = pipeline.check(parse(program(None, f"doc_q[b, i] == doc_kv[b, j] and ({mask})", decls=DOCS), "t.kd"))[0]
    backward = emit_backward.backward_kernel(pipeline.lower(k.with_attrs(tile_n=tile_n), target, d, dv), target)
    if backward.func("kv_lo") is None:
        return
    dims = {**DIMS, "M": 700, "N": 650}
    assert_exact(backward, dims, _ids(backward, dims, seed), random.Random(seed), tiles=12,
                 bn=emit_backward.backward_plan(d, dv, target).keys)


@settings(max_examples=150, deadline=None)
@given(bool_expr(depth=3), st.sampled_from([64, 128]), st.integers(0, 2**32 - 1))
# the rest (min(2i, j) < N) holds on a last tile's keys below N only: compared there only
@example("((i <= ((i * 1) * 1)) and (N > where((i + i) < j, (i + i), j)))", 64, 0)
def test_generated_masks_solve_exactly_or_not_at_all(mask, d, seed):
    k = lowered(program(None, mask), d)
    if k.attr("kv_bounds") != "per-element":
        assert_exact(k, DIMS, {}, random.Random(seed))
    else:
        assert k.attr("kv_bounds") == "per-element" and k.func("kv_lo") is None


def test_a_side_that_does_not_solve_leaves_the_other_where_it_holds_nowhere():
    """`j <= i or (image token pairs)`: causal on the tiles whose rows hold no image token (ids 0)
    or whose ids cannot meet the keys'; per element on an image's own tiles (tile summary)."""
    k = lowered(program(None, "j <= i or (img_q[b, i] > 0 and img_q[b, i] == img_k[b, j])",
                        decls=("img_q: i32[B, M]", "img_k: i32[B, N]")), 128)
    assert k.attr("kv_bounds") == "interval where the rest holds" and ir.print_expr(k.func("kv_hi")).endswith("q")
    dims = {**DIMS, "M": 1024, "N": 1024}
    ids = np.zeros((DIMS["B"], 1024), np.int32)
    ids[:, 300:700] = 1  # text, one image, text
    caps = {"img_q": ids, "img_k": ids}
    holds = lambda q0, k0: interp._holds(k.func("tile_keys"), dims, caps, 1, 1, q0, q0 + 127, k0, k0 + 127)[0, 0]
    assert holds(0, 0) and holds(768, 768) and holds(384, 0) and not holds(384, 384)
    for seed in range(3):
        assert_exact(k, dims, caps, random.Random(seed), tiles=40)


@settings(max_examples=100, deadline=None)
@given(bool_expr(depth=3), st.sampled_from(["({m}) or doc_q[b, i] == doc_kv[b, j]",
                                            "({m}) or (doc_q[b, i] > 2 and doc_q[b, i] == doc_kv[b, j])",
                                            "doc_q[b, i] == doc_kv[b, j] or (j < 7 and ({m}))"]),
       st.sampled_from([64, 128]), st.integers(0, 2**32 - 1))
def test_generated_masks_or_data_solve_exactly(mask, form, d, seed):
    """A mask beside a side that reads data at kv (which does not solve): where the bounds are
    kept, they are exact on the tiles tile_keys picks (from the runtime tile summary)."""
    k = lowered(program(None, form.format(m=mask), decls=DOCS), d)
    if k.attr("kv_bounds") != "per-element":
        dims = {**DIMS, "M": 700, "N": 650}
        assert_exact(k, dims, _ids(k, dims, seed), random.Random(seed), tiles=16)


@pytest.mark.parametrize("mask,lo,hi", [
    # a chunk (block-diagonal) narrower than the tile: an interval per row all the same
    ("i // 64 == j // 64", "(mul:i32 (floordiv:i32 q 64) 64)", None),
    # a window on both sides with a `not`
    ("not (abs(i - j) > 5)", None, None),
    # a union of two rays down
    ("j <= i or j < 100", "k0", "(max:i32 q 99)"),
    # blocks of 64 keys in two phases (a checkerboard): one block of each 128-key tile, per row
    ("(i // 64) % 2 == (j // 64) % 2", "(add:i32 (mul:i32 (mod:i32 (floordiv:i32 q 64) 2) 64) k0)", None),
    # a query block onto key blocks a size wide (cross attention in aligned chunks): i // 64 is
    # small enough to scale by a size in 64 bits (held-out set 40's aligned_chunks was per element)
    ("j // (64 * H) == i // 64", "(mul:i32 (floordiv:i32 q 64) (mul:i32 64 H))", None),
    ("j // (64 * max(N // M, 1)) == i // 64", None, None),
])
def test_shapes_of_solved_masks(mask, lo, hi):
    k = lowered(program(None, mask))
    assert k.attr("kv_bounds") == "interval"
    if lo is not None:
        assert ir.print_expr(k.func("kv_lo")) == lo
    if hi is not None:
        assert ir.print_expr(k.func("kv_hi")) == hi
    assert_exact(k, DIMS, {}, random.Random(0))


@pytest.mark.parametrize("mask, solves", [
    ("j // max(blk[b], 1) == i // max(blk[b], 1)", True),  # blocks of a size per sequence
    ("j // max(blk[b], 1) <= i // max(blk[b], 1)", True),  # chunked causal, chunks per sequence
    ("j <= i and j // max(blk[b], 1) == i // max(blk[b], 1)", True),
    ("j // blk[b] == i // blk[b]", False),  # the divisor may be 0 or negative: per element
    # (i // 64) * max(..): i // 64 below 2^25, the max below 2^32: solved (a query block mapped
    # onto key blocks of a size per sequence)
    ("j // max(blk[b] * 2, 3) == i // 64", True),
    # i * max(..): not provably below 2^62 (leaves count as 2^31): per element
    ("j // max(blk[b] * 2, 3) == i", False),
    ("j // (max(blk[b], 1) * 2) == i // (max(blk[b], 1) * 2)", False),  # the product may wrap to <= 0
    ("j // min(max(blk[b], 1), 256) == i // min(max(blk[b], 1), 256)", True),
])
def test_a_positive_divisor_that_does_not_read_kv_solves_as_a_constant(mask, solves):
    """kv_bounds: `//` by max(blk[b], 1) is one key interval per row, exact on every tile for
    block sizes from 1 (and 0 or negative, made 1) to past the sequence, up to 2^31 - 1."""
    k = lowered(program(None, mask, decls=("blk: i32[B]",)))
    assert (k.attr("kv_bounds") == "interval") == solves, k.attr("kv_bounds")
    if not solves:
        return
    for seed, sizes in enumerate(([1, 7], [64, 100], [1000, 0], [-3, 129], [2**31 - 1, 5], [128, 333])):
        assert_exact(k, DIMS, {"blk": np.array(sizes, np.int32)}, random.Random(seed), tiles=30)


@pytest.mark.parametrize("mask", [
    "i != j",                       # two rays, both reaching into every partial (diagonal) tile
    "j <= i and i != j",            # the same
    "(i - j) % 2 == 0",             # kv % 2: not monotone on a tile
    "j <= i and (i - j) % 2 == 0",  # an interval, but the rest holds on no whole tile
    "j // 1000000 // 1000000 // 1000000 <= i",  # its bounds could pass 2^62: not exact in 64 bits
    "(j // 48) % 2 == 0",           # a period of 96 keys: wraps inside a 128-key tile
])
def test_masks_without_one_interval_stay_per_element(mask):
    k = lowered(program(None, mask))
    assert k.attr("kv_bounds") == "per-element"
    assert all(k.func(n) is None for n in kv_bounds.DERIVED)


def test_a_conjunction_keeps_the_interval_where_the_rest_holds():
    """j <= i + 64 solves, the rest does not: the partial tiles of the band's edge above the
    diagonal take the interval (j > i there), and the diagonal ones evaluate the mask per element."""
    k = lowered(program(None, "j <= i + 64 and ((i - j) % 3 != 0 or j > i)"), 128)
    assert k.attr("kv_bounds") == "interval where the rest holds"
    dims = {**DIMS, "M": 1024, "N": 1024}
    holds = lambda q0, k0: interp._holds(k.func("tile_keys"), dims, {}, 1, 1, q0, q0 + 127, k0, k0 + 127)[0, 0]
    assert holds(512, 640) and not holds(512, 512)
    assert_exact(k, dims, {}, random.Random(3), tiles=30)


@pytest.mark.parametrize("mask, keyed, per_element", [
    # Longformer: a window and global tokens; the first key tile's rows past the window's
    # reach of it hold two intervals
    ("abs(i - j) <= 256 or j < 32 or i < 32", (512, 256), (256, 0)),
    ("abs(i - j) >= 3", (128, 0), (0, 0)),                   # outside a window
    ("j < 10 or j > i", (640, 0), (0, 0)),                   # rays in opposite directions
    ("i < 8 or abs(i - j) <= 100 or j >= N - 16", (512, 384), (768, 896)),
    ("max(i - j, j - i - 5) >= 40", (128, 0), (128, 128)),  # a max >= r: one side or the other
    # three sides: both ends and a window (503 nodes as trees, 46 distinct: kv_bounds._nodes)
    ("j < 16 or j >= N - 16 or abs(i - j) <= 256", (512, 384), (0, 0)),
])
def test_two_intervals_are_one_where_a_side_is_empty(mask, keyed, per_element):
    """A union of two key intervals that may not meet is one interval on the partial tiles
    where one side is false throughout (tile_keys holds there); elsewhere the mask runs per
    element. Exact on every key of every tile, ragged ends included."""
    k = lowered(program(None, mask), 128)
    assert k.attr("kv_bounds") == "interval where the rest holds"
    dims = {**DIMS, "M": 1024, "N": 1000}
    holds = lambda q0, k0: interp._holds(k.func("tile_keys"), dims, {}, 1, 1, q0, q0 + 127, k0,
                                         min(k0 + 128, dims["N"]) - 1)[0, 0]
    assert holds(*keyed) and not holds(*per_element)
    for seed in range(4):
        assert_exact(k, dims, {}, random.Random(seed), tiles=40)


def test_solver_unit():
    q_minus_kv = ir.Op("i32", "sub", (ir.Var("i32", "q"), ir.Var("i32", "kv")))
    keys = kv_bounds.solve(ir.Op("bool", "le", (q_minus_kv, ir.Const("i32", 7))), 128)
    assert keys.hi is None and ir.print_expr(keys.lo) == "(sub:i32 q 7)"


def test_interpreter_follows_the_bounds_at_the_i32_limits():
    """The interpreter keeps partial tiles' keys by kv_lo / kv_hi as the Hopper kernel does;
    j < lim[b] with lim = -2^31 or 2^31 - 1 must not wrap (tests/gpu has the kernel's twin)."""
    import torch
    import kdsl
    from kdsl import interp, reference
    from kdsl.testing import ATTENTION_TOL, attention_inputs, rel_frobenius
    src = ("attention limits {\n q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]\n lim: i32[B]\n"
           " mask(b, h, i, j) = (j < lim[b] or j <= i - 3) and j // 48 >= i // 96 - 2"
           " and abs(i % 128 - j % 128) <= 40\n}\n")
    kir = kdsl.compile(src, "limits.kd").ir["limits"]
    q, k, v, _ = attention_inputs(kir, 4, 2, 2, 300, 250, 64, device="cpu", generator=torch.Generator().manual_seed(0))
    lim = torch.tensor([-2**31, 2**31 - 1, 0, 100], dtype=torch.int32)
    out, _ = interp.attention(kir, *(x.float().numpy() for x in (q, k, v)), {"lim": lim.numpy()})
    ref, _ = reference.attention(kir, q, k, v, {"lim": lim})
    assert rel_frobenius(torch.from_numpy(out), ref) <= ATTENTION_TOL


def test_deeply_nested_abs_stays_cheap():
    """Regression (CI's fuzz test drew it): abs visits its argument twice and a union of its two
    sides was tried at every level of `abs(abs(...(i - j)...)) >= r`, exponential in the depth;
    the solver's work is bounded (kv_bounds._MAX_CALLS), so the mask goes per element instead."""
    e = "(i - j)"
    for d in range(28):  # 56 levels of nesting: within the parser's 64
        e = f"abs({e} - {d % 5})"
    k = lowered(program(None, e + " >= 3"), 128)
    assert k.attr("kv_bounds") == "per-element"
    solver = kv_bounds._Solver(128, lambda x: block_bounds.truth(x), None, lambda p: False)
    assert solver.boolean(k.func("mask")) is None
    assert solver.calls < 2 * kv_bounds._MAX_CALLS  # (each open frame may call once more past it)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from([8, 16, 32, 64, 128, 256]), st.sampled_from([1, 2, 3, 4, 8]),
       st.sampled_from(["==", "<=", ">=", "!=", "<"]), st.sampled_from(["(i // {a}) % {c}", "1", "{c} - 2"]),
       st.sampled_from(["{m}", "{m} and j <= i", "{m} or j < 40"]), st.sampled_from([64, 128]),
       st.integers(0, 2**32 - 1))
def test_blocks_in_phases_solve_exactly_or_not_at_all(a, c, cmp, rhs, form, d, seed):
    """(j // a) % c against a row's phase or a constant: on a tile inside one period of a * c
    keys it is (j - base) // a, which solves; a period that is not a multiple of the tile stays
    per element."""
    m = f"(j // {a}) % {c} {cmp} " + rhs.format(a=a, c=c)
    k = lowered(program(None, form.format(m=m)), d)
    if k.attr("kv_bounds") != "per-element":
        assert_exact(k, DIMS, {}, random.Random(seed), tiles=16)
    if form == "{m}" and cmp != "!=" and (a * c) % k.attr("tile_n") == 0:
        assert k.attr("kv_bounds") == "interval", m


@pytest.mark.parametrize("mask", [
    "j * M <= (i + 1) * N",              # causal over queries and keys of different lengths
    "j * (h % 2) <= i",                  # a factor 0 at even heads: there every key is kept
    "(j - 5) * (h + 1) >= i - 300 and j <= i + 9",
    "(j // 3) * ((b + 1) * N) < i * 700 + 5",  # (j // 3) * (b + 1) * N: two factors, two divisions
])
def test_a_factor_of_the_item_solves(mask):
    """`j * M <= ...`: a factor of b, h and the sizes, >= 0 by its form, is inverted as a positive
    constant is where it is >= 1 and leaves no bound where it is 0; exact at lengths apart, one
    query row and one key."""
    k = lowered(program(None, mask), 128)
    assert k.attr("kv_bounds") == "interval", k.attr("kv_bounds")
    for seed, (m, n) in enumerate(((700, 650), (300, 2000), (2000, 300), (1, 1000), (1000, 1), (129, 127))):
        assert_exact(k, {**DIMS, "M": m, "N": n}, {}, random.Random(seed), tiles=30)


@pytest.mark.parametrize("mask, bounds", [
    ("abs(j * M - i * N) <= 64 * N", "per-element"),  # a band: a division at each end, x0.90-0.93 on an H200
    ("(j - 5) * (h + 1) >= i - 300 and H * j <= i * 3 + 7", "per-element"),
])
def test_two_item_factors_are_not_inverted(mask, bounds):
    """Each inverted factor costs a 64-bit division a row and tile (kv_bounds._MAX_FACTOR_DIVISIONS):
    a mask that would need two stays per element."""
    assert lowered(program(None, mask), 128).attr("kv_bounds") == bounds


@pytest.mark.parametrize("mask", ["j * (H - h) <= i", "j * (h - 1) <= i", "j * i <= 4000", "j * lim[b] <= i"])
def test_a_factor_not_nonnegative_by_its_form_stays_per_element(mask):
    """H - h >= 1 at every head but not by its form (int_signs.py), h - 1 is -1 at head 0, a
    position's factor is no item's, data's sign is the caller's: each stays per element."""
    assert lowered(program(None, mask, decls=("lim: i32[B]",)), 128).attr("kv_bounds") == "per-element"


@settings(max_examples=120, deadline=None)
@given(st.sampled_from(["j", "(j - {x})", "({x} - j)", "(j // 3 + {x})", "abs(j - {x})", "{x}"]), int_expr(depth=2),
       st.sampled_from(["M", "N", "(h % 2)", "(h + 1)", "(2 * H)", "(b * 3)", "(N // 64)"]),
       st.sampled_from(["<", "<=", ">", ">=", "==", "!="]), int_expr(depth=2), st.sampled_from(["", " and j <= i"]),
       st.integers(0, 2**32 - 1))
def test_generated_products_with_item_factors_solve_exactly_or_not_at_all(form, x, factor, cmp, r, rest, seed):
    k = lowered(program(None, f"({form.format(x=x)}) * {factor} {cmp} {r}{rest}"), 128)
    if k.attr("kv_bounds") != "per-element":
        for m, n in ((700, 650), (130, 1000)):
            assert_exact(k, {**DIMS, "M": m, "N": n}, {}, random.Random(seed), tiles=12)


def test_aligned_chunks_of_cross_attention_are_exact_at_lengths_apart():
    """`j // (64 * max(N // M, 1)) == i // 64`: a query chunk of 64 onto the aligned key chunk of a
    longer sequence (N // M times as wide), exact where N is a multiple of M and where it is not."""
    k = lowered(program(None, "j // (64 * max(N // M, 1)) == i // 64"))
    assert k.attr("kv_bounds") == "interval"
    for seed, (m, n) in enumerate(((300, 1300), (256, 1024), (1000, 999), (64, 4096))):
        assert_exact(k, {**DIMS, "M": m, "N": n}, {}, random.Random(seed), tiles=30)
