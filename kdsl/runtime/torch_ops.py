"""kdsl kernels as torch operators, so that torch.compile(fullgraph=True) keeps a model that
calls them in one graph (and CUDA graphs capture them, mode="reduce-overhead" included).

Each kernel of a module loaded while torch is imported becomes two `torch.library` custom
ops: `kdsl::NAME_HASH`, which returns new outputs, and `kdsl::NAME_HASH_out`, which writes
into the `out=` (and `lse=`) tensors a call passes and declares them mutated. HASH covers the
kernel's IR, its backend (GPU or CPU interpreter) and its target, so two programs with a kernel
of one name get ops of their own, and loading a program again reuses its ops. Their fake
(meta) implementations give the outputs' shapes and dtypes, and, when the shapes are static,
check the arguments with the eager path's own code, so a bad call is refused while tracing.

Eager calls do not go through the dispatcher, which costs about 20 µs of host time per call:
a kernel takes its op only while torch.compile traces it (`compiling()`). Gradients: the
functional op returns (out, lse) whatever the kernel declares (the caller gets what it
declared), and its registered autograd formula calls a third op, `kdsl::NAME_HASH_backward`,
which runs the backward kernel (runtime/attention_backward.py, as eager calls do).
"""
from __future__ import annotations

import hashlib
import sys
import weakref

from .. import ir
from ..errors import KdslError, LaunchError
from . import arrays, attention_backward, geometry, head_pad
from .summary import Layout, TileSummary

_OPS: dict[str, tuple] = {}  # op name -> (op returning new outputs, op writing into out=)
# op name -> the kernels (modules loaded from one program) its implementation may call. Weak:
# an op lives as long as the process, a module only as long as its user keeps it.
_KERNELS: dict[str, list] = {}
_running_op = 0                  # > 0 while an op's implementation runs: its kernel call is eager

# A tile summary (runtime/summary.py) travels as its buffer, the kernel it was made for and
# its layout [tile_m, tile_n, warps, entries...], from which the implementation rebuilds it.
_ATTENTION_ARGS = "Tensor q, Tensor k, Tensor v, Tensor[] captures, float? scale, Tensor? summary, " \
    "str? summary_of, int[]? summary_layout"
_GEMM_ARGS = "Tensor a, Tensor a_scale, Tensor b, Tensor b_scale, Tensor? extra"


_torch = None  # the torch module, once register() or compiling() has seen it imported


def compiling() -> bool:
    """Whether torch.compile is tracing the caller; cheap when it is not (no torch import).
    Dynamo traces this function: it reads torch from a global, not from sys.modules, which
    Dynamo would copy item by item while other threads may import (an H200 run failed with
    "dictionary changed size during iteration" there, 2026-11-29)."""
    torch = _torch if _torch is not None else _imported_torch()
    return torch is not None and not _running_op and torch.compiler.is_compiling()


def _imported_torch():
    global _torch
    _torch = sys.modules.get("torch")
    return _torch


def register(kernel, backend: str, arch: str | None) -> None:
    """Make `kernel` (a module's callable; backend 'cuda' or 'interpret') a pair of torch ops,
    when torch is imported: registering needs torch, and must happen outside tracing."""
    torch = _imported_torch()
    if torch is None:
        return
    k = kernel.ir
    digest = hashlib.sha256(f"{ir.print_ir(k)}\n{backend}\n{arch}".encode()).hexdigest()[:12]
    name = f"{k.name}_{digest}"
    _KERNELS[name] = [r for r in _KERNELS.get(name, []) if r() is not None] + [weakref.ref(kernel)]
    if name not in _OPS:
        define = _define_attention if k.kind == "attention" else _define_gemm
        _OPS[name] = define(torch, name, k)
    kernel.torch_ops = _OPS[name]


def _define(torch, name: str, schema: str, impl, fake, mutates=()):
    tags = [getattr(torch.Tag, "needs_exact_strides")] if hasattr(torch.Tag, "needs_exact_strides") else []
    op = torch.library.custom_op(f"kdsl::{name}", impl, mutates_args=mutates, schema=schema, tags=tags)
    op.register_fake(fake)
    return getattr(getattr(torch.ops.kdsl, name), "default")


