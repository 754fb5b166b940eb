"""One decode step against a KV cache: grouped-query heads, each sequence of the batch filled to
its own length, and a sliding window over the cache. Kernel, reference, check and benchmark in
one file; one query row per sequence, so kdsl splits each sequence's keys over several CTAs.

    python examples/decode_with_cache.py          # a GPU: B=8 H=32 Hkv=8, a 16384-key cache, timed against SDPA
    python examples/decode_with_cache.py --cpu    # anywhere: a small shape with the CPU interpreter
"""
import argparse
import math

import torch

import kdsl

SOURCE = """
attention decode_window {
    q: bf16[B, H, 1, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]
    cache_len: i32[B]
    W = 4096
    mask(b, h, i, j) = j < cache_len[b] and cache_len[b] - j <= W
}
"""


def keep(cache_len, N, window=4096):
    """Which cache slots each sequence reads: [B, 1, 1, N]."""
    j = torch.arange(N, device=cache_len.device).view(1, N)
    lengths = cache_len.view(-1, 1).long()
    return ((j < lengths) & (lengths - j <= window)).view(-1, 1, 1, N)


def reference(q, k, v, cache_len):
    """The same step in plain PyTorch, in float64: k/v heads repeated for their query heads."""
    H, Hkv, D, N = q.shape[1], k.shape[1], q.shape[3], k.shape[2]
    k, v = (x.double().repeat_interleave(H // Hkv, dim=1) for x in (k, v))
    s = q.double() @ k.transpose(-1, -2) / math.sqrt(D)
    return torch.softmax(s.masked_fill(~keep(cache_len, N), float("-inf")), dim=-1) @ v


def sdpa(q, k, v, cache_len):
    """torch's SDPA with the same mask as a boolean attn_mask, a peer to time against: a function
    of no arguments that runs it (tests/test_examples.py runs it against reference())."""
    mask = keep(cache_len, k.shape[2])
    return lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="run the CPU interpreter at a small shape")
    args = parser.parse_args(argv)
    device = "cpu" if args.cpu else "cuda"
    mod = kdsl.compile(SOURCE, "decode_window.kd", interpret=args.cpu)
    B, H, Hkv, N, D = (3, 4, 2, 5000, 64) if args.cpu else (8, 32, 8, 16384, 128)
    q = torch.randn(B, H, 1, D, dtype=torch.bfloat16, device=device)
    k, v = (torch.randn(B, Hkv, N, D, dtype=torch.bfloat16, device=device) for _ in range(2))
    cache_len = torch.randint(1, N + 1, (B,), dtype=torch.int32, device=device)
    cache_len[0] = N  # one full cache, past the window

    out = mod.decode_window(q, k, v, cache_len=cache_len)
    ref = reference(q, k, v, cache_len)
    error = ((out.double() - ref).norm() / ref.norm()).item()
    print(f"decode_window B={B} H={H} Hkv={Hkv} N={N} D={D}, cache lengths {cache_len.tolist()[:4]}...: "
          f"relative error {error:.2e} against float64 PyTorch")
    assert error < 2e-2, error

    if not args.cpu:
        from triton.testing import do_bench
        ours = do_bench(lambda: mod.decode_window(q, k, v, cache_len=cache_len))
        theirs = do_bench(sdpa(q, k, v, cache_len))
        print(f"kdsl {ours * 1e3:.1f} us, torch SDPA with the same boolean mask {theirs * 1e3:.1f} us: "
              f"{theirs / ours:.2f}x")


if __name__ == "__main__":
    main()
