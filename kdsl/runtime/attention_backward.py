"""Gradients of an attention kernel under torch autograd.

An eager call whose q, k or v require grad (and grad mode is on) runs the forward through a
torch.autograd.Function that also keeps the forward's lse; its backward launches the
program's backward kernel (kdsl/attention_bwd.cuh, one generated source per kernel and head
dims), which recomputes the scores and differentiates the program's score formula
(passes/score_grad.py). A gradient reaching the lse output (programs that declare it) is
folded into the same kernel: d lse / d score is P, so it only shifts delta.

Gradients flow to q, k and v. A captured tensor that requires grad is refused, not silently
treated as a constant.
"""
from __future__ import annotations

import functools

from ..codegen import emit
from ..errors import LaunchError
from ..passes import tiling
from ..passes.exp2_fold import LOG2E
from .driver import ArgPack, Launcher
from .launch import Loaded, _ptr, _stream_getter
from .programs import Program

BACKWARD = Program(backward=True)


def wants_grad(q, k, v) -> bool:
    """Whether an eager call must record the graph for a backward: q, k or v require grad
    (CuPy and numpy arrays never do) and grad mode is on."""
    if not (getattr(q, "requires_grad", False) or getattr(k, "requires_grad", False)
            or getattr(v, "requires_grad", False)):
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


def check_grad_call(spec, caps, out, lse) -> None:
    """Refuse a call recorded for autograd that would leave a gradient out (eager or traced)."""
    for t, x in zip(spec.captures, caps):
        if getattr(x, "requires_grad", False):
            raise LaunchError(f"{spec.name}: captured tensor '{t.name}' requires grad, but kdsl computes gradients "
                              f"for q, k and v only; pass {t.name}.detach() if it is a constant")
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
            ctx.save_for_backward(q, k, v, out, lse, *caps)
            return out, lse

        @staticmethod
        def backward(ctx, dout, dlse):
            q, k, v, out, lse, *caps = ctx.saved_tensors
            dout = torch.zeros_like(out) if dout is None else dout.contiguous()
            dq, dk, dv = ctx.kernel._backward(q, k, v, dout, lse, delta(dout, out, dlse), caps, ctx.scale)
            return (None, None, None, dq, dk, dv, *[None] * len(caps))

    return AttentionFunction


def delta(dout, out, dlse):
    """rowsum(dout * out), less the lse's own gradient: dS = P (dP - delta) g'(s) scale."""
    d = (dout.float() * out.float()).sum(-1)
    return (d if dlse is None else d - dlse.float()).contiguous()


def backward(kernel, q, k, v, dout, lse, delta, caps, scale):
    """(dq, dk, dv) of an attention call from its dout, lse and delta (torch tensors)."""
    import torch
    infos, dims, s = kernel.validate(q, k, v, caps, None, None, scale)
    B, H, M, D = q.shape
    Hkv, N, Dv = k.shape[1], k.shape[2], v.shape[3]
    dq_acc = torch.zeros((B, H, M, D), dtype=torch.float32, device=q.device)
    dk, dv = torch.zeros_like(k), torch.zeros_like(v)
    if 0 in (B, H, M, N):
        return dq_acc.to(q.dtype), dk, dv
    if B > 65535 or Hkv > 65535:
        raise LaunchError(f"{kernel.name}: the backward kernel takes at most 65535 batches and k/v heads "
                          f"(grid y and z), got B={B}, Hkv={Hkv}")
    device = kernel._device(infos)
    loaded, threads, extra = _program(kernel, D, Dv, device)
    ncap = len(caps)
    kinds = ["ptr"] * 9 + ["i32"] * 5 + ["f32"] * 2 + ["ptr"] * ncap + ["i32"] * len(extra)
    values = [None] * 9 + [B, H, Hkv, M, N, s * LOG2E, s] + [None] * ncap + [dims[n] for n in extra]
    pack = ArgPack(kinds, values, list(range(9)) + list(range(16, 16 + ncap)))
    grid = (-(-N // tiling.BACKWARD_TILE), Hkv, B)
    pointers = [_ptr(x) for x in (q, k, v, dout, lse, delta, dq_acc, dk, dv, *caps)]
    Launcher(loaded.fn_ptr, grid, (threads, 1, 1), loaded.smem)(_stream_getter("torch", device)(), pack, pointers)
    return dq_acc.to(q.dtype), dk, dv


def _program(kernel, d: int, dv: int, device: int):
    """The loaded backward kernel for these head dims, its threads, and the dims only captured
    tensors bind (extra int parameters), built once per kernel and device."""
    key = ("backward", d, dv, device)
    if key not in kernel._loaded:
        from ..passes.target import get_target
        from .compiler import build
        target = get_target(kernel._arch())
        buffers = emit.backward_buffers(d, dv, target.smem_per_block)
        smem, threads = emit.backward_launch(d, dv, buffers or 1)
        if not buffers:
            raise LaunchError(f"{kernel.name}: the backward kernel at head dims {d} / {dv} needs {smem // 1024} KB of "
                              f"shared memory, more than {target.arch}'s {target.smem_per_block // 1024} KB a block; "
                              f"smaller head dims fit")
        built = build(kernel._kernel_ir(False), kernel._arch(), d, value_dim=dv, program=BACKWARD)
        kernel._loaded[key] = (Loaded(built.compiled.cubin, built.generated.entry, smem), threads,
                               built.generated.capture_dims)
    return kernel._loaded[key]
