"""Dev loop for the Hopper attention kernel (attention_wgmma.cuh): quick correctness on
awkward shapes against the float64 reference, then timings against cuDNN SDPA in the same
process. Not the benchmark of record (that is `kdsl bench --suite standard`).

    python3 tools/dev/hopper_attn.py [--quick]
"""
import time

import torch
import triton

import kdsl
from kdsl import reference
from kdsl.testing import attention_inputs, rel_frobenius

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def check(name, shapes, dtype=torch.bfloat16):
    mod = kdsl.load(ROOT / "samples" / f"{name}.kd")
    kir = mod.ir[name]
    worst = 0.0
    for (B, H, Hkv, M, N, D) in shapes:
        if "Hkv" not in kir.dims:
            Hkv = H
        gen = torch.Generator(device="cuda").manual_seed(hash((name, M, N, D)) % 2**31)
        q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, N, D, generator=gen, dtype=dtype)
        out = torch.full_like(q, float("nan"))
        getattr(mod, name)(q, k, v, out=out, **caps)
        torch.cuda.synchronize()
        ref, _ = reference.attention(kir, q, k, v, caps)
        err = rel_frobenius(out, ref)
        worst = max(worst, err)
        flag = "" if err < 2e-2 else "   <-- FAIL"
        print(f"  {name:15s} B={B} H={H} Hkv={Hkv} M={M} N={N} D={D}: rel err {err:.2e}{flag}", flush=True)
    return worst


def bench(name, B, H, S, D, causal_flops=False):
    mod = kdsl.load(ROOT / "samples" / f"{name}.kd")
    kir = mod.ir[name]
    q, k, v, caps = attention_inputs(kir, B, H, H, S, S, D)
    fn = getattr(mod, name)
    out = torch.empty_like(q)
    fn(q, k, v, out=out, **caps)
    ms = triton.testing.do_bench(lambda: fn(q, k, v, out=out, **caps), warmup=50, rep=300, return_mode="median")
    flops = 4 * B * H * S * S * D * (0.5 if causal_flops else 1.0)
    row = f"{name:15s} B={B:2d} H={H} S={S:5d} D={D:3d}: kdsl {ms*1e3:8.1f} us {flops/ms/1e9:6.1f} TFLOPS"
    if name in ("plain", "causal"):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            f = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=name == "causal")
            f()
            pm = triton.testing.do_bench(f, warmup=50, rep=300, return_mode="median")
        row += f" | cuDNN {pm*1e3:8.1f} us {flops/pm/1e9:6.1f} TFLOPS | ratio {pm/ms:5.2f}"
    print(row, flush=True)


def main():
    print(torch.cuda.get_device_name(), flush=True)
    shapes = [(2, 4, 4, 256, 256, 128), (1, 2, 2, 1, 1, 64), (1, 3, 3, 1, 300, 128), (2, 2, 2, 129, 127, 64),
              (1, 8, 2, 127, 65, 128), (1, 4, 1, 200, 513, 64), (3, 2, 2, 64, 63, 128), (1, 2, 2, 1000, 1000, 128),
              (4, 16, 16, 130, 70, 64)]
    t0 = time.time()
    worst = 0.0
    for name in ["plain", "causal", "relpos", "alibi", "softcap", "sliding_window", "document_mask", "natten2d"]:
        worst = max(worst, check(name, shapes if name != "natten2d" else shapes[:3] + [(1, 2, 2, 8192, 8192, 128)]))
    worst = max(worst, check("plain", shapes[:4], torch.float16))
    print(f"correctness: worst rel err {worst:.2e} ({time.time() - t0:.0f} s)", flush=True)
    for S in (2048, 8192):
        for name in ("plain", "causal", "relpos", "alibi", "softcap", "sliding_window"):
            bench(name, 16384 // S, 16, S, 128, causal_flops=name == "causal")
    for name in ("plain", "causal"):
        bench(name, 2, 16, 8192, 64, causal_flops=name == "causal")


if __name__ == "__main__":
    main()


def sweep(variants, names=("plain", "causal"), shapes=((2, 16, 8192, 128), (8, 16, 2048, 128), (2, 16, 8192, 64))):
    """Time tile variants: {head_dim: [(BN, consumers, stages), ...]} (tiling pass override)."""
    from kdsl.passes import tiling
    saved = dict(tiling.WGMMA_ATTENTION_TILES)
    for (B, H, S, D) in shapes:
        for v in variants.get(D, []):
            tiling.WGMMA_ATTENTION_TILES[D] = v
            print(f"tiles {v}:", end=" ")
            for name in names:
                try:
                    bench(name, B, H, S, D, causal_flops=name == "causal")
                except Exception as e:  # a variant that does not fit is reported, not fatal
                    print(f"{name} {v}: {type(e).__name__}: {str(e)[:200]}")
    tiling.WGMMA_ATTENTION_TILES.update(saved)
