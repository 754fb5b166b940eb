"""Key bounds: on a partial tile, the mask as one interval of keys per query row.

For the masks people write over positions (causal, sliding windows, chunks, 2-D
neighbourhoods, prefixes, padding, and their `and`s) the keys a query row keeps inside one kv
tile form an interval. This pass solves the mask for kv and derives two i32 expressions over
b, h, q, the tile's first key k0, the dims and captured data not read at kv, such that for
every key of a tile [k0, k0 + tile_n) whose k0 is a multiple of tile_n:

    mask(b, h, q, kv)  <=>  kv_lo <= kv <= kv_hi

The Hopper kernel evaluates them once per row and tile and keeps an element of a partial tile
by comparing its column, a constant, against them: two compares instead of the whole mask per
element, and no bit mask to pack. Runs after tiling (a key `kv % C` is `kv - k0 + k0 % C` on a
tile only when C is a multiple of the tile width). The bounds are exact integers (no i32
wrap): the generated code computes them in 64 bits and clamps them to the tile.

Solving works on comparisons of i32 expressions, one side isolated down to kv through `+ -`,
negation, a factor that is a positive constant or one of b, h and the sizes (`j * M <= (i + 1) *
N`), `//` by a positive constant or by a divisor that does not read kv and is provably positive
(`max(blk[b], 1)`, `8 * H`: int_signs.py), `abs`, `min`, `max` and a `where` whose condition
does not read kv; `and` intersects intervals, `or` unites two of them
when both are open on the same side (`j <= i or j < prefix[b]`). Two intervals that may not
meet (`abs(i - j) <= W or j < G`, Longformer's window with global tokens; `i != j`) are one
interval on the tiles where one of them is empty for every row: the row's interval is the hull
of the two where both reach into the tile, and a tile predicate (mask analysis' proof that one
side is false over the whole block) says where that hull is exact. In the same way `x or y`
(`x and y`) where y does not solve is x on the tiles where y holds nowhere (everywhere): a
causal mask or an image's bidirectional block, `j <= i or (img_q[b, i] > 0 and img_q[b, i] ==
img_k[b, j])`, is causal on the tiles without image tokens. What it cannot solve (kv inside a
load, `%` of kv by a non-multiple of the tile) needs the per-element mask. When the mask is a
conjunction of which only some parts solve (`doc_q[b, i] == doc_kv[b, j] and j <= i`), the
interval comes from those, and a tile predicate tile_keys (mask analysis' bounds of the other
parts, from the runtime tile summary if they read data) says on which partial tiles the others
hold everywhere: there the interval is the whole mask (a document's diagonal tiles), elsewhere
the mask runs per element; the tile predicate of a union of two intervals joins it there.
attr kv_bounds: "interval", "interval where the rest holds" (a tile predicate says on which
partial tiles) or "per-element".

The bounds hold on tiles of the width they were solved for (`kv % C` is solved through k0 % C,
and the open side of an interval ends at the tile's last key): a kernel whose tiles of keys
have another width (the backward's CTAs: 64 or 128 keys) solves them again for its own
(emit_backward.backward_kernel).
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace

import numpy as np

from .. import ir
from . import block_bounds, mask_analysis, sample_tiles
from .int_signs import item_nonnegative, positive_divisor
from .simplify import FALSE, TRUE, const, op, simplify

# The functions this pass derives: the key interval, and the tile predicate saying where it is
# the whole mask (absent: on every partial tile).
DERIVED = ("kv_lo", "kv_hi", "tile_keys")

_MAX_NODES = 256  # a bound larger than this costs more per row than it saves: per-element
_MAX_CALLS = 2000  # the solver's work on one mask (isolate() calls; a sample's take under 50)
# Each item factor inverted (`j * M`) is a 64-bit division a row and tile. One paid: scaled_cross
# (`j * M <= (i + 1) * N`) ran x1.03 with it; two lost: aligned_cross's band (`abs(j * M - i * N)
# <= 64 * N`) ran x0.90-0.93 against its mask per element (H200, 2x16 at 4096², 2048 x 8192 and
# 8192 x 2048, seventy-ninth session). Past this count such a mask solves without them.
_MAX_FACTOR_DIVISIONS = 1


@dataclass(frozen=True)
class Keys:
    """mask <=> ok and lo <= kv <= hi; None: unbounded on that side. ok does not read kv.
    That holds on the tiles where the tile predicate `tiles` does; on the others the kernel
    evaluates the mask per element and the interval means nothing."""
    lo: ir.Expr | None
    hi: ir.Expr | None
    ok: ir.Expr
    tiles: ir.Expr = TRUE


def run(k: ir.Kernel, tile_n: int = 0) -> ir.Kernel:
    """The kernel with its key bounds, for tiles of tile_n keys (default: the kernel's tile_n)."""
    # Always derived from the mask as it is now: bounds an IR file carries are dropped first.
    k = replace(k, funcs=tuple((n, e) for n, e in k.funcs if n not in DERIVED))
    if k.kind != "attention" or k.attr("kernel") != "wgmma" or k.func("mask") is None:
        return k
    tile_n = tile_n or k.attr("tile_n")
    per_element = k.with_attrs(kv_bounds="per-element")
    whole, floats = mask_analysis.whole_tiles(k), mask_analysis.float_masks(k)
    # KDSL_KEY_UNIONS=0: unions of two intervals and `and` / `or` with a side that does not
    # solve per element, as before them (A/B timing)
    unions = os.environ.get("KDSL_KEY_UNIONS", "1") != "0"
    last_key = op("i32", "sub", k.tensor("k").shape[2], const("i32", 1))
    partial = _PartialTiles(k, tile_n)
    def solve_conjuncts(factors: bool):
        solver = _Solver(tile_n, (lambda e: block_bounds.truth(e, whole, k.tensors, floats)) if unions else None,
                         last_key, lambda p: p == FALSE or partial.never(p), factors)
        solved, rest = [], []
        for c in ir.conjuncts(k.func("mask")):
            keys = solver.boolean(c)
            (rest if keys is None else solved).append(c if keys is None else keys)
        return solver, solved, rest
    solver, solved, rest = solve_conjuncts(True)
    if solver.factor_divisions > _MAX_FACTOR_DIVISIONS:
        solver, solved, rest = solve_conjuncts(False)
    if not solved:
        return per_element
    keys = functools.reduce(solver._both, solved)
    bounds = interval(keys, tile_n, checked_values(k.func("mask")))
    if bounds is None:
        return per_element
    lo, hi = bounds
    exact = simplify(keys.tiles)
    if not rest and exact == TRUE:
        return k.with_func("kv_lo", lo).with_func("kv_hi", hi).with_attrs(kv_bounds="interval")
    # The rest of the mask (data read at kv, say) holds on every element of some partial tiles,
    # and the interval is exact on some: those keep the interval; the others evaluate the
    # whole mask per element.
    if rest:
        rest = functools.reduce(lambda x, y: op("bool", "and", x, y), rest)
        exact = simplify(op("bool", "and", block_bounds.truth(rest, whole, k.tensors, floats).always, exact))
    if exact == FALSE or _nodes(exact) > _MAX_NODES or partial.never(exact):
        return per_element
    return k.with_func("kv_lo", lo).with_func("kv_hi", hi).with_func("tile_keys", exact) \
        .with_attrs(kv_bounds="interval where the rest holds")


def interval(keys: Keys, tile_n: int, checked: frozenset = frozenset()) -> tuple[ir.Expr, ir.Expr] | None:
    """(kv_lo, kv_hi) of keys on the tile of tile_n keys from k0 (an open side ends at the tile's
    edge; hi is below k0 where keys.ok fails), or None where they would cost more per row than
    they save or could leave 64 bits; checked: values known to lie within i32 (checked_values)."""
    k0 = ir.Var("i32", "k0")
    last = op("i32", "add", k0, const("i32", tile_n - 1))
    lo = simplify(keys.lo if keys.lo is not None else k0)
    hi = simplify(op("i32", "where", keys.ok, keys.hi if keys.hi is not None else last, op("i32", "sub", k0, const("i32", 1))))
    if _nodes(lo, hi) > _MAX_NODES or max(_magnitude(lo, checked), _magnitude(hi, checked)) >= 2**62:
        return None
    return lo, hi


class _PartialTiles:
    """Whether a tile predicate of positions, the batch and head indices and the sizes of q and
    k (no data, no other dims) is false on every partial whole tile of a grid of tiles x tiles
    at each (b, h) of a sample problem (2 sequences, 16 query heads): then it is taken to hold
    nowhere (`(i - j) % 2 == 0` on a 128-wide tile, `(i - j) % (h + 2) == 0` at any head; `i
    != j`, whose only partial tiles are the diagonal's), and its evaluation and the interval's
    code are not worth their cost. Getting this wrong costs speed, never correctness. The
    grid's partial tiles are found once (the solver asks about each candidate: 96 times for
    nested abs, each evaluating the tile classes again took a second); where the classes read
    data or other dims, every tile counts."""

    def __init__(self, k: ir.Kernel, bn: int, tiles: int = 64):
        bm = k.attr("tile_m")
        q0 = np.arange(tiles).reshape(1, 1, -1, 1) * bm
        k0 = np.arange(tiles).reshape(1, 1, 1, -1) * bn
        self.grid = {**_sample_sizes(k, tiles * bm, tiles * bn), "b": np.arange(2).reshape(-1, 1, 1, 1),
                     "h": np.arange(16).reshape(1, -1, 1, 1), "q0": q0, "q1": q0 + bm - 1, "k0": k0, "k1": k0 + bn - 1}
        self.shape = (2, 16, tiles, tiles)
        self.k, self._partial = k, None

    def never(self, pred: ir.Expr) -> bool:
        if not sample_tiles.readable(pred, self.grid):
            return False
        values = sample_tiles.evaluate(pred, self.grid, self.shape)
        return values is not None and not np.any(values & self._partial_tiles())

    def _partial_tiles(self):
        if self._partial is None:
            empty, full = self.k.func("tile_empty"), self.k.func("tile_full")
            classes = None if empty is None or full is None else op("bool", "or", empty, full)
            decided = sample_tiles.evaluate(classes, self.grid, self.shape) \
                if classes is not None and sample_tiles.readable(classes, self.grid) else None
            self._partial = ~decided if decided is not None else np.ones(self.shape, bool)
        return self._partial


def _sample_sizes(k: ir.Kernel, rows: int, keys: int) -> dict:
    """The sizes of q and k for _PartialTiles' sample problem: 16 query heads (4 k/v heads when
    they are a dim of their own), rows x keys positions, the kernel's head dims."""
    q, kv = k.tensor("q").shape, k.tensor("k").shape
    d = k.attr("head_dim") or 128
    sizes = {}
    for dim, n in ((q[0], 2), (kv[1], 4), (q[1], 16), (q[2], rows), (kv[2], keys), (q[3], d), (kv[3], d),
                   (k.tensor("v").shape[3], k.attr("value_dim") or d)):
        if isinstance(dim, ir.Var):
            sizes[dim.name] = n
    return sizes


def _within(cap: int, *exprs: ir.Expr | None) -> bool:
    """Whether the expressions hold at most cap nodes together, counted as trees (what walking
    them costs; the count stops past cap). _nodes counts what the kernel computes."""
    n = 0
    for e in exprs:
        for _ in ir.walk(e) if e is not None else ():
            n += 1
            if n > cap:
                return False
    return True


def _magnitude(e: ir.Expr, checked: frozenset = frozenset()) -> int:
    """A bound on |e| when every i32 leaf is below 2^31 in magnitude: the 64-bit evaluation of
    the bounds is exact while this stays below 2^62 (inverting nested `//` by large constants
    multiplies them up). So is a value in checked (checked_values), however it is built."""
    if isinstance(e, ir.Op) and e.op == "floordiv" and isinstance(e.args[1], ir.Const) and e.args[1].value > 0:
        # a block index (`i // 64`): small enough to scale by a size (`j // (64 * H) == i // 64`)
        return _magnitude(e.args[0], checked) // e.args[1].value + 1
    if e in checked:
        return 2**31
    if isinstance(e, ir.Const):
        return abs(int(e.value)) if e.ty == "i32" else 1
    if not isinstance(e, ir.Op):
        return 2**31
    if e.ty == "bool":
        return 1
    if e.op == "mul" and not isinstance(e.args[1], ir.Const) and positive_divisor(e.args[1]):
        return _times(e.args[0], e.args[1], checked)  # the inverse of a runtime divisor's bound
    m = [_magnitude(a, checked) for a in e.args]
    if e.op in ("add", "sub"):
        return m[0] + m[1]
    if e.op == "mul":
        return m[0] * m[1]
    if e.op == "where":
        return max(m[1], m[2])
    return max(m)  # neg, abs, min, max, floordiv and mod by a positive constant, int(...)


def _times(x: ir.Expr, y: ir.Expr, checked: frozenset) -> int:
    """A bound on |x * y| for y >= 1, where x is made of quotients by y: (a // y) * y lies in
    (a - y, a], and (a // y - 40) * y (`abs(i // (h + 1) - j // (h + 1)) <= 40`) is it less 40 y."""
    if isinstance(x, ir.Op) and x.op == "floordiv" and x.args[1] == y:
        return _magnitude(x.args[0], checked) + _magnitude(y, checked)
    if isinstance(x, ir.Op) and x.op in ("add", "sub"):
        return _times(x.args[0], y, checked) + _times(x.args[1], y, checked)
    if isinstance(x, ir.Op) and x.op == "neg":
        return _times(x.args[0], y, checked)
    return _magnitude(x, checked) * _magnitude(y, checked)


def checked_values(mask: ir.Expr) -> frozenset:
    """The mask's integer values of positions, b, h and the sizes alone (no data, no tile
    summary): the runtime refuses a call where one would leave i32 (runtime/bounds.py
    check_integer_ranges), so each is below 2^31 in magnitude, however large its form could make
    it (`32 * (h % 4 + 1) * (h % 4 + 1)`, `((i + 1) * N) // M`)."""
    data: dict[int, bool] = {}

    def reads_data(n: ir.Expr) -> bool:
        if id(n) not in data:
            kids = getattr(n, "args", ()) or getattr(n, "indices", ())
            data[id(n)] = isinstance(n, ir.Load) or (isinstance(n, ir.Op) and n.op in ir.TILE_REDUCTIONS) \
                or any([reads_data(c) for c in kids])
        return data[id(n)]
    return frozenset(n for n in ir.walk_distinct(mask)
                     if isinstance(n, ir.Op) and n.ty == "i32" and not reads_data(n))


def solve(mask: ir.Expr, tile_n: int) -> Keys | None:
    """The mask as one key interval per row on a tile of tile_n keys, or None."""
    return _Solver(tile_n).boolean(mask)


def _on_kv(e: ir.Expr) -> bool:
    return ir.uses(e, "kv")


def _nodes(*exprs: ir.Expr) -> int:
    """The distinct subexpressions of exprs: what the kernel computes once the compiler has
    shared the common ones (a union's sides repeat the tile's ends k0 and min(k0 + 127, N - 1)
    many times over: three sides, `j < 16 or j >= N - 16 or abs(i - j) <= 256`, are 503 nodes
    as trees and 46 distinct)."""
    return len({n for e in exprs for n in ir.walk(e)})


_FLIP = {"le": "ge", "ge": "le"}
_NEGATED = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt", "eq": "ne", "ne": "eq"}


class _Solver:
    def __init__(self, tile_n: int, truth=None, last_key: ir.Expr | None = None, nowhere=lambda p: p == FALSE,
                 factors: bool = True):
        """truth: mask analysis over a block (an interval exact on some tiles only needs it:
        unions of two, a side that does not solve; None: not solved); last_key: the last key
        there is (N - 1), where a tile's keys end; nowhere: whether a tile predicate holds on
        no partial tile; factors: whether an item factor (`j * M`) is inverted."""
        self.tile_n, self.truth, self.unions, self.nowhere = tile_n, truth, truth is not None, nowhere
        self.factors, self.factor_divisions = factors, 0  # _times_factor's, against _MAX_FACTOR_DIVISIONS
        self.calls = 0  # isolate()'s, against _MAX_CALLS
        k0 = ir.Var("i32", "k0")
        last = op("i32", "add", k0, const("i32", tile_n - 1))
        self.k1 = last if last_key is None else op("i32", "min", last, last_key)
        # stand-ins for "no key": below and above every key of the tile
        self.below, self.above = op("i32", "sub", k0, const("i32", 1)), op("i32", "add", k0, const("i32", tile_n))

    def boolean(self, e: ir.Expr) -> Keys | None:
        if not _on_kv(e):
            return Keys(None, None, e)
        if not isinstance(e, ir.Op):
            return None  # a bool load at kv
        if e.op in ("and", "or"):
            x, y = self.boolean(e.args[0]), self.boolean(e.args[1])
            if e.op == "or":  # a side exact on some tiles only and with no key bounds (`img_q[b, i] > 0
                # and img_q[b, i] == img_k[b, j]`): the tiles where it is false serve better
                x, y = (None if z is not None and z.tiles != TRUE and z.lo is None and z.hi is None else z
                        for z in (x, y))
            if x is None or y is None:  # a side that does not solve
                return None if x is None and y is None else \
                    self._partly(x or y, e.args[0] if x is None else e.args[1], e.op)
            return self._both(x, y) if e.op == "and" else self._either(x, y, *e.args)
        if e.op == "not":
            n = _negate(e.args[0])
            return None if n is None else self.boolean(n)
        if e.op == "where" and not _on_kv(e.args[0]):
            x, y = self.boolean(e.args[1]), self.boolean(e.args[2])
            return None if x is None or y is None else self._select(e.args[0], x, y)
        if e.op in _NEGATED and e.args[0].ty == "i32":
            return self.compare(e.op, e.args[0], e.args[1])
        return None

    def compare(self, name: str, a: ir.Expr, b: ir.Expr) -> Keys | None:
        if name == "ne":  # two rays
            x, y = self.compare("lt", a, b), self.compare("gt", a, b)
            return None if x is None or y is None else \
                self._either(x, y, op("bool", "lt", a, b), op("bool", "gt", a, b))
        if name == "eq":
            x, y = self.compare("le", a, b), self.compare("ge", a, b)
            return None if x is None or y is None else self._both(x, y)
        if name == "lt":
            name, b = "le", op("i32", "sub", b, const("i32", 1))
        elif name == "gt":
            name, b = "ge", op("i32", "add", b, const("i32", 1))
        if _on_kv(a) and _on_kv(b):
            la, lb = _linear(a), _linear(b)
            if la is None or lb is None:
                return None
            coef, rest = la[0] - lb[0], op("i32", "sub", lb[1], la[1])  # coef * kv  name  rest
            if coef == 0:
                return Keys(None, None, op("bool", name, const("i32", 0), rest))
            kv = ir.Var("i32", "kv")
            a, b = kv if coef == 1 else op("i32", "mul", kv, const("i32", coef)), rest
        elif _on_kv(b):
            a, b, name = b, a, _FLIP[name]
        return self.isolate(a, name, b)

    def isolate(self, f: ir.Expr, name: str, r: ir.Expr) -> Keys | None:
        """Keys with f(kv) `name` r, name le or ge, r not reading kv."""
        # abs (both sides) and unions visit a subexpression twice: nested ones would take
        # exponential time; past the budget the mask is left per element
        self.calls += 1
        if self.calls > _MAX_CALLS:
            return None
        i32 = lambda n, *xs: op("i32", n, *xs)
        if not _on_kv(f):  # one side of a min, max or where
            return Keys(None, None, op("bool", name, f, r))
        if isinstance(f, ir.Var):  # kv itself
            return Keys(None, r, TRUE) if name == "le" else Keys(r, None, TRUE)
        if not isinstance(f, ir.Op):
            return None  # a load at kv
        x = f.args[0]
        y = f.args[1] if len(f.args) > 1 else None
        if f.op in ("add", "sub") and _on_kv(x) and _on_kv(y):
            lin = _linear(f)
            if lin is None or lin[0] == 0:
                return None if lin is None else Keys(None, None, op("bool", name, lin[1], r))
            kv = ir.Var("i32", "kv")
            return self.isolate(kv if lin[0] == 1 else i32("mul", kv, const("i32", lin[0])), name,
                                i32("sub", r, lin[1]))
        if f.op == "add":
            return self.isolate(x, name, i32("sub", r, y)) if _on_kv(x) else self.isolate(y, name, i32("sub", r, x))
        if f.op == "sub":
            return self.isolate(x, name, i32("add", r, y)) if _on_kv(x) else self.isolate(y, _FLIP[name], i32("sub", x, r))
        if f.op == "neg":
            return self.isolate(x, _FLIP[name], i32("neg", r))
        if f.op == "mul":
            c, g = (x, y) if isinstance(x, ir.Const) or not _on_kv(x) else (y, x)
            if _on_kv(c):
                return None
            if not isinstance(c, ir.Const):
                return self._times_factor(g, c, name, r)
            if c.value < 0:
                return self.isolate(i32("mul", g, const("i32", -c.value)), _FLIP[name], i32("neg", r))
            if name == "le":  # c * g <= r  <=>  g <= floor(r / c)
                return self.isolate(g, "le", i32("floordiv", r, c))
            return self.isolate(g, "ge", i32("neg", i32("floordiv", i32("neg", r), c)))  # ceil(r / c)
        if f.op == "floordiv" and not _on_kv(y) and positive_divisor(y):
            # by a constant, a size of the item (`8 * H`, `16 * (h + 1)`) or a divisor of the row
            # (a block size per sequence, max(blk[b], 1))
            if name == "le":  # x // c <= r  <=>  x <= c * r + c - 1
                return self.isolate(x, "le", i32("add", i32("mul", r, y), i32("sub", y, const("i32", 1))))
            return self.isolate(x, "ge", i32("mul", r, y))
        if f.op == "mod" and isinstance(y, ir.Const) and y.value > 0:
            # kv % c on a tile is k0 % c plus the key's offset in the tile, and (kv // a) % c is
            # (kv % (a c)) // a (blocks of a keys in c phases: a checkerboard (i // 64) % 2 == (j //
            # 64) % 2): neither wraps inside a tile when the period is a multiple of its width
            a, key = (1, x) if isinstance(x, ir.Var) else \
                (x.args[1].value, x.args[0]) if isinstance(x, ir.Op) and x.op == "floordiv" \
                and isinstance(x.args[0], ir.Var) \
                and isinstance(x.args[1], ir.Const) and x.args[1].value > 0 else (0, None)
            if a and (a * y.value) % self.tile_n == 0:
                k0 = ir.Var("i32", "k0")
                base = i32("sub", k0, self._tile_mod(k0, const("i32", a * y.value)))
                if a == 1:
                    return self.isolate(key, name, i32("add", r, base))
                return self.isolate(i32("floordiv", i32("sub", key, base), const("i32", a)), name, r)
            return None
        if f.op == "abs":
            if name == "ge":  # outside a window: x <= -r or x >= r
                below, above = op("bool", "le", x, i32("neg", r)), op("bool", "ge", x, r)
                lo, hi = self.isolate(x, "le", i32("neg", r)), self.isolate(x, "ge", r)
                return None if lo is None or hi is None else self._either(lo, hi, below, above)
            lo, hi = self.isolate(x, "ge", i32("neg", r)), self.isolate(x, "le", r)
            return None if lo is None or hi is None else self._both(lo, hi)
        if f.op in ("min", "max"):
            p, q = self.isolate(x, name, r), self.isolate(y, name, r)
            if p is None or q is None:
                return None
            meet = (f.op == "min") == (name == "ge")  # min >= r and max <= r hold on both
            return self._both(p, q) if meet else self._either(p, q, op("bool", name, x, r), op("bool", name, y, r))
        if f.op == "where" and not _on_kv(x):
            p, q = self.isolate(f.args[1], name, r), self.isolate(f.args[2], name, r)
            return None if p is None or q is None else self._select(x, p, q)
        return None

    def _times_factor(self, g: ir.Expr, c: ir.Expr, name: str, r: ir.Expr) -> Keys | None:
        """g * c `name` r for a factor c of b, h and the sizes alone, >= 0 by its form (`j * M <= (i
        + 1) * N`, keys scaled to queries of another length): g's bound is r divided by c where c
        >= 1, and where c is 0 (`h % 2`, a size 0) the comparison 0 `name` r, no key bound. The
        divisor is max(c, 1): never 0 in the kernel, and c itself wherever it is used."""
        if not self.factors or not item_nonnegative(c):
            return None
        self.factor_divisions += 1
        i32 = lambda n, *xs: op("i32", n, *xs)
        d = i32("max", c, const("i32", 1))
        keys = self.isolate(g, "le", i32("floordiv", r, d)) if name == "le" else \
            self.isolate(g, "ge", i32("neg", i32("floordiv", i32("neg", r), d)))  # ceil(r / c)
        if keys is None:
            return None
        return self._select(op("bool", "ge", c, const("i32", 1)), keys,
                            Keys(None, None, op("bool", name, const("i32", 0), r)))

    def _partly(self, keys: Keys, other: ir.Expr, how: str) -> Keys | None:
        """keys `how` other, where other does not solve: keys alone on the tiles where other
        holds on every element (and) or on none (or): `j <= i or (img_q[b, i] > 0 and
        img_q[b, i] == img_k[b, j])` is causal on the tiles without an image."""
        if not self.unions:
            return None
        t = self.truth(other)
        where = simplify(t.always if how == "and" else t.never)
        return None if self.nowhere(where) else replace(keys, tiles=_and(keys.tiles, where))

    def _tile_mod(self, k0: ir.Expr, c: ir.Const) -> ir.Expr:
        return const("i32", 0) if c.value == self.tile_n else op("i32", "mod", k0, c)

    def _both(self, x: Keys, y: Keys) -> Keys:
        join = lambda n, a, b: a if b is None else b if a is None else op("i32", n, a, b)
        return Keys(join("max", x.lo, y.lo), join("min", x.hi, y.hi), op("bool", "and", x.ok, y.ok),
                    _and(x.tiles, y.tiles))

    def _either(self, x: Keys, y: Keys, ex: ir.Expr | None = None, ey: ir.Expr | None = None) -> Keys | None:
        """x or y; ex, ey: the bool expressions they solve (for two intervals that may not meet)."""
        if x.lo is None and x.hi is None:  # x does not depend on kv: x.ok or y
            return self._select(x.ok, Keys(None, None, TRUE, x.tiles), y)
        if y.lo is None and y.hi is None:
            return self._select(y.ok, Keys(None, None, TRUE, y.tiles), x)
        ok, tiles = op("bool", "or", x.ok, y.ok), _and(x.tiles, y.tiles)
        if x.lo is None and y.lo is None:  # two rays down: the higher end
            return Keys(None, op("i32", "max", self._hi_or_none(x), self._hi_or_none(y)), ok, tiles)
        if x.hi is None and y.hi is None:  # two rays up: the lower start
            return Keys(op("i32", "min", self._lo_or_none(x), self._lo_or_none(y)), None, ok, tiles)
        if ex is None or not self.unions or not _within(_MAX_NODES, x.lo, x.hi, x.ok, y.lo, y.hi, y.ok):
            return None  # (each union doubles its sides' size: nested ones would grow exponentially)
        # Two intervals that may not meet. A row's keys are the hull of those of the two that
        # reach into the tile: exact on the tiles where one side is false on every element
        # (mask analysis proves it over the block); elsewhere the kernel checks per element.
        k0 = ir.Var("i32", "k0")
        ends = lambda z: (k0 if z.lo is None else z.lo, self.k1 if z.hi is None else z.hi)
        (xlo, xhi), (ylo, yhi) = ends(x), ends(y)
        reach = lambda z, lo, hi: op("bool", "and", z.ok, op("bool", "le", op("i32", "max", lo, k0),
                                                              op("i32", "min", hi, self.k1)))
        xin, yin = reach(x, xlo, xhi), reach(y, ylo, yhi)
        lo = op("i32", "min", op("i32", "where", xin, xlo, self.above), op("i32", "where", yin, ylo, self.above))
        hi = op("i32", "max", op("i32", "where", xin, xhi, self.below), op("i32", "where", yin, yhi, self.below))
        one_side = simplify(op("bool", "or", self.truth(ex).never, self.truth(ey).never))
        return None if self.nowhere(one_side) else Keys(lo, hi, op("bool", "or", xin, yin), _and(tiles, one_side))

    def _hi_or_none(self, x: Keys) -> ir.Expr:
        return op("i32", "where", x.ok, x.hi, self.below)

    def _lo_or_none(self, x: Keys) -> ir.Expr:
        return op("i32", "where", x.ok, x.lo, self.above)

    def _select(self, c: ir.Expr, x: Keys, y: Keys) -> Keys:
        def pick(a, b, default):
            if a is None and b is None:
                return None
            return op("i32", "where", c, default if a is None else a, default if b is None else b)
        k0 = ir.Var("i32", "k0")
        return Keys(pick(x.lo, y.lo, k0), pick(x.hi, y.hi, op("i32", "add", k0, const("i32", self.tile_n - 1))),
                    op("bool", "where", c, x.ok, y.ok), _and(x.tiles, y.tiles))


def _and(x: ir.Expr, y: ir.Expr) -> ir.Expr:
    return x if y == TRUE else y if x == TRUE else op("bool", "and", x, y)


def _linear(e: ir.Expr) -> tuple[int, ir.Expr] | None:
    """e as coef * kv + rest (rest not reading kv), or None."""
    if not _on_kv(e):
        return 0, e
    if isinstance(e, ir.Var):
        return 1, const("i32", 0)
    if not isinstance(e, ir.Op):
        return None
    if e.op in ("add", "sub"):
        x, y = _linear(e.args[0]), _linear(e.args[1])
        if x is None or y is None:
            return None
        s = 1 if e.op == "add" else -1
        return x[0] + s * y[0], op("i32", e.op, x[1], y[1])
    if e.op == "neg":
        x = _linear(e.args[0])
        return None if x is None else (-x[0], op("i32", "neg", x[1]))
    if e.op == "mul":
        c, g = (e.args[0], e.args[1]) if isinstance(e.args[0], ir.Const) else (e.args[1], e.args[0])
        x = _linear(g) if isinstance(c, ir.Const) else None
        return None if x is None else (x[0] * c.value, op("i32", "mul", x[1], c))
    return None


def _negate(e: ir.Expr) -> ir.Expr | None:
    """not e, pushed inward (De Morgan, comparisons flipped), or None."""
    if isinstance(e, ir.Const):
        return const("bool", not e.value)
    if not isinstance(e, ir.Op):
        return None
    if e.op == "not":
        return e.args[0]
    if e.op in ("and", "or"):
        x, y = _negate(e.args[0]), _negate(e.args[1])
        return None if x is None or y is None else op("bool", "or" if e.op == "and" else "and", x, y)
    if e.op in _NEGATED and e.args[0].ty == "i32":
        return op("bool", _NEGATED[e.op], *e.args)
    if e.op == "where":
        x, y = _negate(e.args[1]), _negate(e.args[2])
        return None if x is None or y is None else op("bool", "where", e.args[0], x, y)
    if not _on_kv(e):
        return op("bool", "not", e)
    return None
