"""Tiling: choose the kernel family and tile shapes per target and head dim, and the shared
memory they need.

On sm_90a attention runs on the Hopper kernel (attention_wgmma.cuh: TMA, wgmma, warp
specialisation); elsewhere on the mma.sync kernel (attention_mma.cuh). The numbers come from
measurements on an H100 (tools/dev/*_notes.md, bench/NOTES.md); the shared-memory formulas
mirror the headers' constexpr functions, and the generated code static_asserts that both
agree, so an edit to either side cannot drift silently.
"""
from __future__ import annotations

from .. import ir
from ..errors import KdslError
from .target import Target

# head dim -> (BM, BN, warps) for the mma.sync attention kernel
ATTENTION_TILES = {64: (128, 64, 4), 128: (128, 64, 4)}
# head dim -> (BN, consumer warpgroups, stages) for the wgmma attention kernel; BM = 64 * consumers
WGMMA_ATTENTION_TILES = {64: (128, 2, 3), 128: (128, 2, 3)}
# (BM, BN, stages) for the FP8 wgmma GEMM
GEMM_TILE = (128, 128, 4)


def attention_smem_bytes(d: int, bm: int, bn: int, warps: int, elem_bytes: int = 2) -> int:
    """Q tile + double-buffered K and V tiles."""
    return (bm * d + 2 * 2 * bn * d) * elem_bytes


def attention_wgmma_smem_bytes(d: int, bn: int, consumers: int, stages: int) -> int:
    """Q tile + a ring of K and V tiles + 2 + 4 * stages mbarriers + a word per stage
    telling the consumers which tile it holds, + 1024 to realign the tiles to
    the 128-byte swizzle's 1024-byte period."""
    return 1024 + (64 * consumers * d + 2 * stages * bn * d) * 2 + (2 + 4 * stages) * 8 + stages * 4


def gemm_smem_bytes(bm: int, bn: int, stages: int) -> int:
    """Per stage: A and B tiles of 128 fp8 K-elements (one scale block) and that block's
    scales (bm of a, up to 4 of b); + 1024 to realign the ring to the 1024-byte swizzle
    period, + 16 for the group-scan scratch word."""
    return stages * ((bm + bn) * 128 + (bm + 4) * 4) + 1024 + 16


def run(k: ir.Kernel, target: Target) -> ir.Kernel:
    if k.kind == "attention":
        d = k.attr("head_dim")
        if target.has_wgmma:
            if d not in WGMMA_ATTENTION_TILES:
                raise KdslError(f"kernel '{k.name}': head dimension {d} is not supported (64 or 128)")
            bn, consumers, stages = WGMMA_ATTENTION_TILES[d]
            # Persistent CTAs pay off when items cost the same; under a mask the hardware's
            # dynamic block dispatch balances them better (measured: bench/NOTES.md).
            schedule = "persistent" if k.func("mask") is None else "grid"
            return k.with_attrs(kernel="wgmma", tile_m=64 * consumers, tile_n=bn, consumers=consumers,
                                stages=stages, schedule=schedule,
                                smem_bytes=attention_wgmma_smem_bytes(d, bn, consumers, stages))
        if d not in ATTENTION_TILES:
            raise KdslError(f"kernel '{k.name}': head dimension {d} is not supported (64 or 128)")
        bm, bn, warps = ATTENTION_TILES[d]
        smem = attention_smem_bytes(d, bm, bn, warps)
        return k.with_attrs(kernel="mma", tile_m=bm, tile_n=bn, warps=warps, smem_bytes=smem)
    if not target.has_wgmma:
        raise KdslError(f"kernel '{k.name}': the FP8 GEMM needs wgmma (sm_90a); target is {target.arch}")
    bm, bn, stages = GEMM_TILE
    return k.with_attrs(tile_m=bm, tile_n=bn, tile_k=128, stages=stages, smem_bytes=gemm_smem_bytes(bm, bn, stages))
