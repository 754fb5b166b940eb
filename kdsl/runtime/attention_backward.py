"""Gradients of an attention kernel under torch autograd.

An eager call whose q, k or v require grad (and grad mode is on) runs the forward through a
torch.autograd.Function that also keeps the forward's lse; its backward launches the
program's backward kernel (codegen/emit_backward.py backward_plan picks its body, one generated source
per kernel and head dims), which recomputes the scores and differentiates the program's score formula
(passes/score_grad.py). A gradient reaching the lse output (programs that declare it) is
folded into the same kernel: d lse / d score is P, so it only shifts delta.

Gradients flow to q, k and v, and to captured float tensors the score reads (a learned bias
table: passes/score_grad.py capture_grads), which the backward kernel built with
KDSL_CAPTURE_GRADS adds by fp32 atomics. A traced call (torch.compile) whose captured tensor
requires grad is refused, not run as if it were a constant: its op computes q, k and v's only.
"""
from __future__ import annotations

import functools
import operator
import os

from ..codegen import emit_backward
from ..errors import LaunchError
from ..passes import streaming, tiling
from ..passes.exp2_fold import LOG2E
from .driver import ArgPack, Launcher, WarpKernel
from . import arrays, backward_order, backward_schedule, geometry, summary
from .launch import Loaded, _align, _attention_key, _l2_bytes, _ptr, _sm_count, _stream_getter
from .programs import Program

BACKWARD = Program(backward=True)
BACKWARD_CAPTURE_GRADS = Program(backward=True, capture_grads=True)


def wants_grad(q, k, v, caps=()) -> bool:
    """Whether an eager call must record the graph for a backward: q, k, v or a captured tensor
    requires grad (CuPy and numpy arrays never do) and grad mode is on."""
    if not any(getattr(x, "requires_grad", False) for x in (q, k, v, *caps)):
        return False
    import torch
    return torch.is_grad_enabled()


def attention_with_grad(kernel, q, k, v, caps, out, lse, scale, tile_summary):
    """The forward of `kernel` recorded for autograd: out, or (out, lse). kernel: an
    AttentionKernel, or the interpreter's (kdsl.interpreted), each with _run (the forward) and
    _backward (dq, dk, dv)."""
    spec = getattr(kernel, "_args", kernel)  # the interpreter's keeps its argument checks there
    check_grad_call(spec, caps, out, lse)
    out, lse = _function().apply(kernel, scale, tile_summary, q, k, v, *caps)
    return (out, lse) if spec.has_lse else out


def check_grad_call(spec, caps, out, lse, capture_grads: bool = True) -> None:
    """Refuse a call recorded for autograd that would leave a gradient out; capture_grads: the
    captured tensors' gradients are computed (eager calls; a traced call's op has none)."""
    for t, x in zip(spec.captures, caps):
        if getattr(x, "requires_grad", False) and not capture_grads:
            raise LaunchError(f"{spec.name}: captured tensor '{t.name}' requires grad, but under torch.compile, kdsl "
                              f"computes gradients for q, k and v only; pass {t.name}.detach() if it is a constant, "
                              f"or call the kernel eagerly")
    if out is not None or lse is not None:
        raise LaunchError(f"{spec.name}: out= and lse= cannot be given while q, k or v require grad (autograd "
                          f"records outputs of its own); leave them out, or call under torch.no_grad()")


