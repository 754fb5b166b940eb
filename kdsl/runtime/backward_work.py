"""How many query steps each backward CTA walks, counted on the host from the mask's tile classes,
for the choice of splits (attention_backward.splits, backward_schedule).

A mask that keeps a few key blocks for every query (attention sinks, a global prefix, global
tokens) beside a window gives those blocks' CTAs every query step, while the rest walk a few;
at long context with few heads the longest CTA then sets the backward's time. A host model of
sinks beside a window of 512 at B=1 H=8 16384² had 37 % of the SMs' time busy unsplit and 99 %
with the query tiles in 4 ranges (bench/NOTES.md, seventy-eighth session; untimed).

Counted only for masks over positions, heads and the sizes of q and k (no captured data, which
the tile summary classifies on the GPU, per call): the empty-tile predicate of mask analysis,
evaluated on the backward's grid of tiles with numpy, once per kernel and shape.
"""
from __future__ import annotations

import functools

import numpy as np

from .. import ir
from ..passes import mask_analysis, sample_tiles

# The most tiles (batches x heads x query tiles x key blocks) counted: past it, None. So many
# heads and tiles fill the SMs many times over, which a longest CTA cannot outlast.
MAX_TILES = 1 << 22


@functools.lru_cache(maxsize=256)
def live_tiles(k: ir.Kernel, B: int, H: int, Hkv: int, M: int, N: int, rows: int, keys: int) -> np.ndarray | None:
    """[b, h, query tile, key block]: whether the backward walks the tile of `rows` queries and
    `keys` keys (those tile_empty does not rule out) at query head h; one b where the mask does
    not read b. None where the predicate reads data or a dim other than q's and k's, or the grid
    is larger than MAX_TILES."""
    q_tiles, key_blocks = -(-M // rows), -(-N // keys)
    e = _tile_empty(k)
    if e is None:  # no mask: every tile
        return np.ones((1, H, q_tiles, key_blocks), dtype=bool)
    q, kv = k.tensor("q").shape, k.tensor("k").shape
    dims = {d.name: n for d, n in ((q[0], B), (q[1], H), (kv[1], Hkv), (q[2], M), (kv[2], N))
            if isinstance(d, ir.Var)}
    nb = B if ir.uses(e, "b") else 1
    if not sample_tiles.readable(e, {"q0", "q1", "k0", "k1", "b", "h", *dims}) \
            or nb * H * q_tiles * key_blocks > MAX_TILES:
        return None
    b, h, q0, k0 = np.meshgrid(np.arange(nb), np.arange(H), np.arange(q_tiles) * rows, np.arange(key_blocks) * keys,
                               indexing="ij")
    env = {**dims, "b": b, "h": h, "q0": q0, "q1": np.minimum(q0 + rows, M) - 1, "k0": k0,
           "k1": np.minimum(k0 + keys, N) - 1}
    empty = sample_tiles.evaluate(e, env, b.shape)
    return None if empty is None else ~empty


@functools.lru_cache(maxsize=64)
def _tile_empty(k: ir.Kernel) -> ir.Expr | None:
    return mask_analysis.run(k).func("tile_empty") if k.func("mask") is not None else None
