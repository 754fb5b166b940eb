"""Warp mapping: which warps own which part of the tile, and their roles.

Attention, mma.sync: every warp owns tile_m / warps query rows and all kv columns of the
tile, so the online-softmax row statistics stay in one warp's registers (no shared-memory
reduction). Attention, wgmma: warpgroup 0 is the TMA producer; each consumer warpgroup owns
64 query rows (one m64 wgmma row block) and all kv columns. FP8 GEMM (wgmma): warpgroups of
4 warps; warpgroup 0 is the TMA producer (one warp walks the tile schedule), each of one
(tile_m 64), two or three (tile_m 192) math warpgroups owns 64 rows of the tile (tile_m 256:
two warpgroups, 64 of every 128 rows, two m64 waves each).
"""
from __future__ import annotations

from .. import ir
from . import gemm_tiles
from .target import Target


def run(k: ir.Kernel, target: Target) -> ir.Kernel:
    if k.kind == "attention" and k.attr("kernel") == "wgmma":
        # setmaxnreg split of the 64K registers: the producer needs few, the consumers hold the
        # S, P and O tiles (attention_wgmma.cuh static_asserts the same numbers).
        c = k.attr("consumers")
        return k.with_attrs(threads=128 * (c + 1), roles="producer+consumers",
                            producer_regs=40 if c <= 2 else 32, consumer_regs={1: 240, 2: 232, 3: 160}[c])
    if k.kind == "attention":
        warps = k.attr("warps")
        return k.with_attrs(threads=32 * warps, warp_rows=k.attr("tile_m") // warps, roles="uniform")
    math = gemm_tiles.math_warpgroups(k.attr("tile_m"))
    producer, consumer = gemm_tiles.REGISTER_SPLIT[math]
    return k.with_attrs(threads=gemm_tiles.threads(k.attr("tile_m")), warpgroups=math, roles="producer+consumers",
                        producer_regs=producer, consumer_regs=consumer)
