"""kdsl.load / kdsl.compile: a Module with one callable per kernel; compilation happens
on a kernel's first call and is cached."""
from __future__ import annotations

import time
from pathlib import Path

from ..errors import KdslError, SourceError, Span
from ..grammar import parse
from ..passes import pipeline
from .geometry import softmax_scale
from . import prebuild
from .launch import AttentionKernel, GemmKernel


class Module:
    def __init__(self, kernels, file: str, arch: str | None = None, interpret: bool = False):
        self.file = file
        make = Interpreted if interpret else (lambda k, a: AttentionKernel(k, a) if k.kind == "attention"
                                              else GemmKernel(k, a))
        self.kernels = {k.name: make(k, arch) for k in kernels}
        self.ir = {k.name: k for k in kernels}
        if not interpret:
            prebuild.start(list(self.kernels.values()))

    def __getattr__(self, name):
        kernels = self.__dict__.get("kernels", {})
        if name in kernels:
            return kernels[name]
        raise AttributeError(f"module {self.__dict__.get('file')!r} has no kernel '{name}'; "
                             f"kernels: {', '.join(kernels) or 'none'}")

    def __dir__(self):
        return list(super().__dir__()) + list(self.kernels)

    def __repr__(self):
        return f"<kdsl module {self.file}: {', '.join(self.kernels)}>"


class Interpreted:
    """A kernel run by the CPU interpreter of its tiled program (kdsl.interp): same calling
    convention, torch CPU tensors in and out. Slow; for small shapes and debugging."""

    def __init__(self, kernel, arch=None):
        from ..check import interpreted
        self.ir, self.name = kernel, kernel.name
        self._run = interpreted(kernel)
        self._args = AttentionKernel(kernel) if kernel.kind == "attention" else GemmKernel(kernel)

    def __call__(self, *args, out=None, **named):
        import torch
        if self.ir.kind == "attention":
            q, k, v, *caps = args
            scale = named.pop("scale", None)
            if scale is not None:  # the GPU path's rule: a real, finite number
                scale = softmax_scale(scale, None, self.name)
            lse = named.pop("lse", None)
            given = dict(zip([t.name for t in self._args.captures], self._args._collect_captures(caps, named)))
            out = torch.empty_like(q) if out is None else out
            if lse is None and self._args.has_lse:
                lse = torch.empty(q.shape[:3], dtype=torch.float32)
            return self._run(q, k, v, out=out, lse=lse, scale=scale, **given)
        a, sa, b, sb, *extra = args
        extra = [self._args._extra(extra, named)] if self._args.extra else []
        if out is None:
            shape = (*a.shape[:-1], b.shape[-2])
            dtype = torch.float32 if self.ir.tensor("out").dtype == "f32" else torch.bfloat16
            out = torch.full(shape, float("nan"), dtype=dtype)
        return self._run(a, sa, b, sb, *extra, out=out)


def compile_source(source: str, file: str = "<string>", arch: str | None = None, interpret: bool = False) -> Module:
    """interpret=True: kernels run on the CPU through the interpreter of the tiled program."""
    t0 = time.perf_counter()
    mod = Module(pipeline.check(parse(source, file)), file, arch, interpret)
    mod.front_end_s = time.perf_counter() - t0  # parse + type check, for `kdsl bench`
    return mod


def load(path, arch: str | None = None, interpret: bool = False) -> Module:
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise KdslError(f"cannot read {path}: {e.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise SourceError("file is not UTF-8 text (binary data?)", Span(str(path), line, 1, line, 1, "")) from None
    return compile_source(text, str(path), arch, interpret)
