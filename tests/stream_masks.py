"""Programs whose masks read dense tensors at [..., i, j] (passes/streaming.py's rings), for the
backward's copied tiles: tests/test_backward_stream.py (plans, builds) and
tests/gpu/test_backward_stream_gpu.py (gradients)."""

SOURCE = """
attention head_bool {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    keep: bool[B, H, M, N]
    mask(b, h, i, j) = keep[b, h, i, j]
}
attention shared_bool {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    keep: bool[B, M, N]
    mask(b, h, i, j) = keep[b, i, j]
}
attention head_u8_causal {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    sel: u8[B, H, M, N]
    mask(b, h, i, j) = j <= i + (N - M) and sel[b, h, i, j] > 100
}
attention shared_i8 {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    sel: i8[B, M, N]
    mask(b, h, i, j) = sel[b, i, j] >= -3
}
attention two_rings {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    keep: bool[B, M, N]; sel: u8[B, H, M, N]
    mask(b, h, i, j) = keep[b, i, j] or sel[b, h, i, j] > 200
}
attention score_and_mask {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    bias: f32[B, H, M, N]; keep: bool[B, M, N]
    score(s, b, h, i, j) = s + bias[b, h, i, j]
    mask(b, h, i, j) = keep[b, i, j]
}
attention float_mask {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    w: f32[B, H, M, N]
    mask(b, h, i, j) = w[b, h, i, j] > 0.0
}
attention causal {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    mask(b, h, i, j) = j <= i
}
"""
