"""Clamp a score's load index that is in range only where the mask keeps the element.

`table[h, min(int(log2(float(i - j) + 1.0) * 3.0), 31)]` under causal: the kernels evaluate the
score at every element of a tile, those the mask drops too (mask_facts.py), and there, at
j > i + 1, the log is NaN and the index unbounded below, so runtime/bounds.py refused every call.
Where an index reads the positions only through q - kv and the mask fixes that difference's sign
(`j <= i`: mask_facts.q_minus_kv_sign), this pass clamps it to its axis, `max(min(X, S - 1), 0)`:
an element the mask drops reads in bounds, and one it keeps reads X, provided X lies in [0, S - 1]
for every q - kv of that sign. runtime/bounds.py proves that per call (attr masked_index names
each clamped index "tensor:axis") and refuses the call otherwise, as it did before.

Only an index that the proof over the whole (q, kv) domain cannot bound at any shape (a side
infinite at a sample shape) is clamped; the others stay as written and are proved as before.
"""
from __future__ import annotations

from .. import ir
from . import index_intervals as intervals, mask_facts

ATTR = intervals.MASKED_INDEX
SAMPLE_SIZES = {"B": 2, "H": 4, "M": 1024, "N": 1024}  # other dims: 64


def run(k: ir.Kernel) -> ir.Kernel:
    score, mask = k.func("score"), k.func("mask")
    if k.kind != "attention" or score is None or mask is None or k.attr(ATTR):
        return k
    sign = mask_facts.q_minus_kv_sign(mask)
    if sign == 0:
        return k
    ranges = intervals.sample_ranges(k, SAMPLE_SIZES)
    clamped = []

    def rewrite(e: ir.Expr) -> ir.Expr:
        if isinstance(e, ir.Op):
            return ir.Op(e.ty, e.op, tuple(rewrite(a) for a in e.args))
        if not isinstance(e, ir.Load):
            return e
        indices = []
        for axis, idx in enumerate(e.indices):
            if _needs_clamp(idx, sign, ranges):
                clamped.append(f"{e.tensor}:{axis}")
                idx = intervals.clamp_to_axis(idx, k.tensor(e.tensor).shape[axis])
            indices.append(idx)
        return ir.Load(e.ty, e.tensor, tuple(indices))

    new = rewrite(score)
    if not clamped:
        return k
    return k.with_func("score", new).with_attrs(**{ATTR: sorted(set(clamped))})


def _needs_clamp(idx: ir.Expr, sign: int, ranges: dict) -> bool:
    """Whether idx is unbounded over the whole domain but bounded over q - kv of the mask's sign."""
    if intervals.by_difference(idx) is None:
        return False
    lo, hi = intervals.interval(idx, ranges)
    if lo > -intervals.INF and hi < intervals.INF:
        return False
    lo, hi = intervals.interval_where_kept(idx, sign, ranges)
    return lo > -intervals.INF and hi < intervals.INF
