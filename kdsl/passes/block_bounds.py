"""Bounds over a block of the mask's integer values and truths, for the mask analysis
(mask_analysis.py) and the key bounds' solver (kv_bounds.py).

A block is q in [q0, q1], kv in [k0, k1] at one (b, h). interval(e) gives an integer
expression's bounds over it and truth(e) what is certain about a bool one (always true,
never true), both as IR expressions over b, h, q0, q1, k0, k1 and the dims, by interval
arithmetic on the expression.

Data-dependent masks (loads of captured tensors) are bounded too. An integer expression that
reads data but depends on neither q nor kv (`prefix[b]`) is exact over a block: the predicate
simply loads it. One that depends on q only (`doc_q[b, q]`) or kv only is bounded by its min
and max over the block's rows or columns, written (qmin e) / (qmax e) / (kvmin e) / (kvmax e):
a tile summary the runtime computes on the GPU before the attention kernel, so the kernel
skips the empty tiles of a document mask and drops the per-element check on its full ones. One
that reads data at neither position but moves one way along one (`i + off[b]`, `max(i - 511,
start[b])`: monotone.py) is exact at the block's first and last row or key, with no summary,
and so are its remainders by a divisor read once per item (`i % max(width[0], 1)`).
Data read at both q and kv and shared by the heads (torch's attn_mask `keep[b, i, j]`, a gather
`allow[seg_q[b, i], seg_kv[b, j]]`) is bounded over the whole block, (tmin e) / (tmax e): one
summary entry per (b, q tile, kv tile), so the all-false blocks of a block-diagonal, padded or
banded dense mask are skipped and its all-true ones run unchecked, as FlexAttention's BlockMask
has them; per-head data (`keep[b, h, i, j]`) too, an entry per (b, h, block). A bool element is
bounded as 0 / 1. Not where the score itself loads data per element (mask_analysis.whole_tiles). A load whose
indices each take at most two values over the block
(`blocks[b, h, i // 128, j // 128]`, a block-sparse table) is read at those values: exact where
no tile straddles a block, with no summary; so is a comparison of the positions' blocks alone
with a remainder of them (BigBird's hashed blocks), and an order comparison that reads a
position twice but moves one way along each (`i - j <= 64 + i // 4`: monotone.py) at the tile's
four corners (both tile_corners.py). What is left stays unknown and falls back to the
per-element check.
Integer `//` and `%` are bounded by a divisor the same over the block and at least 1: a constant,
`max(blk[b], 1)`, or one of b, h and the sizes that cannot be negative (`8 * H`: int_signs.py).
Float comparisons are bounded too (float_bounds.py).

The work is bounded: a bound or predicate of more than _MAX_NODES distinct nodes (or
_MAX_TREE_NODES written out, or deeper than _MAX_DEPTH) counts as unknown. Bounds of nested
abs, % and where grow about threefold per level; giving up on them costs only the per-element
check on some tiles, never correctness, and keeps analysis time and the generated code small
for any mask.
"""
from __future__ import annotations

import functools
import itertools
import os
from dataclasses import dataclass

from .. import ir
from . import float_bounds, monotone, tile_corners
from .int_signs import item_level, item_nonnegative, nonnegative_form, positive_divisor
from .simplify import FALSE, TRUE, const, op


@dataclass(frozen=True)
class Interval:  # integer interval [lo, hi]; None = unbounded
    lo: ir.Expr | None
    hi: ir.Expr | None


@dataclass(frozen=True)
class Truth:  # what is certain about a bool over the whole block
    always: ir.Expr  # true only if the value is true everywhere
    never: ir.Expr   # true only if the value is false everywhere


_MAX_NODES = 512
_MAX_DEPTH = 64
# A bound may name one part several times (a float bound and the finiteness test of it,
# passes/float_bounds.py): NVVM computes a shared part once, so the budget counts distinct
# parts; their repetitions, which the generated text spells out, stay within this.
_MAX_TREE_NODES = 4096


def _distinct_within(e: ir.Expr, limit: int) -> bool:
    """Whether e has at most `limit` distinct nodes (by identity: parts built once and named
    again), stopping as soon as it has more."""
    return all(count <= limit for count, _ in enumerate(ir.walk_distinct(e), 1))


