"""Float comparisons in a mask (passes/float_bounds.py): their tile predicates must hold for any
data, NaN and infinities included, whether the elements and the predicates are computed in f32
(the kernel) or float64 (the CPU), and they must skip the tiles a float mask leaves empty."""
import numpy as np
from hypothesis import example, given, settings, strategies as st

from kdsl import interp, ir
from kdsl.grammar import parse
from kdsl.passes import mask_analysis, typecheck
from kdsl.semantics import eval_numpy

DECLS = """attention t {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    ratio: f32[H]
    width: f32[B]
    cut: i32[B]
    tq: f32[B, M]
    tk: bf16[B, N]
    mask(b, h, i, j) = %s
}
"""
LEAVES = ["float(i)", "float(j)", "float(i - j)", "float(j - cut[b])", "ratio[h]", "width[b]", "1.0", "-2.5",
          "0.25", "64.0", "tq[b, i]", "tk[b, j]"]


@st.composite
def float_expr(draw, depth=3):
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(LEAVES))
    form = draw(st.sampled_from(["({a} + {b})", "({a} - {b})", "({a} * {c})", "({c} * {a})", "({a} / {d})",
                                 "abs({a})", "min({a}, {b})", "max({a}, {b})", "-{a}",
                                 "where(j <= i, {a}, {b})", "({a} * {b})", "exp({a} * 0.01)", "exp2({a})",
                                 "log(abs({a}))", "log2({a})", "sqrt({a})", "rsqrt({a})", "tanh({a})",
                                 "sigmoid({a})", "sin({a})", "({a} * {a})", "float({p})"]))
    return form.format(a=draw(float_expr(depth - 1)), b=draw(float_expr(depth - 1)),
                       c=draw(st.sampled_from(["ratio[h]", "width[b]", "0.5", "-3.0", "0.0"])),
                       d=draw(st.sampled_from(["4.0", "-0.75", "3.0"])), p=draw(int_product()))


INTS = ["i", "j", "(i - j)", "(i // 64 - j // 64)", "(i % 32 - j % 32)", "3", "(j - i + 5)"]


@st.composite
def int_product(draw):
    """Integer products of two ranges (bounded as reals: float_bounds.as_floats)."""
    a, b, c = (draw(st.sampled_from(INTS)) for _ in range(3))
    return draw(st.sampled_from([f"{a} * {b}", f"{a} * {a} + {c} * {c}", f"{a} * {b} - {c}", f"abs({a} * {b})"]))


@st.composite
def float_mask(draw):
    cmp = draw(st.sampled_from(["<", "<=", ">", ">=", "==", "!="]))
    if draw(st.integers(0, 4)) == 0:  # integers compared, one side a product of ranges
        m = f"{draw(int_product())} {cmp} {draw(st.sampled_from(INTS + ['40', '-7']))}"
        return f"not ({m})" if draw(st.booleans()) else m
    m = f"{draw(float_expr())} {cmp} {draw(float_expr())}"
    return f"not ({m})" if draw(st.booleans()) else m


def _kernel(mask: str) -> ir.Kernel:
    return mask_analysis.run(typecheck.check_program(parse(DECLS % mask, "t.kd"))[0])


SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 3.0e38, -3.0e38, 1e-40, 1e-30]


def _data(rng, B, H, M, N):
    ratio = (rng.standard_normal(H) * 10.0 ** rng.integers(-3, 3)).astype(np.float32)
    width = (rng.standard_normal(B) * 100).astype(np.float32)
    # timestamps: increasing along the sequence (tiles then hold narrow ranges), or not
    tq, tk = (np.cumsum(rng.exponential(1.0, (B, n)), axis=1).astype(np.float32) for n in (M, N))
    if rng.random() < 0.5:
        rng.shuffle(tk, axis=1)
    tk = tk.astype(np.float32)  # bf16 in the program: read as floats, rounding aside
    for arr in (ratio, width, tq, tk):  # now and then a special value
        if rng.random() < 0.3:
            arr.flat[rng.integers(0, arr.size)] = rng.choice(SPECIAL)
    return {"ratio": ratio, "width": width, "cut": rng.integers(0, N + 1, (B,)).astype(np.int32), "tq": tq, "tk": tk}


