"""Benchmark of every sample against its peers, timed in one process on the same inputs.

Attention TFLOPS count only the work the mask leaves: 4 * D * (kept (q, kv) pairs) * B * H.
FP8 GEMM TFLOPS: 2 * M * N * K (grouped: over valid rows). Times: CUDA events, median of
the repetitions after warm-up; inputs are several times larger than L2.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import torch

import kdsl
from kdsl import flex, fp8, reference
from kdsl.runtime.launch import eval_scalar
from kdsl.testing import attention_inputs, fp8_difference, rel_frobenius

ROOT = Path(__file__).resolve().parents[1]


def bench(fn, reps=30, warmup=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def kept_pairs(kir, dims, caps, B, H, M, N):
    """Number of unmasked (q, kv) pairs summed over b, h (for the FLOP convention)."""
    from kdsl.semantics import eval_torch
    m = kir.func("mask")
    if m is None:
        return B * H * M * N
    total = 0
    for b in range(B):
        for h in range(H):
            keep = eval_torch(m, {**dims, "b": b, "h": h, "q": torch.arange(M, device="cuda").view(M, 1),
                                  "kv": torch.arange(N, device="cuda").view(1, N)}, caps)
            total += int(torch.as_tensor(keep).expand(M, N).sum())
            if "b" not in str(m) and "h" not in str(m):
                return total * B * H
    return total


def attention_row(name, B, H, M, N, D, rows, reps):
    mod = kdsl.load(ROOT / "samples" / f"{name}.kd")
    kir = mod.ir[name]
    if D != 128:
        pass
    q, k, v, caps = attention_inputs(kir, B, H, H, M, N, D)
    fn = getattr(mod, name)
    out = fn(q, k, v, **caps)
    # error on a slice (b = 0, two heads): the float64 reference of the full shape is too big
    sub = {n: c for n, c in caps.items()}
    sl = slice(0, 2)
    ref, _ = reference.attention(kir, q[:1, sl], k[:1, sl], v[:1, sl], {n: (c[:1] if c.dim() > 1 and c.shape[0] == B else c) for n, c in sub.items()})
    err = rel_frobenius(out[:1, sl], ref)
    del ref
    dims = {"B": B, "H": H, "Hkv": H, "M": M, "N": N, "D": D}
    scale = float(eval_scalar(kir.func("scale"), dims))
    pairs = kept_pairs(kir, dims, caps, B, H, M, N)
    flops = 4 * D * pairs
    t = bench(lambda: fn(q, k, v, **caps), reps)
    row = {"kernel": name, "shape": f"B={B} H={H} M={M} N={N} D={D}", "err": err, "ms": t,
           "tflops": flops / t / 1e9}
    # FlexAttention, compiled, same score/mask
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        fa = torch.compile(flex_attention)
        sm = flex.score_mod(kir, dims, caps, scale)
        mm = flex.mask_mod(kir, dims, caps)
        bm = create_block_mask(mm, B, H, M, N, device="cuda") if mm else None
        fo = fa(q, k, v, score_mod=sm, block_mask=bm, scale=scale)
        row["flex_err_vs_kdsl"] = rel_frobenius(fo, out)
        tf = bench(lambda: fa(q, k, v, score_mod=sm, block_mask=bm, scale=scale), reps)
        row["flex_ms"] = tf
        row["flex_tflops"] = flops / tf / 1e9
    except Exception as e:  # shown as such, not dropped
        row["flex_error"] = repr(e)[:200]
    if name in ("causal",) or kir.func("score") is None and kir.func("mask") is None:
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                f = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=name == "causal")
                row["cudnn_ms"] = bench(f, reps)
                row["cudnn_tflops"] = flops / row["cudnn_ms"] / 1e9
        except Exception as e:
            row["cudnn_error"] = repr(e)[:200]
    rows.append(row)
    print(json.dumps(row), flush=True)


def gemm_row(M, N, K, rows, reps):
    mod = kdsl.load(ROOT / "samples" / "fp8_gemm.kd")
    a, sa = fp8.quantize_1x128(torch.randn(M, K, device="cuda"))
    b, sb = fp8.quantize_128x128(torch.randn(N, K, device="cuda"))
    out = mod.fp8_gemm(a, sa, b, sb)
    err = fp8_difference(out, reference.fp8_gemm(a, sa, b, sb))
    flops = 2 * M * N * K
    t = bench(lambda: mod.fp8_gemm(a, sa, b, sb), reps)
    row = {"kernel": "fp8_gemm", "shape": f"M={M} N={N} K={K}", "err": err, "ms": t, "tflops": flops / t / 1e9}
    try:
        f = lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb.t(), out_dtype=torch.bfloat16)
        row["scaled_mm_diff_vs_kdsl"] = fp8_difference(f(), out)
        row["scaled_mm_ms"] = bench(f, reps)
        row["scaled_mm_tflops"] = flops / row["scaled_mm_ms"] / 1e9
    except Exception as e:
        row["scaled_mm_error"] = repr(e)[:200]
    x, y = torch.randn(M, K, device="cuda", dtype=torch.bfloat16), torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    row["bf16_mm_tflops"] = flops / bench(lambda: x @ y.t(), reps) / 1e9
    rows.append(row)
    print(json.dumps(row), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    torch._dynamo.config.cache_size_limit = 256
    if hasattr(torch._dynamo.config, "recompile_limit"):
        torch._dynamo.config.recompile_limit = 256
    rows = []
    S = 8192
    plan = [("relpos", 2, 16, S, S, 128), ("alibi", 2, 16, S, S, 128), ("softcap", 2, 16, S, S, 128),
            ("causal", 2, 16, S, S, 128), ("sliding_window", 2, 16, S, S, 128),
            ("document_mask", 2, 16, S, S, 128), ("natten2d", 2, 16, 64 * 128, 64 * 128, 128),
            ("relpos", 2, 16, S, S, 64), ("causal", 2, 16, S, S, 64)]
    for p in plan:
        try:
            attention_row(*p, rows, args.reps)
        except Exception as e:
            rows.append({"kernel": p[0], "shape": str(p[1:]), "error": repr(e)[:300]})
            print("ERROR", p, repr(e)[:300], flush=True)
    for m, n, k in [(4096, 7168, 16384), (128, 2112, 7168), (4096, 2112, 7168)]:
        try:
            gemm_row(m, n, k, rows, args.reps)
        except Exception as e:
            rows.append({"kernel": "fp8_gemm", "shape": f"{m}x{n}x{k}", "error": repr(e)[:300]})
            print("ERROR gemm", repr(e)[:300], flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "bench.json").write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    print(f"\n## {torch.cuda.get_device_name()} — torch {torch.__version__}")
    print("| kernel | shape | err | kdsl ms | kdsl TFLOPS | peer | peer TFLOPS | kdsl/peer |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['kernel']} | {r['shape']} | ERROR {r['error'][:80]} | | | | | |")
            continue
        for peer, key in (("flex", "flex_tflops"), ("cuDNN sdpa", "cudnn_tflops"), ("scaled_mm", "scaled_mm_tflops"),
                          ("bf16 mm", "bf16_mm_tflops")):
            if key in r:
                print(f"| {r['kernel']} | {r['shape']} | {r['err']:.2e} | {r['ms']:.3f} | {r['tflops']:.1f} | {peer} | "
                      f"{r[key]:.1f} | {r['tflops'] / r[key]:.2f} |")
        if not any(k in r for k in ("flex_tflops", "cudnn_tflops", "scaled_mm_tflops")):
            note = r.get("flex_error") or r.get("scaled_mm_error") or ""
            print(f"| {r['kernel']} | {r['shape']} | {r['err']:.2e} | {r['ms']:.3f} | {r['tflops']:.1f} | peer failed: {note[:60]} | | |")


if __name__ == "__main__":
    main()
