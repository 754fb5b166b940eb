"""Mask analysis: classify each (q-tile, kv-tile) block as empty, full or partial.

From mask(b, h, q, kv) we derive two predicates over a block q in [q0, q1], kv in [k0, k1]:
  tile_empty  true only if every element of the block is masked   -> never visited
  tile_full   true only if no element of the block is masked       -> per-element check skipped
by interval arithmetic on the mask expression. Both are IR expressions over b, h, q0, q1,
k0, k1 and the dims, so they print with the IR and compile like any other expression.
Causal, sliding windows and 2-D neighbourhoods come out exact up to the tile grid.

How the predicates bound what the mask reads, data included (tile summaries, corners, monotone
values, floats), and the budget that keeps them small: block_bounds.py.
attr mask_tiles says which case holds: interval, data-dependent, tile-summary or none.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from .. import ir
from . import sample_tiles
from .block_bounds import BYTE_RANGE, BlockBounds
from .simplify import simplify


def run(k: ir.Kernel) -> ir.Kernel:
    if k.kind != "attention":
        return k
    mask = k.func("mask")
    if mask is None:
        return k.with_attrs(mask_tiles="none")
    # Predicates already given (a tuned program's IR) are kept: the tune guard checked them.
    if k.func("tile_empty") is None or k.func("tile_full") is None:
        # KDSL_MONOTONE_CORNERS=0: no comparison decided at its corners (tile_corners.monotone_corners; A/B timing)
        monotone = os.environ.get("KDSL_MONOTONE_CORNERS", "1") != "0"
        t = BlockBounds(whole_tiles(k), k.tensors, float_masks(k), monotone=monotone).truth(mask)
        for name, derived in (("tile_empty", t.never), ("tile_full", t.always)):
            if k.func(name) is None:
                k = k.with_func(name, simplify(derived))
    if summary_slots(k):
        return k.with_attrs(mask_tiles="tile-summary")
    data = any(isinstance(n, ir.Load) for n in ir.walk(mask))
    return k.with_attrs(mask_tiles="data-dependent" if data else "interval")


WHOLE_TILES_DEFAULT = "1"  # measured on (bench/NOTES.md, fifty-eighth session); "0" to turn it off
HEADS_DEFAULT = "1"  # per-head data too (sixty-seventh session); KDSL_TILE_SUMMARY_HEADS=0 turns it off
BESIDE_LOADS_DEFAULT = "forward"  # beside a score that loads at q / kv: forwards (seventy-first session)


def whole_tiles(k: ir.Kernel) -> str:
    """Which data read at both the query and the key may be bounded over whole blocks (a 2-D
    tile summary; bool elements as 0 / 1): "" none, "shared" data shared by the heads, "heads"
    per-head data too. Not where the score loads data at the query or key (bias[b, h, i, j]):
    the summary's registers beside that load made ptxas spill 8-24 bytes (sm_90a builds, D=128)
    when the score loaded per element. Since such a tensor streams by TMA, the forward builds
    without spills with the summary and the backward with 24-112 bytes (seventieth session), so
    the forward summarises beside it and the backward (lowered with attr lowered_for="backward")
    does not: H200, B=2 H=16 4096², masks in runs 1.5-5x faster forward, random bits 0.98x; the
    backward with it ran a random mask 0.58x (seventy-first session, bench/NOTES.md).
    KDSL_SUMMARY_BESIDE_LOADS (BESIDE_LOADS_DEFAULT otherwise) = forward / 1 (both passes) / 0.
    KDSL_TILE_SUMMARY_2D=0 / 1 turns it off / on (WHOLE_TILES_DEFAULT otherwise; the A/B
    switch of bench/NOTES.md). Per-head data (keep[b, h, i, j]) is summarised too unless
    KDSL_TILE_SUMMARY_HEADS=0 (HEADS_DEFAULT): its summary reads the mask once more, at most, where
    the kernel reads it per visited tile, and a 1-byte mask's is read 16 bytes a lane and stopped
    once a block is decided (H200, B=2 H=16 4096², sixty-seventh session: masks in runs x1.20-1.33,
    a random bool mask x0.93)."""
    if os.environ.get("KDSL_TILE_SUMMARY_2D", WHOLE_TILES_DEFAULT) == "0":
        return ""
    score = k.func("score_log2") or k.func("score")
    beside = os.environ.get("KDSL_SUMMARY_BESIDE_LOADS", BESIDE_LOADS_DEFAULT)
    summarised = beside == "1" or (beside == "forward" and k.attr("lowered_for") != "backward")
    if score is not None and ir.loads_at(score, ("q", "kv")) and not summarised:
        return ""
    return "heads" if os.environ.get("KDSL_TILE_SUMMARY_HEADS", HEADS_DEFAULT) == "1" else "shared"


def float_masks(k: ir.Kernel) -> bool:
    """Whether float comparisons are bounded (passes/float_bounds.py): KDSL_MASK_FLOATS=1 (the
    default) in both passes, 0 in neither, "forward" in the forward only (A/B timing)."""
    mode = os.environ.get("KDSL_MASK_FLOATS", "1")
    return mode == "1" or (mode == "forward" and k.attr("lowered_for") != "backward")


def summary_slots(k: ir.Kernel) -> list[ir.Op]:
    """The distinct tile reductions the tile predicates read, in a fixed order: each is one
    slot of the runtime tile summary (the (qmin e) and (qmax e) of one e share a slot)."""
    slots: dict[tuple[str, ir.Expr], ir.Op] = {}
    for name in ("tile_empty", "tile_full", "tile_keys"):  # tile_keys: passes/kv_bounds.py
        e = k.func(name)
        for n in ir.walk(e) if e is not None else ():
            if isinstance(n, ir.Op) and n.op in ir.TILE_REDUCTIONS:
                slots.setdefault((ir.TILE_REDUCTIONS[n.op][0], n.args[0]), n)
    return list(slots.values())


_BYTE_KINDS = {"bool": 1, "u8": 2, "i8": 3}  # attention_summary.cuh bytes16_min_max


def byte_slot(k: ir.Kernel, e: ir.Expr) -> tuple[int, ir.Load | None]:
    """(kind, load) where a whole-block slot's expression is a 1-byte tensor's element at
    [..., q, kv] (a bool as `where(x, 1, 0)`, a u8 or i8 as it is) with neither q nor kv in the
    leading indices: the summary kernel reads its rows 16 bytes a lane, one warp a block. A u8
    the tile predicates only test against zero (`sel > 0`) is read as a bool: whether a block
    holds a zero and a nonzero byte is all they ask, and that is the cheapest test of 16 bytes.
    (0, None) else. kdsl/runtime/summary.py counts the warps by it."""
    load = e.args[0] if isinstance(e, ir.Op) and e.op == "where" and [getattr(x, "value", None) for x in e.args[1:]] \
        == [1, 0] else e
    if not (isinstance(load, ir.Load) and k.tensor(load.tensor).dtype in _BYTE_KINDS and len(load.indices) >= 2
            and load.indices[-2:] == (ir.Var("i32", "q"), ir.Var("i32", "kv"))
            and not any(ir.uses(i, v) for i in load.indices[:-2] for v in ("q", "kv"))
            and (load is e) == (k.tensor(load.tensor).dtype != "bool")):
        return 0, None
    dtype = k.tensor(load.tensor).dtype
    if dtype == "u8" and _zero_test(_uses(k, e, "tile")):
        return _BYTE_KINDS["bool"], load
    return _BYTE_KINDS[dtype], load


# the functions that may read a summary (stream_rest_full: passes/stream_mask.py)
TILE_PREDICATES = ("tile_empty", "tile_full", "tile_keys", "stream_rest_full")
# (m OP c) -> the integers between which its truth flips: it is fixed for m <= low, for m >= high
_FLIPS = {"lt": (-1, 0), "le": (0, 1), "gt": (0, 1), "ge": (-1, 0), "eq": (-1, 1), "ne": (-1, 1)}
_MIRROR = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}


def summary_saturation(k: ir.Kernel, slot: ir.Op) -> tuple[int | None, int | None]:
    """(floor, ceiling) of a slot's min / max past which no tile predicate can change, so the
    summary kernel may stop reading a block once it has met both and store them. A bool element
    read as 0 / 1 stays within (0, 1). Where the predicates only compare (tmin e) and (tmax e)
    with constants (`0 < (tmin sel)`), a min at or below the lowest constant's flip decides every
    comparison as the true min would (a u8 mask `sel > 0`: floor 0, ceiling 1, so random bytes
    stop after the first rows). The tighter of the two; None where neither holds."""
    e = slot.args[0]
    bounds = (None, None)
    if isinstance(e, ir.Op) and e.op == "where" and all(isinstance(x, ir.Const) for x in e.args[1:]):
        bounds = tuple(sorted(int(x.value) for x in e.args[1:]))
    elif isinstance(e, ir.Load) and k.tensor(e.tensor).dtype in BYTE_RANGE:
        bounds = BYTE_RANGE[k.tensor(e.tensor).dtype]
    uses = _uses(k, e, ir.TILE_REDUCTIONS[slot.op][0])
    floor = min(lo for lo, _ in uses.flips["min"]) if uses.whole["min"] and uses.flips["min"] else None
    ceiling = max(hi for _, hi in uses.flips["max"]) if uses.whole["max"] and uses.flips["max"] else None
    floor = bounds[0] if floor is None else floor if bounds[0] is None else max(floor, bounds[0])
    ceiling = bounds[1] if ceiling is None else ceiling if bounds[1] is None else min(ceiling, bounds[1])
    if uses.pairs and floor is not None and ceiling is not None and floor >= ceiling:
        # (tmin e) == (tmax e) is decided (false) only once the two differ: a higher ceiling
        # is as sound, a value above the floor then a must
        ceiling = floor + 1 if bounds[1] is None or floor + 1 <= bounds[1] else None
    return floor, ceiling


@dataclass(frozen=True)
class _SlotUses:
    """How the tile predicates use one slot's min and max: the (low, high) integers each
    comparison with a constant flips between, whether every use is such a comparison (or the
    min compared with the max: `pairs` of those)."""
    flips: dict
    whole: dict
    pairs: int


def _uses(k: ir.Kernel, e: ir.Expr, axis: str) -> _SlotUses:
    of_slot = lambda n: isinstance(n, ir.Op) and n.op in ir.TILE_REDUCTIONS and n.args[0] == e \
        and ir.TILE_REDUCTIONS[n.op][0] == axis  # noqa: E731
    flips: dict[str, list[tuple[int, int]]] = {"min": [], "max": []}
    uses, counted, pairs = {"min": 0, "max": 0}, {"min": 0, "max": 0}, 0
    for name in TILE_PREDICATES:
        f = k.func(name)
        for n in ir.walk(f) if f is not None else ():
            if of_slot(n):
                uses[ir.TILE_REDUCTIONS[n.op][1]] += 1
            if not (isinstance(n, ir.Op) and n.op in _FLIPS):
                continue
            if n.op in ("eq", "ne") and all(of_slot(a) for a in n.args) \
                    and {ir.TILE_REDUCTIONS[a.op][1] for a in n.args} == {"min", "max"}:
                pairs += 1
                counted["min"] += 1
                counted["max"] += 1
                continue
            for m, c, rel in ((n.args[0], n.args[1], n.op), (n.args[1], n.args[0], _MIRROR[n.op])):
                if of_slot(m) and isinstance(c, ir.Const) and isinstance(c.value, int) \
                        and not isinstance(c.value, bool):
                    kind = ir.TILE_REDUCTIONS[m.op][1]
                    flips[kind].append((c.value + _FLIPS[rel][0], c.value + _FLIPS[rel][1]))
                    counted[kind] += 1
    return _SlotUses(flips, {kind: counted[kind] == uses[kind] for kind in uses}, pairs)


def _zero_test(uses: _SlotUses) -> bool:
    """Whether the predicates ask a u8 slot only which of its values are 0 and which are not:
    every use a comparison with a constant flipping between 0 and 1 or outside [0, 255]."""
    lo, hi = BYTE_RANGE["u8"]
    return all(uses.whole.values()) and not uses.pairs and any(uses.flips.values()) and all(
        (a, b) == (0, 1) or b <= lo or a >= hi for fs in uses.flips.values() for a, b in fs)


def visited_tiles(k: ir.Kernel, length: int = 8192, tile: int = 128, heads: int = 4) -> float | None:
    """How many kv tiles a row tile visits (those tile_empty does not rule out), the median
    over the row tiles of a length x length problem's first `heads` heads: about W / tile + 1
    for a window of W keys, length / (2 tile) for a causal mask, every tile without a mask.
    None where the predicate reads captured data or a dim other than the lengths and heads."""
    e = k.func("tile_empty")
    if e is None:
        return float(-(-length // tile))
    q, kv = k.tensor("q").shape, k.tensor("k").shape
    dims = {d.name: n for d, n in ((q[0], 1), (q[1], heads), (kv[1], heads), (q[2], length), (kv[2], length))
            if isinstance(d, ir.Var)}
    if not sample_tiles.readable(e, {"q0", "q1", "k0", "k1", "b", "h", *dims}):
        return None
    import numpy as np
    start = np.arange(0, length, tile)
    h, q0, k0 = np.meshgrid(np.arange(heads), start, start, indexing="ij")
    env = {**dims, "b": 0, "h": h, "q0": q0, "q1": np.minimum(q0 + tile, length) - 1, "k0": k0,
           "k1": np.minimum(k0 + tile, length) - 1}
    empty = sample_tiles.evaluate(e, env, h.shape)
    return None if empty is None else float(np.median((~empty).sum(axis=2)))


