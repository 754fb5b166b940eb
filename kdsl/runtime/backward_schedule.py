"""Which head and query splits the backward takes, by simulating its launch on the host.

The backward launches a CTA per (b, k/v head) pair, range of the pair's query heads, range of
their query tiles and key block (attention_common.cuh backward_block), one CTA an SM at a time,
each as long as the query steps it walks. A grid a little past a multiple of the SMs leaves most
of them idle in its last wave: B=2 H=12 Hkv=4 3000² at head dim 128, a mask bidirectional on
half the k/v heads and causal on the rest, is 192 CTAs on 132 SMs, and its backward ran x1.42
faster with the pair's query heads split (576 CTAs) and x1.54 with their query tiles split too
(1152), against Flex's 0.88 of kdsl's fwd+bwd time (H200, kv_group_parity, bench/NOTES.md,
eighty-first session). The rules that chose the splits only counted CTAs against SMs
(geometry.backward_head_splits, backward_query_splits); the mask's work per CTA and the waves
are what decide.

A candidate's time, in query steps: the CTAs in blockIdx order, each to the SM that frees first
(list scheduling, as the hardware dispatches them), each CTA_OVERHEAD_STEPS (K and V in, dK and
dV out) beyond its steps; with splits, plus the partial sums' traffic (each split's fp32 dK and
dV written, then read back and summed) at HBM_BYTES_PER_S, in the time of a step. Counted only
where the mask's tiles are known on the host (backward_work.live_tiles: no captured data).
"""
from __future__ import annotations

import heapq

import numpy as np

from ..passes.tiling import BACKWARD_TILE
from . import geometry
from .backward_work import live_tiles

CTA_OVERHEAD_STEPS = 0.5
# A step (64 query rows by a CTA's keys: five GEMMs, 2 * 64 * keys * (3 D + 2 Dv) FLOPs) on one
# SM at SM_FLOPS, and the partial sums at HBM_BYTES_PER_S: a model's numbers (an H100's 132 SMs
# reach ~400 of its 989 dense TFLOPS in the backward; 3.35 TB/s, a little below the H200's 4.8).
SM_FLOPS = 3.0e12
HBM_BYTES_PER_S = 3.3e12
# A candidate replaces the counting rules' choice only when modelled this much faster.
MARGIN = 1.1
MOST_QUERY_SPLITS = 4
# Grids of more waves than this lose little in their last: the rules' choice stands.
MAX_WAVES = 16
BACKWARD_TAIL_GROUPS = 1  # attention_common.cuh KDSL_BWD_TAIL_GROUPS


def cta_steps(live: np.ndarray, B: int, Hkv: int, head_splits: int, query_splits: int, group: int) -> np.ndarray:
    """Each CTA's query steps in blockIdx order, as attention_common.cuh backward_block and
    backward_query_tiles map them. live: [b (1: the same for every b), h, query tile, key block],
    in tiles of 64 rows (a kernel that steps 128 rows splits its ranges at the nearest such
    pair: a model's rounding)."""
    _, H, tiles, key_blocks = live.shape
    live = np.broadcast_to(live, (B, H, tiles, key_blocks)).astype(np.int64)
    per_head = H // Hkv // head_splits
    steps = live.reshape(B, Hkv, head_splits, per_head, tiles, key_blocks).sum(axis=3)
    per_tile = -(-tiles // query_splits)
    starts = np.arange(query_splits) * per_tile
    ranges = np.zeros((B, Hkv, head_splits, query_splits, key_blocks), dtype=np.int64)
    used = starts < tiles  # a range past the last tile walks nothing
    ranges[:, :, :, used] = np.add.reduceat(steps, starts[used], axis=3)
    units = ranges.reshape(-1, key_blocks)  # unit bh = ((b * Hkv + hkv) * head_splits + range) * qs + qsplit
    heads = units.shape[0]
    w = np.arange(heads * key_blocks)
    span = group * key_blocks
    last = max(1, heads // group - (BACKWARD_TAIL_GROUPS - 1)) - 1
    g = np.minimum(w // span, last)
    r = w - g * span
    size = np.where(g == last, heads - g * group, group)
    kb = r // size
    return units[g * group + (r - kb * size), kb]


def makespan(costs, sms: int) -> float:
    """When the last of `costs` ends, each started in order on the first of `sms` SMs to free."""
    free = [0.0] * min(sms, len(costs))
    heapq.heapify(free)
    end = 0.0
    for c in costs:
        t = heapq.heappop(free) + c
        end = max(end, t)
        heapq.heappush(free, t)
    return end


def modelled_time(live, B: int, H: int, Hkv: int, N: int, D: int, Dv: int, keys: int, sms: int,
                  head_splits: int, query_splits: int, group: int) -> float:
    """A candidate's time in steps: its CTAs' schedule and its partial sums' traffic."""
    costs = cta_steps(live, B, Hkv, head_splits, query_splits, group) + CTA_OVERHEAD_STEPS
    splits = head_splits * query_splits
    partial_bytes = 8 * splits * B * Hkv * N * (D + Dv) if splits > 1 else 0
    step_s = 2 * 64 * keys * (3 * D + 2 * Dv) / SM_FLOPS
    return makespan(costs.tolist(), sms) + partial_bytes / HBM_BYTES_PER_S / step_s


def candidates(group_heads: int, rows: int) -> list[tuple[int, int]]:
    """(head_splits, query_splits): each divisor of a pair's query heads, then one query head a
    CTA with its tiles in up to MOST_QUERY_SPLITS ranges, one per 128 rows at most (the kernels'
    walks split query tiles only with a query head a CTA)."""
    heads = [(s, 1) for s in range(1, group_heads + 1) if group_heads % s == 0]
    return heads + [(group_heads, q) for q in range(2, min(MOST_QUERY_SPLITS, rows // 128) + 1)]


def best_splits(kernel_ir, B: int, H: int, Hkv: int, M: int, N: int, D: int, Dv: int, keys: int, sms: int,
                l2_bytes: int, default: tuple[int, int]) -> tuple[int, int]:
    """The candidate with the least modelled time where it beats `default` (the counting rules'
    choice) by MARGIN; else default (also where the mask's tiles are not known on the host)."""
    key_blocks = -(-N // keys)
    if B * Hkv * key_blocks > MAX_WAVES * sms:
        return default
    live = live_tiles(kernel_ir, B, H, Hkv, M, N, BACKWARD_TILE, keys)
    if live is None:
        return default
    masked = kernel_ir.func("mask") is not None
    times: dict = {}

    def time(c):  # the head group as attention_backward._head_group picks it (1 without a mask)
        if c not in times:
            group = geometry.backward_head_group(B, H, Hkv, M, D, Dv, 2, key_blocks, sms, l2_bytes, False,
                                                 c[0] * c[1], c[1]) if masked else 1
            times[c] = modelled_time(live, B, H, Hkv, N, D, Dv, keys, sms, c[0], c[1], group)
        return times[c]
    best = min(candidates(H // Hkv, M), key=lambda c: (time(c), c[0] * c[1]))
    return best if time(best) * MARGIN <= time(default) else default
