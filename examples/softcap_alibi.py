"""ALiBi over a soft-capped score, causal, written with helper functions: kernel, reference,
check and benchmark in one file.

    python examples/softcap_alibi.py           # a GPU: check at B=2 H=16 4096² D=128, time against Flex
    python examples/softcap_alibi.py --cpu     # anywhere: check a small shape with the CPU interpreter
"""
import argparse
import math

import torch

import kdsl

SOURCE = """
attention softcap_alibi {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    slope(h) = exp2(-8.0 * float(h + 1) / float(H))
    soft(x, c) = c * tanh(x / c)
    score(s, b, h, i, j) = soft(s, 30) - slope(h) * float(i - j)
    mask(b, h, i, j) = j <= i
}
"""


def reference(q, k, v):
    """The same attention in plain PyTorch, in float64."""
    B, H, M, D = q.shape
    N = k.shape[2]
    s = q.double() @ k.double().transpose(-1, -2) / math.sqrt(D)
    s = 30 * torch.tanh(s / 30)
    slope = torch.exp2(-8.0 * torch.arange(1, H + 1, dtype=torch.float64, device=q.device) / H).view(1, H, 1, 1)
    i = torch.arange(M, device=q.device).view(M, 1)
    j = torch.arange(N, device=q.device).view(1, N)
    s = (s - slope * (i - j)).masked_fill(j > i, float("-inf"))
    return torch.softmax(s, dim=-1) @ v.double()


def flex(q, k, v, compile=True):
    """FlexAttention's form of the same attention, a peer to time against: a function of no
    arguments that runs it (tests/test_examples.py runs it eagerly against reference())."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    H, M, N = q.shape[1], q.shape[2], k.shape[2]

    def score_mod(score, b, h, i, j):
        slope = torch.exp2(-8.0 * (h + 1).to(score.dtype) / H)
        return 30 * torch.tanh(score / 30) - slope * (i - j).to(score.dtype)

    block_mask = create_block_mask(lambda b, h, i, j: j <= i, None, None, M, N, device=q.device)
    run = torch.compile(flex_attention) if compile else flex_attention
    return lambda: run(q, k, v, score_mod=score_mod, block_mask=block_mask)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="run the CPU interpreter at a small shape")
    args = parser.parse_args(argv)
    device = "cpu" if args.cpu else "cuda"
    mod = kdsl.compile(SOURCE, "softcap_alibi.kd", interpret=args.cpu)
    B, H, M, N, D = (1, 2, 150, 300, 64) if args.cpu else (2, 16, 4096, 4096, 128)
    q = torch.randn(B, H, M, D, dtype=torch.bfloat16, device=device)
    k, v = (torch.randn(B, H, N, D, dtype=torch.bfloat16, device=device) for _ in range(2))

    out = mod.softcap_alibi(q, k, v)
    ref = reference(q, k, v)
    error = ((out.double() - ref).norm() / ref.norm()).item()
    print(f"softcap_alibi B={B} H={H} M={M} N={N} D={D}: relative error {error:.2e} against float64 PyTorch")
    assert error < 2e-2, error

    if not args.cpu:
        from triton.testing import do_bench
        ours = do_bench(lambda: mod.softcap_alibi(q, k, v))
        theirs = do_bench(flex(q, k, v))
        print(f"kdsl {ours * 1e3:.0f} us, FlexAttention {theirs * 1e3:.0f} us: {theirs / ours:.2f}x")


if __name__ == "__main__":
    main()
