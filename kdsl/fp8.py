"""FP8 (e4m3) block quantisation in the layouts that kdsl's FP8 GEMM reads.

The GEMM (``kdsl/codegen/include/kdsl/fp8_gemm_wgmma.cuh``) computes
``out = A @ B^T`` from e4m3 operands with fp32 scales in the DeepSeek-V3 recipe:

* activations ``A [M, K]``: one scale per row per 128 columns of K ("1x128");
* weights ``B [N, K]``: one scale per 128x128 block ("128x128").

Scales are *dequantisation* factors: ``x ~= x_fp8.float() * scale``. Each is the block's
absolute maximum divided by 448 (the largest finite e4m3 value), or 1 for an all-zero
block, and values are clamped to +-448 before the cast because torch's cast to
``float8_e4m3fn`` does not saturate (it yields NaN past the range).

Layouts:

* ``quantize_1x128`` returns ``sa`` of logical shape ``[M, K // 128]`` stored M-major:
  the storage is a contiguous ``[K // 128, M]`` buffer and ``sa`` is its transposed view
  (strides ``(1, M)``), which is also what ``torch._scaled_mm`` expects for 1x128 block
  scales. For a 3-D input ``[G, Mmax, K]`` the result has shape ``[G, Mmax, K // 128]``
  backed by a contiguous ``[G, K // 128, Mmax]`` buffer.
* ``quantize_128x128`` returns ``sb`` contiguous ``[ceil(N / 128), K // 128]`` (or
  ``[G, ceil(N / 128), K // 128]``).

Every function takes numpy arrays or torch tensors and answers in the same kind; numpy
has no e4m3 dtype, so there the quantised values are float32 arrays holding e4m3 values
(rounded to nearest even, saturating at +-448), and ``import kdsl.fp8`` needs no torch.
"""

from __future__ import annotations

from .backends import E4M3_MAX, backend_for

BLOCK = 128

__all__ = [
    "BLOCK",
    "E4M3_MAX",
    "quantize_1x128",
    "quantize_128x128",
    "dequantize_1x128",
    "dequantize_128x128",
]


def _check(be, x, name: str, ranks: tuple[int, ...]) -> None:
    if x.ndim not in ranks:
        want = " or ".join(f"{r}-D" for r in ranks)
        raise ValueError(f"{name}: expected a {want} array, got shape {tuple(x.shape)}")
    k = x.shape[-1]
    if k == 0 or k % BLOCK != 0:
        raise ValueError(
            f"{name}: K (last dimension) must be a positive multiple of {BLOCK}, got {k}"
        )
    if not be.is_float(x):
        raise ValueError(f"{name}: expected a floating-point array, got {x.dtype}")


def _scale_of(be, amax):
    amax = be.float32(amax)
    return be.float32(be.xp.where(amax > 0, amax / E4M3_MAX, 1.0))


def quantize_1x128(x):
    """Quantise activations with one scale per row per 128 columns.

    Args:
        x: ``[M, K]`` or ``[G, Mmax, K]`` floating array, K a multiple of 128.

    Returns:
        ``(x_fp8, sa)``: ``x_fp8`` has ``x``'s shape in ``torch.float8_e4m3fn`` (numpy:
        float32 holding e4m3 values); ``sa`` is float32 of logical shape
        ``[..., M, K // 128]`` whose storage is the contiguous M-major buffer
        ``[..., K // 128, M]`` (so its strides end in ``(1, M)`` elements).
    """
    be = backend_for(x)
    _check(be, x, "quantize_1x128", (2, 3))
    *lead, m, k = x.shape
    xb = be.float32(x).reshape(*lead, m, k // BLOCK, BLOCK)
    scale = _scale_of(be, be.amax(be.xp.abs(xb), -1))             # [..., M, K/128]
    q = be.cast(xb / scale[..., None], "e4m3").reshape(x.shape)
    swap = be.xp.swapaxes
    sa = swap(be.contiguous(swap(scale, -1, -2)), -1, -2)         # M-major storage
    return q, sa


def quantize_128x128(w):
    """Quantise weights with one scale per 128x128 block.

    Args:
        w: ``[N, K]`` or ``[G, N, K]`` floating array, K a multiple of 128; N may be any
           size (the last row block is partial).

    Returns:
        ``(w_fp8, sb)``: ``w_fp8`` in ``torch.float8_e4m3fn`` (numpy: float32 holding e4m3
        values) with ``w``'s shape and ``sb`` contiguous float32
        ``[..., ceil(N / 128), K // 128]``.
    """
    be = backend_for(w)
    _check(be, w, "quantize_128x128", (2, 3))
    *lead, n, k = w.shape
    nb = (n + BLOCK - 1) // BLOCK
    wf = be.float32(w)
    if nb * BLOCK != n:  # zero rows do not change a block's amax
        wf = be.cat([wf, be.full((*lead, nb * BLOCK - n, k), 0.0, "f32")], -2)
    wb = wf.reshape(*lead, nb, BLOCK, k // BLOCK, BLOCK)
    scale = _scale_of(be, be.amax(be.xp.abs(wb), (-3, -1)))       # [..., N/128, K/128]
    q = be.cast(wb / scale[..., :, None, :, None], "e4m3")
    q = be.contiguous(q.reshape(*lead, nb * BLOCK, k)[..., :n, :])
    return q, be.contiguous(scale)


def dequantize_1x128(x_fp8, sa, dtype=None):
    """Inverse of :func:`quantize_1x128`: ``x_fp8 * sa`` broadcast over 128-column blocks.

    ``sa`` may be the strided view returned by ``quantize_1x128`` or any array of logical
    shape ``[..., M, K // 128]``. ``dtype`` (of the array's library) defaults to float32;
    pass float64 for references.
    """
    be = backend_for(x_fp8)
    dtype = dtype or be.dtype("f32")
    _check(be, x_fp8, "dequantize_1x128", (2, 3))
    *lead, m, k = x_fp8.shape
    if tuple(sa.shape) != (*lead, m, k // BLOCK):
        raise ValueError(
            f"dequantize_1x128: sa has shape {tuple(sa.shape)}, expected {(*lead, m, k // BLOCK)}"
        )
    xb = be.astype(x_fp8, dtype).reshape(*lead, m, k // BLOCK, BLOCK)
    return (xb * be.astype(sa, dtype)[..., None]).reshape(x_fp8.shape)


def dequantize_128x128(w_fp8, sb, dtype=None):
    """Inverse of :func:`quantize_128x128`: ``w_fp8 * sb`` broadcast over 128x128 blocks."""
    be = backend_for(w_fp8)
    dtype = dtype or be.dtype("f32")
    _check(be, w_fp8, "dequantize_128x128", (2, 3))
    *lead, n, k = w_fp8.shape
    nb = (n + BLOCK - 1) // BLOCK
    if tuple(sb.shape) != (*lead, nb, k // BLOCK):
        raise ValueError(
            f"dequantize_128x128: sb has shape {tuple(sb.shape)}, expected {(*lead, nb, k // BLOCK)}"
        )
    s = be.astype(sb, dtype)[..., be.arange(n) // BLOCK, :]    # one row of scales per row of w
    return be.astype(w_fp8, dtype) * s[..., be.arange(k) // BLOCK]