def interval(e: ir.Expr, whole: str = "", tensors=(), floats: bool = True) -> Interval:
    """Bounds of an i32 expression over the block; whole: see whole_tiles; tensors: the
    kernel's, which lets a load whose indices each take at most two values be read at them;
    floats: see float_masks."""
    return BlockBounds(whole, tensors, floats).interval(e)


def truth(e: ir.Expr, whole: str = "", tensors=(), floats: bool = True) -> Truth:
    """What holds for a bool expression over the whole block; whole, tensors, floats: see interval."""
    return BlockBounds(whole, tensors, floats).truth(e)


def _v(name):
    return ir.Var("i32", name)


class BlockBounds:
    """One analysis, remembering the size of every expression it has measured, so that
    keeping derived expressions within the budget costs O(1) per new node."""

    def __init__(self, whole: str = "", tensors=(), floats: bool = True, monotone: bool = False):
        self.whole = whole  # which data read at q and kv may be bounded over the whole block
        self.floats = floats  # float comparisons bounded (float_masks)
        # comparisons tried at their corners (tile_corners.monotone_corners): for the tile classes alone, not
        # the key bounds' solver, which asks about hundreds of derived comparisons (each judged on
        # a sample problem: a fuzzed nested abs took 2.4 s)
        self.monotone = monotone
        # and data values moving one way along a position bounded at the block's edges (_monotone_interval;
        # KDSL_MONOTONE_BOUNDS=0: by the tile summary, A/B timing)
        self.monotone_bounds = monotone and os.environ.get("KDSL_MONOTONE_BOUNDS", "1") != "0"
        self.tensors = {t.name: t for t in tensors}  # for _corners: element types and shapes
        self._corner_memo: dict = {}  # _corners per load: _whole_block asks before _truth does
        self._costs: dict[int, tuple[ir.Expr, int, int]] = {}  # id -> (expr kept alive, nodes, depth)
        self._kinds: dict[int, tuple[ir.Expr, bool, bool]] = {}  # id -> (expr, reads data, item level)

    def _cost(self, e: ir.Expr) -> tuple[int, int]:
        hit = self._costs.get(id(e))
        if hit is None:
            nodes, depth = 1, 1
            for c in getattr(e, "args", ()) or getattr(e, "indices", ()):
                n, d = self._cost(c)
                nodes, depth = nodes + n, max(depth, d + 1)
            hit = self._costs[id(e)] = (e, nodes, depth)
        return hit[1], hit[2]

    def _kind(self, e: ir.Expr) -> tuple[bool, bool]:
        """(whether e reads a captured tensor, whether it is a value of b, h and the sizes alone:
        int_signs.item_level), remembered per node: asked at every node of a deep mask, a walk
        each would take time quadratic in its depth."""
        hit = self._kinds.get(id(e))
        if hit is None:
            kids = [self._kind(c) for c in getattr(e, "args", ()) or getattr(e, "indices", ())]
            if isinstance(e, ir.Load):
                kind = (True, False)
            elif isinstance(e, ir.Var):
                kind = (False, item_level(e))
            else:
                kind = (any(r for r, _ in kids), all(i for _, i in kids)
                        and not (isinstance(e, ir.Op) and e.op in ir.TILE_REDUCTIONS))
            hit = self._kinds[id(e)] = (e, *kind)
        return hit[1], hit[2]

    def _affordable(self, e: ir.Expr | None) -> bool:
        nodes, depth = self._cost(e)
        if depth > _MAX_DEPTH or nodes > _MAX_TREE_NODES:
            return False
        return nodes <= _MAX_NODES or _distinct_within(e, _MAX_NODES)

    def interval(self, e: ir.Expr) -> Interval:
        """Bounds of an i32 expression over the block; a bound past the budget is dropped."""
        i = self._interval(e)
        return Interval(i.lo if i.lo is None or self._affordable(i.lo) else None,
                        i.hi if i.hi is None or self._affordable(i.hi) else None)

    def truth(self, e: ir.Expr) -> Truth:
        """A predicate past the budget becomes FALSE (not proven)."""
        t = self._truth(e)
        return Truth(t.always if self._affordable(t.always) else FALSE,
                     t.never if self._affordable(t.never) else FALSE)

    def _interval(self, e: ir.Expr) -> Interval:
        if isinstance(e, ir.Const):
            return Interval(e, e)
        reads = self._kind(e)[0]
        if reads and self.monotone_bounds and _periodic(e):
            return self._parts(e)  # exact: [lo % c, hi % c] within one period, else all of it
        if reads:
            data = (self.monotone_bounds and _monotone_interval(e)) or _data_interval(e)
            if data is not None:
                return data
        i = self._parts(e)
        # Data read at q and kv: bounded part by part where that bounds it (doc_q[b, i] -
        # doc_kv[b, j] by its two 1-D summaries), else over the whole block.
        if reads and (i.lo is None or i.hi is None):
            i = self._whole_block(e) or i
        if isinstance(e, ir.Load) and i.lo is None and i.hi is None:
            return self._corner_interval(e) or i
        return i

    def _corner_interval(self, e: ir.Load) -> Interval | None:
        """A byte element read at indices of two values at most (see _corners): their min and
        max where the indices are that narrow, the element type's range elsewhere."""
        corners, t = self._corners(e), self.tensors.get(e.tensor)
        if corners is None or t.dtype not in BYTE_RANGE:
            return None
        narrow, loads = corners
        lo, hi = (const("i32", v) for v in BYTE_RANGE[t.dtype])
        join = lambda name: functools.reduce(lambda x, y: op("i32", name, x, y), loads)
        return Interval(op("i32", "where", narrow, join("min"), lo), op("i32", "where", narrow, join("max"), hi))

    def _corners(self, e: ir.Load) -> tuple[ir.Expr, list[ir.Load]] | None:
        if e not in self._corner_memo:
            self._corner_memo[e] = self._corners_of(e)
        return self._corner_memo[e]

    def _corners_of(self, e: ir.Load) -> tuple[ir.Expr, list[ir.Load]] | None:
        """A load whose indices that vary over the block (two at most) each take at most two
        values on it (`blocks[b, h, i // 128, j // 128]` on a tile of up to 129 rows and keys):
        the condition that they do, and the loads at every combination of those values. Each
        value is clamped into the tensor: a call's indices are proven in bounds, so where the
        condition holds the clamped values still include every one the block reads (those of
        an over-wide bound are read needlessly, which only weakens the bound); elsewhere the
        clamp only keeps the predicate's reads inside the tensor. KDSL_MASK_CORNERS=0 turns
        it off (A/B timing)."""
        t = self.tensors.get(e.tensor)
        varying = [ir.uses(x, "q") or ir.uses(x, "kv") for x in e.indices]
        if t is None or not 0 < sum(varying) <= 2 or os.environ.get("KDSL_MASK_CORNERS", "1") == "0":
            return None
        narrow, choices = TRUE, []
        for x, dim, varies in zip(e.indices, t.shape, varying):
            if not varies:
                choices.append((x,))
                continue
            i = self.interval(x)
            if i.lo is None or i.hi is None:
                return None
            narrow = op("bool", "and", narrow, op("bool", "le", op("i32", "sub", i.hi, i.lo), const("i32", 1)))
            top = op("i32", "sub", dim, const("i32", 1))
            clamp = lambda v: op("i32", "min", op("i32", "max", v, const("i32", 0)), top)
            choices.append((clamp(i.lo), clamp(i.hi)))
        if not tile_corners.ever_narrow(narrow):
            return None
        return narrow, [ir.Load(ty=e.ty, tensor=e.tensor, indices=tuple(c)) for c in itertools.product(*choices)]

    def _whole_block(self, e: ir.Expr) -> Interval | None:
        if not self.whole or (ir.uses(e, "h") and self.whole != "heads"):
            return None
        # a per-head table of blocks is read at its corners (_corners) with no summary kernel,
        # as it was before per-head data had summaries
        if ir.uses(e, "h") and any(isinstance(n, ir.Load) and self._corners(n) is not None for n in ir.walk(e)):
            return None
        return Interval(ir.Op("i32", "tmin", (e,)), ir.Op("i32", "tmax", (e,)))

    def _parts(self, e: ir.Expr) -> Interval:
        """Bounds from those of e's operands."""
        if isinstance(e, ir.Var):
            if e.name == "q":
                return Interval(_v("q0"), _v("q1"))
            if e.name == "kv":
                return Interval(_v("k0"), _v("k1"))
            return Interval(e, e)  # b, h and dims are exact for a block
        if self._kind(e)[1]:  # and so is a value of them alone (`h // (H // Hkv) % 2`)
            return Interval(e, e)
        if not isinstance(e, ir.Op):
            return Interval(None, None)
        a = [self.interval(x) if x.ty == "i32" else None for x in e.args]
        i32 = lambda name, *xs: None if any(x is None for x in xs) else op("i32", name, *xs)
        if e.op == "add":
            return Interval(i32("add", a[0].lo, a[1].lo), i32("add", a[0].hi, a[1].hi))
        if e.op == "sub":
            return Interval(i32("sub", a[0].lo, a[1].hi), i32("sub", a[0].hi, a[1].lo))
        if e.op == "neg":
            return Interval(i32("neg", a[0].hi), i32("neg", a[0].lo))
        if e.op in ("min", "max"):
            return Interval(i32(e.op, a[0].lo, a[1].lo), i32(e.op, a[0].hi, a[1].hi))
        if e.op == "mul":
            # by a constant, or by a factor of b, h and the sizes that is >= 0 (`(i + 1) * N`: the
            # bounds are values the product takes, which the runtime keeps within i32)
            c = next((x for x in e.args if isinstance(x, ir.Const) or item_nonnegative(x)), None)
            other = a[1] if c is e.args[0] else a[0]
            if c is not None and (not isinstance(c, ir.Const) or c.value >= 0):
                return Interval(i32("mul", other.lo, c), i32("mul", other.hi, c))
            if c is not None:
                return Interval(i32("mul", other.hi, c), i32("mul", other.lo, c))
            # by a factor the same over the block of either sign (`(i - j) * stride[h]`): the
            # products with the other's two bounds, in the order the factor's sign gives
            c = next((x for x in e.args if not ir.uses(x, "q") and not ir.uses(x, "kv")), None)
            other = a[1] if c is e.args[0] else a[0]
            if c is None or other.lo is None or other.hi is None:
                return Interval(None, None)
            at_lo, at_hi, up = op("i32", "mul", other.lo, c), op("i32", "mul", other.hi, c), op("bool", "ge", c, const("i32", 0))
            return Interval(op("i32", "where", up, at_lo, at_hi), op("i32", "where", up, at_hi, at_lo))
        if e.op == "abs":
            lo, hi = a[0].lo, a[0].hi
            if lo is None or hi is None:
                return Interval(const("i32", 0), None)
            zero = const("i32", 0)
            abs_lo = op("i32", "where", op("bool", "ge", lo, zero), lo,
                        op("i32", "where", op("bool", "le", hi, zero), op("i32", "neg", hi), zero))
            return Interval(abs_lo, op("i32", "max", op("i32", "neg", lo), hi))
        # a divisor the same over the block and at least 1 (a constant, `8 * H`, max(blk[b], 1))
        c = e.args[1] if e.op in ("floordiv", "mod") and not ir.uses(e.args[1], "q") \
            and not ir.uses(e.args[1], "kv") and positive_divisor(e.args[1]) else None
        if e.op == "floordiv" and c is not None:  # floor division is monotone
            return Interval(i32("floordiv", a[0].lo, c), i32("floordiv", a[0].hi, c))
        if e.op == "mod" and c is not None:
            lo, hi, top = a[0].lo, a[0].hi, op("i32", "sub", c, const("i32", 1))
            if lo is None or hi is None:
                return Interval(const("i32", 0), top)
            same = op("bool", "eq", op("i32", "floordiv", lo, c), op("i32", "floordiv", hi, c))
            return Interval(op("i32", "where", same, op("i32", "mod", lo, c), const("i32", 0)),
                            op("i32", "where", same, op("i32", "mod", hi, c), top))
        if e.op == "mod" and a[1].hi is not None and nonnegative_form(e.args[1]):
            # a divisor that varies over the block, >= 0 by its form (`j % (i // 1024 + 1)`): x % d
            # lies in [0, d - 1], and is 0 where d is 0, so in [0, max(hi - 1, 0)] for d's hi
            zero = const("i32", 0)
            return Interval(zero, op("i32", "max", op("i32", "sub", a[1].hi, const("i32", 1)), zero))
        if e.op == "where":
            t = self.truth(e.args[0])
            x, y = a[1], a[2]
            return Interval(_pick(t, x.lo, y.lo, "min"), _pick(t, x.hi, y.hi, "max"))
        return Interval(None, None)  # int(float), loads: anything

    def _truth(self, e: ir.Expr) -> Truth:
        if isinstance(e, ir.Const):
            return Truth(const("bool", e.value), const("bool", not e.value))
        if isinstance(e, ir.Load):  # a bool element: bounded as 0 / 1, else read at its corners
            one, zero = const("i32", 1), const("i32", 0)
            as_int = op("i32", "where", e, one, zero)
            i = (_data_interval(as_int) or self._whole_block(as_int)) if self.whole else None
            if i is not None:
                return Truth(op("bool", "ge", i.lo, one), op("bool", "le", i.hi, zero))
            corners = self._corners(e)
            if corners is None:
                return Truth(FALSE, FALSE)
            narrow, loads = corners
            every = lambda xs: functools.reduce(lambda x, y: op("bool", "and", x, y), xs, narrow)
            return Truth(every(loads), every(op("bool", "not", x) for x in loads))
        if not isinstance(e, ir.Op):
            return Truth(FALSE, FALSE)
        if e.op == "not":
            t = self.truth(e.args[0])
            return Truth(t.never, t.always)
        if e.op in ("and", "or"):
            x, y = self.truth(e.args[0]), self.truth(e.args[1])
            if e.op == "and":
                return Truth(op("bool", "and", x.always, y.always), op("bool", "or", x.never, y.never))
            return Truth(op("bool", "or", x.always, y.always), op("bool", "and", x.never, y.never))
        if e.op in ("lt", "le", "gt", "ge", "eq", "ne") and e.args[0].ty == "i32":
            a, b = self.interval(e.args[0]), self.interval(e.args[1])
            if None in (a.lo, a.hi, b.lo, b.hi) and self.floats and any(float_bounds.in_reals(x) for x in e.args) \
                    and not any(isinstance(n, ir.Load) for n in ir.walk(e)):  # `dy * dy + dx * dx <= 20`, in reals
                return self._float_compare(ir.Op("bool", e.op, tuple(ir.Op("f32", "float", (x,)) for x in e.args)))
            t = _compare(e.op, a, b)
            # either decides: the block corners need two blocks a tile at most, intervals none
            for corners in (tile_corners.block_corners(e), tile_corners.monotone_corners(e) if self.monotone else None):
                if corners is not None and tile_corners.decides_more(corners, (t.always, t.never)):
                    t = Truth(op("bool", "or", t.always, corners[0]), op("bool", "or", t.never, corners[1]))
            return t
        if e.op in ("lt", "le", "gt", "ge", "eq", "ne") and e.args[0].ty == "f32" and self.floats:
            return self._float_compare(e)
        if e.op in ("eq", "ne") and e.args[0].ty == "bool":  # `(j <= i) != (h >= H // 2)`: equal where both hold or neither
            x, y = self.truth(e.args[0]), self.truth(e.args[1])
            both = lambda p, r: op("bool", "and", p, r)  # noqa: E731
            same = op("bool", "or", both(x.always, y.always), both(x.never, y.never))
            differ = op("bool", "or", both(x.always, y.never), both(x.never, y.always))
            return Truth(same, differ) if e.op == "eq" else Truth(differ, same)
        if e.op == "where" and e.ty == "bool":
            c, x, y = self.truth(e.args[0]), self.truth(e.args[1]), self.truth(e.args[2])
            pick = lambda a, b, both: op("bool", "or", op("bool", "and", c.always, a),
                                         op("bool", "or", op("bool", "and", c.never, b), both))
            return Truth(pick(x.always, y.always, op("bool", "and", x.always, y.always)),
                         pick(x.never, y.never, op("bool", "and", x.never, y.never)))
        return Truth(FALSE, FALSE)  # bool loads of data at q and kv with no summary: unknown

    def _float_compare(self, e: ir.Op) -> Truth:
        """A comparison of floats, decided where all four bounds are finite (float_bounds.py)."""
        bounds = float_bounds.FloatBounds(self.interval, self.truth)
        (alo, ahi), (blo, bhi) = bounds.of(e.args[0]), bounds.of(e.args[1])
        keep = lambda x: x if x is None or self._affordable(x) else None  # noqa: E731
        a, b = Interval(keep(alo), keep(ahi)), Interval(keep(blo), keep(bhi))
        t, ok = _compare(e.op, a, b), float_bounds.finite(a.lo, a.hi, b.lo, b.hi, *bounds.guards)
        return Truth(op("bool", "and", t.always, ok), op("bool", "and", t.never, ok))