def _kernel(name: str):
    """A live kernel of the op (they are alike: one program, backend and target)."""
    kernel = next((k for k in (r() for r in reversed(_KERNELS[name])) if k is not None), None)
    if kernel is None:
        raise KdslError(f"torch op kdsl::{name} was called after every kdsl module holding its kernel was freed; "
                        f"keep the module alive while compiled code calls it")
    return kernel


def _eager(name: str, *args, method: str = "__call__", **kw):
    """The op's implementation: the kernel's eager call, or another eager method of it (never
    the op again)."""
    global _running_op
    _running_op += 1
    try:
        return getattr(_kernel(name), method)(*args, **kw)
    finally:
        _running_op -= 1


def _static(*tensors) -> bool:
    """Whether every size and stride is a plain int (not a symbol of dynamic shapes): then the
    eager path's checks can run on fake tensors without specialising the graph."""
    return all(type(d) is int for x in tensors if x is not None for d in (*x.shape, *x.stride()))


def _spec(kernel):
    """The object whose methods check a call's arguments (an interpreted kernel holds one)."""
    return getattr(kernel, "_args", kernel)


# ------------------------------------------------------------------------------ attention

def _attention_shapes(q, v):
    """out [B, H, M, Dv] and lse [B, H, M], as the calling convention defines them."""
    return (*q.shape[:3], v.shape[3]), tuple(q.shape[:3])


def _define_attention(torch, name: str, k: ir.Kernel):
    def run(q, k_, v, captures, scale, *summary):
        """(out, lse) whether or not the kernel declares lse: the backward reads it."""
        return _eager(name, q, k_, v, list(captures), None, None, scale, tile_summary=_summary(*summary),
                      keep_lse=True, method="_run")

    def run_into(q, k_, v, captures, scale, summary, summary_of, summary_layout, out, lse):
        _eager(name, q, k_, v, *captures, out=out, lse=lse, scale=scale,
               tile_summary=_summary(summary, summary_of, summary_layout))

    def fake(q, k_, v, captures, scale, summary, summary_of, summary_layout, out=None, lse=None):
        if _static(q, k_, v, *captures, out, lse):
            if head_pad.needed(q, v):  # the eager call pads: its checks
                head_pad.check(_spec(_kernel(name)), q, k_, v, captures, scale)
            else:
                _spec(_kernel(name)).validate(q, k_, v, captures, out, lse, scale)
        if out is not None:
            return None
        out_shape, lse_shape = _attention_shapes(q, v)
        return q.new_empty(out_shape), q.new_empty(lse_shape, dtype=torch.float32)

    def run_backward(q, k_, v, out, lse, dout, dlse, captures, scale):
        return _eager(name, q, k_, v, out, dout, lse, dlse, list(captures), scale,
                      method="_backward")[:3]  # a traced call's captures require no grad (check_grad_call)

    def fake_backward(q, k_, v, out, lse, dout, dlse, captures, scale):
        return torch.empty_like(q), torch.empty_like(k_), torch.empty_like(v)

    forward = _define(torch, name, f"({_ATTENTION_ARGS}) -> (Tensor, Tensor)", run, fake)
    backward = _define(torch, f"{name}_backward", "(Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor dout, "
                       "Tensor? dlse, Tensor[] captures, float? scale) -> (Tensor, Tensor, Tensor)", run_backward,
                       fake_backward)

    def setup_context(ctx, inputs, output):
        q, k_, v, captures, scale, _, _, layout = inputs
        ctx.save_for_backward(q, k_, v, *output, *captures)
        ctx.scale = scale
        # the gradients' structure is the inputs': a list where a list came
        ctx.no_grads = ([None] * len(captures), None, None, None, None if layout is None else [None] * len(layout))

    def differentiate(ctx, dout, dlse):
        q, k_, v, out, lse, *captures = ctx.saved_tensors
        dout = torch.zeros_like(out) if dout is None else dout.contiguous()
        return (*backward(q, k_, v, out, lse, dout, dlse, captures, ctx.scale), *ctx.no_grads)

    torch.library.register_autograd(f"kdsl::{name}", differentiate, setup_context=setup_context)
    return (forward,
            _define(torch, f"{name}_out", f"({_ATTENTION_ARGS}, Tensor(a!) out, Tensor(b!)? lse) -> ()", run_into,
                    fake, mutates=("out", "lse")))