def _tiles(k, caps, B, H, M, N, fdt, tm=64, tn=96):
    dims = {"B": B, "H": H, "Hkv": H, "M": M, "N": N, "D": 64}
    grid = {**dims, "b": np.arange(B).reshape(B, 1, 1, 1), "h": np.arange(H).reshape(1, H, 1, 1),
            "q": np.arange(M).reshape(1, 1, M, 1), "kv": np.arange(N).reshape(1, 1, 1, N)}
    with np.errstate(all="ignore"):
        keep = np.broadcast_to(eval_numpy(k.func("mask"), grid, caps, float_dtype=fdt), (B, H, M, N))
        for q0 in range(0, M, tm):
            for k0 in range(0, N, tn):
                q1, k1 = min(q0 + tm, M) - 1, min(k0 + tn, N) - 1
                env = {**dims, "b": np.arange(B).reshape(B, 1), "h": np.arange(H).reshape(1, H),
                       "q0": q0, "q1": q1, "k0": k0, "k1": k1}
                ranges = {"q": (q0, q1), "kv": (k0, k1)}  # tile reductions of i32 data, as interp takes them
                empty, full = (np.broadcast_to(eval_numpy(interp._reduce_tiles(k.func(p), env, caps, ranges, {}), env,
                                                          caps, float_dtype=fdt), (B, H))
                               for p in ("tile_empty", "tile_full"))
                yield (q0, k0), empty, full, keep[:, :, q0:q1 + 1, k0:k1 + 1]


@settings(max_examples=150, deadline=None)
@given(float_mask(), st.integers(0, 2**32 - 1), st.sampled_from([np.float32, np.float64]),
       st.sampled_from([np.float32, np.float64]))
# CI found it: f64 predicates bounded exp2(i) * 0.0 by 0 where the f32 elements are inf * 0 = NaN
@example("(exp2(float(i)) * 0.0) < float(i)", 0, np.float32, np.float64)
def test_float_tile_predicates_are_sound_for_any_data(mask, seed, element_dtype, predicate_dtype):
    """'empty' blocks keep no element and 'full' blocks mask none, the elements computed in one
    precision and the predicates in another (each within the slack of the other)."""
    k = _kernel(mask)
    rng = np.random.default_rng(seed)
    B, H, M, N = 2, 3, int(rng.integers(1, 300)), int(rng.integers(1, 300))
    caps = _data(rng, B, H, M, N)
    elements = {at: block for at, _, _, block in _tiles(k, caps, B, H, M, N, element_dtype)}
    for at, empty, full, _ in _tiles(k, caps, B, H, M, N, predicate_dtype):
        block = elements[at]
        assert not (empty & block.any(axis=(2, 3))).any(), (mask, at, caps)
        assert not (full & ~block.all(axis=(2, 3))).any(), (mask, at, caps)


def _classes(mask, caps, B=1, H=2, M=1024, N=1024):
    k = _kernel(mask)
    out = {"empty": 0, "full": 0, "partial": 0}
    for _, empty, full, block in _tiles(k, caps, B, H, M, N, np.float32, 128, 128):
        assert not (empty & block.any(axis=(2, 3))).any() and not (full & ~block.all(axis=(2, 3))).any()
        for e, f in zip(empty.ravel(), full.ravel()):
            out["empty" if e else "full" if f else "partial"] += 1
    return k, out


def test_a_data_dependent_float_bound_skips_the_tiles_past_it():
    """Held-out 27's ratio_cross (a key bound j <= i * ratio[h] + 1): with ratios 0.1 and -0.2 most
    tiles are empty and those under the line full; a NaN ratio decides nothing (its elements are
    all masked, but the predicates do not claim so: no bound is finite)."""
    mask = "float(j) <= float(i) * ratio[h] + 1.0"
    caps = {"ratio": np.array([0.1, -0.2], np.float32), "width": np.zeros(1, np.float32),
            "cut": np.zeros(1, np.int32), "tq": np.zeros((1, 1024), np.float32), "tk": np.zeros((1, 1024), np.float32)}
    k, n = _classes(mask, caps)
    assert k.attr("mask_tiles") == "data-dependent"
    # head 0: a row i keeps keys up to 0.1 i + 1 <= 103.3, so each 128-row tile visits kv tile 0
    # alone (partial); head 1 keeps j <= 1 - 0.2 i, nothing past row 5: row tile 0 visits kv
    # tile 0. Every other tile is empty.
    assert n == {"empty": 2 * 64 - 9, "full": 0, "partial": 9}
    caps["ratio"] = np.array([np.nan, 1.0], np.float32)
    _, n = _classes(mask, caps)
    # head 1 keeps j <= i + 1: the diagonal's 8 tiles and the 7 right of them (one key each) partial
    assert n == {"empty": 28 - 7, "full": 28, "partial": 64 + 8 + 7}


