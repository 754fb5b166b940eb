"""runtime/backward_work.py and geometry.backward_query_splits_by_work: the query steps each
backward CTA walks, counted on the host from the mask's tile classes, and the query splits a
longest CTA calls for (a trial, KDSL_BWD_SPLIT_BY_WORK=1)."""
import numpy as np
import pytest
from hypothesis import given, settings

import kdsl
from kdsl import reference
from kdsl.runtime import attention_backward, backward_work, geometry

from exprgen import bool_expr, program

MASKS = {
    "sinks": "j <= i and (i - j < 96 or j < 4)",
    "causal": "j <= i",
    "phase": "j <= i and (j // 16) % Hkv == h // (H // Hkv)",
    "per_batch": "j <= i + 40 * b and i - j < 80",
}


def _kernel(mask, captures=""):
    src = f"""attention t {{
        q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]
        {captures}
        mask(b, h, i, j) = {mask}
    }}"""
    return kdsl.compile(src, "t.kd", interpret=True).t._args


def _kept_tiles(k, B, H, Hkv, M, N, rows, keys):
    """[b, h, key block]: query tiles holding a kept element, the mask evaluated per element."""
    q = np.zeros((B, H, M, 16), np.float32)
    kv = np.zeros((B, Hkv, N, 16), np.float32)
    kept = reference.mask_of(k.ir, q, kv, kv).astype(np.int64)  # [B, H, M, N]
    tiles = np.add.reduceat(np.add.reduceat(kept, np.arange(0, M, rows), axis=2), np.arange(0, N, keys), axis=3)
    return (tiles > 0).sum(axis=2)


@pytest.mark.parametrize("name", sorted(MASKS))
def test_the_counts_are_the_query_tiles_the_mask_keeps_at_each_key_block(name):
    """Every mask here has exact tile classes: each count is the number of query tiles with a kept
    element (ragged sizes: the last tiles short)."""
    k = _kernel(MASKS[name])
    B, H, Hkv, M, N, rows, keys = 2, 4, 2, 330, 290, 64, 128
    live = backward_work.live_steps(k.ir, B, H, Hkv, M, N, rows, keys)
    want = _kept_tiles(k, B, H, Hkv, M, N, rows, keys)
    assert np.array_equal(np.broadcast_to(live, want.shape), want)
    assert live.shape[0] == (2 if name == "per_batch" else 1)  # b counted only where the mask reads it


@settings(max_examples=30, deadline=None)
@given(bool_expr(depth=3))
def test_a_generated_mask_s_counts_never_miss_a_kept_tile(mask):
    """Counts come from tile classes, which are sound, not always exact: never below the query
    tiles the mask keeps (a miss would be a CTA the split model thinks shorter than it is)."""
    k = kdsl.compile(program(None, mask), "gen.kd", interpret=True).gen._args
    B, H, Hkv, M, N = 2, 4, 2, 200, 330
    live = backward_work.live_steps(k.ir, B, H, Hkv, M, N, 64, 128)
    if live is not None:
        assert (np.broadcast_to(live, (B, H, 3)) >= _kept_tiles(k, B, H, Hkv, M, N, 64, 128)).all(), mask


def test_no_count_where_the_mask_reads_data_and_every_tile_without_a_mask():
    k = _kernel("j <= i and doc[b, i] == doc[b, j]", "doc: i32[B, M]")
    assert backward_work.live_steps(k.ir, 1, 2, 2, 300, 300, 64, 128) is None
    src = "attention t { q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D] }"
    plain = kdsl.compile(src, "t.kd", interpret=True).t._args
    assert backward_work.live_steps(plain.ir, 1, 2, 2, 300, 300, 64, 128).tolist() == [[[5, 5, 5]] * 2]


def test_a_longest_cta_past_the_mean_is_split_and_a_balanced_launch_is_not():
    """Sinks beside a window of 512 at long context and few heads: key block 0 walks every query
    step, the rest ~10; causal at the same shape and sinks at many heads are balanced."""
    sinks = _kernel("j <= i and (i - j < 512 or j < 4)")
    causal = _kernel("j <= i")

    def choice(k, B, H, M):
        live = backward_work.live_steps(k.ir, B, H, H, M, M, 64, 128)
        return geometry.backward_query_splits_by_work(M, live, B, H, 1, 132)

    assert choice(sinks, 1, 8, 16384) > 1
    assert choice(sinks, 1, 4, 32768) == 4  # at most 4 ranges
    assert choice(sinks, 2, 16, 4096) == 1
    assert choice(causal, 1, 8, 16384) == 1
    live = np.full((1, 2, 4), 40)
    assert geometry.backward_query_splits_by_work(256, live, 1, 2, 1, 132) == 2  # a range per 128 rows at most


def test_splits_take_the_count_only_when_asked(monkeypatch):
    """KDSL_BWD_SPLIT_BY_WORK=1 (off by default, untimed): a split query range needs one query
    head a CTA, so the head splits go to H / Hkv; KDSL_BWD_QUERY_SPLITS still forces its number."""
    k = _kernel("j <= i and (i - j < 512 or j < 4)")
    monkeypatch.setattr(attention_backward, "_sm_count", lambda device: 132)  # an H100's, with no GPU here
    monkeypatch.setattr(k, "_arch", lambda: "sm_90a")
    monkeypatch.delenv("KDSL_BWD_SPLIT_BY_WORK", raising=False)
    monkeypatch.delenv("KDSL_BWD_QUERY_SPLITS", raising=False)
    assert attention_backward.splits(k, 1, 8, 4, 16384, 16384, 128, 128, 0) == (1, 1)
    monkeypatch.setenv("KDSL_BWD_SPLIT_BY_WORK", "1")
    head_splits, query_splits = attention_backward.splits(k, 1, 8, 4, 16384, 16384, 128, 128, 0)
    assert query_splits > 1 and head_splits == 2
    monkeypatch.setenv("KDSL_BWD_QUERY_SPLITS", "1")
    assert attention_backward.splits(k, 1, 8, 4, 16384, 16384, 128, 128, 0)[1] == 1
