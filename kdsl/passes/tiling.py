"""Tiling: choose the kernel family and tile shapes per target and head dim (attention) or
per problem shape and SM count (FP8 GEMM, gemm_tiles.py), and the shared memory they need.

On sm_90a attention runs on the Hopper kernel (attention_wgmma.cuh: TMA, wgmma, warp
specialisation); elsewhere on the mma.sync kernel (attention_mma.cuh). The numbers come from
measurements on an H100 (tools/dev/*_notes.md, bench/NOTES.md); the shared-memory formulas
mirror the headers' constexpr functions, and the generated code static_asserts that both
agree, so an edit to either side cannot drift silently.

An FP8 GEMM is tiled for the problem in its `shape` attr ([M, N, K, G]; the runtime sets it
per call signature, `kdsl compile --shape` on the command line; else gemm_tiles'
DEFAULT_SHAPES) on `sms` multiprocessors (the device's count at call time; else the
target's). Tile attrs already on the kernel are kept (an override).
"""
from __future__ import annotations

from .. import ir
from ..errors import KdslError
from . import gemm_tiles
from .target import Target

# head dim -> (BM, BN, warps) for the mma.sync attention kernel
ATTENTION_TILES = {64: (128, 64, 4), 128: (128, 64, 4)}
# head dim -> (BN, consumer warpgroups, stages) for the wgmma attention kernel; BM = 64 * consumers
WGMMA_ATTENTION_TILES = {64: (128, 2, 3), 128: (128, 2, 3)}


def attention_smem_bytes(d: int, bm: int, bn: int, warps: int, elem_bytes: int = 2) -> int:
    """Q tile + double-buffered K and V tiles."""
    return (bm * d + 2 * 2 * bn * d) * elem_bytes


def attention_wgmma_smem_bytes(d: int, bn: int, consumers: int, stages: int) -> int:
    """Q tile + a ring of K and V tiles + 2 + 4 * stages mbarriers, + 1024 to realign the
    tiles to the 128-byte swizzle's 1024-byte period."""
    return 1024 + (64 * consumers * d + 2 * stages * bn * d) * 2 + (2 + 4 * stages) * 8


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
    return _gemm(k, target)


def gemm_problem(k: ir.Kernel) -> gemm_tiles.Problem:
    """The problem the kernel is tiled for: its `shape` attr, else the default shape."""
    grouping = k.attr("grouping")
    shape = k.attr("shape") or gemm_tiles.DEFAULT_SHAPES[grouping]
    if len(shape) != 4 or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in shape):
        raise KdslError(f"kernel '{k.name}': attr shape must be [M, N, K, G] of positive integers, got {list(shape)}")
    M, N, K, G = shape
    if K % 128:
        raise KdslError(f"kernel '{k.name}': K must be a multiple of 128, got {K}")
    out_bytes = 4 if k.tensor("out").dtype == "f32" else 2
    return gemm_tiles.Problem(M, N, K, G, grouping, out_bytes, bool(k.attr("accumulate")))


def _gemm(k: ir.Kernel, target: Target) -> ir.Kernel:
    problem = gemm_problem(k)
    sms = k.attr("sms") or target.sms
    cfg = gemm_tiles.choose(problem, sms, target.smem_per_block, dict(k.attrs))
    smem = gemm_tiles.smem_bytes(cfg["tile_m"], cfg["tile_n"], cfg["stages"], problem.out_bytes, cfg["store"] == "tma")
    shape = [problem.M, problem.N, problem.K, problem.G]
    return k.with_attrs(shape=shape, sms=sms, **cfg, tile_k=128, smem_bytes=smem)
