"""Building at load time: kdsl.load starts compiling each kernel of the file for this
machine's GPU, at every head dim it may be called with, in compiler processes
(kdsl.runtime.workers), so that a first call finds its kernel built or building. A call
never waits for another kernel or head dim (see compiler.build). Only where an NVIDIA
driver is present and a CPU is to spare; KDSL_PREBUILD=0 turns it off. A module with an FP8
GEMM also starts building the GEMM's compiled launch path (runtime/fast_launch.py).

The GPU's arch comes from CUDA (CuPy's import and cuInit: a few tenths of a second, which
a first call pays too before it can build). Where the driver's /proc listing names only
Hopper parts, the sm_90a builds start before that, and the arch CUDA reports follows (the
same builds are then no-ops; a wrong guess costs CPU time, never a wrong kernel)."""
from __future__ import annotations

import glob
import os
import re
import sys
import threading
from pathlib import Path

from ..errors import NoGpuError

_THREADS: list[threading.Thread] = []


def _enabled() -> bool:
    """Building ahead pays where there is a GPU to run the result and a CPU to spare (a build in
    the background would otherwise only slow the caller's own); KDSL_PREBUILD=0 turns it off."""
    if os.environ.get("KDSL_PREBUILD", "1") == "0" or not os.path.exists("/proc/driver/nvidia"):
        return False
    from .workers import cpus
    return cpus() >= 2


def start(kernels) -> None:
    """kernels: the module's AttentionKernel / GemmKernel objects (they know their arch)."""
    if not kernels or not _enabled():
        return
    t = threading.Thread(target=_run, args=(kernels,), name="kdsl-prebuild", daemon=True)
    _THREADS.append(t)
    t.start()
    if "torch" in sys.modules and any(k.ir.kind == "gemm" for k in kernels):
        from . import fast_launch  # the FP8 GEMM's compiled launch path (a C++ extension)
        fast_launch.start()


def start_backward(kernel, head_dim: int, value_dim: int, capture_grads: bool, query_split: bool = False,
                   stream: bool = True) -> None:
    """At an attention kernel's first call recorded for autograd with this backward program
    (head dims, captured tensors' gradients, query tiles split: attention_backward.splits;
    whether it may copy the mask's tiles: attention_backward.copies_fit): start building it, so
    that loss.backward() finds it built or building instead of compiling it then."""
    if not _enabled():
        return
    from .attention_backward import backward_program
    from .compiler import prebuild
    try:
        prebuild(kernel._kernel_ir(), kernel._arch(), head_dim, value_dim,
                 backward_program(capture_grads, query_split, stream))
    except Exception:  # noqa: BLE001 - the backward call reports the same problem where it belongs
        pass


def finish() -> None:
    """Wait for every build started at load (before timing anything, say)."""
    from . import fast_launch
    from .compiler import finish_prebuilds
    while _THREADS:
        _THREADS.pop().join()
    finish_prebuilds()
    fast_launch.wait()


def _run(kernels):
    # Off the caller's thread: finding the GPU's arch initialises CUDA (CuPy), and submitting
    # generates each kernel's source; neither should delay load().
    from ..passes import pipeline
    from .compiler import prebuild
    guess = arch_from_models(_gpu_models())
    rounds = ([lambda kern: kern.arch or guess] if guess else []) + [lambda kern: kern._arch()]
    for arch_of in rounds:
        for kern in kernels:
            try:
                arch = arch_of(kern)  # NoGpuError without a usable GPU
                for d in sorted(pipeline.head_dims(kern.ir), reverse=True):  # longest build first
                    prebuild(kern.ir, arch, d)
            except NoGpuError:
                return
            except Exception:  # noqa: BLE001 - the kernel's first call reports the same problem
                continue


_HOPPER = re.compile(r"\b(GH200|H100|H200|H800|H20)\b")


def arch_from_models(models: list[str]) -> str | None:
    """sm_90a when every GPU model named is a Hopper part, else None (no guess)."""
    return "sm_90a" if models and all(_HOPPER.search(m) for m in models) else None


def _gpu_models() -> list[str]:
    """The 'Model:' line of each GPU in the driver's /proc listing; [] if any is unreadable."""
    models = []
    for info in sorted(glob.glob("/proc/driver/nvidia/gpus/*/information")):
        try:
            m = re.search(r"^Model:\s*(.+?)\s*$", Path(info).read_text(), re.M)
        except OSError:
            return []
        if m is None:
            return []
        models.append(m.group(1))
    return models
