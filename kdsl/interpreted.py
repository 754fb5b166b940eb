"""A kernel run by the CPU interpreter of its tiled program (kdsl.interp), with the calling
convention and the argument checks of its compiled twin: `kdsl.load(path, interpret=True)`.

Arrays: numpy arrays, or torch CPU tensors; the result comes back in the same kind. numpy
has no bf16 or e4m3 dtype, so there bf16 / e4m3 tensors are passed as float32 arrays and
kdsl rounds their values to the declared type (nearest even), as a cast would; a bf16
output comes back as float32 holding bf16 values. The arguments are checked by the same
code as on the GPU (kdsl.runtime.launch's validate, kdsl.runtime.bounds), so both paths
refuse the same calls with the same messages. Slow: for small shapes and debugging.
"""
from __future__ import annotations

import sys

import numpy as np

from . import interp, ir
from .backends import round_float32
from .errors import LaunchError
from .passes import gemm_tiles
from .runtime import attention_backward, head_pad, torch_ops
from .runtime.gemm_launch import GemmKernel
from .runtime.attention_launch import AttentionKernel


class Interpreted:
    torch_ops = None  # (op, out= op) once registered with torch (runtime/torch_ops.py)

    def __init__(self, kernel: ir.Kernel, arch: str | None = None):
        self.ir, self.name = kernel, kernel.name
        self.arch = arch or "sm_90a"
        self._args = AttentionKernel(kernel) if kernel.kind == "attention" else GemmKernel(kernel)
        self._args.on_host = True

    def __repr__(self):
        return f"<kdsl interpreted kernel {self.name}>"

    def __call__(self, *args, out=None, **named):
        return (self._attention if self.ir.kind == "attention" else self._gemm)(*args, out=out, **named)

    def _one_kind(self, infos):
        if len({a.framework for a in infos}) > 1:
            raise LaunchError(f"{self.name}: mix of numpy arrays and torch tensors; pass one kind")

    def _attention(self, q, k, v, *captures, out=None, lse=None, scale=None, tile_summary=None, **named):
        if torch_ops.compiling():  # torch.compile traces the call: it records the torch op
            return torch_ops.attention(self, q, k, v, captures, named, out, lse, scale, tile_summary)
        # tile_summary= is accepted for the GPU kernels' calling convention and unused: the
        # interpreter computes each tile's reductions itself (interp._reduce_tiles).
        spec = self._args
        q, k, v, caps = spec.inputs(q, k, v, captures, named)
        if attention_backward.wants_grad(q, k, v, caps):
            return attention_backward.attention_with_grad(self, q, k, v, caps, out, lse, scale, tile_summary)
        return self._run(q, k, v, caps, out, lse, scale, tile_summary)

    def _run(self, q, k, v, caps, out, lse, scale, tile_summary, keep_lse: bool = False):
        spec = self._args
        if head_pad.needed(q, v):  # as on the GPU: through zero-padded copies
            return head_pad.run(self._run, spec, q, k, v, caps, out, lse, scale, tile_summary, keep_lse)
        infos, _, s = spec.validate(q, k, v, caps, out, lse, scale)
        self._one_kind(infos)
        if out is not None or lse is not None:
            spec.refuse_overlap(q, k, v, caps, out, lse)
        elem = self.ir.tensor("q").dtype
        o, l = interp.attention(self.ir, _host(q, elem), _host(k, elem), _host(v, elem), self._captured(caps), s,
                                self.arch)
        out = _deliver(o, out, q, elem)
        if spec.has_lse or keep_lse:
            return out, _deliver(l, lse, q, "f32")
        return out

    def _backward(self, q, k, v, out, dout, lse, dlse, caps, scale, want_caps=()):
        """(dq, dk, dv, capture grads) as the backward kernel computes them
        (interp.attention_backward); a capture's gradient None where the score reads no float
        value of it."""
        if head_pad.needed(q, v):
            return head_pad.backward(self._backward, self._args, q, k, v, out, dout, lse, dlse, caps, scale, want_caps)
        _, _, s = self._args.validate(q, k, v, caps, None, None, scale)
        delta = attention_backward.delta(dout, out, dlse)
        elem = self.ir.tensor("q").dtype
        *grads, dcaps = interp.attention_backward(self.ir, _host(q, elem), _host(k, elem), _host(v, elem),
                                                  _host(dout, elem), _host(lse, "f32"), _host(delta, "f32"),
                                                  self._captured(caps), s, self.arch)
        cap_grads = [None if t.name not in dcaps else _deliver(dcaps[t.name], None, c, t.dtype)
                     for t, c in zip(self._args.captures, caps)]
        return (*(_deliver(g, None, q, elem) for g in grads), cap_grads)

    # gradients of captured tensors (a learned bias): every differentiable one, wanted or not
    computes_capture_grads = True

    def _captured(self, caps) -> dict:
        return {t.name: _host(c, t.dtype) for t, c in zip(self._args.captures, caps)}

    def _gemm(self, a, a_scale, b, b_scale, *rest, out=None, **named):
        if named and "expected_rows" in named:  # a tile choice hint: checked, nothing to choose here
            gemm_tiles.check_expected_rows(self.name, self._args.grouping, named.pop("expected_rows"))
        if torch_ops.compiling():
            return torch_ops.gemm(self, a, a_scale, b, b_scale, rest, named, out)
        spec = self._args
        extra = spec._extra(rest, named) if (rest or named or spec.extra) else None
        self._one_kind(spec.validate(a, a_scale, b, b_scale, extra, out)[0])
        kw = {spec.extra: _host(extra, "i32")} if extra is not None else {}
        if spec.accumulate:
            kw["c"] = _host(out, "f32")
        r = interp.fp8_gemm(self.ir, _host(a, "e4m3"), _host(a_scale, "f32"), _host(b, "e4m3"), _host(b_scale, "f32"),
                            arch=self.arch, **kw)
        # NaN marks rows a grouped kernel leaves alone: a given out keeps its values there
        if out is not None:
            r = np.where(np.isnan(r), _host(out, "f32"), r)
        return _deliver(r, out, a, self.ir.tensor("out").dtype)


def _host(x, dtype: str) -> np.ndarray:
    """A numpy view of an argument as the interpreter reads it: float32 values of the
    declared type (numpy floats rounded to it), or int32."""
    if isinstance(x, np.ndarray):
        return x if dtype == "i32" else round_float32(x, dtype)
    x = x.detach()
    return x.numpy() if dtype == "i32" else x.float().numpy()


def _deliver(result: np.ndarray, out, like, dtype: str):
    """The interpreter's float32 result in the caller's kind: written into `out` when given."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(like, torch.Tensor):
        r = torch.from_numpy(result)
        if out is None:
            return r.to({"bf16": torch.bfloat16, "f16": torch.float16}.get(dtype, torch.float32))
        return out.copy_(r)
    r = round_float32(result, dtype).astype(np.float16 if dtype == "f16" else np.float32)
    if out is None:
        return r
    out[...] = r
    return out
