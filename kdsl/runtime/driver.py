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

_CTYPES = {"ptr": ctypes.c_uint64, "i32": ctypes.c_int32, "f32": ctypes.c_float}


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
    return lib


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


def launch(function_ptr: int, grid, block, smem: int, stream: int, pack: ArgPack, pointers):
    """Write `pointers` into the pointer slots and launch; KdslError on a driver error."""
    lib = _libcuda()
    with pack.lock:
        for slot, p in zip(pack.pointer_slots, pointers):
            slot.value = p
        status = lib.cuLaunchKernel(function_ptr, grid[0], grid[1], grid[2], block[0], block[1], block[2], smem,
                                    stream, pack.params, None)
    if status:
        msg = ctypes.c_char_p()
        lib.cuGetErrorString(status, ctypes.byref(msg))
        raise KdslError(f"kernel launch failed: CUDA error {status} ({(msg.value or b'?').decode()})")
