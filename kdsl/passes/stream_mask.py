"""A streamed byte mask tested by warps: where the mask keeps an element exactly when its byte
in the streamed tensor is nonzero, beside a part over anything else (`j <= i and sel[b, h, i,
j] > 0`, `keep[b, h, i, j]`), derive the tiles on which that other part holds everywhere:

    def stream_rest_full = <tile predicate over b, h, q0, q1, k0, k1>

On such a tile the mask is the byte's test alone. The Hopper kernel's warps then look at their
16 rows of the streamed tile in shared memory (four 16-byte reads a lane, attention_wgmma.cuh)
and, where no byte is zero, run the tile as a full one: no per-element read, compare and select.
A per-head mask has no tile summary (mask_analysis: its summary would read as much as the
kernel), so its padding, bands and documents laid out in the tensor were partial tiles, each
element tested; now only the warps whose rows hold a zero byte test theirs. Off unless
KDSL_STREAM_NONZERO=1 (enabled(): it did not pay where timed). Not where a whole-
block summary of the same tensor already classifies its tiles, nor for a mask that reads the
streamed tensor otherwise (`sel[...] == 3`), nor for elements wider than a byte.
"""
from __future__ import annotations

import functools
import os
from dataclasses import replace

from .. import ir
from . import block_bounds, mask_analysis, streaming
from .simplify import FALSE, TRUE, op, simplify

DERIVED = ("stream_rest_full",)


def run(k: ir.Kernel) -> ir.Kernel:
    # Always derived from the mask as it is now: what an IR file carries is dropped first.
    k = replace(k, funcs=tuple((n, e) for n, e in k.funcs if n not in DERIVED))
    if k.kind != "attention" or k.attr("kernel") != "wgmma" or k.func("mask") is None or not enabled():
        return k
    reads = streaming.mask_reads(k)
    if len(reads) != 1 or k.attr("tile_n") % 128:  # (the warps read whole 128-byte rows of the tile)
        return k
    name = reads[0]
    t = k.tensor(name)
    if streaming.ELEM_BYTES[t.dtype] != 1 or _summarised(k, name):
        return k
    rest, tests = [], 0
    for c in ir.conjuncts(k.func("mask")):
        if nonzero_test(c, name, t.dtype):
            tests += 1
        elif any(isinstance(n, ir.Load) and n.tensor == name for n in ir.walk(c)):
            return k  # read some other way: its byte alone does not decide
        else:
            rest.append(c)
    if not tests:
        return k
    full = simplify(block_bounds.truth(functools.reduce(lambda x, y: op("bool", "and", x, y), rest, TRUE),
                                        "", k.tensors, mask_analysis.float_masks(k)).always)
    if full == FALSE or any(isinstance(n, ir.Op) and n.op in ir.TILE_REDUCTIONS for n in ir.walk(full)):
        return k
    return k.with_func("stream_rest_full", full)


def enabled() -> bool:
    """KDSL_STREAM_NONZERO=1 turns the warps' test on. Off by default: on an H200 (B=2 H=16 4096²,
    bench/NOTES.md, sixty-sixth session) a per-head u8 mask under causal laid out in runs ran 1.04x
    slower with it at head dim 128 and 1.08x faster at 64; random bits 1.02x / 1.10x slower."""
    return os.environ.get("KDSL_STREAM_NONZERO", "0") == "1"


def nonzero_test(e: ir.Expr, name: str, dtype: str) -> bool:
    """Whether e is true exactly when the element of `name` it loads is nonzero: the bool
    element itself, `x != 0`, and for elements that cannot be negative `x > 0` / `x >= 1`."""
    load = lambda x: isinstance(x, ir.Load) and x.tensor == name  # noqa: E731
    if load(e):
        return e.ty == "bool"
    if not (isinstance(e, ir.Op) and len(e.args) == 2):
        return False
    x, y = e.args
    zero = lambda v, n=0: isinstance(v, ir.Const) and v.value == n  # noqa: E731
    unsigned = dtype in ("u8", "bool")
    return ((e.op == "ne" and ((load(x) and zero(y)) or (zero(x) and load(y))))
            or (unsigned and e.op == "gt" and load(x) and zero(y))
            or (unsigned and e.op == "lt" and zero(x) and load(y))
            or (unsigned and e.op == "ge" and load(x) and zero(y, 1))
            or (unsigned and e.op == "le" and zero(x, 1) and load(y)))


def _summarised(k: ir.Kernel, name: str) -> bool:
    """Whether a tile summary reads the tensor: its uniform tiles are classified already."""
    return any(any(isinstance(n, ir.Load) and n.tensor == name for n in ir.walk(s.args[0]))
               for s in mask_analysis.summary_slots(k))
