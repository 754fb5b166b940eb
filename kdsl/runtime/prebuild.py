"""Building at load time: kdsl.load starts compiling each kernel of the file for this
machine's GPU, at every head dim it may be called with, in compiler processes
(kdsl.runtime.workers), so that a first call finds its kernel built or building. A call
never waits for another kernel or head dim (see compiler.build). Only where an NVIDIA
driver is present and a CPU is to spare; KDSL_PREBUILD=0 turns it off."""
from __future__ import annotations

import os
import threading

from ..errors import NoGpuError

_THREADS: list[threading.Thread] = []


def start(kernels) -> None:
    """kernels: the module's AttentionKernel / GemmKernel objects (they know their arch)."""
    if not kernels or os.environ.get("KDSL_PREBUILD", "1") == "0" or not os.path.exists("/proc/driver/nvidia"):
        return
    from .workers import cpus
    if cpus() < 2:  # a build in the background would only slow the caller's own
        return
    t = threading.Thread(target=_run, args=(kernels,), name="kdsl-prebuild", daemon=True)
    _THREADS.append(t)
    t.start()


def finish() -> None:
    """Wait for every build started at load (before timing anything, say)."""
    from .compiler import finish_prebuilds
    while _THREADS:
        _THREADS.pop().join()
    finish_prebuilds()


def _run(kernels):
    # Off the caller's thread: finding the GPU's arch initialises CUDA (CuPy), and submitting
    # generates each kernel's source; neither should delay load().
    from ..passes import pipeline
    from .compiler import prebuild
    for kern in kernels:
        try:
            arch = kern._arch()  # NoGpuError without a usable GPU
            for d in sorted(pipeline.head_dims(kern.ir), reverse=True):  # longest build first
                prebuild(kern.ir, arch, d)
        except NoGpuError:
            return
        except Exception:  # noqa: BLE001 - the kernel's first call reports the same problem
            continue
