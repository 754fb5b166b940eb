"""The lean launch path: cuLaunchKernelEx through ctypes with a pre-built parameter block
and launch configuration.

CuPy loads the module (it owns context set-up); launching through CuPy's generic argument
conversion costs ~20 us a call, so each plan keeps its kernel parameters in ctypes slots
and a call only rewrites the pointers and the stream, and launches. The driver copies the
parameters at launch, so the block can be reused immediately; a lock keeps threads from
interleaving.
"""
from __future__ import annotations

import ctypes
import functools
import threading

from ..errors import KdslError

_CTYPES = {"ptr": ctypes.c_uint64, "i32": ctypes.c_int32, "i64": ctypes.c_int64, "f32": ctypes.c_float,
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


def _cu_launch_ex(*args):
    """cuLaunchKernelEx; binds itself to the driver function on first use."""
    global _cu_launch_ex
    _cu_launch_ex = _libcuda().cuLaunchKernelEx
    return _cu_launch_ex(*args)


class ArgPack:
    """Kernel parameters in launch order; set scalars once, pointers per call. The per-call
    pointers live side by side in one array (`pointers`), written with one slice assignment."""

    def __init__(self, kinds, values=None, pointer_slots=()):
        self.pointers = (ctypes.c_uint64 * len(pointer_slots))()
        self.slots = [_CTYPES[k]() for k in kinds]
        for n, i in enumerate(pointer_slots):  # filled per call, in this order
            assert kinds[i] == "ptr", (i, kinds[i])
            self.slots[i] = ctypes.c_uint64.from_buffer(self.pointers, 8 * n)
        self.params = (ctypes.c_void_p * len(kinds))(*[ctypes.addressof(s) for s in self.slots])
        self.params_address = ctypes.addressof(self.params)
        self.lock = threading.Lock()
        for slot, v in zip(self.slots, values or ()):
            if v is not None:
                slot.value = v


class Launcher:
    """One kernel's launch: its CUlaunchConfig (grid, block, dynamic shared memory) built once,
    the stream written per launch, then cuLaunchKernelEx, whose four arguments cost ctypes
    ~1.5 us less a call than cuLaunchKernel's eleven. A `dependent` launch is the previous
    kernel's programmatic dependent: its blocks get on the GPU while that kernel runs, and it
    must wait for it (griddepcontrol.wait) before reading what it wrote."""

    def __init__(self, fn: int, grid, block, smem: int, dependent: bool = False):
        self.fn = fn
        self._attr = _LaunchAttribute(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
        self._attr.value[0] = 1
        self.config = _LaunchConfig((ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block), smem, None,
                                    ctypes.addressof(self._attr) if dependent else None, 1 if dependent else 0)
        self._address = ctypes.addressof(self.config)

    def __call__(self, stream: int, pack: ArgPack, pointers, bind=None, bind_arg=None) -> None:
        """Write `pointers` into the pack's pointer slots (after `bind(bind_arg)`, which may
        rewrite other slots, e.g. tensor maps) and launch on `stream`; KdslError on a driver error.
        The driver copies the parameters at launch, so the pack can be rewritten at once; its
        lock keeps threads from interleaving (it guards this config's stream too: a config
        is only ever launched with one pack)."""
        with pack.lock:
            if bind is not None:
                bind(bind_arg)
            pack.pointers[:] = pointers
            self.config.stream = stream
            status = _cu_launch_ex(self._address, self.fn, pack.params_address, None)
        if status:
            _check(status)


class WarpKernel:
    """A helper kernel of a loaded module (tile summary, split-KV combine) that gives one warp
    to each of `warps` work items, 8 warps a block (its __launch_bounds__(256)), launched as
    the previous kernel's programmatic dependent when `dependent` (Launcher)."""

    def __init__(self, module, entry: str, warps: int, pack: ArgPack, dependent: bool = False):
        self._fn = module.get_function(entry)  # kept: the handle lives as long as this object
        self.pack = pack
        self._launch = Launcher(int(self._fn.ptr), (-(-warps // 8), 1, 1), (256, 1, 1), 0, dependent)

    def run(self, stream: int, pointers) -> None:
        self._launch(stream, self.pack, pointers)


def _check(status: int) -> None:
    if status:
        lib = _libcuda()
        msg = ctypes.c_char_p()
        lib.cuGetErrorString(status, ctypes.byref(msg))
        raise KdslError(f"kernel launch failed: CUDA error {status} ({(msg.value or b'?').decode()})")
