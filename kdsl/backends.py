"""Array backends: the few operations kdsl needs from numpy arrays or torch tensors, so the
IR semantics, the float64 reference, FP8 quantisation and the judge are written once and
run on either — numpy on a CPU-only install, torch (CPU or CUDA) where it is installed.

numpy has no bf16 or e4m3 dtype: on numpy those element types are float32 arrays holding
values rounded to the type (`round_float32`, round to nearest even, as a cast in torch or
on the GPU would round them).
"""
from __future__ import annotations

import contextlib
import importlib
import sys

import numpy as np

from .errors import KdslError

E4M3_MAX = 448.0
INTEGRAL = ("i32", "i8", "u8", "bool")  # element types cast as they are, not rounded as floats


def need(module: str, extra: str, purpose: str):
    """Import an optional dependency, or say which kdsl extra brings it (a user's fix, exit 1)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise KdslError(f"{purpose} needs {module}, which is not installed; install it with "
                        f"pip install 'kdsl[{extra}]' (or pip install -e '.[{extra}]' in a clone)") from None


def round_float32(x, dtype: str) -> np.ndarray:
    """float32 values rounded to the kdsl element type `dtype` (nearest even), kept in float32."""
    x = np.asarray(x, np.float32)
    if dtype == "f16":
        with np.errstate(over="ignore"):  # past f16's range is inf, as a cast gives
            return x.astype(np.float16).astype(np.float32)
    if dtype == "bf16":
        bits = x.view(np.uint32)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return np.where(np.isfinite(x), rounded.view(np.float32), x)
    if dtype == "e4m3":  # saturating, like kdsl.fp8's clamp before the cast
        x64 = np.clip(x.astype(np.float64), -E4M3_MAX, E4M3_MAX)
        _, exp = np.frexp(x64)  # |x| = m * 2**exp with m in [0.5, 1): the binade is 2**(exp - 1)
        quantum = np.ldexp(1.0, np.maximum(exp - 1, -6) - 3)  # 3 mantissa bits; subnormals below 2**-6
        return (np.round(x64 / quantum) * quantum).astype(np.float32)
    return x


class Numpy:
    """numpy arrays on the CPU (the interpreter, the CPU judge, a torch-free install)."""

    name = "numpy"
    _DTYPES = {"bf16": np.float32, "f16": np.float16, "f32": np.float32, "e4m3": np.float32,
               "i32": np.int32, "i8": np.int8, "u8": np.uint8, "f64": np.float64, "bool": np.bool_}

    def __init__(self, float_dtype=None):
        self.xp, self.array = np, np.ndarray
        self.fdt = float_dtype or np.float64

    def quiet(self):  # NaN and inf are values (docs/language.md), not warnings
        return np.errstate(all="ignore")

    # --- IR evaluation (kdsl.semantics) ----------------------------------------------
    def to_float(self, a): return a.astype(self.fdt)
    def to_int(self, a): return a.astype(np.int64)
    def index(self, t, idx): return t[tuple(i.astype(np.int64) if isinstance(i, np.ndarray) else int(i) for i in idx)]
    def clamp(self, a, lo=None, hi=None): return np.clip(a, lo, hi)
    def fmin(self, a, b): return np.fmin(a, b)
    def fmax(self, a, b): return np.fmax(a, b)
    def f32_bits(self, a): return np.asarray(a, np.float32).view(np.int32).astype(np.int64)
    def bits_f32(self, a): return self.to_float(np.asarray(a).astype(np.int32).view(np.float32))
    def move(self, x): return x  # numpy arrays already live on the CPU

    # --- arrays ---------------------------------------------------------------------
    def dtype(self, kdsl: str): return self._DTYPES[kdsl]
    def empty(self, shape, dtype: str): return np.empty(tuple(shape), self.dtype(dtype))
    def full(self, shape, value, dtype: str): return np.full(tuple(shape), value, self.dtype(dtype))
    def asarray(self, x, dtype: str): return np.asarray(x, self.dtype(dtype))
    def arange(self, n): return np.arange(n)
    def astype(self, x, dtype): return np.asarray(x).astype(dtype)
    def float32(self, x): return np.asarray(x, np.float32)
    def float64(self, x): return np.asarray(x, np.float64)
    def cast(self, x, dtype: str):
        """Values as the element type `dtype` holds them (rounded; bf16/e4m3 kept in float32)."""
        return np.asarray(x).astype(self.dtype(dtype)) if dtype in INTEGRAL else \
            round_float32(x, dtype).astype(self.dtype(dtype))
    def is_float(self, x): return np.issubdtype(x.dtype, np.floating)
    def copy(self, x): return x.copy()
    def equal(self, a, b): return a.shape == b.shape and bool(np.array_equal(a, b))
    def contiguous(self, x): return np.ascontiguousarray(x)
    def cat(self, xs, axis): return np.concatenate(xs, axis=axis)
    def amax(self, x, axis): return x.max(axis=axis)
    def logsumexp(self, x):
        """Over the last axis; rows of -inf give -inf."""
        m = x.max(axis=-1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0.0)
        with np.errstate(divide="ignore"):
            return (m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))[..., 0]
    def rng(self, seed: int): return np.random.default_rng(int(seed))
    def randn(self, shape, rng): return rng.standard_normal(tuple(shape), dtype=np.float32)
    def randint(self, lo, hi, shape, rng): return rng.integers(lo, hi, tuple(shape), dtype=np.int32)
    def sort_last(self, x): return np.sort(x, axis=-1)
    def sync(self): pass


class Torch:
    """torch tensors on one device (the GPU judge, the FlexAttention translation)."""

    name = "torch"

    def __init__(self, device="cpu", float_dtype=None):
        import torch  # a plain import: eval_torch builds this inside FlexAttention's traced score_mod
        self.xp, self.array = torch, torch.Tensor
        self.device = device
        self.fdt = float_dtype or torch.float64
        self._dtypes = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32,
                        "e4m3": torch.float8_e4m3fn, "i32": torch.int32, "i8": torch.int8, "u8": torch.uint8,
                        "f64": torch.float64, "bool": torch.bool}

    def quiet(self):  # torch does not warn; and Dynamo cannot trace np.errstate (FlexAttention's mods)
        return contextlib.nullcontext()

    def to_float(self, a): return a.to(self.fdt)
    def to_int(self, a): return a.to(self.xp.int64)
    def index(self, t, idx): return t[tuple(i.long() if isinstance(i, self.array) else int(i) for i in idx)]
    def clamp(self, a, lo=None, hi=None): return self.xp.clamp(a, min=lo, max=hi)
    def fmin(self, a, b): return self.xp.fmin(a, self._like(b, a))
    def fmax(self, a, b): return self.xp.fmax(a, self._like(b, a))
    def f32_bits(self, a): return a.to(self.xp.float32).view(self.xp.int32).to(self.xp.int64)
    def bits_f32(self, a): return self.to_float(a.to(self.xp.int32).view(self.xp.float32))
    def _like(self, b, a): return b if isinstance(b, self.array) else self.xp.as_tensor(b, dtype=a.dtype, device=a.device)
    def move(self, x): return x.to(self.device) if isinstance(x, self.array) else x

    def dtype(self, kdsl: str): return self._dtypes[kdsl]
    def empty(self, shape, dtype: str): return self.xp.empty(tuple(shape), dtype=self.dtype(dtype), device=self.device)
    def full(self, shape, value, dtype: str):
        return self.xp.full(tuple(shape), value, dtype=self.dtype(dtype), device=self.device)
    def asarray(self, x, dtype: str): return self.xp.as_tensor(x, dtype=self.dtype(dtype), device=self.device)
    def arange(self, n): return self.xp.arange(n, device=self.device)
    def astype(self, x, dtype): return x.to(dtype)
    def float32(self, x): return x.to(self.xp.float32)
    def float64(self, x): return x.to(self.xp.float64)
    def cast(self, x, dtype: str):
        if dtype == "e4m3":  # torch's cast does not saturate (NaN past the range)
            x = x.clamp(-E4M3_MAX, E4M3_MAX)
        return x.to(self.dtype(dtype))
    def is_float(self, x): return x.is_floating_point()
    def copy(self, x): return x.clone()
    def equal(self, a, b): return bool(self.xp.equal(a, b))
    def contiguous(self, x): return x.contiguous()
    def cat(self, xs, axis): return self.xp.cat(xs, dim=axis)
    def amax(self, x, axis): return x.amax(dim=axis)
    def logsumexp(self, x):
        """Over the last axis; rows of -inf give -inf and pass back a zero gradient, not
        autograd's exp(-inf - -inf) = NaN (which reaches the scores where -inf comes from data,
        an additive mask `s + am[b, i, j]`, rather than from a mask's where)."""
        empty = self.xp.isneginf(x).all(dim=-1, keepdim=True)
        finite = self.xp.logsumexp(self.xp.where(empty, self.xp.zeros_like(x), x), dim=-1)
        return self.xp.where(empty[..., 0], self.xp.full_like(finite, float("-inf")), finite)
    def rng(self, seed: int): return self.xp.Generator(device=self.device).manual_seed(int(seed))
    def randn(self, shape, rng): return self.xp.randn(tuple(shape), device=self.device, generator=rng)
    def randint(self, lo, hi, shape, rng):
        return self.xp.randint(lo, hi, tuple(shape), device=self.device, generator=rng, dtype=self.xp.int32)
    def sort_last(self, x): return self.xp.sort(x, dim=-1).values
    def sync(self):
        if str(self.device).startswith("cuda"):
            self.xp.cuda.synchronize()


def host_for(be):
    """The CPU twin of a backend on a GPU (where the reference rounds floats to integers,
    see semantics.eval_array), or None for a backend already on the CPU."""
    if isinstance(be, Torch) and str(be.device) != "cpu":
        return Torch("cpu", be.fdt)
    return None


def backend_for(x, float_dtype=None):
    """The backend of an array: Torch on its device for a torch tensor, Numpy otherwise."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return Torch(x.device, float_dtype)
    if isinstance(x, np.ndarray):
        return Numpy(float_dtype)
    raise KdslError(f"expected a numpy array or a torch tensor, got {type(x).__name__}")
