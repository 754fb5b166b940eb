"""kdsl.load / kdsl.compile: a Module with one callable per kernel; compilation happens
on a kernel's first call and is cached."""
from __future__ import annotations

import time
from pathlib import Path

from .. import ir, ircheck
from ..errors import KdslError, SourceError, Span
from ..grammar import parse
from ..interpreted import Interpreted
from ..passes import pipeline
from . import prebuild, torch_ops
from .gemm_launch import GemmKernel
from .attention_launch import AttentionKernel


class Module:
    def __init__(self, kernels, file: str, arch: str | None = None, interpret: bool = False):
        self.file = file
        make = Interpreted if interpret else (lambda k, a: AttentionKernel(k, a) if k.kind == "attention"
                                              else GemmKernel(k, a))
        self.kernels = {k.name: make(k, arch) for k in kernels}
        self.ir = {k.name: k for k in kernels}
        for k in kernels:  # what help(mod.NAME) and IPython's mod.NAME? show
            self.kernels[k.name].__doc__ = call_doc(k)
        for kernel in self.kernels.values():
            torch_ops.register(kernel, "interpret" if interpret else "cuda", arch)
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


def call_doc(k: ir.Kernel) -> str:
    """How to call kernel k: its arguments in order with their declared types and shapes, and
    what it returns."""
    decl = lambda t: f"{t.name}: {t.dtype}[{', '.join(ir.format_expr(e) for e in t.shape)}]"  # noqa: E731
    inputs = [t for t in k.tensors if t.role != "output"]
    outputs = [t for t in k.tensors if t.role == "output"]
    if k.kind == "attention":
        keywords = "out=None" + (", lse=None" if k.tensor("lse") is not None else "") + ", scale=None"
        args = [(t.name, decl(t)) for t in inputs]
    else:  # each operand's scales follow it (kdsl.fp8 makes both in these layouts)
        by_name = {t.name: t for t in inputs}
        keywords = "out=None"
        args = [("a", decl(by_name["a"])),
                ("a_scale", "a_scale: f32, one per row and 128 of K, M-major (kdsl.fp8.quantize_1x128)"),
                ("b", decl(by_name["b"])),
                ("b_scale", "b_scale: f32, one per 128 x 128 block (kdsl.fp8.quantize_128x128)")]
        args += [(t.name, decl(t)) for t in inputs if t.name not in ("a", "b")]
    result = ", ".join(decl(t) for t in outputs)
    return "\n".join([f"{k.name}({', '.join(n for n, _ in args)}, *, {keywords})", ""]
                     + [f"    {text}" for _, text in args]
                     + ["", f"Returns {'(' + result + ')' if len(outputs) > 1 else result}"
                        + (", added into out" if k.attr("accumulate") else "") + ".",
                        f"Compiled from {k.source} (docs/runtime.md)."])


def compile_source(source: str, file: str = "<string>", arch: str | None = None, interpret: bool = False,
                   exact_math: bool = False) -> Module:
    """interpret=True: kernels run on the CPU through the interpreter of the tiled program.
    exact_math=True: score and mask expressions use libm's functions and IEEE division instead
    of the hardware approximations (docs/language.md lists their errors).
    A file named *.ir holds kernels in kdsl's IR text form (`kdsl compile --emit ir`, or what
    `kdsl tune` writes) instead of the language."""
    t0 = time.perf_counter()
    kernels = _ir_kernels(source, file) if file.endswith(".ir") else pipeline.check(parse(source, file))
    if exact_math:
        kernels = [k.with_attrs(math="exact") for k in kernels]
    mod = Module(kernels, file, arch, interpret)
    mod.front_end_s = time.perf_counter() - t0  # parse + type check, for `kdsl bench`
    return mod


def _ir_kernels(text: str, file: str) -> list:
    """Kernels from IR text, checked as the type checker checks a program; schedule
    attributes they carry are checked for legality when they are lowered (passes/tiling.py)."""
    kernels = ir.parse_ir(text, file)
    seen = set()
    for k in kernels:
        span = _kernel_span(k, text)
        if k.name in seen:
            raise SourceError(f"kernel '{k.name}' is defined twice", span)
        seen.add(k.name)
        try:
            ircheck.check_kernel(k)
        except ircheck.IrTypeError as e:
            raise SourceError(str(e), span) from None
    pipeline.distinct_entries(kernels, [_kernel_span(k, text) for k in kernels])
    return kernels


def _kernel_span(k, text: str) -> Span:
    file, _, line = k.source.rpartition(":")
    return Span(file, int(line), 1, int(line), 1, text)


def load(path, arch: str | None = None, interpret: bool = False, exact_math: bool = False) -> Module:
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
    return compile_source(text, str(path), arch, interpret, exact_math)
