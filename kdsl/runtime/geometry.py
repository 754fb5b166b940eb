"""Launch geometry and scalar arguments, as pure functions of shapes and values, so every
rule here is testable without a GPU: empty inputs, grid limits, the softmax scale."""
from __future__ import annotations

import math
import numbers
from typing import Callable

from ..errors import LaunchError

# CUDA limits gridDim.y and gridDim.z to 65535 (gridDim.x to 2**31 - 1).
GRID_YZ_LIMIT = 65535


def attention_work(B: int, H: int, M: int, N: int) -> str:
    """What a call with these sizes does, following torch: 'empty' (the output has no
    elements: nothing to launch), 'no_keys' (N = 0: every row sees no key, so out = 0 and
    lse = -inf, kdsl's rule for fully masked rows, without a launch) or 'launch'."""
    if B * H * M == 0:
        return "empty"
    return "no_keys" if N == 0 else "launch"


def attention_batch_chunks(B: int, H: int, uses_batch_index: bool, kname: str) -> list[tuple[int, int]]:
    """(first batch, batch count) of each launch. The mma.sync kernel's grid is (q tiles,
    H, B); a batch past grid.z's limit is split into launches over consecutive batches
    (pointers offset by the host), which is exact only when no score, mask or captured
    tensor index mentions the batch index b."""
    if H > GRID_YZ_LIMIT:
        raise LaunchError(f"{kname}: {H} heads exceed the CUDA grid limit of {GRID_YZ_LIMIT} (gridDim.y)")
    if B <= GRID_YZ_LIMIT:
        return [(0, B)]
    if uses_batch_index:
        raise LaunchError(f"{kname}: batch {B} exceeds the CUDA grid limit of {GRID_YZ_LIMIT} (gridDim.z), and "
                          f"the kernel uses the batch index b, so kdsl cannot split the call; pass at most "
                          f"{GRID_YZ_LIMIT} batches per call")
    return [(b0, min(GRID_YZ_LIMIT, B - b0)) for b0 in range(0, B, GRID_YZ_LIMIT)]