def test_a_float_distance_mask_is_decided_over_blocks():
    """A radius in float: |i - j| * 0.5 < width[b] (a sliding window of 2 width keys each way)."""
    caps = {"ratio": np.ones(2, np.float32), "width": np.array([100.0], np.float32), "cut": np.zeros(1, np.int32),
            "tq": np.zeros((1, 1024), np.float32), "tk": np.zeros((1, 1024), np.float32)}
    _, n = _classes("abs(float(i - j)) * 0.5 < width[b]", caps)
    assert n["empty"] > 0 and n["full"] > 0 and n["partial"] < n["empty"]


def test_float_data_at_the_query_and_key_is_bounded_by_the_tile_summary():
    """Timestamps (tk[b, j] <= tq[b, i] within 30 time units): in time order each tile's keys
    lie within its min and max, so the blocks far in the past or the future are decided; a NaN
    among the keys decides nothing where it lies (its bounds are NaN)."""
    t = np.arange(1024, dtype=np.float32)[None] * 0.5  # 0.5 a position: 60 positions back
    caps = {"ratio": np.ones(2, np.float32), "width": np.zeros(1, np.float32), "cut": np.zeros(1, np.int32),
            "tq": t.copy(), "tk": t.copy()}
    mask = "tk[b, j] <= tq[b, i] and tq[b, i] - tk[b, j] < 30.0"
    k, n = _classes(mask, caps)
    assert k.attr("mask_tiles") == "tile-summary"
    assert n == {"empty": 2 * (64 - 8 - 7), "full": 0, "partial": 2 * (8 + 7)}  # the diagonal and one below
    caps["tk"][0, 300] = np.nan
    _, n_nan = _classes(mask, caps)
    assert n_nan["partial"] == n["partial"] + 2 * 6  # kv tile 2: its six empty blocks now undecided


def test_a_circular_neighbourhood_skips_the_tiles_beyond_its_radius():
    """sqrt(dy * dy + dx * dx) <= 5.5 on a 64-wide image: a square is bounded from |x| (a range
    across 0 squares to [0, ...], not to a negative product), so the tiles more than six image
    rows away are empty."""
    caps = {"ratio": np.ones(2, np.float32), "width": np.zeros(1, np.float32), "cut": np.zeros(1, np.int32),
            "tq": np.zeros((1, 1024), np.float32), "tk": np.zeros((1, 1024), np.float32)}
    mask = ("sqrt(float(i // 64 - j // 64) * float(i // 64 - j // 64) + "
            "float(i % 64 - j % 64) * float(i % 64 - j % 64)) <= 5.5")
    _, n = _classes(mask, caps)
    # 128-row tiles span two image rows: a block is empty when its rows are 7 or more apart
    # (|dy| - 1 > 5.5); of the 8 x 8 blocks per head those within 4 tiles of the diagonal are not
    assert n["empty"] == 2 * sum(abs(r - c) >= 4 for r in range(8) for c in range(8))


def test_an_integer_disc_is_bounded_in_reals():
    """dy * dy + dx * dx <= 30 in integers: the integer analysis has no bound for a product of two
    ranges, so the comparison is bounded as reals (exact: positions stay within i32)."""
    caps = {"ratio": np.ones(2, np.float32), "width": np.zeros(1, np.float32), "cut": np.zeros(1, np.int32),
            "tq": np.zeros((1, 1024), np.float32), "tk": np.zeros((1, 1024), np.float32)}
    _, n = _classes("(i // 64 - j // 64) * (i // 64 - j // 64) + (i % 64 - j % 64) * (i % 64 - j % 64) <= 30", caps)
    assert n["empty"] == 2 * sum(abs(r - c) >= 4 for r in range(8) for c in range(8))
