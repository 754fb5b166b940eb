"""Streamed captures: a captured tensor read at [..., q, kv] travels with the K tiles.

`s + bias[b, h, i, j]` read per element from global memory costs the Hopper kernel a
dependent load per score, in the softmax's critical path, half of each 32-byte sector
wasted (the accumulator layout gives a thread two adjacent keys per 8-key group). When the
score's last two indices of a captured tensor are exactly the query and key positions and
the others depend on (b, h) only, the tile [q0 : q0 + BM, k0 : k0 + BN] of that tensor is
what tile (q0, k0) reads: the producer TMA-copies it into shared memory beside the K tile
(counted on the K tile's barrier), and the consumers read it from there, swizzled like Q so
that a warp's reads are free of bank conflicts (attention_wgmma.cuh, kStreamBytes).

A mask read per element from a dense tensor (torch's boolean attn_mask, `keep[b, i, j]`) is
streamed the same way: there the cost was worse, 64 scalar loads a thread a partial tile, each
warp load touching 8 rows (bench/NOTES.md, fifty-fifth session); streamed, the softmax reads
a pair of the tile's elements from shared memory where it selects -inf (2x on a bool mask, the
fifty-sixth session). The element arrives as a float (float tensors) or an int (integer and
bool ones). The wgmma backward copies the tiles of the rings its mask reads by cp.async, where
they fit (codegen/emit_backward.py backward_plan_for, attention_bwd_stream.cuh: 2.3-3x on a random bool
mask's backward, the sixty-eighth session); the tile summary keeps reading global memory.

Two tensors at most (attr stream_capture, and attr mask_stream_capture beside it): the score's
(else one the mask reads), and a second one that the mask alone reads (`s + 0.1 *
float(bucket[b, i, j])` under `keep[b, i, j]`, a dense bias beside a dense mask; or a mask of two
dense tensors), each in its own ring. A third would not fit beside K and V at head dim 128.

This pass only finds the candidates; tiling keeps them when their rings fit shared memory
beside K and V, with fewer stages or beside a narrower kv tile if need be (1.4-2.1x over the
wider tile reading per element), else drops the second, then the first (the score then loads
per element, as before). The runtime falls back to the per-element program
(KDSL_STREAM_CAPTURES=0, for both) for a call whose tensor TMA cannot read: a row not a
multiple of 16 bytes, or a data pointer not 16-byte aligned.
"""
from __future__ import annotations

from .. import ir
from ..errors import KdslError

ELEM_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "i32": 4, "bool": 1, "u8": 1, "i8": 1}  # dtypes TMA copies as they are
FLOAT_ELEMS = ("bf16", "f16", "f32")  # elements that arrive as a float (the others as an int)
MAX_RANK = 5                                   # TMA tensor maps have at most 5 dims
# what a leading index may not depend on: then one tile holds what one tile of scores reads
PER_ELEMENT = ("q", "kv", "qf", "kvf", "dqkf", "qk", "s")


def run(k: ir.Kernel) -> ir.Kernel:
    """attr stream_capture = the candidate, attr mask_stream_capture = the second one. An IR
    file may carry them: null keeps the tensor in global memory, a name must be the candidate."""
    if k.kind != "attention":
        return k
    attrs = dict(k.attrs)
    found = candidate(k)
    first = attrs["stream_capture"] if "stream_capture" in attrs else found
    if first is not None and first != found:
        raise KdslError(f"kernel '{k.name}': attr stream_capture = {first!r} names no tensor the score reads "
                        f"at [..., q, kv] alone (candidate: {found!r})")
    found = mask_candidate(k, first)
    second = attrs["mask_stream_capture"] if "mask_stream_capture" in attrs else found
    if second is not None and second != found:
        raise KdslError(f"kernel '{k.name}': attr mask_stream_capture = {second!r} names no tensor the mask alone "
                        f"reads at [..., q, kv] beside the first streamed one (candidate: {found!r})")
    return k.with_attrs(stream_capture=first, mask_stream_capture=second) if first else k