def forward_query_warpgroups(rows: int, widest: int, row_mask: bool, keys_split: bool = False) -> int:
    """How many consumer warpgroups (64 query rows each) the Hopper forward takes a work item
    for a head's `rows` query rows, where the tiling allows `widest` (3 at head dims <= 64).
    Three earn their keep on long rows (plain D=64 x1.14 over two at 2048 rows), but a short
    head pads its last 192-row tile: at 256 rows, 384 rows of work for 256 (two ran x1.21
    plain, x1.45 causal), and under a mask that reads the query row (row_mask: causal, windows,
    prefixes) the taller diagonal tiles cost more (two ran x1.11-1.20 under causal at 640-1024
    rows, x0.96 at 2048). So two where the padding of 192-row tiles exceeds 128-row ones' by a
    fifth, and under such a mask up to 6 tiles of 192 rows (H200, B x M = 16384 tokens, H=16:
    bench/NOTES.md, fifty-first session). Two also where the 192-row items are so few that the
    keys split over CTAs (keys_split, splitkv.kv_splits): 1.5 times the items, fewer and longer
    key ranges to merge (plain B=1 H=4 2048² D=64 x1.14, B=1 H=2 4096² x1.04, relpos B=1 H=4
    2048 x 4096 x1.06, softcap B=1 H=6 1536² D=32 x1.07: H200, bench/NOTES.md, fifty-third
    session)."""
    if widest != 3:
        return widest
    padded = lambda tile: -(-rows // tile) * tile  # noqa: E731
    short = rows <= 6 * 192 if row_mask else padded(192) >= 1.2 * padded(128)
    return 2 if short or keys_split else 3


def attention_row_limit(B: int, H: int, M: int, kname: str) -> None:
    """The Hopper kernel numbers output rows across batch and heads in 32 bits (b * H + h)
    * M + q: a call with 2**31 rows or more (64 GB of q at head dim 16) is refused, with the
    way out, rather than written to the wrong rows."""
    if B * H * M >= 2**31:
        raise LaunchError(f"{kname}: B * H * M = {B} * {H} * {M} = {B * H * M} query rows; the Hopper kernel "
                          f"takes at most 2**31 - 1 per call: split the batch over several calls")


def gemm_grid(tiles: int, sms: int, cluster: int) -> tuple[int, int, int]:
    """The persistent FP8 GEMM's grid: a CTA per SM (or fewer, one per tile), in whole
    clusters; each CTA walks tiles i, i + grid, ..."""
    return (max(cluster, min(tiles, sms) // cluster * cluster), 1, 1)


def gemm_index_limits(M: int, N: int, K: int, G: int, tile_m: int, tile_n: int, masked: bool, kname: str,
                      sa_pitch: int = 0) -> None:
    """The kernel indexes tiles, and a_scale's rows (sa_pitch floats apart: M unless padded), with
    32-bit integers."""
    tiles = -(-M // tile_m) * -(-N // tile_n) * (G if masked else 1)
    scales = (G if masked else 1) * (K // 128) * max(M, sa_pitch)
    if max(tiles, scales) >= 2**31:
        raise LaunchError(f"{kname}: M = {M}, N = {N}, K = {K}, G = {G} is too large for one call ({tiles} output "
                          f"tiles, {scales} scales of a; at most 2**31 - 1 each); split the call along M")


# The FP8 GEMM's tensor-map parameters, in the kernel's order (fp8_gemm_wgmma.cuh: ta tb td tsa tsb).
GEMM_MAP_OPERANDS = ("a", "b", "out", "a_scale", "b_scale")
# Bytes fetched into L2 around each TMA miss of the FP8 GEMM's maps (as attention's). None and
# 256 tie on the H100 once the timer's rounds rotate (2026-11-27, tools/dev/fp8_l2_promotion.py;
# none's x1.03-1.05 before that was its place in the round).
GEMM_L2_PROMOTION = 256


def gemm_tensor_maps(M: int, N: int, K: int, G: int, grouping: str, out_bytes: int, cfg: dict,
                     sa_pitch: int = 0) -> dict:
    """The FP8 GEMM's TMA tensor maps, as fp8_gemm_wgmma.cuh's launch contract describes them,
    by operand (GEMM_MAP_OPERANDS order): (element type, dims innermost first, byte strides of
    dims[1:], box, swizzle bytes, L2 promotion bytes) for a, b, out when stores go through
    TMA, a_scale when its scales come by TMA (scale_load: M % 4 == 0, so that each box
    starts 16-byte aligned; a 1-D map over it faulted wherever M % 4 != 0), and b_scale when
    B's do (b_scale_load: K % 512 == 0, rows of whole 16-byte units). Masked: a, a_scale and
    out have a group dimension; grouped: b and b_scale have one. a_scale's rows lie sa_pitch
    floats apart (M unless padded). An operand left out gets no map (its parameter stays blank)."""
    masked = grouping == "masked"
    ga, gb = (G if masked else 1), (1 if grouping == "dense" else G)
    bm, bn, mcast = cfg["tile_m"], cfg["tile_n"], cfg["multicast"]
    maps = {"a": ("u8", (K, M, ga), (K, M * K), (128, bm // (2 if mcast == "a" else 1), 1), 128),
            "b": ("u8", (K, N, gb), (K, N * K), (128, bn // (2 if mcast == "b" else 1), 1), 128)}
    if cfg["store"] == "tma":  # 64-row boxes, one swizzle width of columns (fp8_gemm_epilogue.cuh)
        sw = next(w for w in (128, 64, 32) if bn * out_bytes % w == 0)
        maps["out"] = ("f32" if out_bytes == 4 else "bf16", (N, M, ga), (N * out_bytes, M * N * out_bytes),
                       (sw // out_bytes, 64, 1), sw)
    if cfg["scale_load"] == "tma":  # [groups][K / 128][M] floats, one K block of BM rows a box
        pitch = max(M, sa_pitch)
        maps["a_scale"] = ("f32", (M, K // 128, ga), (pitch * 4, K // 128 * pitch * 4), (bm, 1, 1), 0)
    if cfg["b_scale_load"] == "tma":  # [groups][ceil(N / 128)][K / 128] floats: 4 K blocks of two scale rows a box
        nk, n_blocks = K // 128, -(-N // 128)
        maps["b_scale"] = ("f32", (nk, n_blocks, gb), (nk * 4, n_blocks * nk * 4), (4, 2, 1), 0)
    return {name: spec + (GEMM_L2_PROMOTION,) for name, spec in maps.items()}


def softmax_scale(scale, default: Callable[[], float], kname: str) -> float:
    """The scale a call uses: the kernel's own (default(), evaluated only when needed) when
    none is given, else a real, finite number. Strings, bools and tensors are refused rather
    than converted."""
    if scale is None:
        value = float(default())
    elif isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        hint = "; pass a Python float, e.g. float(x)" if hasattr(scale, "shape") else ""
        raise LaunchError(f"{kname}: scale must be a real number (int or float), got "
                          f"{type(scale).__name__} {scale!r}"[:200] + hint)
    else:
        value = float(scale)
    if not math.isfinite(value):
        raise LaunchError(f"{kname}: softmax scale must be finite, got {value}")
    return value


def attention_head_group(heads: int, tiles: int, sms: int, bytes_per_head: int, l2_bytes: int,
                         reads_data: bool = False) -> int:
    """How many consecutive heads the Hopper attention kernels order together under a mask:
    the forward's (b, h) heads, whose items run last q tile first across a group
    (AttnArgs::head_group), and the backward's (b, k/v head) pairs, whose CTAs run key block 0
    first (attention_common.cuh backward_block). tiles: a head's items or CTAs; bytes_per_head:
    what they read that others of the head read too (K and V; the backward's q, dO, dq_acc).
    Enough for two waves, so that under causal-like masks the long items of the group start
    well before its end and short ones fill the tail, but no more than half of L2 holds the
    shared bytes of, so that the CTAs running a group share them there. 1: head by head.
    A mask that reads data (a document mask) need not put the long items first (they are those
    at each document's end, or for the backward its start): there a group takes at least half
    as many heads as there are SMs, so that the long items of many heads mix. (H200,
    document_mask, 16-64 heads in one group against groups by L2: forward x1.09-1.18, backward
    x1.08-1.17; at 256 heads a group of 66 within 0.5 % of the L2 rule's 9, one of 256 lost
    2-3 %; causal masks lost up to 12 % at 128-256 heads in one group: bench/NOTES.md, 48th
    session.)"""
    enough = -(-2 * sms // max(1, tiles))
    fits = max(1, l2_bytes // 2 // max(1, bytes_per_head))
    group = max(1, min(heads, enough, fits))
    return min(heads, max(group, sms // 2)) if reads_data else group



def backward_head_group(B: int, H: int, Hkv: int, M: int, D: int, Dv: int, itemsize: int, key_blocks: int, sms: int,
                        l2_bytes: int, reads_data: bool = False, splits: int = 1, query_splits: int = 1) -> int:
    """attention_head_group for the backward's (b, k/v head) pairs. What a pair's CTAs share in
    L2 at a time is one query head's q, dO and dq_acc: each CTA walks the H / Hkv query heads of
    its group one after the other (BwdSteps), so the CTAs running together are on the same one.
    Counting all of the group's heads made grouped-query attention run head by head, its longest
    CTAs (key block 0, H / Hkv times a head's steps) starting near the end: one group of the 8
    pairs ran causal GQA's backward x1.36 faster at B=2 H=16 Hkv=4 4096^2 D=128 on an H200, 3
    pairs x1.16 at D=256 (bench/NOTES.md, fiftieth session). With a pair's query heads split
    over CTAs a key block (backward_head_splits, and its query tiles, backward_query_splits:
    `splits` ranges in all, `query_splits` of a head's rows), the units ordered are (pair, range)."""
    per_query_head = -(-M // query_splits) * ((D + Dv) * itemsize + D * 4)
    return attention_head_group(B * Hkv * splits, key_blocks, sms, per_query_head, l2_bytes, reads_data)


def backward_head_splits(group: int, ctas: int, sms: int) -> int:
    """Into how many ranges the backward splits a (b, k/v head) pair's `group` query heads, a CTA
    each per key block: the fewest (a divisor of the group) that give at least a CTA an SM.
    ctas: the CTAs without a split (key blocks x pairs). A pair's key blocks alone leave SMs idle
    with few k/v heads (MQA at 4096 keys: 32 CTAs on 132 SMs), and under causal masks the CTA of
    key block 0 then sets the time; a schedule simulation put 1.02-1.05x the mean load on the
    split this picks against 2-8x without (bench/NOTES.md, fiftieth session). More splits cost
    the partials' traffic and shorter CTAs for nothing once every SM has one."""
    return next(s for s in range(1, group + 1) if group % s == 0 and (ctas * s >= sms or s == group))


def backward_query_splits(rows: int, ctas: int, sms: int) -> int:
    """Into how many ranges the backward splits the query tiles its CTAs walk, once split query
    heads (backward_head_splits) leave `ctas` CTAs: 1 while they fill half the SMs, else about a
    CTA an SM (sms // ctas: one wave, not a second one's tail), at most one range per 128 of the
    `rows` query rows. Few k/v heads and keys with many queries (cross-attention, MHA with
    B x H small: 8 heads, 1024 keys and 8192 queries are 64 CTAs) ran on a part of the GPU,
    each CTA walking every query tile."""
    if ctas * 2 > sms:
        return 1
    return max(1, min(sms // ctas, rows // 128))
