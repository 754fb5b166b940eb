"""One view over torch tensors, CuPy arrays and (for the CPU interpreter) numpy arrays:
dtype, shape, strides, pointer, device, stream, and allocation in the caller's framework."""
from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from ..errors import LaunchError

# kdsl element type -> (torch dtype name, numpy/cupy dtype name)
_KDSL_TO = {"bf16": ("bfloat16", None), "f16": ("float16", "float16"), "f32": ("float32", "float32"),
            "i32": ("int32", "int32"), "e4m3": ("float8_e4m3fn", "uint8"), "i8": ("int8", "int8"),
            "u8": ("uint8", "uint8"), "bool": ("bool", "bool")}
# numpy (host arrays, the interpreter) has no bf16 or e4m3: float32 arrays stand for them,
# their values rounded to the type by kdsl (kdsl.backends.round_float32).
_NUMPY_HOST = {"float16": "f16", "float32": "f32", "int32": "i32", "int8": "i8", "uint8": "u8", "bool": "bool"}
_NUMPY_STANDS_FOR = {"bf16": "f32", "e4m3": "f32"}
_ITEMSIZE = {"bf16": 2, "f16": 2, "f32": 4, "i32": 4, "e4m3": 1, "i8": 1, "u8": 1, "bool": 1}


@dataclass(frozen=True)
class ArrayInfo:
    framework: str    # torch | cupy | numpy
    dtype: str        # kdsl name, or the framework's own name if not a kdsl type
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements
    device: int       # -1 = not on a GPU
    # No data pointer: validation must also work on torch.compile's fake tensors, which have none.


def info(x, name: str) -> ArrayInfo:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        dev = x.device.index if x.is_cuda else -1
        return ArrayInfo("torch", _from_torch(x.dtype), tuple(x.shape), tuple(x.stride()), dev)
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(x, cupy.ndarray):
        item = x.dtype.itemsize
        return ArrayInfo("cupy", _from_numpy(x.dtype.name), tuple(x.shape), tuple(s // item for s in x.strides),
                         x.device.id)
    if isinstance(x, np.ndarray):
        item = x.dtype.itemsize
        return ArrayInfo("numpy", _NUMPY_HOST.get(x.dtype.name, x.dtype.name), tuple(x.shape),
                         tuple(s // item for s in x.strides), -1)
    raise LaunchError(f"argument '{name}': expected a torch tensor or a CuPy array (or a numpy array, for the "
                      f"CPU interpreter), got {type(x).__name__}")


def holds(a: ArrayInfo, dtype: str) -> bool:
    """Whether the array can be passed where the kernel declares `dtype`."""
    return a.dtype == dtype or (a.framework == "numpy" and _NUMPY_STANDS_FOR.get(dtype) == a.dtype) or \
        (a.framework == "cupy" and a.dtype == "e4m3" and dtype == "u8")  # CuPy's uint8 reads as e4m3's carrier


def _from_torch(dt) -> str:
    name = str(dt).removeprefix("torch.")
    return next((k for k, (t, _) in _KDSL_TO.items() if t == name), name)


def _from_numpy(name: str) -> str:
    return next((k for k, (_, n) in _KDSL_TO.items() if n == name), name)


def expected_dtype_text(dtype: str, framework: str) -> str:
    t, n = _KDSL_TO[dtype]
    if framework == "numpy":
        if dtype in _NUMPY_STANDS_FOR:
            return f"float32 (numpy has no {dtype}: kdsl rounds the float32 values to {dtype})"
        return n
    if framework == "cupy" and n is None:
        return f"{dtype} (CuPy has no {dtype} dtype; pass torch tensors)"
    return f"torch.{t}" if framework == "torch" else (n if dtype != "e4m3" else "uint8 holding e4m3 bits")


def conversion_text(name: str, dtype: str, framework: str) -> str:
    """How to convert argument `name` to kdsl's `dtype` in its framework ('' where none does)."""
    t, n = _KDSL_TO[dtype]
    if framework == "torch":
        return f"{name}.to(torch.{t})"
    if framework == "numpy" and dtype in _NUMPY_STANDS_FOR:
        return f"{name}.astype(numpy.float32)"
    return f"{name}.astype({framework}.{n})" if n else ""


def dtype_text(a: ArrayInfo) -> str:
    """The array's element type as its framework spells it (torch.float32, int8), for messages."""
    names = _KDSL_TO.get(a.dtype)
    if names is None:  # a type kdsl has no name for: already the framework's name
        return f"torch.{a.dtype}" if a.framework == "torch" else a.dtype
    if a.framework == "torch":
        return f"torch.{names[0]}"
    return "uint8" if a.dtype == "e4m3" else names[1] or a.dtype


def allocator(framework: str, shape, dtype: str, device: int):
    """A no-argument function returning a new uninitialised array (cheap to call)."""
    import functools
    if framework == "torch":
        import torch
        # The device as its index: torch parses that ~2 us faster a call than a torch.device
        # (H100 host, 2026-11-27, tools/dev/gemm_host_profile.py: 4.2 against 6.2 us).
        # (Not torch.empty_like of a one-element template expanded to the shape, ~1 us cheaper a
        # call: under torch.compile's CUDA-graph trees each plan's template was a live
        # allocation in the graph's pool that no output tracked, and the capture was refused.)
        return functools.partial(torch.empty, tuple(shape), dtype=torch_dtype(dtype), device=device)
    import cupy
    return functools.partial(cupy.empty, tuple(shape), dtype=_KDSL_TO[dtype][1])


def torch_dtype(dtype: str):
    """The torch dtype of a kdsl element type."""
    import torch
    return getattr(torch, _KDSL_TO[dtype][0])


def is_contiguous(a: ArrayInfo) -> bool:
    if 0 in a.shape:
        return True  # an empty array has no layout to get wrong (torch agrees)
    expect = 1
    for size, stride in zip(reversed(a.shape), reversed(a.strides)):
        if size != 1 and stride != expect:
            return False
        expect *= size
    return True


def dense(x):
    """x itself where it is row-major, else a row-major copy (a transposed view such as
    `x.view(B, N, H, D).transpose(1, 2)`, an expanded tensor): the kernels address their inputs
    as row-major arrays, where SDPA and FlexAttention take any strides. The copy costs one read
    and one write of the array; for torch it is recorded by autograd like any other op. Not for
    outputs, which are written where the caller gave them. Anything else comes back as it is,
    for validation to name."""
    if row_major(x):
        return x
    if hasattr(x, "is_contiguous"):  # torch: the copy is recorded by autograd
        return x.contiguous()
    return sys.modules[type(x).__module__.split(".")[0]].ascontiguousarray(x)


def row_major(x) -> bool:
    """Whether x is row-major, by the framework's own flag (no ArrayInfo: a call's hot path asks
    it of every input); anything not an array counts as row-major, for validation to name."""
    if hasattr(x, "is_contiguous"):  # torch (also its fake tensors under torch.compile)
        return x.is_contiguous()
    flags = getattr(x, "flags", None)  # CuPy and numpy
    return flags is None or flags.c_contiguous or 0 in getattr(x, "shape", ())


def fill(x, value: float) -> None:
    """Set every element, on the caller's current stream (torch tensor or CuPy array)."""
    if hasattr(x, "fill_"):
        x.fill_(value)
    else:
        x.fill(value)


def itemsize(dtype: str) -> int:
    return _ITEMSIZE[dtype]


def current_device(framework: str) -> int:
    if framework == "torch":
        import torch
        return torch.cuda.current_device()
    import cupy
    return cupy.cuda.Device().id