BYTE_RANGE = {"u8": (0, 255), "i8": (-128, 127)}  # the range of an element read as i32


def _data_interval(e: ir.Expr) -> Interval | None:
    """Bounds of an i32 expression that reads captured tensors: itself when it depends on
    neither q nor kv, the tile summary's min / max when it depends on one of them."""
    on_q, on_kv = ir.uses(e, "q"), ir.uses(e, "kv")
    if on_q and on_kv:
        return None  # per-element; its parts may still be bounded one by one
    if not (on_q or on_kv):
        return Interval(e, e)
    axis = "q" if on_q else "kv"
    return Interval(ir.Op("i32", axis + "min", (e,)), ir.Op("i32", axis + "max", (e,)))


def _monotone_interval(e: ir.Expr) -> Interval | None:
    """Bounds of an i32 expression that reads captured tensors at neither position but varies
    along one, moving one way along it (monotone.step): its values at the block's two edges,
    exact, with no tile summary (`max(i - 511, start[b])`, a window clipped at a batch's start,
    took a summary kernel for its qmin before)."""
    on_q, on_kv = ir.uses(e, "q"), ir.uses(e, "kv")
    if on_q == on_kv or ir.loads_at(e, ("q", "kv")):
        return None
    axis, first, last = ("q", "q0", "q1") if on_q else ("kv", "k0", "k1")
    step = monotone.step(e, axis)
    if step is None or step[0] < 0 < step[1]:
        return None
    at_first, at_last = (ir.substitute(e, {axis: _v(v)}) for v in (first, last))
    return Interval(at_first, at_last) if step[0] >= 0 else Interval(at_last, at_first)