def candidate(k: ir.Kernel) -> str | None:
    """The first captured tensor that every load in the score and the mask reads at one index
    [lead..., q, kv], lead free of per-element variables: one the score reads, else one the mask
    alone reads; None when there is none."""
    loads = _loads(k)
    for reader in ("score_log2", "mask"):
        for t in k.tensors:
            if _streamable(t, loads, reader):
                return t.name
    return None


def mask_candidate(k: ir.Kernel, first: str | None) -> str | None:
    """The second ring's tensor: beside the first streamed tensor (the score's, or one the mask
    reads), another tensor the mask alone reads as candidate() asks; else None."""
    loads = _loads(k)
    if first is None:
        return None
    for t in k.tensors:
        if t.name != first and _streamable(t, loads, "mask") \
                and not any(n.tensor == t.name for n in loads["score_log2"]):
            return t.name
    return None


def _loads(k: ir.Kernel) -> dict[str, list[ir.Load]]:
    return {name: [n for n in ir.walk(f) if isinstance(n, ir.Load)] if (f := k.func(name)) is not None else []
            for name in ("score_log2", "mask")}


def _streamable(t: ir.Tensor, loads: dict, reader: str) -> bool:
    """Whether reader (score_log2, mask) reads capture t and every load of t, in either, is at
    one index [lead..., q, kv] a TMA box can copy."""
    mine = [n for n in loads[reader] if n.tensor == t.name]
    if t.role != "capture" or not mine or t.dtype not in ELEM_BYTES or not 2 <= len(t.shape) <= MAX_RANK:
        return False
    everywhere = [n for name in loads for n in loads[name] if n.tensor == t.name]
    return _at_tile_element(mine[0].indices) and all(n.indices == mine[0].indices for n in everywhere)


def _at_tile_element(index: tuple[ir.Expr, ...]) -> bool:
    q, kv = index[-2:]
    return (isinstance(q, ir.Var) and q.name == "q" and isinstance(kv, ir.Var) and kv.name == "kv"
            and not any(ir.uses(i, v) for i in index[:-2] for v in PER_ELEMENT))


def streamed(k: ir.Kernel) -> tuple[str, ...]:
    """The streamed tensors, ring by ring (stream_capture, then mask_stream_capture)."""
    return tuple(n for n in (k.attr("stream_capture"), k.attr("mask_stream_capture")) if n)


def lead_indices(k: ir.Kernel, name: str | None = None) -> tuple[ir.Expr, ...]:
    """A streamed tensor's indices before [q, kv] (functions of b, h and sizes); the first ring's
    by default."""
    name = name or k.attr("stream_capture")
    load = next(n for f in ("score_log2", "mask") if k.func(f) is not None
                for n in ir.walk(k.func(f)) if isinstance(n, ir.Load) and n.tensor == name)
    return load.indices[:-2]


def read_by(k: ir.Kernel, func: str) -> bool:
    """Whether function `func` of k (score_log2, mask) reads a streamed tensor."""
    f = k.func(func)
    return f is not None and any(isinstance(n, ir.Load) and n.tensor in streamed(k) for n in ir.walk(f))


def mask_reads(k: ir.Kernel) -> tuple[str, ...]:
    """The streamed tensors the mask reads, ring by ring."""
    mask = k.func("mask")
    names = {n.tensor for n in ir.walk(mask) if isinstance(n, ir.Load)} if mask is not None else set()
    return tuple(n for n in streamed(k) if n in names)


def tile_bytes(elem_bytes: int, bm: int, bn: int) -> int:
    """Shared memory one ring stage of the streamed tensor takes: BN columns stored as
    128-byte column blocks of BM rows (attention_wgmma_parts.cuh, Cfg::kStreamBytes)."""
    return -(-bn * elem_bytes // 128) * 128 * bm if elem_bytes else 0
