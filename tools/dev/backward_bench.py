"""Forward + backward time of kdsl's attention against FlexAttention (compiled) and, for plain
and causal, torch SDPA (flash and cuDNN backends): timed in turns on the same inputs, CUDA
events, median of --reps rounds. Also each gradient's error against FlexAttention's.

    python tools/dev/backward_bench.py [--shape B,H,M,N,D] [--programs plain,causal,...] [--reps 20]
"""
import argparse
import pathlib
import statistics

import torch

import kdsl
from kdsl import flex
from kdsl.semantics import eval_scalar
from kdsl.testing import attention_inputs, rel_frobenius

ROOT = pathlib.Path(__file__).resolve().parents[2]


def fwd_bwd(fn, q, k, v, dout):
    def run():
        for x in (q, k, v):
            x.grad = None
        out = fn(q, k, v)
        out = out[0] if isinstance(out, tuple) else out
        out.backward(dout)
        return q.grad, k.grad, v.grad
    return run


def timed(fns: dict, reps: int) -> dict:
    times = {n: [] for n in fns}
    for r in range(reps):
        order = list(fns)[r % len(fns):] + list(fns)[:r % len(fns)]
        for n in order:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fns[n]()
            b.record()
            b.synchronize()
            times[n].append(a.elapsed_time(b) * 1e3)
    return {n: statistics.median(t) for n, t in times.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="2,16,4096,4096,128")
    ap.add_argument("--programs", default="plain,causal,relpos,alibi,softcap,sliding_window,document_mask")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    B, H, M, N, D = map(int, args.shape.split(","))
    print(f"device: {torch.cuda.get_device_name()}; B={B} H={H} M={M} N={N} D={D}, forward + backward, us")
    print("| program | kdsl us | flex us | kdsl / flex | sdpa flash us | kdsl / flash | err dq dk dv vs flex |")
    print("|---|---|---|---|---|---|---|")
    for name in args.programs.split(","):
        mod = kdsl.load(ROOT / "samples" / f"{name}.kd")
        kir = mod.ir[name]
        q, k, v, caps = attention_inputs(kir, B, H, H, M, N, D)
        q, k, v = (x.requires_grad_() for x in (q, k, v))
        dout = torch.randn_like(q)
        dims = {"B": B, "H": H, "Hkv": H, "M": M, "N": N, "D": D, "Dv": D}
        scale = float(eval_scalar(kir.func("scale"), dims))
        kern = getattr(mod, name)
        fns = {"kdsl": fwd_bwd(lambda q, k, v: kern(q, k, v, **caps), q, k, v, dout)}
        from torch.nn.attention.flex_attention import create_block_mask
        fa = flex.compiled_flex_attention()
        sm, mm = flex.score_mod(kir, dims, caps, scale), flex.mask_mod(kir, dims, caps)
        bm = create_block_mask(mm, B, H, M, N, device="cuda") if mm else None
        fns["flex"] = fwd_bwd(lambda q, k, v: fa(q, k, v, score_mod=sm, block_mask=bm, scale=scale), q, k, v, dout)
        if name in ("plain", "causal"):
            from torch.nn.attention import SDPBackend, sdpa_kernel

            def sdpa(q, k, v):
                with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=name == "causal")
            fns["flash"] = fwd_bwd(sdpa, q, k, v, dout)
        got = [g.clone() for g in fns["kdsl"]()]
        ref = [g.clone() for g in fns["flex"]()]
        errs = " ".join(f"{rel_frobenius(a, b):.1e}" for a, b in zip(got, ref))
        t = timed(fns, args.reps)
        fl = f"{t['flash']:.0f} | {t['flash'] / t['kdsl']:.2f}" if "flash" in t else " | "
        print(f"| {name} | {t['kdsl']:.0f} | {t['flex']:.0f} | {t['flex'] / t['kdsl']:.2f} | {fl} | {errs} |",
              flush=True)


if __name__ == "__main__":
    main()
