"""NVRTC through ctypes: CUDA C++ -> PTX and cubin, with no GPU needed.

We call libnvrtc directly rather than through CuPy's compiler because CuPy's getCUBIN
returned a cubin one byte short of NVRTC's reported size (cuobjdump rejected it), and
because `kdsl compile` must work on machines where CuPy cannot initialise CUDA at all.
"""
from __future__ import annotations

import ctypes
import functools
import glob
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CompileError, KdslError


@dataclass(frozen=True)
class Compiled:
    ptx: str
    cubin: bytes
    log: str
    phases: dict = field(default_factory=dict, compare=False)  # seconds per NVRTC phase, when traced


# NVRTC's time-trace events -> our phase names. A phase is absent when NVRTC did not run it,
# e.g. when it served NVVM's or ptxas' output from the CUDA driver's compute cache.
TRACE_PHASES = {"CUDA C++ Front-End": "cxx_front_end_s", "LibNVVM": "nvvm_s", "Total PTXAS Time": "ptxas_s"}


def _candidates():
    for base in sys.path:
        for sub in ("nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib", "nvidia/cu12/lib"):
            yield from sorted(glob.glob(os.path.join(base, sub, "libnvrtc.so*")), reverse=True)
    for root in (os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if root:
            yield from sorted(glob.glob(os.path.join(root, "lib64", "libnvrtc.so*")), reverse=True)
    yield "libnvrtc.so"


@functools.cache
def _lib():
    tried = []
    for path in _candidates():
        if "builtins" in path or path.endswith(".alt.so.13"):
            continue
        try:
            # libnvrtc dlopens its builtins by soname; pip wheels put them beside it, off the
            # loader's path, so load them first into the global namespace.
            for builtins in glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so.*")):
                if ".alt." not in builtins:
                    ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path}: {e}")
            continue
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        return lib
    raise KdslError("NVRTC not found: install kdsl[cuda13] (the nvidia-cuda-nvrtc package) or a CUDA toolkit"
                    + ("\n  tried: " + "\n  tried: ".join(tried) if tried else ""))


def version() -> str:
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(_lib().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return f"{major.value}.{minor.value}"


def _check(status: int, what: str):
    if status != 0:
        raise KdslError(f"{what} failed: {_lib().nvrtcGetErrorString(status).decode()}")


def compile_cuda(source: str, name: str, options: list[str], want_cubin: bool = True,
                 trace: bool = False) -> Compiled:
    """Compile one translation unit; raises CompileError carrying NVRTC's log. trace=True
    records how long each NVRTC phase took (--fdevice-time-trace) in Compiled.phases. The
    program is the same, but not always its bytes: the trace option can make NVVM order some
    instructions otherwise (a bool mask under causal's byte tests did)."""
    if not trace:
        return _compile(source, name, options, want_cubin)
    with tempfile.TemporaryDirectory(prefix="kdsl-trace-") as d:
        stem = os.path.join(d, "trace")  # NVRTC appends .json; a fresh file per compile
        compiled = _compile(source, name, options + [f"--fdevice-time-trace={stem}"], want_cubin)
        phases = _phases(next(iter(glob.glob(stem + "*")), None))
    return Compiled(compiled.ptx, compiled.cubin, compiled.log, phases)


def _phases(path) -> dict:
    if path is None:
        return {}
    with open(path) as f:
        data = json.load(f)
    totals: dict = {}
    for e in data.get("traceEvents", []) if isinstance(data, dict) else data:
        name = TRACE_PHASES.get(e.get("name"))
        if name and e.get("ph") == "X":
            totals[name] = totals.get(name, 0.0) + e.get("dur", 0) / 1e6
    return totals


def _compile(source: str, name: str, options: list[str], want_cubin: bool) -> Compiled:
    lib = _lib()
    prog = ctypes.c_void_p()
    _check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), f"{name}.cu".encode(), 0, None, None),
           "nvrtcCreateProgram")
    try:
        opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        status = lib.nvrtcCompileProgram(prog, len(options), opts)
        log = _get(lib.nvrtcGetProgramLogSize, lib.nvrtcGetProgramLog, prog).decode(errors="replace").rstrip("\x00")
        if status != 0:
            raise CompileError(name, log or lib.nvrtcGetErrorString(status).decode(), options)
        ptx = _get(lib.nvrtcGetPTXSize, lib.nvrtcGetPTX, prog).rstrip(b"\x00").decode()
        cubin = _get(lib.nvrtcGetCUBINSize, lib.nvrtcGetCUBIN, prog) if want_cubin else b""
        return Compiled(ptx, cubin, log)
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def _get(size_fn, get_fn, prog) -> bytes:
    size = ctypes.c_size_t()
    _check(size_fn(prog, ctypes.byref(size)), size_fn.__name__)
    buf = ctypes.create_string_buffer(size.value)
    _check(get_fn(prog, buf), get_fn.__name__)
    return buf.raw[: size.value]


def default_options(arch: str, include_dir: Path) -> list[str]:
    options = [f"--gpu-architecture={arch}", "-std=c++17", f"-I{include_dir}", "--device-as-default-execution-space"]
    # --minimal (NVRTC 12.4+) leaves texture, surface and device-runtime declarations, which
    # kdsl never uses, out of NVRTC's builtin header: ~8 ms less C++ front end per kernel,
    # byte-identical cubins for every sample, head dim, arch and math mode (bench/NOTES.md).
    if tuple(map(int, version().split("."))) >= (12, 4):
        options.append("--minimal")
    return options + env_defines()


_DEFINE = re.compile(r"KDSL_[A-Z0-9_]+(=-?[A-Za-z0-9_]+)?")


def env_defines() -> list[str]:
    """KDSL_DEFINES="KDSL_FP8_UNROLL_KB_256=2 ...": defines added to every build, so that a device
    header's trial switch can run a whole test suite or benchmark; they are options, so they are
    part of every cache key."""
    out = []
    for item in os.environ.get("KDSL_DEFINES", "").split():
        if not _DEFINE.fullmatch(item):
            raise KdslError(f"KDSL_DEFINES: {item!r} is not NAME or NAME=VALUE with a NAME starting KDSL_ "
                            "(e.g. KDSL_DEFINES=\"KDSL_FP8_UNROLL_KB_256=2\")")
        out.append("-D" + item)
    return out
