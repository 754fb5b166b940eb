"""Streamed captures: a captured tensor the score reads at [..., q, kv] travels with the K tiles.

`s + bias[b, h, i, j]` read per element from global memory costs the Hopper kernel a
dependent load per score, in the softmax's critical path, half of each 32-byte sector
wasted (the accumulator layout gives a thread two adjacent keys per 8-key group). When the
score's last two indices of a captured tensor are exactly the query and key positions and
the others depend on (b, h) only, the tile [q0 : q0 + BM, k0 : k0 + BN] of that tensor is
what tile (q0, k0) reads: the producer TMA-copies it into shared memory beside the K tile
(counted on the K tile's barrier), and the consumers read it from there, swizzled like Q so
that a warp's reads are free of bank conflicts (attention_wgmma.cuh, kStreamBytes).

This pass only finds the candidate (attr `stream_capture`); tiling keeps it when a ring of
its tiles fits shared memory beside K and V, else drops it (the score then loads per
element, as before). One tensor at most: a second ring would not fit beside K and V at
head dim 128. The runtime falls back to the per-element program (KDSL_STREAM_CAPTURES=0)
for a call whose tensor TMA cannot read: a row not a multiple of 16 bytes, or a data
pointer not 16-byte aligned.
"""
from __future__ import annotations

from .. import ir
from ..errors import KdslError

ELEM_BYTES = {"bf16": 2, "f16": 2, "f32": 4}  # dtypes TMA copies as they are
MAX_RANK = 5                                   # TMA tensor maps have at most 5 dims
# what a leading index may not depend on: then one tile holds what one tile of scores reads
PER_ELEMENT = ("q", "kv", "qf", "kvf", "dqkf", "qk", "s")


def run(k: ir.Kernel) -> ir.Kernel:
    """attr stream_capture = the candidate. An IR file may carry the attr: null keeps every
    tensor in global memory, a name must be the candidate."""
    if k.kind != "attention":
        return k
    attrs = dict(k.attrs)
    if "stream_capture" in attrs:
        given = attrs["stream_capture"]
        if given is not None and given != candidate(k):
            raise KdslError(f"kernel '{k.name}': attr stream_capture = {given!r} names no tensor the score reads "
                            f"at [..., q, kv] alone (candidate: {candidate(k)!r})")
        return k
    found = candidate(k)
    return k.with_attrs(stream_capture=found) if found else k


def candidate(k: ir.Kernel) -> str | None:
    """The first captured tensor that every load in the score reads at one index
    [lead..., q, kv], lead free of per-element variables; None when there is none."""
    score = k.func("score_log2")
    if score is None:
        return None
    loads = [n for n in ir.walk(score) if isinstance(n, ir.Load)]
    for t in k.tensors:
        mine = [n for n in loads if n.tensor == t.name]
        if t.role != "capture" or not mine or t.dtype not in ELEM_BYTES or not 2 <= len(t.shape) <= MAX_RANK:
            continue
        index = mine[0].indices
        if any(n.indices != index for n in mine):
            continue
        q, kv = index[-2:]
        if not (isinstance(q, ir.Var) and q.name == "q" and isinstance(kv, ir.Var) and kv.name == "kv"):
            continue
        if any(ir.uses(i, v) for i in index[:-2] for v in PER_ELEMENT):
            continue
        return t.name
    return None


def lead_indices(k: ir.Kernel) -> tuple[ir.Expr, ...]:
    """The streamed tensor's indices before [q, kv] (functions of b, h and sizes)."""
    name = k.attr("stream_capture")
    load = next(n for n in ir.walk(k.func("score_log2")) if isinstance(n, ir.Load) and n.tensor == name)
    return load.indices[:-2]


def is_streamed(e: ir.Load, k: ir.Kernel) -> bool:
    """Whether load e reads the streamed tensor (then at the tile's element)."""
    return e.tensor == k.attr("stream_capture")


def tile_bytes(elem_bytes: int, bm: int, bn: int) -> int:
    """Shared memory one ring stage of the streamed tensor takes: BN columns stored as
    128-byte column blocks of BM rows (attention_wgmma_parts.cuh, Cfg::kStreamBytes)."""
    return -(-bn * elem_bytes // 128) * 128 * bm if elem_bytes else 0