def _periodic(e: ir.Expr) -> bool:
    """Whether e is `x % c` with c >= 1 the same over the block and x moving along one position
    by steps of at most 1 (`i % max(width[0], 1)`, `(j + off[b]) % 64`): x then takes every
    value between its edges, so the remainder's bounds from x's (_parts) are exact, and data
    read once per item needs no tile summary for them."""
    if not (isinstance(e, ir.Op) and e.op == "mod") or ir.loads_at(e, ("q", "kv")):
        return False
    x, c = e.args
    on_q, on_kv = ir.uses(x, "q"), ir.uses(x, "kv")
    if on_q == on_kv or ir.uses(c, "q") or ir.uses(c, "kv") or not positive_divisor(c):
        return False
    s = monotone.step(x, "q" if on_q else "kv")
    return s is not None and -1 <= s[0] and s[1] <= 1 and (s[0] >= 0 or s[1] <= 0)


def _pick(t: Truth, x, y, join):
    if x is None or y is None:
        return None
    both = op("i32", join, x, y)
    return op("i32", "where", t.always, x, op("i32", "where", t.never, y, both))


def _compare(name: str, a: Interval, b: Interval) -> Truth:
    def rel(r, x, y):
        return FALSE if x is None or y is None else op("bool", r, x, y)
    if name in ("gt", "ge"):
        name, a, b = {"gt": "lt", "ge": "le"}[name], b, a
    if name == "lt":
        return Truth(rel("lt", a.hi, b.lo), rel("ge", a.lo, b.hi))
    if name == "le":
        return Truth(rel("le", a.hi, b.lo), rel("gt", a.lo, b.hi))
    point = op("bool", "and", op("bool", "and", rel("eq", a.lo, a.hi), rel("eq", b.lo, b.hi)),
               rel("eq", a.lo, b.lo))
    apart = op("bool", "or", rel("lt", a.hi, b.lo), rel("lt", b.hi, a.lo))
    return Truth(point, apart) if name == "eq" else Truth(apart, point)
