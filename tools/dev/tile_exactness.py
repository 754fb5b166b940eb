#!/usr/bin/env python3
"""How exactly the forward's tile classes see a data-free mask, with no GPU: on a sample problem
(one batch, --heads heads, --rows queries and --keys keys, every other dim = rows) the mask is
evaluated per element and each tile of the Hopper kernel's (tile_m x tile_n) called truly empty,
full or partial; the lowered kernel's tile_empty / tile_full are evaluated on the same tiles. A
row a kernel: the true counts, how many of each the predicates call, and how many partial tiles
run by key bounds (a key interval per row, no element of the mask: attr kv_bounds "interval", or
its tile predicate tile_keys where the interval holds on some tiles only). A tile
truly empty or full that the predicates leave partial is a gap: its elements all evaluate the mask
(and a truly empty one is computed at all). Masks that read captured data are skipped.

    python3 tools/dev/tile_exactness.py tools/dev/heldout3*.kd [--rows 2048 --keys 2048 --heads 4] [--only a,b]
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kdsl import ir  # noqa: E402
from kdsl.grammar import parse  # noqa: E402
from kdsl.passes import pipeline, sample_tiles  # noqa: E402
from kdsl.passes.target import get_target  # noqa: E402
from kdsl.semantics import eval_numpy  # noqa: E402


def _env(k: ir.Kernel, rows: int, keys: int, heads: int) -> dict:
    """q's and k's lengths rows and keys, the heads' heads, the batch 1, every other dim rows."""
    q, kv = k.tensor("q").shape, k.tensor("k").shape
    env = {n.name: rows for _, e in k.funcs for n in ir.walk(e) if isinstance(n, ir.Var)}
    for d, n in ((q[0], 1), (q[1], heads), (kv[1], heads), (q[2], rows), (kv[2], keys)):
        if isinstance(d, ir.Var):
            env[d.name] = n
    return env


def truth(k: ir.Kernel, rows: int, keys: int, heads: int, bm: int, bn: int) -> np.ndarray:
    """(heads, row tiles, key tiles) of 0 empty, 1 partial, 2 full, from the mask per element."""
    mask = k.func("mask")
    tiles = np.zeros((heads, -(-rows // bm), -(-keys // bn)), dtype=np.int8)
    pos_q, pos_k = np.arange(rows)[:, None], np.arange(keys)[None, :]
    for h in range(heads):
        with np.errstate(all="ignore"):
            m = np.broadcast_to(eval_numpy(mask, {**_env(k, rows, keys, heads), "b": 0, "h": h, "q": pos_q, "kv": pos_k},
                                           {}), (rows, keys)).astype(bool)
        for r in range(tiles.shape[1]):
            for c in range(tiles.shape[2]):
                t = m[r * bm:(r + 1) * bm, c * bn:(c + 1) * bn]
                tiles[h, r, c] = 2 if t.all() else 1 if t.any() else 0
    return tiles


def called(k: ir.Kernel, name: str, rows: int, keys: int, heads: int, bm: int, bn: int) -> np.ndarray | None:
    """A tile predicate on every tile of the sample problem (False where the kernel has none)."""
    e = k.func(name)
    shape = (heads, -(-rows // bm), -(-keys // bn))
    if e is None:
        return np.zeros(shape, dtype=bool)
    h, q0, k0 = np.meshgrid(np.arange(heads), np.arange(0, rows, bm), np.arange(0, keys, bn), indexing="ij")
    env = {**_env(k, rows, keys, heads), "b": 0, "h": h, "q0": q0, "q1": np.minimum(q0 + bm, rows) - 1, "k0": k0,
           "k1": np.minimum(k0 + bn, keys) - 1}
    return sample_tiles.evaluate(e, env, shape)


@dataclass(frozen=True)
class Exactness:
    """One kernel's tiles on the sample problem: truly empty / full / partial, the empty and full
    ones its predicates call so, the partial ones of the key-bounds class, and whether a predicate
    called any tile wrongly."""
    tile: str
    empty: int
    full: int
    partial: int
    called_empty: int
    called_full: int
    keyed: int
    unsound: bool

    @property
    def exact(self) -> bool:
        return not self.unsound and self.called_empty == self.empty and self.called_full == self.full

    def __str__(self) -> str:
        if self.unsound:
            return "UNSOUND: a predicate calls a tile wrongly"
        return (f"{self.tile}: empty {self.called_empty}/{self.empty}, full {self.called_full}/{self.full}, "
                f"partial {self.partial} ({self.keyed} by key bounds){'' if self.exact else '  <- gap'}")


def exactness(k: ir.Kernel, rows: int = 2048, keys: int = 2048, heads: int = 4) -> Exactness | str:
    """k's Exactness, or why there is none (no mask, a mask that reads data, ...)."""
    mask = k.func("mask")
    if mask is None:
        return "no mask"
    if any(isinstance(n, ir.Load) for n in ir.walk(mask)):
        return "reads data (skipped)"
    low = pipeline.lower(k, get_target("sm_90a"), 128)
    bm, bn = low.attr("tile_m"), low.attr("tile_n")
    t = truth(low, rows, keys, heads, bm, bn)
    empty, full, keyed = (called(low, n, rows, keys, heads, bm, bn) for n in ("tile_empty", "tile_full", "tile_keys"))
    if low.attr("kv_bounds") == "interval":  # every partial tile keeps one key interval a row (kv_bounds.py)
        keyed = np.ones_like(t, dtype=bool)
    if empty is None or full is None:
        return "tile predicates read what the sample cannot give (skipped)"
    return Exactness(f"{bm}x{bn}", *(int((t == c).sum()) for c in (0, 2, 1)),
                     int((empty & (t == 0)).sum()), int((full & (t == 2)).sum()),
                     int((keyed & (t == 1) & ~empty & ~full).sum()) if keyed is not None else 0,
                     bool((empty & (t != 0)).any() or (full & (t != 2)).any()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--rows", type=int, default=2048, help="queries (q's length)")
    ap.add_argument("--keys", type=int, default=2048, help="keys (k's length)")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--only", help="comma-separated kernel names")
    args = ap.parse_args()
    for f in args.files:
        for k in pipeline.check(parse(Path(f).read_text(), f)):
            if k.kind == "attention" and (not args.only or k.name in args.only.split(",")):
                print(f"{Path(f).stem}:{k.name}: {exactness(k, args.rows, args.keys, args.heads)}", flush=True)


if __name__ == "__main__":
    main()
