"""Masks that compare a value read per key: one gather a key, shared by the warp's shuffles.

A threshold per row against a score per key, a bucket per query against one per key, document
ids where the tile summary cannot prove a tile empty or full:

    ks[b, h, j] >= thr[b, h, i]          bq[b, h, i] == bk[b, h // (H // Hkv), j]          doc[b, i] == doc[b, j]

On a partial tile the Hopper kernel evaluates the mask per element (attention_wgmma.cuh
survivors()): each of a thread's BN/2 elements gathered its key's value, BN/4 loads a thread for
BN distinct keys, in blocks of 16 whose round trips follow each other (4 a 128-key tile), beside
a Q K^T shorter than them. held-out set 40's row_threshold ran its forward at 0.78 of compiled
Flex (H200, 2x16x4096², the eighty-second session), 4 us a partial tile against about 1 for a
dense one. With KDSL_KEY_VALUES the kernel gathers that value once per key of the tile (lane l of
each warp keys k0 + l + 32u: BN / 32 loads a thread, all in flight at once) and each element takes
its key's value from the lane that holds it (__shfl_sync; the accumulator layout puts key
8 jj + 2 t + e of a 32-key chunk at lane 8 (jj % 4) + 2 t + e).

part() finds the part: the largest non-bool subexpression of the mask that gathers captured data
at the key (kv) and depends on nothing per query (q, q - kv); one part a mask or none. A bool
part is key_mask's (passes/key_mask.py: one bit a key, by a vote), which takes precedence.
valued() is the mask with the part read as the variable kx.
"""
from __future__ import annotations

from dataclasses import replace

from .. import ir
from . import streaming

_PER_ROW = ("q", "qf", "dqkf", "dqk")  # what the part may not read
_KEY = ("kv", "kvf")


def applies(k: ir.Kernel, tile_n: int) -> bool:
    """Whether k's partial tiles take their mask's key part by shuffles: a mask with one such
    part, not streamed (read from shared memory per element already: passes/streaming.py), not
    voted as key bits (attr key_mask), on tiles of whole 32-key chunks."""
    mask = k.func("mask")
    if k.kind != "attention" or mask is None or tile_n % 32 or streaming.read_by(k, "mask") or k.attr("key_mask"):
        return False
    return part(mask) is not None


def part(mask: ir.Expr) -> ir.Expr | None:
    """The mask's one key value, or None."""
    return ir.only_largest(mask, _is_part)


def valued(mask: ir.Expr, p: ir.Expr) -> ir.Expr:
    """The mask with every occurrence of its part p read as kx (of p's type)."""
    x = ir.Var(p.ty, "kx")

    def sub(e: ir.Expr) -> ir.Expr:
        if e == p:
            return x
        if isinstance(e, ir.Op):
            return replace(e, args=tuple(sub(a) for a in e.args))
        if isinstance(e, ir.Load):
            return replace(e, indices=tuple(sub(i) for i in e.indices))
        return e
    return sub(mask)


def _is_part(e: ir.Expr) -> bool:
    if not isinstance(e, (ir.Op, ir.Load)) or e.ty not in ("f32", "i32"):
        return False
    if any(ir.uses(e, v) for v in _PER_ROW) or not any(ir.uses(e, v) for v in _KEY):
        return False
    return ir.loads_at(e, _KEY)

