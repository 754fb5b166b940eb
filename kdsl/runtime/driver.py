"""The lean launch path: cuLaunchKernel through ctypes with a pre-built parameter block.

CuPy loads the module (it owns context set-up); launching through CuPy's generic argument
conversion costs ~20 us a call, so each plan keeps its kernel parameters in ctypes slots
and a call only rewrites the pointers and launches. cuLaunchKernel copies the parameters
at launch, so the block can be reused immediately; a lock keeps threads from interleaving.
"""
from __future__ import annotations

import ctypes
import functools
import threading

from ..errors import KdslError

_CTYPES = {"ptr": ctypes.c_uint64, "i32": ctypes.c_int32, "f32": ctypes.c_float,
           "tmap": ctypes.c_ubyte * 128}  # a CUtensorMap, passed by value (__grid_constant__)


@functools.cache
def _libcuda():
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    else:
        raise KdslError("libcuda (the NVIDIA driver) not found")
    lib.cuLaunchKernel.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                                   ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p,
                                   ctypes.c_void_p]
    lib.cuLaunchKernel.restype = ctypes.c_int
    lib.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    lib.cuLaunchKernelEx.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.cuLaunchKernelEx.restype = ctypes.c_int
    return lib


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.c_void_p), ("num_attrs", ctypes.c_uint)]


class _LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute: id, 4 bytes of padding, a 64-byte value
    _fields_ = [("id", ctypes.c_uint), ("pad", ctypes.c_uint), ("value", ctypes.c_int * 16)]


CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6


def _dependent_config(fixed: tuple):
    """A CUlaunchConfig (stream set per launch) that lets a launch overlap the previous
    kernel in the stream (programmatic dependent launch); the kernel waits for that kernel
    with griddepcontrol.wait. Returned with the attribute it points to, to keep it alive."""
    attr = _LaunchAttribute(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
    attr.value[0] = 1
    cfg = _LaunchConfig((ctypes.c_uint * 3)(*fixed[1:4]), (ctypes.c_uint * 3)(*fixed[4:7]), fixed[7],
                        None, ctypes.cast(ctypes.pointer(attr), ctypes.c_void_p), 1)
    return cfg, attr


def max_active_clusters(fn_ptr: int, grid: tuple, block: tuple, smem: int) -> int:
    """How many clusters of a kernel compiled with __cluster_dims__ can be resident at once
    (cuOccupancyMaxActiveClusters). A GPC holds whole clusters only, so on an H100 this can be
    fewer than SMs / cluster size: a persistent grid larger than it runs a second wave."""
    lib = _libcuda()
    cfg = _LaunchConfig((ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block), smem, None, None, 0)
    n = ctypes.c_int()
    status = lib.cuOccupancyMaxActiveClusters(ctypes.byref(n), ctypes.c_void_p(fn_ptr), ctypes.byref(cfg))
    if status:
        raise KdslError(f"cuOccupancyMaxActiveClusters failed: CUDA error {status}")
    return n.value


def _cu_launch(*args):
    """cuLaunchKernel; binds itself to the driver function on first use."""
    global _cu_launch
    _cu_launch = _libcuda().cuLaunchKernel
    return _cu_launch(*args)


class ArgPack:
    """Kernel parameters in launch order; set scalars once, pointers per call."""

    def __init__(self, kinds, values=None, pointer_slots=()):
        self.slots = [_CTYPES[k]() for k in kinds]
        self.pointer_slots = [self.slots[i] for i in pointer_slots]  # filled per call, in order
        self.params = (ctypes.c_void_p * len(kinds))(*[ctypes.addressof(s) for s in self.slots])
        self.lock = threading.Lock()
        for slot, v in zip(self.slots, values or ()):
            if v is not None:
                slot.value = v


class WarpKernel:
    """A helper kernel of a loaded module (tile summary, split-KV combine) that gives one warp
    to each of `warps` work items, 8 warps a block (its __launch_bounds__(256)). A `dependent`
    one is launched as the previous kernel's programmatic dependent: its blocks get on the
    GPU while that kernel runs, and it must wait for it (griddepcontrol.wait) before reading."""

    def __init__(self, module, entry: str, warps: int, pack: ArgPack, dependent: bool = False):
        self._fn = module.get_function(entry)  # kept: the handle lives as long as this object
        self._fixed = (int(self._fn.ptr), -(-warps // 8), 1, 1, 256, 1, 1, 0)
        self.pack = pack
        self._config = _dependent_config(self._fixed) if dependent else None

    def run(self, stream: int, pointers) -> None:
        if self._config is not None:
            launch_dependent(self._config, self._fixed[0], stream, self.pack, pointers)
        else:
            launch(self._fixed, stream, self.pack, pointers)


def launch(fixed: tuple, stream: int, pack: ArgPack, pointers, bind=None):
    """fixed = (function, grid x, y, z, block x, y, z, shared bytes). Write `pointers` into
    the pointer slots (after `bind()`, which may rewrite other slots, e.g. tensor maps) and
    launch; KdslError on a driver error."""
    with pack.lock:
        if bind is not None:
            bind()
        for slot, p in zip(pack.pointer_slots, pointers):
            slot.value = p
        status = _cu_launch(*fixed, stream, pack.params, None)
    _check(status)


def launch_dependent(config, fn: int, stream: int, pack: ArgPack, pointers):
    """launch(), as a programmatic dependent of the previous kernel in the stream
    (cuLaunchKernelEx; config from _dependent_config)."""
    cfg = config[0]
    with pack.lock:
        cfg.stream = stream
        for slot, p in zip(pack.pointer_slots, pointers):
            slot.value = p
        status = _libcuda().cuLaunchKernelEx(ctypes.byref(cfg), fn, pack.params, None)
    _check(status)


def _check(status: int) -> None:
    if status:
        lib = _libcuda()
        msg = ctypes.c_char_p()
        lib.cuGetErrorString(status, ctypes.byref(msg))
        raise KdslError(f"kernel launch failed: CUDA error {status} ({(msg.value or b'?').decode()})")
