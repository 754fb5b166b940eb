"""Masks with a part read per key: one bit a key, by a vote of the warp.

Global tokens flagged per key, a key validity or type read from a tensor, a key parity:

    is_global[b, j] or abs(i - j) < 256          valid[b, h, j]          j % 3 != 0 and j <= i

On a partial tile the Hopper kernel evaluates the mask per element (attention_wgmma.cuh
survivors()), and for such a mask each of a thread's BN/2 elements (two rows of BN/4 keys)
gathered its key's flag (an address, a clamp and a load a column) and packed its bit, although a
tile has only BN keys, the same for every row. With attr key_mask = 1 each warp evaluates that
part once per key of the tile (lane l keys k0 + l + 32u) and votes, so a thread holds the tile's
bits in four words, spread to its elements' keep bits by word operations
(attention_wgmma_parts.cuh spread_key_bits).

part() finds the part: the largest bool subexpression of the mask that depends on the key
position (kv) and on nothing per query (q, q - kv), and gathers captured data at the key or
divides the key (`j % 3`, `j // 64`): one part per mask, or none (two distinct such parts keep
the mask per element). rests() is the rest of the mask with that part true and false: the two
arms the bit chooses between. An arm is a constant (`flag or window` keeps every key whose flag
is set), one key interval per row (arm_interval: kv_bounds.solve of the arm; the kernel turns two
bounds a row into the arm's bits with word operations) or neither (tested per element).
applies() takes a part whose arms are all constants or intervals, and a part that gathers at the
key beside one arm per element. Measured on an H200 (2026-12-01, attrs_sweep.py, in turns, B=2
H=16 4096², random flags, against the per-element mask): a key validity x1.62 / x1.59 (D=64 /
128), global flags beside a window x1.56 / x1.50, a padding flag under bottom-right causal x1.49 /
x1.51, `(kvalid[b, j] and not qpad[b, i]) or i == j` x1.30 (128), a key parity beside a window
x1.16 / x1.20, `j <= i and (i - j < 128 or j % 4 == 0)` x1.22 (128), the Sparse Transformer's fixed
pattern x1.03, phases of 32 keys by head x1.03, halves of 32 keys under causal x1.08 (64). Both
arms per element lost (x0.85 and x0.90 on the first two of those before their arms were
intervals), and a part that only divides the key beside an arm per element gained nothing it
could keep (x0.95-1.06): those stay per element.
"""
from __future__ import annotations


from .. import ir
from . import kv_bounds, streaming
from .simplify import TRUE, simplify

KB = ir.Var("bool", "kb")  # the part's bit for the element's key, in the mask rests() splits
_PER_ROW = ("q", "qf", "dqkf", "dqk")  # what the part may not read
_KEY = ("kv", "kvf")
_KEY_OPS = ("mod", "floordiv", "div")  # a division of the key: worth a bit per key too


def applies(k: ir.Kernel, tile_n: int) -> bool:
    """Whether k's mask has a key part the kernel takes as bits on tiles of tile_n keys: its arms
    constants or key intervals, or a gather at the key beside one arm per element (a streamed
    mask is read from shared memory per element already: passes/streaming.py)."""
    mask = k.func("mask")
    if k.kind != "attention" or mask is None or streaming.read_by(k, "mask"):
        return False
    p = part(mask)
    if p is None:
        return False
    per_element = [r for r in rests(mask, p) if not isinstance(r, ir.Const) and arm_interval(r, tile_n) is None]
    return not per_element or (len(per_element) == 1 and ir.loads_at(p, _KEY))


def rests(mask: ir.Expr, p: ir.Expr) -> tuple[ir.Expr, ir.Expr]:
    """The mask with its part p true, and false (simplified: a constant where the part decides)."""
    keyed = with_kb(mask, p)
    return tuple(simplify(ir.substitute(keyed, {KB.name: ir.Const("bool", v)})) for v in (True, False))


def arm_interval(arm: ir.Expr, tile_n: int) -> tuple[ir.Expr, ir.Expr] | None:
    """The arm beside the bit as one key interval per row on every tile of tile_n keys
    (passes/kv_bounds.py: a window, causal), or None: the kernel then turns two bounds a row
    into the arm's bits with word operations instead of testing it per element."""
    keys = kv_bounds.solve(arm, tile_n)
    if keys is None or simplify(keys.tiles) != TRUE:
        return None
    return kv_bounds.interval(keys, tile_n)


def part(mask: ir.Expr) -> ir.Expr | None:
    """The mask's one key part, or None."""
    return ir.only_largest(mask, _is_part)


def _is_part(e: ir.Expr) -> bool:
    if not isinstance(e, (ir.Op, ir.Load)) or e.ty != "bool":
        return False
    if any(ir.uses(e, v) for v in _PER_ROW) or not any(ir.uses(e, v) for v in _KEY):
        return False
    # a gather at the key, or a division of it; a compare with a bound read per batch
    # (`j < kv_len[b]`) is one instruction an element, and passes/kv_bounds.py's interval
    return ir.loads_at(e, _KEY) or any(isinstance(n, ir.Op) and n.op in _KEY_OPS and
                                       any(ir.uses(x, v) for x in n.args for v in _KEY) for n in ir.walk(e))


def with_kb(e: ir.Expr, p: ir.Expr) -> ir.Expr:
    """e with every occurrence of the part p read as kb."""
    return ir.replace_expr(e, p, KB)