@functools.cache
def _function():
    import torch

    class AttentionFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, kernel, scale, tile_summary, q, k, v, *caps):
            out, lse = kernel._run(q, k, v, caps, None, None, scale, tile_summary, keep_lse=True)
            ctx.kernel, ctx.scale = kernel, scale
            ctx.set_materialize_grads(False)  # an output the loss does not reach gets None, not zeros to add
            ctx.save_for_backward(q, k, v, out, lse, *caps)
            return out, lse

        @staticmethod
        def backward(ctx, dout, dlse):
            q, k, v, out, lse, *caps = ctx.saved_tensors
            dout = torch.zeros_like(out) if dout is None else dout.contiguous()
            dq, dk, dv, dcaps = ctx.kernel._backward(q, k, v, out, dout, lse, dlse, caps, ctx.scale,
                                                     ctx.needs_input_grad[6:])
            # a captured tensor the score reads no float value of has gradient 0 (masks and
            # indices are flat): zeros, as autograd gives an input the loss does not reach
            dcaps = [None if not need else torch.zeros_like(c) if g is None else g
                     for c, g, need in zip(caps, dcaps, ctx.needs_input_grad[6:])]
            return (None, None, None, dq, dk, dv, *dcaps)

    return AttentionFunction


def delta(dout, out, dlse):
    """rowsum(dout * out), less the lse's own gradient: dS = P (dP - delta) g'(s) scale."""
    d = (dout.float() * out.float()).sum(-1)
    return (d if dlse is None else d - dlse.float()).contiguous()


def backward(kernel, q, k, v, out, dout, lse, dlse, caps, scale, want_caps=()):
    """(dq, dk, dv, capture grads) of an attention call from its out and lse, and the
    gradients reaching them (torch tensors; dlse may be None). want_caps: per captured tensor,
    whether its gradient is wanted; those the score reads differentiably come back (the
    backward built with KDSL_CAPTURE_GRADS), zeros for the others wanted, None for the rest."""
    import torch
    # the backward kernels take k and v by pointer, row-major (the forward's maps took any strides)
    q, k, v = arrays.dense(q), arrays.dense(k), arrays.dense(v)
    want = tuple(bool(w) for w in want_caps) + (False,) * (len(caps) - len(want_caps))
    key = ("backward", want) + _attention_key(q, k, v, caps, None, None, scale)
    launch = kernel._plans.get(key)
    if launch is None:  # checks and choices that depend only on the call's signature: once
        launch = kernel._plans[key] = _BackwardLaunch(kernel, q, k, v, caps, scale, want)
    if any(_ptr(caps[t]) & 15 for t in launch.chunked_args):  # cp.async and the L2 prefetch: 16-byte chunks
        key += ("no stream",)
        launch = kernel._plans.get(key) or kernel._plans.setdefault(
            key, _BackwardLaunch(kernel, q, k, v, caps, scale, want, stream=False))
    cap_grads = {t.name: torch.zeros(c.shape, dtype=torch.float32, device=c.device)
                 for t, c, w in zip(kernel.captures, caps, want) if w}
    if launch.loaded is None:  # nothing to launch (B, H, M or N is 0)
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v), _delivered(kernel, caps, cap_grads)
    if out.shape != dout.shape or dout.dtype != out.dtype or (dlse is not None and dlse.shape != lse.shape):
        raise LaunchError(f"{kernel.name}: the backward's dout must match out ({list(out.shape)}, {out.dtype}) and "
                          f"dlse the lse; got {list(dout.shape)} {dout.dtype}")
    dout, dlse = dout.contiguous(), None if dlse is None else dlse.float().contiguous()
    stream = _stream_getter("torch", launch.device)()
    # delta = rowsum(dout * out) - dlse in fp32, by the module's helper
    delta = torch.empty(lse.shape, dtype=torch.float32, device=q.device)
    launch.delta.run(stream, [_ptr(dout), _ptr(out), _ptr(dlse) if dlse is not None else 0, _ptr(delta)])
    # every dK and dV element is written (each key block's CTA stores all of its rows)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    dq_acc = torch.zeros(launch.dq_shape, dtype=torch.float32, device=q.device)
    pointers = [_ptr(x) for x in (q, k, v, dout, lse, delta, dq_acc, dk, dv, *caps)]
    if functools.reduce(operator.or_, pointers[:9]) & 15:  # cp.async reads 16 bytes at a time
        for p, n in zip(pointers, ("q", "k", "v", "dout", "lse", "delta")):
            _align(p, n, kernel.name)
    # a gradient buffer per tensor the kernel has one for: null where the build adds none
    pointers += [_ptr(cap_grads[n]) if n in cap_grads else 0 for n in launch.graded]
    pointers.append(0)  # the tile summary of a mask that reads data, computed now on the backward's tiles
    if launch.summary is not None:
        tiles = launch.summary.new_buffer()
        launch.summary.run(stream, pointers[9:9 + len(caps)], _ptr(tiles))
        pointers[-1] = _ptr(tiles)
    # a split's partial dK and dV: every float written (each CTA stores all of its rows and columns)
    part = torch.empty(launch.splits * launch.part_size, dtype=torch.float32, device=q.device) \
        if launch.dkv is not None else None
    pointers.append(_ptr(part) if part is not None else 0)
    if launch.ordered:  # null: the kernel's own order (one wave, or KDSL_BWD_ORDER=0)
        # (order_buffer held until the launch below, which reads it)
        order_buffer, order = launch.order.run(stream, pointers[9:9 + len(caps)], pointers[-2], q.device) \
            if launch.order is not None else (None, 0)
        pointers.append(order)
    if launch.maps:  # q's and dout's maps, re-encoded where their pointers changed
        launch.launcher(stream, launch.pack, pointers, launch.bind_maps, (pointers[0], pointers[3]))
    else:
        launch.launcher(stream, launch.pack, pointers)
    if launch.dkv is not None:
        launch.dkv.run(stream, [_ptr(part), _ptr(dk), _ptr(dv)])
    if launch.dq_rows is None:
        dq = dq_acc.to(q.dtype)
    else:  # fragment-order tiles to rows of q's dtype, by the module's helper
        dq = torch.empty_like(q)
        launch.dq_rows.run(stream, [_ptr(dq_acc), _ptr(dq)])
    return dq, dk, dv, _delivered(kernel, caps, cap_grads)


