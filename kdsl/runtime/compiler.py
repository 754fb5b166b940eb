"""IR kernel -> cubin, through codegen, the cache and NVRTC; with the dump switch
(KDSL_DUMP=DIR writes each kernel's ir, cuda and ptx)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .. import __version__, ir
from ..codegen import emit
from ..passes import pipeline
from ..passes.target import get_target
from . import cache, nvrtc


@dataclass(frozen=True)
class Built:
    kernel: ir.Kernel           # lowered IR (with tile attrs)
    generated: emit.Generated
    compiled: nvrtc.Compiled
    cache_key: str
    cache_hit: bool


def build(k: ir.Kernel, arch: str = "sm_90a", head_dim: int = 0, want_cubin: bool = True) -> Built:
    lowered = pipeline.lower(k, get_target(arch), head_dim)
    gen = emit.generate(lowered)
    options = nvrtc.default_options(arch, emit.INCLUDE_DIR)
    key = cache.make_key(gen.source, " ".join(options), nvrtc.version(), emit.headers_hash(), __version__)
    hit = cache.get(key)
    compiled = hit or nvrtc.compile_cuda(gen.source, gen.entry, options, want_cubin)
    if hit is None and want_cubin:
        cache.put(key, compiled)
    _dump(lowered, gen, compiled)
    return Built(lowered, gen, compiled, key, hit is not None)


def _dump(k: ir.Kernel, gen: emit.Generated, compiled: nvrtc.Compiled) -> None:
    where = os.environ.get("KDSL_DUMP")
    if not where:
        return
    d = Path(where)
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{gen.entry}.ir").write_text(ir.print_ir(k))
    (d / f"{gen.entry}.cu").write_text(gen.source)
    (d / f"{gen.entry}.ptx").write_text(compiled.ptx)
