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
fifty-sixth session). The score streams float tensors (its element arrives as a float), the
mask also integer and bool ones (as an int; the mask's other callers, the tile summary and the
backward, keep reading global memory).

This pass only finds the candidate (attr `stream_capture`); tiling keeps it when a ring of
its tiles fits shared memory beside K and V, with fewer stages or beside a narrower kv tile
if need be (1.4-2.1x over the wider tile reading per element), else drops it (the score then
loads per element, as before). One tensor at most: a second ring would not fit beside K and V at
head dim 128. The runtime falls back to the per-element program (KDSL_STREAM_CAPTURES=0)
for a call whose tensor TMA cannot read: a row not a multiple of 16 bytes, or a data
pointer not 16-byte aligned.
"""
from __future__ import annotations

from .. import ir
from ..errors import KdslError

ELEM_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "i32": 4, "bool": 1, "u8": 1, "i8": 1}  # dtypes TMA copies as they are
FLOAT_ELEMS = ("bf16", "f16", "f32")  # what the score may stream: its element arrives as a float
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
    """The first captured tensor that every load in the score and the mask reads at one index
    [lead..., q, kv], lead free of per-element variables: a float tensor the score reads, else
    one the mask alone reads; None when there is none."""
    readers = [(name, k.func(name)) for name in ("score_log2", "mask")]
    loads = {name: [n for n in ir.walk(f) if isinstance(n, ir.Load)] if f is not None else [] for name, f in readers}
    for reader in ("score_log2", "mask"):
        for t in k.tensors:
            mine = [n for n in loads[reader] if n.tensor == t.name]
            if t.role != "capture" or not mine or t.dtype not in ELEM_BYTES or not 2 <= len(t.shape) <= MAX_RANK:
                continue
            everywhere = [n for name in loads for n in loads[name] if n.tensor == t.name]
            if t.dtype not in FLOAT_ELEMS and any(n.tensor == t.name for n in loads["score_log2"]):
                continue  # the score's sv is a float
            if _at_tile_element(mine[0].indices) and all(n.indices == mine[0].indices for n in everywhere):
                return t.name
    return None


def _at_tile_element(index: tuple[ir.Expr, ...]) -> bool:
    q, kv = index[-2:]
    return (isinstance(q, ir.Var) and q.name == "q" and isinstance(kv, ir.Var) and kv.name == "kv"
            and not any(ir.uses(i, v) for i in index[:-2] for v in PER_ELEMENT))


def lead_indices(k: ir.Kernel) -> tuple[ir.Expr, ...]:
    """The streamed tensor's indices before [q, kv] (functions of b, h and sizes)."""
    name = k.attr("stream_capture")
    load = next(n for f in ("score_log2", "mask") if k.func(f) is not None
                for n in ir.walk(k.func(f)) if isinstance(n, ir.Load) and n.tensor == name)
    return load.indices[:-2]


def read_by(k: ir.Kernel, func: str) -> bool:
    """Whether function `func` of k (score_log2, mask) reads the streamed tensor."""
    f, name = k.func(func), k.attr("stream_capture")
    return bool(name) and f is not None and any(isinstance(n, ir.Load) and n.tensor == name for n in ir.walk(f))


def tile_bytes(elem_bytes: int, bm: int, bn: int) -> int:
    """Shared memory one ring stage of the streamed tensor takes: BN columns stored as
    128-byte column blocks of BM rows (attention_wgmma_parts.cuh, Cfg::kStreamBytes)."""
    return -(-bn * elem_bytes // 128) * 128 * bm if elem_bytes else 0
