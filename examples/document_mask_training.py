"""Packed documents under causal attention, trained: the mask reads document ids captured at
call time, and loss.backward() runs the backward kernel kdsl generates from the same program.
Kernel, reference, check of the output and the gradients, and benchmark in one file.

    python examples/document_mask_training.py        # a GPU: B=1 H=16 16384 tokens D=128, timed against Flex
    python examples/document_mask_training.py --cpu  # anywhere: a small shape with the CPU interpreter
"""
import argparse
import math

import torch

import kdsl

SOURCE = """
attention packed_documents {
    q: bf16[B, H, N, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    doc: i32[B, N]
    mask(b, h, i, j) = doc[b, i] == doc[b, j] and j <= i
}
"""


def documents(B, N, device, generator=None):
    """Sorted document ids: each sequence packs documents of random lengths (at least one token)."""
    cuts = torch.rand(B, N, generator=generator) < 8 / N
    cuts[:, 0] = False
    return torch.cumsum(cuts.int(), dim=1).int().to(device)


def reference(q, k, v, doc):
    """The same attention in plain PyTorch, in float64 (differentiable)."""
    N, D = q.shape[2], q.shape[3]
    s = q.double() @ k.double().transpose(-1, -2) / math.sqrt(D)
    i = torch.arange(N, device=q.device).view(N, 1)
    j = torch.arange(N, device=q.device).view(1, N)
    keep = (doc[:, None, :, None] == doc[:, None, None, :]) & (j <= i)
    return torch.softmax(s.masked_fill(~keep, float("-inf")), dim=-1) @ v.double()


def flex(q, k, v, doc, compile=True):
    """FlexAttention's form of the same attention, a peer to time against: a function of no
    arguments that runs its forward (tests/test_examples.py runs it eagerly against reference())."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    B, N = doc.shape

    def mask_mod(b, h, i, j):
        return (doc[b, i] == doc[b, j]) & (j <= i)

    block_mask = create_block_mask(mask_mod, B, None, N, N, device=q.device)
    run = torch.compile(flex_attention) if compile else flex_attention
    return lambda: run(q, k, v, block_mask=block_mask)


def relative_error(got, want):
    return ((got.double() - want).norm() / want.norm()).item()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="run the CPU interpreter at a small shape")
    args = parser.parse_args(argv)
    device = "cpu" if args.cpu else "cuda"
    mod = kdsl.compile(SOURCE, "packed_documents.kd", interpret=args.cpu)
    B, H, N, D = (1, 2, 300, 64) if args.cpu else (1, 16, 16384, 128)
    q, k, v = (torch.randn(B, H, N, D, dtype=torch.bfloat16, device=device, requires_grad=True) for _ in range(3))
    doc = documents(B, N, device)
    dout = torch.randn(B, H, N, D, dtype=torch.bfloat16, device=device)

    out = mod.packed_documents(q, k, v, doc=doc)
    out.backward(dout)
    got = [out.detach()] + [x.grad for x in (q, k, v)]
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    # The float64 reference a head at a time: all heads' scores at once would take 32 GiB at the GPU's shape.
    refs = []
    for h in range(H):
        ref = reference(q64[:, h:h + 1], k64[:, h:h + 1], v64[:, h:h + 1], doc)
        ref.backward(dout[:, h:h + 1].double())
        refs.append(ref.detach())
    want = [torch.cat(refs, dim=1), q64.grad, k64.grad, v64.grad]
    errors = {name: relative_error(g, w) for name, g, w in zip(("out", "dq", "dk", "dv"), got, want)}
    print(f"packed_documents B={B} H={H} N={N} D={D}, {int(doc.max()) + 1} documents a sequence: relative errors "
          + ", ".join(f"{n} {e:.2e}" for n, e in errors.items()) + " against float64 PyTorch")
    assert max(errors.values()) < 2e-2, errors

    if not args.cpu:
        from triton.testing import do_bench
        def ours():
            mod.packed_documents(q, k, v, doc=doc).backward(dout)
        forward = flex(q, k, v, doc)

        def theirs():
            forward().backward(dout)
        t_ours, t_theirs = do_bench(ours), do_bench(theirs)
        print(f"forward + backward: kdsl {t_ours * 1e3:.0f} us, FlexAttention {t_theirs * 1e3:.0f} us: "
              f"{t_theirs / t_ours:.2f}x")


if __name__ == "__main__":
    main()