def attention(kernel, q, k, v, captures, named, out, lse, scale, tile_summary):
    """A call while torch.compile traces: the kernel's op, arguments as the eager call takes them."""
    ops = _ops(kernel)
    spec = _spec(kernel)
    q, k, v, caps = spec.inputs(q, k, v, captures, named)
    if scale is not None:  # the op's schema takes a float: refuse what eager refuses, with its message
        scale = geometry.softmax_scale(scale, None, kernel.name)
    if any(getattr(x, "requires_grad", False) for x in (q, k, v, *caps)):
        # recorded for autograd (the op's backward is registered): as eager, refuse what would
        # leave a gradient out
        attention_backward.check_grad_call(spec, caps, out, lse, capture_grads=False)
    caps = _detached(*caps)
    summary = (None, None, None)
    if tile_summary is not None:
        given = TileSummary.expect(kernel.name, tile_summary)
        layout = given.layout and [given.layout.tile_m, given.layout.tile_n, given.layout.warps, *given.layout.entries]
        summary = (given.buffer, given.kernel, layout)
    if out is None and lse is None:
        out, lse = ops[0](q, k, v, caps, scale, *summary)
        return (out, lse) if spec.has_lse else out
    q, k, v = _detached(q, k, v)
    out_shape, lse_shape = _attention_shapes(q, v)
    out = q.new_empty(out_shape) if out is None else out
    if spec.has_lse and lse is None:
        lse = q.new_empty(lse_shape, dtype=sys.modules["torch"].float32)
    ops[1](q, k, v, caps, scale, *summary, *_detached(out, lse))
    return (out, lse) if spec.has_lse else out


def _summary(buffer, made_for, layout):
    """The TileSummary a traced call passed, rebuilt from what its op carries."""
    if made_for is None:
        return None
    return TileSummary(made_for, Layout(tuple(layout[3:]), layout[0], layout[1], layout[2]) if layout else None, buffer)


# ------------------------------------------------------------------------------ FP8 GEMM

def _define_gemm(torch, name: str, k: ir.Kernel):
    out_dtype = arrays.torch_dtype(k.tensor("out").dtype)

    def args(extra):
        return () if extra is None else (extra,)

    def run(a, a_scale, b, b_scale, extra):
        return _eager(name, a, a_scale, b, b_scale, *args(extra))

    def run_into(a, a_scale, b, b_scale, extra, out):
        _eager(name, a, a_scale, b, b_scale, *args(extra), out=out)

    def fake(a, a_scale, b, b_scale, extra, out=None):
        if _static(a, a_scale, b, b_scale, extra, out):
            _spec(_kernel(name)).validate(a, a_scale, b, b_scale, extra, out)
        return None if out is not None else a.new_empty((*a.shape[:-1], b.shape[-2]), dtype=out_dtype)

    return (_define(torch, name, f"({_GEMM_ARGS}) -> Tensor", run, fake),
            _define(torch, f"{name}_out", f"({_GEMM_ARGS}, Tensor(a!) out) -> ()", run_into, fake,
                    mutates=("out",)))


def gemm(kernel, a, a_scale, b, b_scale, rest, named, out):
    """A GEMM call while torch.compile traces (see attention)."""
    ops = _ops(kernel)
    spec = _spec(kernel)
    extra = spec._extra(rest, named) if (rest or named or spec.extra) else None
    a, a_scale, b, b_scale, extra = _detached(a, a_scale, b, b_scale, extra)
    if out is None:
        return ops[0](a, a_scale, b, b_scale, extra)
    ops[1](a, a_scale, b, b_scale, extra, *_detached(out))
    return out


def _detached(*tensors):
    """Views outside autograd, sharing memory: what the kernels read and write."""
    return [x.detach() if x is not None else None for x in tensors]


def _ops(kernel):
    ops = getattr(kernel, "torch_ops", None)
    if ops is None:
        raise LaunchError(f"{kernel.name}: called under torch.compile, but its module was loaded before torch was "
                          f"imported, so it is no torch operator; import torch before kdsl.load / kdsl.compile")
    return ops
