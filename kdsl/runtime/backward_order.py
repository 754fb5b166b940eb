"""The backward's CTAs longest first, where its tile classes are arithmetic on data it loads
(emit_backward.backward_orders: sinks or a prefix per batch; not the tile summary's document ids).

The hardware starts a grid's CTAs in blockIdx order; the backward's order (attention_common.cuh
backward_block) puts the long CTAs of masks of positions first, but under a mask of data which
CTAs are long is known only from the data. Each call, the module's two helpers count every CTA's
tiles on the GPU and sort the CTAs longest first (attention_bwd_order.cuh) into the order the
kernel reads (AttnArgs::order). Attention sinks beside a window ran with a few SMs busy 43 %
past the mean before (bench/NOTES.md, eighty-fifth session).

KDSL_BWD_ORDER=0 passes no order (the kernel's own; A/B timing).
"""
from __future__ import annotations

import os

from .driver import ArgPack, Launcher, WarpKernel

MOST_UNITS = 4096  # attention_bwd_order.cuh kOrderMostUnits
SORT_THREADS = 1024  # its __launch_bounds__


def wanted(units: int, sms: int) -> bool:
    """Whether a grid of `units` CTAs is ordered: more than one wave (in one wave all start at
    once) and no more than the sort holds; not under KDSL_BWD_ORDER=0."""
    return sms < units <= MOST_UNITS and os.environ.get("KDSL_BWD_ORDER", "1") != "0"


def cost_kinds(ncap: int, ndims: int, query_split: bool) -> list[str]:
    """`<entry>_cost`'s parameters by kind: B H Hkv M N head_group head_splits, scale_log2 scale,
    the captured tensors, the dims only they bind, the summary, in the query-split program
    query_splits, the keys and their count."""
    return ["i32"] * 7 + ["f32"] * 2 + ["ptr"] * ncap + ["i32"] * ndims + ["ptr"] + ["i32"] * query_split + \
        ["ptr", "i32"]


class BackwardOrder:
    """The order helpers of one backward plan: `<entry>_cost`, a warp a CTA, with the kernel's
    scalars and captured tensors (templates/attention_backward.cu.j2), then `<entry>_order`."""

    def __init__(self, module, entry: str, units: int, scalars: list, ncap: int, dims: list,
                 query_splits: int | None):
        # B H Hkv M N head_group head_splits, scale_log2 scale, the captures, their dims, the
        # summary, [query_splits], the keys, units
        tail = [query_splits] if query_splits is not None else []
        kinds = cost_kinds(ncap, len(dims), bool(tail))
        values = list(scalars) + [None] * ncap + list(dims) + [None] + tail + [None, units]
        slots = list(range(9, 9 + ncap)) + [9 + ncap + len(dims), len(kinds) - 2]
        self.cost = WarpKernel(module, entry + "_cost", units, ArgPack(kinds, values, slots))
        fn = module.get_function(entry + "_order")
        self._fn = fn  # kept: the handle lives as long as this object
        self.sort_pack = ArgPack(["ptr", "ptr", "i32"], [None, None, units], [0, 1])
        self.sort = Launcher(int(fn.ptr), (1, 1, 1), (SORT_THREADS, 1, 1), 0)
        self.units = units

    def run(self, stream: int, capture_ptrs, summary_ptr: int, device) -> tuple:
        """Counts and sorts on `stream`; (the buffer to keep alive until the kernel has read it,
        the order's pointer)."""
        import torch
        # keys: units int64; the order after them: units int32
        buf = torch.empty(self.units + (self.units + 1) // 2, dtype=torch.int64, device=device)
        keys = buf.data_ptr()
        order = keys + 8 * self.units
        self.cost.run(stream, [*capture_ptrs, summary_ptr, keys])
        self.sort(stream, self.sort_pack, [keys, order])
        return buf, order
