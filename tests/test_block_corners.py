"""passes/tile_corners.py block_corners: a comparison that reads the positions only through
their blocks (`i // 64`, `j // 64`) and takes a remainder of them, where intervals lose the order
(BigBird's hashed random blocks), is decided per tile at each combination of the blocks the tile
holds: sound on any block, and exact on the tile grid where a tile holds two blocks or fewer."""
import random

import pytest
import torch
from hypothesis import given, settings, strategies as st

from kdsl.semantics import eval_scalar, eval_torch

from conftest import lowered
from exprgen import program
from test_passes import _check_tiles

BIGBIRD = "abs(i // 64 - j // 64) <= 1 or j < 64 or ((i // 64) * 7 + (j // 64) * 13 + h) % 5 == 0"


def _tile_counts(k, n=2048, t=128, heads=3):
    """(tiles called empty, tiles with no kept element, tiles called full, tiles with no masked one)."""
    counts = [0, 0, 0, 0]
    for h in range(heads):
        env = {"b": 0, "h": h, "B": 1, "H": heads, "Hkv": heads, "M": n, "N": n, "D": 128}
        keep = eval_torch(k.func("mask"), {**env, "q": torch.arange(n).view(n, 1), "kv": torch.arange(n).view(1, n)}, {})
        blocks = keep.view(n // t, t, n // t, t).permute(0, 2, 1, 3).reshape(n // t, n // t, t * t)
        for i in range(n // t):
            for j in range(n // t):
                tile = {**env, "q0": i * t, "q1": i * t + t - 1, "k0": j * t, "k1": j * t + t - 1}
                empty, full = eval_scalar(k.func("tile_empty"), tile), eval_scalar(k.func("tile_full"), tile)
                really_empty, really_full = not bool(blocks[i, j].any()), bool(blocks[i, j].all())
                assert really_empty or not empty and (really_full or not full), (h, i, j)
                counts = [c + x for c, x in zip(counts, (empty, really_empty, full, really_full))]
    return counts


def test_hashed_blocks_are_skipped_exactly():
    k = lowered(program(None, BIGBIRD), 128)
    empty, really_empty, full, really_full = _tile_counts(k)
    assert empty == really_empty > 0  # every empty tile skipped (none was: the remainder spans [0, 4])
    assert full > 0


@pytest.mark.parametrize("mask", [
    "((i // 64) + (j // 64)) % 3 != 0",  # no tile is empty: none called so
    "((i // 128) * 5 + (j // 64)) % 4 == h % 4",
    "(i // 256 - j // 128) % 3 == 0 and j <= i",
])
def test_remainders_of_blocks_skip_every_empty_tile(mask):
    empty, really_empty, _, _ = _tile_counts(lowered(program(None, mask), 128))
    assert empty == really_empty


@settings(max_examples=100, deadline=None)
@given(st.sampled_from([2, 16, 32, 64, 128, 256]), st.sampled_from([2, 32, 64, 100, 128]), st.integers(1, 9),
       st.integers(1, 9), st.integers(2, 7), st.sampled_from(["==", "!=", "<", ">="]), st.integers(0, 3),
       st.integers(0, 2**32 - 1))
def test_remainders_of_blocks_classify_soundly(a, c, p, r, m, cmp, rhs, seed):
    """On blocks of any size (spanning more blocks than two too) no tile is called empty or full
    wrongly."""
    k = lowered(program(None, f"((i // {a}) * {p} + (j // {c}) * {r} + h) % {m} {cmp} {rhs}"), 64)
    _check_tiles(k, {"B": 2, "H": 3, "Hkv": 3, "M": 700, "N": 650, "D": 64}, random.Random(seed), trials=30)