class _BackwardLaunch:
    """A backward call's launches for one signature (shapes, dtypes, devices, scale, the
    captured tensors whose gradients are wanted): the checked call, the loaded kernel, its grid
    and parameters but the pointers, and its helpers (delta before it, dQ's rows after).
    Cached in the kernel's plans, as the forward's Plan is. stream=False: the program that
    reads the mask's streamed tensors per element (one whose data pointer is not 16-byte
    aligned); a row not a whole number of 16-byte chunks takes it by itself."""

    def __init__(self, kernel, q, k, v, caps, scale, want, stream: bool = True):
        infos, dims, s = kernel.validate(q, k, v, caps, None, None, scale)
        B, H, M, D = q.shape
        Hkv, N, Dv = k.shape[1], k.shape[2], v.shape[3]
        self.loaded, self.stream_args, self.chunked_args = None, (), ()
        if 0 in (B, H, M, N):
            return
        self.device = kernel._device(infos)
        keys = _cta_keys(kernel, D, Dv)
        key_blocks = -(-N // keys)
        if key_blocks * Hkv * B >= 2 ** 31 or B * H * M >= 2 ** 31:
            raise LaunchError(f"{kernel.name}: the backward kernel takes fewer than 2^31 CTAs (one per {keys} "
                              f"keys of each batch and k/v head) and query rows; got {key_blocks} x Hkv={Hkv} x "
                              f"B={B} and B x H x M = {B * H * M}")
        head_splits, query_splits = splits(kernel, B, H, Hkv, M, N, D, Dv, self.device)
        self.splits = head_splits * query_splits  # the partial sums of dK and dV
        self.loaded, plan, extra, self.graded, lowered = _program(kernel, D, Dv, self.device, any(want),
                                                                  query_splits > 1, stream)
        # the captured tensors whose tiles the kernel copies for the mask (emit_backward.backward_plan_for),
        # and all it reads rows of in 16-byte units: those and the ones whose step tiles it asks
        # into L2 (attention_bwd_stream.cuh prefetch_stream_tile), any streamed one
        index = {t.name: i for i, t in enumerate(kernel.captures)}
        streamed = streaming.streamed(lowered) if stream else ()
        self.stream_args = tuple(index[n] for r, n in enumerate(streamed) if plan.streams >> r & 1)
        self.chunked_args = tuple(index[n] for n in streamed)
        if any(caps[t].shape[-1] * caps[t].element_size() % 16 for t in self.chunked_args):
            self.stream_args = self.chunked_args = ()
            self.loaded, plan, extra, self.graded, lowered = _program(kernel, D, Dv, self.device, any(want),
                                                                      query_splits > 1, False)
        # dQ is summed over the key blocks in fp32: as 64-row tiles in fragment order, or rows
        tiles, dp = -(-M // 64), -(-D // 64) * 64
        self.dq_shape = (B, H, tiles, 64 * dp) if plan.dq_tiles else (B, H, M, D)
        ncap, ngrad = len(caps), len(self.graded)
        nmaps = 2 if plan.tma else 0  # q's and dout's tensor maps come first (QdoByTma, attention_bwd_wgmma.cuh)
        ordered = emit_backward.backward_orders(lowered)  # the kernel takes an order (may be null)
        kinds = param_kinds(nmaps, ncap, len(extra), ngrad, query_splits > 1, ordered)
        # A mask that reads data has its tiles classified from a summary made for the backward's
        # own tiles (64 queries by plan.keys; emit_backward.generate_backward) by the module's summary
        # kernel.
        layout = summary.Layout.of(lowered, B, H, M, N, tiles=(tiling.BACKWARD_TILE, plan.keys))
        group = _head_group(kernel, q, Hkv, Dv, key_blocks, self.splits, query_splits, self.device,
                            reads_data=layout is not None)
        values = [None] * (nmaps + 9) + [B, H, Hkv, M, N, group, head_splits, s * LOG2E, s] + [None] * ncap + \
            [dims[n] for n in extra] + [None] * (ngrad + 2) + [query_splits] * (query_splits > 1) + [None] * ordered
        first_cap, first_grad = nmaps + 18, nmaps + 18 + ncap + len(extra)
        self.pack = ArgPack(kinds, values, list(range(nmaps, nmaps + 9)) + list(range(first_cap, first_cap + ncap)) +
                            list(range(first_grad, first_grad + ngrad + 2)) + [len(kinds) - 1] * ordered)
        # the CTAs longest first, counted on the GPU per call, where the tile classes are arithmetic on loads
        units = key_blocks * Hkv * B * self.splits
        self.ordered = ordered
        self.order = backward_order.BackwardOrder(
            self.loaded.module, self.loaded.entry, units, [B, H, Hkv, M, N, group, head_splits, s * LOG2E, s], ncap,
            [dims[n] for n in extra], query_splits if query_splits > 1 else None) \
            if ordered and backward_order.wanted(units, _sm_count(self.device)) else None
        self.summary = None if layout is None else summary.SummaryLaunch(
            self.loaded, self.loaded.entry + "_summary", layout,
            summary.pack(B, H, Hkv, M, N, s * LOG2E, s, ncap, [dims[n] for n in extra]), "torch", self.device)
        self.maps = ()
        if plan.tma:  # boxes of 64 columns x 64 rows of a [B * H, M, D] tensor, zeros past M
            from .tma import RowTiles
            elem = kernel.ir.tensor("q").dtype
            # the backward's maps keep a 256-byte promotion (128 is the forward's: unmeasured here)
            self.maps = (RowTiles(self.pack, 0, elem, B * H, M, D, 64, 256),
                         RowTiles(self.pack, 1, elem, B * H, M, Dv, 64, 256))
        self.launcher = Launcher(self.loaded.fn_ptr, (key_blocks * Hkv * B * self.splits, 1, 1),
                                 (plan.threads, 1, 1), self.loaded.smem)
        entry = self.loaded.entry
        self.part_size = B * Hkv * N * (D + Dv)  # floats of a split's partial [dK | dV]
        self.dkv = None if self.splits == 1 else WarpKernel(
            self.loaded.module, entry + "_dkv", -(-self.part_size // 64),  # a thread a pair
            ArgPack(["ptr"] * 3 + ["i64"] * 2 + ["i32"], [None] * 3 + [B * Hkv * N * D, B * Hkv * N * Dv, self.splits],
                    [0, 1, 2]))
        self.delta = WarpKernel(self.loaded.module, entry + "_delta", B * H * M,
                                ArgPack(["ptr"] * 4 + ["i32"], [None] * 4 + [B * H * M], [0, 1, 2, 3]))
        # one warp per 128 floats of dq_acc (attention_bwd_rows.cuh dq_tiles_to_rows), which holds
        # dQ / scale: the softmax scale is applied here
        items = B * H * tiles * 64 * dp // 128
        self.dq_rows = WarpKernel(self.loaded.module, entry + "_dq", items,
                                  ArgPack(["ptr"] * 2 + ["i32"] * 2 + ["f32"], [None, None, M, items, s], [0, 1])) \
            if plan.dq_tiles else None
        self.scale = s

    def bind_maps(self, pointers) -> None:
        for m, p in zip(self.maps, pointers):
            m.bind(p)


def _head_splits(kernel, group: int, ctas: int, device: int) -> int:
    """Into how many ranges the backward splits each pair's `group` query heads (a CTA each per
    key block; geometry.backward_head_splits). KDSL_BWD_HEAD_SPLITS, a divisor of the group,
    forces it (tests and A/B timing)."""
    forced = os.environ.get("KDSL_BWD_HEAD_SPLITS")
    if not forced:
        return geometry.backward_head_splits(group, ctas, _sm_count(device))
    if not forced.isdigit() or int(forced) < 1 or group % int(forced):
        raise LaunchError(f"{kernel.name}: KDSL_BWD_HEAD_SPLITS={forced!r} must divide the {group} query heads a "
                          f"k/v head serves")
    return int(forced)


def _cta_keys(kernel, D: int, Dv: int) -> int:
    """The keys a backward CTA takes (emit_backward.backward_plan): what the splits count."""
    from ..passes.target import get_target
    return emit_backward.backward_plan(D, Dv, get_target(kernel._arch())).keys


def splits(kernel, B: int, H: int, Hkv: int, M: int, N: int, D: int, Dv: int, device: int) -> tuple[int, int]:
    """(head_splits, query_splits) of a backward call: with few k/v heads a pair's query heads
    split over CTAs, and with few CTAs still their query tiles (the query-split program, a
    program of its own: Program.query_split), dK and dV summed from partials after; where the
    mask's tiles are known on the host, the split its launch's simulated schedule favours
    (backward_schedule; KDSL_BWD_SCHEDULE=0: the counting rules alone). Also asked at the
    forward, to prebuild the program the backward will run (prebuild.start_backward)."""
    keys = _cta_keys(kernel, D, Dv)
    key_blocks = -(-N // keys)
    head_splits = _head_splits(kernel, H // Hkv, key_blocks * Hkv * B, device)
    query_splits = _query_splits(kernel, M, key_blocks * Hkv * B * head_splits, device)
    forced = os.environ.get("KDSL_BWD_HEAD_SPLITS") or os.environ.get("KDSL_BWD_QUERY_SPLITS")
    if not forced and os.environ.get("KDSL_BWD_SCHEDULE", "1") != "0":
        l2 = _l2_bytes(device) if kernel.ir.func("mask") is not None else 0  # (the head group's; 1 unmasked)
        head_splits, query_splits = backward_schedule.best_splits(
            kernel.ir, B, H, Hkv, M, N, D, Dv, keys, _sm_count(device), l2, (head_splits, query_splits))
    if query_splits > 1:  # only with a query head a CTA (the kernels' walks rely on it: BwdSteps)
        head_splits = H // Hkv
    return head_splits, query_splits


def copies_fit(caps, N: int) -> bool:
    """Whether the backward can copy the tiles of any 1-byte tensor its mask may read at
    [..., q, kv]: each such tensor's rows whole 16-byte chunks and its pointer 16-byte aligned
    (cp.async), as _BackwardLaunch and backward() decide; else the per-element program
    (stream=False) runs. Judged at the forward from every 1-byte capture whose last axis has N
    entries, for the prebuild (prebuild.start_backward): a tensor the mask does not read only
    makes the prebuild build a program the backward then does not take."""
    def fits(c) -> bool:
        shape = tuple(getattr(c, "shape", ()))
        if len(shape) < 2 or shape[-1] != N or getattr(c, "element_size", lambda: 0)() != 1:
            return True
        return shape[-1] % 16 == 0 and _ptr(c) % 16 == 0
    return all(fits(c) for c in caps)


def backward_program(capture_grads: bool, query_split: bool, stream: bool = True) -> Program:
    """The backward's program: whether it adds captured tensors' gradients, whether its CTAs
    may split their query tiles and whether it copies the mask's streamed tensors' tiles."""
    return Program(backward=True, capture_grads=capture_grads, query_split=query_split, stream=stream)


def param_kinds(nmaps: int, ncap: int, nextra: int, ngrad: int, query_split: bool = False,
                ordered: bool = False) -> list[str]:
    """The backward kernel's parameters (templates/attention_backward.cu.j2) by kind: q's and
    dout's tensor maps (the TMA body), q k v dout lse delta dq_acc dk dv, B H Hkv M N
    head_group head_splits, scale_log2 scale, the captured tensors, the dims only they bind,
    their gradient buffers, the summary and the partials of dK / dV, in the query-split
    program (Program.query_split) query_splits, and where the tile classes read data the
    CTAs' order (emit_backward.backward_orders)."""
    return ["tmap"] * nmaps + ["ptr"] * 9 + ["i32"] * 7 + ["f32"] * 2 + ["ptr"] * ncap + ["i32"] * nextra + \
        ["ptr"] * (ngrad + 2) + ["i32"] * query_split + ["ptr"] * ordered


def _query_splits(kernel, M: int, ctas: int, device: int) -> int:
    """Into how many ranges the backward splits the query tiles of its CTAs (a CTA each;
    geometry.backward_query_splits). KDSL_BWD_QUERY_SPLITS forces it (tests and A/B timing)."""
    forced = os.environ.get("KDSL_BWD_QUERY_SPLITS")
    if not forced:
        return geometry.backward_query_splits(M, ctas, _sm_count(device))
    if not forced.isdigit() or int(forced) < 1:
        raise LaunchError(f"{kernel.name}: KDSL_BWD_QUERY_SPLITS={forced!r} must be a positive integer")
    return int(forced)


def _head_group(kernel, q, Hkv: int, Dv: int, key_blocks: int, splits: int, query_splits: int, device: int,
                reads_data: bool) -> int:
    """How many units of a (b, k/v head) pair and a range of its query heads and tiles (`splits` a pair)
    the backward orders together, key block by key block
    (AttnArgs::head_group, attention_common.cuh backward_block; geometry.backward_head_group).
    1 without a mask: every CTA is as long as the next, and head by head shares L2 best."""
    if kernel.ir.func("mask") is None:
        return 1
    B, H, M, D = q.shape
    return geometry.backward_head_group(B, H, Hkv, M, D, Dv, q.element_size(), key_blocks, _sm_count(device),
                                        _l2_bytes(device), reads_data, splits, query_splits)


def _delivered(kernel, caps, cap_grads: dict) -> list:
    """Each captured tensor's gradient in its own dtype, or None where it was not wanted."""
    return [cap_grads[t.name].to(c.dtype) if t.name in cap_grads else None for t, c in zip(kernel.captures, caps)]


def dq_from_tiles(acc, M: int, D: int):
    """attention_bwd_wgmma.cuh's dq_acc, [B, H, tiles, 64 * DP] with each 64-row tile in the
    order its accumulator fragments were stored (warpgroup, warp, n-tile j, lane, row half,
    column pair), as [B, H, M, D] rows (row 16 warp + 8 half + lane / 4, column
    warpgroup * DP / 2 + 8 j + 2 (lane % 4) + pair); dq_acc holds dQ / scale, which this leaves
    as it is. The layout's reference in torch ops: a call's dq comes from the module's helper
    kernel (attention_bwd_rows.cuh), tested against it."""
    B, H, tiles, n = acc.shape
    dp = n // 64
    t = acc.view(B, H, tiles, 2, 4, dp // 16, 8, 4, 2, 2)  # warpgroup, warp, j, lane / 4, lane % 4, half, pair
    rows = t.permute(0, 1, 2, 4, 8, 6, 3, 5, 7, 9).reshape(B, H, tiles * 64, dp)  # columns wg * dp / 2 + 8 j + ...
    # each column's place there: past 128 a warpgroup's n-tiles are not consecutive columns
    by_column = [0] * dp
    for v in range(dp):
        wg, j = divmod(v // 8, dp // 16)
        by_column[half_col(dp, wg, j) + v % 8] = v
    return rows[..., by_column][:, :, :M, :D]


def half_col(width: int, wg: int, j: int) -> int:
    """The first column of warpgroup wg's n-tile j (8 columns) of a padded head dim `width` in
    the wgmma backwards (attention_bwd_rows.cuh, BwdHalfCols): the 64-column blocks in turn,
    then half of a last odd block."""
    pairs, half = width // 128, width % 128 // 2
    return (2 * (j // 8) + wg) * 64 + 8 * (j % 8) if j < 8 * pairs else 128 * pairs + wg * half + 8 * (j - 8 * pairs)


def _program(kernel, d: int, dv: int, device: int, capture_grads: bool = False, query_split: bool = False,
             stream: bool = True):
    """The loaded backward kernel for these head dims, its plan (emit_backward.backward_plan_for: launch,
    dq_acc's layout, the mask's copied tiles), the dims only captured tensors bind (extra int
    parameters), the captured tensors it has gradient buffers for (in parameter order) and the
    lowered kernel it was built from, built once per kernel, device, whether it adds those
    gradients, whether its CTAs may split their query tiles (AttnArgs::query_splits) and whether
    it copies the mask's streamed tensors (stream; each a program of its own)."""
    key = ("backward", d, dv, device, capture_grads, query_split, stream)
    if key not in kernel._loaded:
        from ..passes import score_grad
        from ..passes.target import get_target
        from .compiler import build
        target = get_target(kernel._arch())
        plan = emit_backward.backward_plan(d, dv, target)
        if not plan.buffers:
            raise LaunchError(f"{kernel.name}: the backward kernel at head dims {d} / {dv} needs {plan.smem // 1024} KB of "
                              f"shared memory, more than {target.arch}'s {target.smem_per_block // 1024} KB a block; "
                              f"smaller head dims fit")
        built = build(kernel._kernel_ir(), kernel._arch(), d, value_dim=dv,
                      program=backward_program(capture_grads, query_split, stream))
        plan = emit_backward.backward_plan_for(built.kernel, target)  # its smem holds the mask's copied tiles
        kernel._loaded[key] = (Loaded(built.compiled.cubin, built.generated.entry, plan.smem), plan,
                               built.generated.capture_dims, score_grad.capture_grad_tensors(built.kernel), built.kernel)
    return kernel._loaded[key]
