"""kdsl: describe an attention variant or an FP8 block-scaled GEMM in a few lines, get a
CUDA kernel for NVIDIA Hopper.

    mod = kdsl.load("samples/relpos.kd")
    out = mod.relpos(q, k, v)
"""
from .errors import CompileError, KdslError, LaunchError, LayoutWarning, NoGpuError, SourceError

__version__ = "0.1.0"


def load(path, **options):
    """Parse and check a .kd file; returns a Module with one callable per kernel."""
    from .runtime.module import load as _load
    return _load(path, **options)


def compile(source: str, file: str = "<string>", **options):
    """Like load(), from source text."""
    from .runtime.module import compile_source
    return compile_source(source, file, **options)


__all__ = ["load", "compile", "KdslError", "SourceError", "CompileError", "LaunchError", "NoGpuError", "LayoutWarning"]
