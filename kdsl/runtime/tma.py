"""TMA tensor maps for the Hopper kernels (attention, FP8 GEMM), built with the driver's
cuTensorMapEncodeTiled through ctypes.

A tensor map embeds the tensor's address; shapes, strides and boxes are fixed per plan. Each
map keeps its encodings by pointer, each in its own 128-byte buffer, and binding a pointer
points the kernel parameter at that buffer: a model's layers (one plan, other weights and
activations each call) and torch's caching allocator (the same blocks again each step) bring
back the same few pointers, and writing an address is cheaper than the driver's encode.
"""
from __future__ import annotations

import ctypes

from ..errors import KdslError
from .driver import _libcuda

# CUtensorMapDataType, CUtensorMapSwizzle, CUtensorMapL2promotion (cuda.h)
_DTYPE = {"bf16": 9, "f16": 6, "u8": 0, "f32": 7, "i32": 3, "i8": 0, "bool": 0}  # 1-byte types copied as UINT8
_BYTES = {"bf16": 2, "f16": 2, "u8": 1, "f32": 4, "i32": 4, "i8": 1, "bool": 1}
_SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}
_L2_PROMOTION = {0: 0, 64: 1, 128: 2, 256: 3}  # bytes an L2 miss of a TMA request fetches around it
_OOB_FILL_ZEROS = 0

TensorMapBuffer = ctypes.c_ubyte * 128  # a CUtensorMap


def _encoder():
    lib = _libcuda()
    fn = lib.cuTensorMapEncodeTiled
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p,
                   ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                   ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def encode_tiled(ptr: int, dtype: str, dims, strides, box, swizzle: int = 128, l2_promotion: int = 256) -> bytes:
    """One tiled map's 128 bytes, for a tensor at `ptr` (arguments as TensorMap's): for tools
    and tests that pass a map by pointer. Kernel launches bind TensorMaps to their parameters."""
    m = TensorMap(_OneParam(), 0, dtype, dims, strides, box, swizzle, l2_promotion)
    return ctypes.string_at(m.encoding(ptr), 128)


class _OneParam:
    """The one parameter slot a TensorMap outside a launch needs (driver.ArgPack's `params`)."""

    def __init__(self):
        self.params = [None]


class TensorMap:
    """A tiled tensor map passed as kernel parameter `index` of `pack` (driver.ArgPack):
    `dims` innermost first, byte `strides` of dims[1:], `box` elements per dim, `swizzle`
    bytes (0, 32, 64, 128); elements outside the tensor read as zeros; `l2_promotion` bytes
    (0, 64, 128, 256) fetched into L2 around each miss."""

    ENCODINGS_KEPT = 64  # per map; past that the oldest is dropped

    def __init__(self, pack, index: int, dtype: str, dims, strides, box, swizzle: int = 128, l2_promotion: int = 256):
        rank = len(dims)
        self.params, self.index = pack.params, index
        self.dtype = _DTYPE[dtype]
        self.rank = rank
        self.dims = (ctypes.c_uint64 * rank)(*dims)
        self.strides = (ctypes.c_uint64 * max(rank - 1, 1))(*(strides or (0,)))
        self.box = (ctypes.c_uint32 * rank)(*box)
        self.elem_strides = (ctypes.c_uint32 * rank)(*([1] * rank))
        self.swizzle = _SWIZZLE[swizzle]
        self.l2_promotion = _L2_PROMOTION[l2_promotion]
        self.ptr = None
        self.encode = _encoder()
        self.encoded: dict[int, tuple] = {}  # pointer -> (its map's buffer, the buffer's address)
        self.on_drop: list = []  # called with a pointer whose encoding is dropped

    def bind(self, ptr: int) -> None:
        """Make the parameter the map of the tensor at `ptr` (run under the pack's lock)."""
        if ptr == self.ptr:
            return
        self.ptr = None  # until the parameter is ptr's map
        self.params[self.index] = self.encoding(ptr)
        self.ptr = ptr

    def encoding(self, ptr: int) -> int:
        """The address of the map's encoding for the tensor at `ptr`, encoded on first use.
        Past ENCODINGS_KEPT the oldest is dropped, and each of `on_drop` hears of it (the
        compiled launch path keeps these addresses too)."""
        known = self.encoded.get(ptr)
        if known is not None:
            return known[1]
        buf = TensorMapBuffer()
        status = self.encode(ctypes.addressof(buf), self.dtype, self.rank, ptr, self.dims, self.strides, self.box,
                             self.elem_strides, 0, self.swizzle, self.l2_promotion, _OOB_FILL_ZEROS)
        if status:
            raise KdslError(f"cuTensorMapEncodeTiled failed with CUDA error {status} (dims {list(self.dims)}, "
                            f"box {list(self.box)})")
        if len(self.encoded) >= self.ENCODINGS_KEPT:
            oldest = next(iter(self.encoded))
            for drop in self.on_drop:
                drop(oldest)
            del self.encoded[oldest]
        self.encoded[ptr] = (buf, ctypes.addressof(buf))
        return self.encoded[ptr][1]


