"""A DeepSeek-style FP8 GEMM: out = a @ b.T from e4m3 operands with one scale per 1x128 block of
a and per 128x128 block of b. Kernel, quantisation, reference, check and benchmark in one file.

    python examples/fp8_gemm.py           # a GPU: M=4096 N=7168 K=2048, timed against torch._scaled_mm
    python examples/fp8_gemm.py --cpu     # anywhere: a small shape with the CPU interpreter
"""
import argparse

import torch

import kdsl
from kdsl.fp8 import dequantize_1x128, dequantize_128x128, quantize_1x128, quantize_128x128

SOURCE = """
gemm fp8_gemm {
    a: e4m3[M, K] block(1, 128)
    b: e4m3[N, K] block(128, 128)
    out: bf16[M, N]
}
"""


def calc_diff(x, y):
    """DeepGEMM's measure: 1 - 2 sum(xy) / sum(x² + y²), 0 for equal outputs."""
    x, y = x.double(), y.double()
    return (1 - 2 * (x * y).sum() / (x * x + y * y).sum()).item()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="run the CPU interpreter at a small shape")
    args = parser.parse_args(argv)
    device = "cpu" if args.cpu else "cuda"
    mod = kdsl.compile(SOURCE, "fp8_gemm.kd", interpret=args.cpu)
    M, N, K = (130, 200, 384) if args.cpu else (4096, 7168, 2048)

    # activations quantised per row and 128 columns, weights per 128x128 block; a's scales come
    # M-major (strides (1, M)), the layout the kernel and torch._scaled_mm read
    a, sa = quantize_1x128(torch.randn(M, K, device=device))
    b, sb = quantize_128x128(torch.randn(N, K, device=device))
    out = mod.fp8_gemm(a, sa, b, sb)

    # the reference: the dequantised operands multiplied in float64
    ref = dequantize_1x128(a, sa).double() @ dequantize_128x128(b, sb).double().T
    diff = calc_diff(out, ref)
    print(f"fp8_gemm M={M} N={N} K={K}: calc_diff {diff:.1e} against the dequantised product in float64")
    assert diff < 1e-3, diff

    if not args.cpu:
        from triton.testing import do_bench
        ours = do_bench(lambda: mod.fp8_gemm(a, sa, b, sb, out=out))
        theirs = do_bench(lambda: torch._scaled_mm(a, b.T, scale_a=sa, scale_b=sb.T, out_dtype=torch.bfloat16))
        tflops = lambda ms: 2 * M * N * K / ms / 1e9
        print(f"kdsl {tflops(ours):.0f} TFLOPS, torch._scaled_mm blockwise {tflops(theirs):.0f} TFLOPS: "
              f"{theirs / ours:.2f}x")


if __name__ == "__main__":
    main()
