"""Comparisons a tile decides at its corners, where interval arithmetic (mask_analysis.py) loses
what the comparison says: BigBird's hashed blocks `((i // 64) * 7 + (j // 64) * 13 + h) % 5 ==
0`, read through the positions' blocks alone (block_corners), and an order comparison that reads
a position twice but moves one way along each, `i - j <= 64 + i // 4` (monotone_corners). Each
gives a tile's (always, never) predicates over q0, q1, k0, k1 (block_bounds.Truth's fields),
and mask_analysis adds them where decides_more says they decide some tile of a sample problem
that intervals leave undecided: the corners' code costs registers, so only then.
"""
from __future__ import annotations

import functools
import itertools

from .. import ir
from . import monotone, sample_tiles
from .simplify import TRUE, const, op, simplify

TILE_ENDS = {"q": ("q0", "q1"), "kv": ("k0", "k1")}  # a position's first and last value on a tile
# The largest comparison (nodes written out) tried at its corners: whether they decide more is
# judged on a sample problem, some 20 ms for a comparison of ten nested quotients against ~1 ms
# for a short one, and the masks it serves are short.
MONOTONE_NODES = 40


def ever_narrow(narrow: ir.Expr, length: int = 8192, tile: int = 64) -> bool:
    """Whether a condition of the tile (a load's indices or the positions' blocks take at most two
    values on it) holds on some 64 x 64 tile of a length x length problem (each dim = length; the
    smallest tile a kernel takes): not for `keep[b, h, i, j]`, whose corners would be read on
    every tile for nothing. A condition that reads data, or that the probe cannot evaluate,
    counts as narrow."""
    if any(isinstance(n, ir.Load) or (isinstance(n, ir.Op) and n.op in ir.TILE_REDUCTIONS) for n in ir.walk(narrow)):
        return True
    values = on_sample_tiles((narrow,), length, tile, heads=1)
    return values is None or bool(values[0].any())


def block_corners(e: ir.Expr) -> tuple[ir.Expr, ir.Expr] | None:
    """A comparison that reads the positions only through their blocks `q // c`, `kv // c` (a
    constant c > 1; two such quotients at most) and takes a remainder of them, where intervals
    lose the order: BigBird's hashed blocks `((i // 64) * 7 + (j // 64) * 13 + h) % 5 == 0`.
    Where each quotient takes at most two values on the block (a 128-row tile holds two blocks
    of 64), the comparison at every combination of them decides it exactly; None where it does
    not apply or is never narrow."""
    terms = []
    for n in ir.walk_distinct(e):
        if isinstance(n, ir.Load):
            return None
        if isinstance(n, ir.Op) and n.op == "floordiv" and isinstance(n.args[0], ir.Var) \
                and n.args[0].name in ("q", "kv") and isinstance(n.args[1], ir.Const) and n.args[1].value > 1 \
                and n not in terms:
            terms.append(n)
    if not 0 < len(terms) <= 2:
        return None
    names = [f"<block{i}>" for i in range(len(terms))]  # no program can name a dim so
    rest = replace_nodes(e, {t: ir.Var("i32", n) for t, n in zip(terms, names)})
    if ir.uses(rest, "q") or ir.uses(rest, "kv") or not any(
            isinstance(n, ir.Op) and n.op == "mod" and any(ir.uses(n, x) for x in names) for n in ir.walk(rest)):
        return None
    narrow, choices = TRUE, []
    for t in terms:
        lo, hi = (op("i32", "floordiv", _v(end), t.args[1]) for end in TILE_ENDS[t.args[0].name])
        narrow = op("bool", "and", narrow, op("bool", "le", op("i32", "sub", hi, lo), const("i32", 1)))
        choices.append((lo, hi))
    if not ever_narrow(narrow):
        return None
    values = [simplify(ir.substitute(rest, dict(zip(names, combo)))) for combo in itertools.product(*choices)]
    return at_every(values, narrow)


def monotone_corners(e: ir.Op) -> tuple[ir.Expr, ir.Expr] | None:
    """An order comparison of integers that reads a position more than once (`i - j <= 64 + i //
    4`), where intervals take each reading as free: if its sides' difference moves one way along
    each position it reads (monotone.py), it takes its extremes over a tile at the tile's corners,
    and the comparison at the corners decides the tile exactly. None where that does not hold."""
    nodes = list(itertools.islice(ir.walk(e), MONOTONE_NODES + 1))
    if e.op not in ("lt", "le", "gt", "ge") or len(nodes) > MONOTONE_NODES \
            or any(isinstance(n, ir.Load) for n in nodes):
        return None
    reads = [n.name for n in nodes if isinstance(n, ir.Var) and n.name in ("q", "kv")]
    if len(reads) == len(set(reads)):
        return None  # each position read once: the intervals are exact already
    diff = ir.Op("i32", "sub", e.args)
    used = sorted(set(reads))
    if not all(monotone.one_way(diff, v) for v in used):
        return None
    values = [simplify(ir.substitute(e, {v: _v(end) for v, end in zip(used, combo)}))
              for combo in itertools.product(*(TILE_ENDS[v] for v in used))]
    return at_every(values, TRUE)


def at_every(values: list[ir.Expr], given: ir.Expr) -> tuple[ir.Expr, ir.Expr]:
    """A comparison evaluated at every corner a tile can take (values): it holds on the tile where
    it holds at each, and never where it fails at each, both only where `given` holds."""
    every = lambda xs: functools.reduce(lambda x, y: op("bool", "and", x, y), xs, given)  # noqa: E731
    return every(values), every(op("bool", "not", v) for v in values)


def decides_more(x: tuple[ir.Expr, ir.Expr], y: tuple[ir.Expr, ir.Expr], length: int = 8192, tile: int = 128,
                 heads: int = 16) -> bool:
    """Whether x, (always, never), decides some 128 x 128 tile of a length x length problem (its
    first `heads` heads; every other dim = length) that y leaves undecided: the block or monotone
    corners' code is worth its registers only then (a remainder of blocks of 32, four a tile, or
    `(i // 64 - j // 64) % 2 == 0`, whose 128-wide tiles hold both parities, would only cost
    them). A predicate the probe cannot evaluate counts as deciding."""
    values = on_sample_tiles((*x, *y), length, tile, heads)
    if values is None:
        return True
    xa, xn, ya, yn = values
    return bool((xa & ~ya).any() or (xn & ~yn).any())


def on_sample_tiles(exprs, length: int, tile: int, heads: int):
    """Tile predicates of positions, b, h and the dims evaluated on every tile x tile block of a
    length x length problem at batch 0 and heads 0 .. heads - 1 (every dim = length), one array
    (heads, tiles, tiles) each; None where they cannot be evaluated there."""
    import numpy as np
    start = np.arange(0, length, tile)
    h, q0, k0 = np.meshgrid(np.arange(heads), start, start, indexing="ij")
    env = {n.name: length for e in exprs for n in ir.walk(e) if isinstance(n, ir.Var)}
    env.update(b=0, h=h, q0=q0, q1=q0 + tile - 1, k0=k0, k1=k0 + tile - 1)
    values = [sample_tiles.evaluate(e, env, h.shape) for e in exprs]
    return None if any(v is None for v in values) else values


def replace_nodes(e: ir.Expr, mapping: dict) -> ir.Expr:
    if e in mapping:
        return mapping[e]
    if isinstance(e, ir.Op):
        return ir.Op(e.ty, e.op, tuple(replace_nodes(a, mapping) for a in e.args))
    return e


def _v(name):
    return ir.Var("i32", name)
