"""Clamp a score's load index that is in range only where the mask keeps the element.

`table[h, min(int(log2(float(i - j) + 1.0) * 3.0), 31)]` under causal: the kernels evaluate the
score at every element of a tile, those the mask drops too (mask_facts.py), and there, at
j > i + 1, the log is NaN and the index unbounded below, so runtime/bounds.py refused every call.
So did `rb[h, min(i - j, 63)]` under causal, at -N + 1 where j > i, and a bias by blocks'
distance `bb[h, min(i // 128 - j // 128, 31)]` under `j // 128 <= i // 128`. Where an index
lies in its axis over the elements the mask keeps (index_intervals.interval_where_kept: under
the mask's top-level comparisons, and where it fixes q - kv's sign) but not over every element,
this pass clamps it to its axis, `max(min(X, S - 1), 0)`: an element the mask drops reads in
bounds, and one it keeps reads X. runtime/bounds.py proves X in range wherever the mask keeps,
per call (attr masked_index names each clamped index "tensor:axis"), and refuses the call
otherwise, as it did before.

Decided at a sample shape: an index in range over every element there stays as written; one
unbounded where the mask keeps too is refused as written.
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
    ranges = intervals.sample_ranges(k, SAMPLE_SIZES)
    sizes = {name: ranges[name][0] for name in k.dims}
    clamped = []

    def rewrite(e: ir.Expr) -> ir.Expr:
        if isinstance(e, ir.Op):
            return ir.Op(e.ty, e.op, tuple(rewrite(a) for a in e.args))
        if not isinstance(e, ir.Load):
            return e
        indices = []
        for axis, idx in enumerate(e.indices):
            size = intervals.eval_size(k.tensor(e.tensor).shape[axis], sizes)
            if _needs_clamp(idx, size, mask, sign, ranges):
                clamped.append(f"{e.tensor}:{axis}")
                idx = intervals.clamp_to_axis(idx, k.tensor(e.tensor).shape[axis])
            indices.append(idx)
        return ir.Load(e.ty, e.tensor, tuple(indices))

    new = rewrite(score)
    if not clamped:
        return k
    return k.with_func("score", new).with_attrs(**{ATTR: sorted(set(clamped))})


def _needs_clamp(idx: ir.Expr, size: int, mask: ir.Expr, sign: int, ranges: dict) -> bool:
    """Whether idx may leave [0, size) over the whole domain but is bounded where the mask keeps
    (in range there at a call's shapes or not: the runtime says which, naming the kept range)."""
    if any(isinstance(n, ir.Load) for n in ir.walk(idx)):  # an index of data: its range is the caller's
        return False
    lo, hi = intervals.interval(idx, ranges)
    if 0 <= lo and hi < size:
        return False
    lo, hi = intervals.interval_where_kept(idx, mask, sign, ranges)
    return lo > -intervals.INF and hi < intervals.INF
