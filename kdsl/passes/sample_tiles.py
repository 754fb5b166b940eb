"""Tile predicates evaluated on a sample problem's grid of tiles (numpy, on the host).

Three choices look at a sample problem instead of proving anything, because getting them wrong
costs speed, never correctness: how many kv tiles a row tile visits (mask_analysis.visited_tiles,
for the tiling pass), whether a predicate's part decides some tile the rest leaves open
(mask_analysis' block corners), and whether a key-bounds candidate holds on no partial tile
(kv_bounds). Each builds its own problem (its sizes say why); this module is what they share:
which predicates a problem can evaluate, and evaluating one on every tile of it.
"""
from __future__ import annotations

import numpy as np

from .. import ir
from ..semantics import eval_numpy


def readable(e: ir.Expr, names) -> bool:
    """Whether e reads only the variables in `names`: no captured data, no tile summary."""
    return not any(isinstance(n, ir.Load) or (isinstance(n, ir.Op) and n.op in ir.TILE_REDUCTIONS)
                   or (isinstance(n, ir.Var) and n.name not in names)
                   for n in ir.walk_distinct(e))  # the tile classes share parts: each once


def evaluate(e: ir.Expr, env: dict, shape: tuple[int, ...]) -> np.ndarray | None:
    """e on every tile of the problem env describes (variables to arrays broadcast to shape), as
    bools; None where it cannot be evaluated there (a variable env lacks, an integer overflow)."""
    try:
        with np.errstate(all="ignore"):  # a predicate dividing by h counts h = 0 (its 0 is the kernel's)
            return np.broadcast_to(eval_numpy(e, env, {}), shape).astype(bool)
    except (ArithmeticError, ValueError, KeyError):
        return None
