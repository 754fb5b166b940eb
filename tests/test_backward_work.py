"""runtime/backward_work.py and runtime/backward_schedule.py: the query steps each backward CTA
walks, counted on the host from the mask's tile classes, the launch's schedule simulated from
them, and the splits it favours."""
import numpy as np
import pytest
from hypothesis import given, settings

import kdsl
from kdsl import reference
from kdsl.runtime import attention_backward, backward_schedule, backward_work

from exprgen import bool_expr, program

MASKS = {
    "sinks": "j <= i and (i - j < 96 or j < 4)",
    "causal": "j <= i",
    "phase": "j <= i and (j // 16) % Hkv == h // (H // Hkv)",
    "per_batch": "j <= i + 40 * b and i - j < 80",
}


def _steps(*args):
    """[b, h, key block]: the query tiles live_tiles leaves at each query head and key block."""
    live = backward_work.live_tiles(*args)
    return None if live is None else live.sum(axis=2)


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
    live = _steps(k.ir, B, H, Hkv, M, N, rows, keys)
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
    live = _steps(k.ir, B, H, Hkv, M, N, 64, 128)
    if live is not None:
        assert (np.broadcast_to(live, (B, H, 3)) >= _kept_tiles(k, B, H, Hkv, M, N, 64, 128)).all(), mask


def test_no_count_where_the_mask_reads_data_and_every_tile_without_a_mask():
    k = _kernel("j <= i and doc[b, i] == doc[b, j]", "doc: i32[B, M]")
    assert _steps(k.ir, 1, 2, 2, 300, 300, 64, 128) is None
    src = "attention t { q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D] }"
    plain = kdsl.compile(src, "t.kd", interpret=True).t._args
    assert _steps(plain.ir, 1, 2, 2, 300, 300, 64, 128).tolist() == [[[5, 5, 5]] * 2]


def _rules(B, H, Hkv, M, N, keys=128, sms=132):
    """The counting rules' (head_splits, query_splits) (geometry), the simulation's default."""
    from kdsl.runtime import geometry
    kb = -(-N // keys)
    hs = geometry.backward_head_splits(H // Hkv, kb * Hkv * B, sms)
    return hs, geometry.backward_query_splits(M, kb * Hkv * B * hs, sms)


def _choice(k, B, H, Hkv, M, N, D=128):
    return backward_schedule.best_splits(k.ir, B, H, Hkv, M, N, D, D, 128, 132, 50 << 20, _rules(B, H, Hkv, M, N))


def test_the_simulation_splits_where_its_launch_idles_and_keeps_the_rules_elsewhere():
    """Each split here ran faster on an H200 (backward alone against KDSL_BWD_SCHEDULE=0, eighty-first
    session): sinks beside a window at long context and few heads (the longest CTA walks every
    query step) x1.45; a grid of 192 CTAs on 132 SMs (half its k/v heads bidirectional) x1.47; key
    blocks owned by one k/v group in turn x1.34. Causal, plain and a window at the standard shapes
    keep the rules' choice."""
    sinks = _kernel("j <= i and (i - j < 512 or j < 4)")
    parity = _kernel("(h // (H // Hkv)) % 2 == 0 or j <= i")
    phase = _kernel("j <= i and (j // 64) % Hkv == h // (H // Hkv)")
    causal = _kernel("j <= i")
    window = _kernel("j <= i and i - j < 1024")
    assert _choice(sinks, 1, 8, 8, 16384, 16384)[1] > 1
    assert _choice(parity, 2, 12, 4, 3000, 3000)[0] == 3  # the pair's three query heads a CTA each
    assert _choice(phase, 2, 16, 4, 4096, 4096) != (1, 1)
    for k in (causal, window, sinks):
        for D in (64, 128, 256):
            assert _choice(k, 2, 16, 16, 4096, 4096, D) == (1, 1), (k.ir.name, D)
    assert _choice(causal, 1, 32, 1, 4096, 4096) == _rules(1, 32, 1, 4096, 4096)  # MQA: the rules' head split


def test_the_cta_steps_follow_the_kernels_block_order():
    """cta_steps against a direct transcription of attention_common.cuh backward_block and
    backward_query_tiles, CTA by CTA, on a random live-tile array (groups with a remainder)."""
    rng = np.random.default_rng(5)
    B, H, Hkv, tiles, kbs = 3, 8, 2, 7, 5
    live = rng.random((1, H, tiles, kbs)) < 0.6
    for hs, qs, group in ((1, 1, 2), (2, 1, 4), (4, 3, 5), (4, 2, 1)):
        got = backward_schedule.cta_steps(live, B, Hkv, hs, qs, group)
        heads, span = B * Hkv * hs * qs, group * kbs
        last = max(1, heads // group) - 1
        want = []
        for w in range(heads * kbs):
            g = min(w // span, last)
            r = w - g * span
            size = heads - g * group if g == last else group
            kb, bh = r // size, g * group + r % size
            pair, split = divmod(bh, hs * qs)
            rng_, qsplit = divmod(split, qs)
            b, hkv = divmod(pair, Hkv)
            per = H // Hkv // hs
            h0 = hkv * (H // Hkv) + rng_ * per
            per_t = -(-tiles // qs)
            t0, t1 = min(tiles, qsplit * per_t), min(tiles, qsplit * per_t + per_t)
            want.append(int(live[0, h0:h0 + per, t0:t1, kb].sum()))
        assert got.tolist() == want, (hs, qs, group)


def test_the_makespan_is_list_scheduling():
    assert backward_schedule.makespan([4, 4, 4], 2) == 8  # a third CTA of equal length: a second wave
    assert backward_schedule.makespan([6, 1, 1, 1, 1, 1], 2) == 6  # short ones fill beside a long one
    assert backward_schedule.makespan([1, 1, 6], 2) == 7  # a long one last sets the end


def test_splits_take_the_simulation_unless_switched_off_or_forced(monkeypatch):
    """KDSL_BWD_SCHEDULE=0 keeps the counting rules; a split query range needs one query head a CTA,
    so the head splits go to H / Hkv; KDSL_BWD_QUERY_SPLITS still forces its number."""
    k = _kernel("j <= i and (i - j < 512 or j < 4)")
    monkeypatch.setattr(attention_backward, "_sm_count", lambda device: 132)  # an H100's, with no GPU here
    monkeypatch.setattr(attention_backward, "_l2_bytes", lambda device: 50 << 20)
    monkeypatch.setattr(k, "_arch", lambda: "sm_90a")
    for name in ("KDSL_BWD_SCHEDULE", "KDSL_BWD_QUERY_SPLITS", "KDSL_BWD_HEAD_SPLITS"):
        monkeypatch.delenv(name, raising=False)
    head_splits, query_splits = attention_backward.splits(k, 1, 8, 4, 16384, 16384, 128, 128, 0)
    assert query_splits > 1 and head_splits == 2
    monkeypatch.setenv("KDSL_BWD_SCHEDULE", "0")
    assert attention_backward.splits(k, 1, 8, 4, 16384, 16384, 128, 128, 0) == (1, 1)
    monkeypatch.delenv("KDSL_BWD_SCHEDULE")
    monkeypatch.setenv("KDSL_BWD_QUERY_SPLITS", "1")
    assert attention_backward.splits(k, 1, 8, 4, 16384, 16384, 128, 128, 0)[1] == 1
