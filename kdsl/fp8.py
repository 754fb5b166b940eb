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

torch is imported inside the functions so that ``import kdsl.fp8`` works without it.
"""

from __future__ import annotations

BLOCK = 128
E4M3_MAX = 448.0

__all__ = [
    "BLOCK",
    "E4M3_MAX",
    "quantize_1x128",
    "quantize_128x128",
    "dequantize_1x128",
    "dequantize_128x128",
]


def _check(x, name: str, ranks: tuple[int, ...]) -> None:
    if x.dim() not in ranks:
        want = " or ".join(f"{r}-D" for r in ranks)
        raise ValueError(f"{name}: expected a {want} tensor, got shape {tuple(x.shape)}")
    k = x.shape[-1]
    if k == 0 or k % BLOCK != 0:
        raise ValueError(
            f"{name}: K (last dimension) must be a positive multiple of {BLOCK}, got {k}"
        )
    if not x.is_floating_point():
        raise ValueError(f"{name}: expected a floating-point tensor, got {x.dtype}")


def _scale_of(amax):
    import torch

    amax = amax.float()
    return torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))


def _to_e4m3(x):
    import torch

    return x.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def quantize_1x128(x):
    """Quantise activations with one scale per row per 128 columns.

    Args:
        x: ``[M, K]`` or ``[G, Mmax, K]`` floating tensor, K a multiple of 128.

    Returns:
        ``(x_fp8, sa)``: ``x_fp8`` has ``x``'s shape in ``torch.float8_e4m3fn``;
        ``sa`` is float32 of logical shape ``[..., M, K // 128]`` whose storage is the
        contiguous M-major buffer ``[..., K // 128, M]`` (so ``sa.stride()[-2:] == (1, M)``).
    """
    _check(x, "quantize_1x128", (2, 3))
    *lead, m, k = x.shape
    xb = x.float().reshape(*lead, m, k // BLOCK, BLOCK)
    scale = _scale_of(xb.abs().amax(dim=-1))                      # [..., M, K/128]
    q = _to_e4m3(xb / scale.unsqueeze(-1)).reshape(x.shape)
    sa = scale.transpose(-1, -2).contiguous().transpose(-1, -2)  # M-major storage
    return q, sa


def quantize_128x128(w):
    """Quantise weights with one scale per 128x128 block.

    Args:
        w: ``[N, K]`` or ``[G, N, K]`` floating tensor, K a multiple of 128; N may be any
           size (the last row block is partial).

    Returns:
        ``(w_fp8, sb)``: ``w_fp8`` in ``torch.float8_e4m3fn`` with ``w``'s shape and
        ``sb`` contiguous float32 ``[..., ceil(N / 128), K // 128]``.
    """
    import torch

    _check(w, "quantize_128x128", (2, 3))
    *lead, n, k = w.shape
    nb = (n + BLOCK - 1) // BLOCK
    wf = w.float()
    if nb * BLOCK != n:  # zero rows do not change a block's amax
        pad = torch.zeros(*lead, nb * BLOCK - n, k, dtype=wf.dtype, device=wf.device)
        wf = torch.cat([wf, pad], dim=-2)
    wb = wf.reshape(*lead, nb, BLOCK, k // BLOCK, BLOCK)
    scale = _scale_of(wb.abs().amax(dim=(-3, -1)))               # [..., N/128, K/128]
    q = _to_e4m3(wb / scale[..., :, None, :, None])
    q = q.reshape(*lead, nb * BLOCK, k)[..., :n, :].contiguous()
    return q, scale.contiguous()


def dequantize_1x128(x_fp8, sa, dtype=None):
    """Inverse of :func:`quantize_1x128`: ``x_fp8 * sa`` broadcast over 128-column blocks.

    ``sa`` may be the strided view returned by ``quantize_1x128`` or any tensor of logical
    shape ``[..., M, K // 128]``. ``dtype`` defaults to float32 (pass torch.float64 for
    references).
    """
    import torch

    dtype = dtype or torch.float32
    _check(x_fp8, "dequantize_1x128", (2, 3))
    *lead, m, k = x_fp8.shape
    if tuple(sa.shape) != (*lead, m, k // BLOCK):
        raise ValueError(
            f"dequantize_1x128: sa has shape {tuple(sa.shape)}, expected {(*lead, m, k // BLOCK)}"
        )
    xb = x_fp8.to(dtype).reshape(*lead, m, k // BLOCK, BLOCK)
    return (xb * sa.to(dtype).unsqueeze(-1)).reshape(x_fp8.shape)


def dequantize_128x128(w_fp8, sb, dtype=None):
    """Inverse of :func:`quantize_128x128`: ``w_fp8 * sb`` broadcast over 128x128 blocks."""
    import torch

    dtype = dtype or torch.float32
    _check(w_fp8, "dequantize_128x128", (2, 3))
    *lead, n, k = w_fp8.shape
    nb = (n + BLOCK - 1) // BLOCK
    if tuple(sb.shape) != (*lead, nb, k // BLOCK):
        raise ValueError(
            f"dequantize_128x128: sb has shape {tuple(sb.shape)}, expected {(*lead, nb, k // BLOCK)}"
        )
    s = sb.to(dtype).repeat_interleave(BLOCK, dim=-2)[..., :n, :]
    s = s.repeat_interleave(BLOCK, dim=-1)
    return w_fp8.to(dtype) * s
