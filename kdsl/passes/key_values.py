"""Masks that compare a value read per key: one gather a key, shared by the warp's shuffles.

A threshold per row against a score per key, a bucket per query against one per key, document
ids where the tile summary cannot prove a tile empty or full:

    ks[b, h, j] >= thr[b, h, i]          bq[b, h, i] == bk[b, h // (H // Hkv), j]          doc[b, i] == doc[b, j]

On a partial tile the Hopper kernel evaluates the mask per element (attention_wgmma.cuh
survivors()): each of a thread's BN/2 elements gathered its key's value, BN/4 loads a thread for
BN distinct keys, in blocks of 16 whose round trips follow each other (4 a 128-key tile), beside
a Q K^T shorter than them. held-out set 40's row_threshold ran its forward at 0.78 of compiled
Flex (H200, 2x16x4096², the eighty-second session), 4 us a partial tile against about 1 for a
dense one. With key values (the default; KDSL_KEY_VALUES=0 for the per-element gathers, an A/B) the
kernel gathers that value once per key of the tile (lane l of
each warp keys k0 + l + 32u: BN / 32 loads a thread, all in flight at once) and each element takes
its key's value from the lane that holds it (__shfl_sync; the accumulator layout puts key
8 jj + 2 t + e of a 32-key chunk at lane 8 (jj % 4) + 2 t + e). On an H200 (2x16x4096², the
eighty-third session) the forward ran x1.18 (row_threshold D=128; x1.24 at D=64), x1.13
(lsh_buckets_gqa), x1.15 (event_horizon), x1.09-1.10 (doc_temperature, lsh_local, document_mask)
and x1.00 (perm_causal, data_positions) against the per-element gathers.

part() finds the part: the largest non-bool subexpression of the mask that gathers captured data
at the key (kv) and depends on nothing per query (q, q - kv); one part a mask or none. A bool
part is key_mask's (passes/key_mask.py: one bit a key, by a vote), which takes precedence.
valued() is the mask with the part read as the variable kx.

The wgmma backward is the mirror: a CTA's keys stay fixed while it walks the queries, and a step's
elements gather the query's value (thr[b, h, i], a query's document id) for 16 query columns a
thread, after the step's S and dP wgmmas are waited for. part(mask, "q") is the value gathered at
the query; the lanes gather the step's queries' values before that wait (2 a thread a 64-query
block) and each element shuffles its own, read as qx (KDSL_BWD_QUERY_VALUES=0: per element, an A/B).
query_parts() takes two where the mask has two (a band's per-row bounds, two levels of document
ids), the second read as qx2: backward x1.04-1.39 (H200, eighty-fourth session;
KDSL_BWD_QUERY_VALUES2=0 for the A/B).
Splitting the valued mask further (its bool part that reads kx tested per element, the two
position arms it chooses between as interval bits once a row) was tried in the eighty-fourth
session and dropped: x1.00-0.94 of the key values with keys past N dropped once a ragged tile.

Backward alone on an H200 (2x16x4096², the eighty-third session): row_threshold x1.30,
doc_temperature x1.17, lsh_buckets_gqa x1.12, segment_bidir_queries x1.06, document_mask x1.03 at
D=128 and x0.96 at D=64, packed_window x1.02.
"""
from __future__ import annotations

from .. import ir
from . import streaming

# axis: (what the part must gather at, what it may not read, the variable the mask reads it as)
_AXES = {"kv": (("kv", "kvf"), ("q", "qf", "dqkf", "dqk"), "kx"),
         "q": (("q", "qf"), ("kv", "kvf", "dqkf", "dqk"), "qx")}


def applies(k: ir.Kernel, tile_n: int) -> bool:
    """Whether k's partial tiles take their mask's key part by shuffles: a mask with one such
    part, not streamed (read from shared memory per element already: passes/streaming.py), not
    voted as key bits (attr key_mask), on tiles of whole 32-key chunks."""
    mask = k.func("mask")
    if k.kind != "attention" or mask is None or tile_n % 32 or streaming.read_by(k, "mask") or k.attr("key_mask"):
        return False
    return part(mask) is not None


def query_parts(k: ir.Kernel) -> tuple[ir.Expr, ...]:
    """The backward's: the values k's mask gathers at the query, where its mask is not streamed:
    its one part, or two where there are two and neither holds the other (a band's per-row
    bounds `lo[b, h, i] <= kx and kx <= hi[b, h, i]`, two levels of document ids); () else."""
    mask = k.func("mask")
    if k.kind != "attention" or mask is None or streaming.read_by(k, "mask"):
        return ()
    one = part(mask, "q")
    if one is not None:
        return (one,)
    found = ir.largest_all(mask, _is_part("q"))
    if len(found) == 2 and not _contains(found[0], found[1]) and not _contains(found[1], found[0]):
        return tuple(found)
    return ()


def _is_part(axis: str):
    """Whether an expression is a value gathered at the axis: an f32 / i32 that reads the axis's
    position by a load and nothing of the other's."""
    at, per_other, _ = _AXES[axis]

    def is_part(e: ir.Expr) -> bool:
        if not isinstance(e, (ir.Op, ir.Load)) or e.ty not in ("f32", "i32"):
            return False
        if any(ir.uses(e, v) for v in per_other) or not any(ir.uses(e, v) for v in at):
            return False
        return ir.loads_at(e, at)
    return is_part


def part(mask: ir.Expr, axis: str = "kv") -> ir.Expr | None:
    """The mask's one value gathered at the key (axis "kv") or the query ("q"), or None."""
    is_part = _is_part(axis)
    found = ir.largest_all(mask, is_part)
    if len(found) <= 1:
        return found[0] if found else None
    # several: the largest one inside all (`lo[b, h, i]` of `kx >= lo[b, h, i]` and `kx <= lo[b, h, i]
    # + 1.0`), whose one gather serves them all (valued() replaces it inside each)
    shared = [x for x in ir.walk(found[0]) if is_part(x) and all(_contains(f, x) for f in found[1:])]
    return max(shared, key=_size) if shared else None


def valued(mask: ir.Expr, p: ir.Expr | tuple, axis: str = "kv") -> ir.Expr:
    """The mask with every occurrence of its part p read as kx (qx for the query's; of p's type);
    p a tuple of two parts (query_parts): the second read as qx2."""
    name = _AXES[axis][2]
    for i, one in enumerate(p if isinstance(p, tuple) else (p,)):
        mask = ir.replace_expr(mask, one, ir.Var(one.ty, name + ("2" if i else "")))
    return mask


def _contains(e: ir.Expr, x: ir.Expr) -> bool:
    return any(n == x for n in ir.walk(e))


def _size(e: ir.Expr) -> int:
    return sum(1 for _ in ir.walk(e))
