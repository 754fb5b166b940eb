"""Attention sinks as gpt-oss has them: one learned logit per head that joins every row's softmax
denominator and carries no value. The kernel returns the log-sum-exp beside the output, and one
elementwise step turns its output into the sinks' (out * sigmoid(lse - sink)); autograd runs
through both, the kernel's backward taking lse's gradient. Kernel, reference, check of the
output and every gradient (the sinks' too), and benchmark in one file.

    python examples/attention_sinks.py         # a GPU: B=2 H=64 Hkv=8 4096², D=64, a 128-key window
    python examples/attention_sinks.py --cpu   # anywhere: a small shape with the CPU interpreter
"""
import argparse
import math

import torch

import kdsl

SOURCE = """
attention sliding_window_lse {
    q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]
    lse: f32[B, H, M]
    mask(b, h, i, j) = j <= i and i - j < 128
}
"""


def with_sinks(kernel, q, k, v, sinks):
    """The attention with one extra logit per head in each row's denominator: the kernel's output
    is softmax-weighted over the keys alone, so it is scaled by exp(lse) / (exp(lse) + exp(sink))."""
    out, lse = kernel(q, k, v)
    weight = torch.sigmoid(lse - sinks.view(1, -1, 1))
    return (out.float() * weight.unsqueeze(-1)).to(q.dtype)


def reference(q, k, v, sinks):
    """The same in plain PyTorch, in float64: the sink as one more column of scores, dropped after
    the softmax."""
    H, Hkv, M, D, N = q.shape[1], k.shape[1], q.shape[2], q.shape[3], k.shape[2]
    k, v = (x.double().repeat_interleave(H // Hkv, dim=1) for x in (k, v))
    s = q.double() @ k.transpose(-1, -2) / math.sqrt(D)
    i = torch.arange(M, device=q.device).view(M, 1)
    j = torch.arange(N, device=q.device).view(1, N)
    s = s.masked_fill(~((j <= i) & (i - j < 128)), float("-inf"))
    sink = sinks.double().view(1, H, 1, 1).expand(*s.shape[:3], 1)
    p = torch.softmax(torch.cat([s, sink], dim=-1), dim=-1)[..., :N]
    return p @ v


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="run the CPU interpreter at a small shape")
    args = parser.parse_args(argv)
    device = "cpu" if args.cpu else "cuda"
    mod = kdsl.compile(SOURCE, "sliding_window_lse.kd", interpret=args.cpu)
    B, H, Hkv, N, D = (1, 4, 2, 300, 64) if args.cpu else (2, 64, 8, 4096, 64)
    q = torch.randn(B, H, N, D, dtype=torch.bfloat16, device=device, requires_grad=True)
    k, v = (torch.randn(B, Hkv, N, D, dtype=torch.bfloat16, device=device, requires_grad=True) for _ in range(2))
    # sinks near a row's log-sum-exp (log 128 with a full window), so that they take a real share
    sinks = (4 + 2 * torch.randn(H, device=device)).requires_grad_()
    dout = torch.randn(B, H, N, D, dtype=torch.bfloat16, device=device)

    out = with_sinks(mod.sliding_window_lse, q, k, v, sinks)
    out.backward(dout)
    got = [out.detach()] + [x.grad for x in (q, k, v, sinks)]
    leaves = [x.detach().double().requires_grad_() for x in (q, k, v, sinks)]
    # The float64 reference a query head at a time (with its key head): all heads' scores at once would take
    # 16 GiB at the GPU's shape.
    q64, k64, v64, sinks64 = leaves
    refs = []
    for h in range(H):
        kv = slice(h // (H // Hkv), h // (H // Hkv) + 1)
        ref = reference(q64[:, h:h + 1], k64[:, kv], v64[:, kv], sinks64[h:h + 1])
        ref.backward(dout[:, h:h + 1].double())
        refs.append(ref.detach())
    want = [torch.cat(refs, dim=1)] + [x.grad for x in leaves]
    errors = {n: ((g.double() - w).norm() / w.norm()).item()
              for n, g, w in zip(("out", "dq", "dk", "dv", "dsinks"), got, want)}
    print(f"attention sinks B={B} H={H} Hkv={Hkv} N={N} D={D}: relative errors "
          + ", ".join(f"{n} {e:.2e}" for n, e in errors.items()) + " against float64 PyTorch")
    assert max(errors.values()) < 2e-2, errors

    if not args.cpu:
        from triton.testing import do_bench

        def step():
            with_sinks(mod.sliding_window_lse, q, k, v, sinks).backward(dout)
        print(f"forward + backward with sinks: {do_bench(step) * 1e3:.0f} us")


if __name__ == "__main__":
    main()