# L2 promotion of the attention forward's Q, K and V boxes: 128 bytes, each box row's own line.
# With 256 (a box row is 128 bytes of a 256-byte row at head dim 128) the SMs asked L2 for
# 25 % more sectors than K and V hold, all hits (ncu, B=64 H=16 N=4096 decode: 84.0 M against
# cuDNN's 67.1 M, DRAM bytes equal), with L2 at 95 % of its throughput:
# decode 9 % slower on an H200 (521 against 476 us; B=4 H=32 N=8192 7 %); prefill even
# (0.996-1.001 at 2k-8k, head dims 64-256). bench/NOTES.md, fifty-seventh session.
ROW_TILE_L2_PROMOTION = 128


class RowTiles(TensorMap):
    """A 3-D tensor map over a contiguous [batch*heads, rows, D] 16-bit tensor, boxes of
    (64 elements, box_rows, 1) in the 128-byte swizzle; rows past the end read as zeros."""

    def __init__(self, pack, index: int, dtype: str, heads: int, rows: int, d: int, box_rows: int,
                 l2_promotion: int = ROW_TILE_L2_PROMOTION):
        super().__init__(pack, index, dtype, (d, rows, heads), (d * 2, rows * d * 2), (64, box_rows, 1), 128,
                         l2_promotion)


class KeyTiles(TensorMap):
    """A 4-D tensor map over k or v, [batch, heads, rows, D] in any layout key_strides takes: a KV
    cache kept [B, N, H, D] and passed transposed, a slice of a longer cache, k and v of one
    fused projection. Boxes of (64 elements, box_rows, 1, 1) in the 128-byte swizzle at
    coordinates (column, row, head, batch); rows past the end read as zeros."""

    def __init__(self, pack, index: int, dtype: str, shape, strides, box_rows: int,
                 l2_promotion: int = ROW_TILE_L2_PROMOTION):
        batch, heads, rows, d = shape
        super().__init__(pack, index, dtype, (d, rows, heads, batch), key_strides(shape, strides, dtype),
                         (64, box_rows, 1, 1), 128, l2_promotion)


def key_strides(shape, strides, dtype: str) -> tuple | None:
    """The byte strides of rows, heads and batches of a [batch, heads, rows, D] array (`strides`
    in elements, as arrays.ArrayInfo's) as KeyTiles maps them, or None where a tensor map cannot:
    D must be innermost and the others whole 16-byte units (TMA's rule) and positive (an expanded
    axis, stride 0, is copied instead). An axis of one element has no stride to honour (torch
    leaves any there): it gets the span of the axes inside it."""
    size = _BYTES[dtype]
    if shape[3] > 1 and strides[3] != 1:
        return None
    out, span = [], shape[3] * size
    for axis in (2, 1, 0):
        stride = strides[axis] * size if shape[axis] > 1 else -(-span // 16) * 16
        if stride <= 0 or stride % 16:
            return None
        out.append(stride)
        span = max(span, stride * shape[axis])
    return tuple(out)


def key_strides_fit(shape, strides, dtype: str) -> bool:
    return key_strides(shape, strides, dtype) is not None


class StreamTiles(TensorMap):
    """A tensor map over a contiguous captured tensor streamed with the K tiles
    (passes/streaming.py): boxes of one 128-byte column block by box_rows rows (by 1 in each
    leading dim), in the 128-byte swizzle; what lies outside the tensor reads as zeros.
    The rows must be whole 16-byte units (the runtime checks that before choosing this)."""

    def __init__(self, pack, index: int, dtype: str, shape, box_rows: int):
        size = _BYTES[dtype]
        dims = tuple(reversed(shape))
        strides, stride = [], size
        for d in dims[:-1]:
            stride *= d
            strides.append(stride)
        super().__init__(pack, index, dtype, dims, strides, (128 // size, box_rows) + (1,) * (len(dims) - 2), 128)
