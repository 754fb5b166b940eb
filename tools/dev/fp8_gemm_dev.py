#!/usr/bin/env python3
"""GPU check and benchmark for kdsl/fp8_gemm_wgmma.cuh (standalone; needs CuPy + torch + a Hopper GPU).

Builds the header with NVRTC through cupy.RawModule (falling back to nvcc -cubin if NVRTC
fails), checks every kind against the float64 product of the dequantised inputs, and
benchmarks against torch's blockwise _scaled_mm and bf16 torch.matmul.

    python3 tools/dev/fp8_gemm_dev.py [--quick] [--no-bench] [--no-check]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import warnings

warnings.filterwarnings("ignore", category=DeprecationWarning)

import numpy as np
import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, ROOT)
INCLUDE = os.path.join(ROOT, "kdsl", "codegen", "include")

# Load kdsl/fp8.py by path so this script does not depend on the rest of the package.
import importlib.util  # noqa: E402

_spec = importlib.util.spec_from_file_location("kdsl_fp8", os.path.join(ROOT, "kdsl", "fp8.py"))
_fp8 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fp8)
quantize_1x128, quantize_128x128 = _fp8.quantize_1x128, _fp8.quantize_128x128
dequantize_1x128, dequantize_128x128 = _fp8.dequantize_1x128, _fp8.dequantize_128x128

import cupy  # noqa: E402

WRAPPER = r"""
#include "kdsl/fp8_gemm_wgmma.cuh"
extern "C" __global__ void __launch_bounds__(kdsl::fp8_gemm_threads<{BM},{BN}>(), 1)
{name}(const void* a, const float* sa, const void* b, const float* sb, void* out,
       const int* group, const int* count, int M, int N, int K, int G) {{
  kdsl::Fp8GemmArgs p;
  p.a = a; p.sa = sa; p.b = b; p.sb = sb; p.out = out; p.group = group; p.count = count;
  p.M = M; p.N = N; p.K = K; p.G = G;
  kdsl::fp8_gemm<{BM}, {BN}, {ST}, {F32}, {KIND}>(p);
}}
"""

_cache: dict = {}
_backend_note: list = []


def smem_bytes(bm, bn, st):
    return st * ((bm + bn) * 128 + (bm + 4) * 4) + 1024 + 16


def get_kernel(bm, bn, st, f32, kind):
    key = (bm, bn, st, f32, kind)
    if key in _cache:
        return _cache[key]
    name = f"fp8g_{bm}_{bn}_{st}_{int(f32)}_{kind}"
    src = WRAPPER.format(BM=bm, BN=bn, ST=st, F32="true" if f32 else "false", KIND=kind, name=name)
    try:
        mod = cupy.RawModule(code=src, options=("-std=c++17", "--gpu-architecture=sm_90a", "-I" + INCLUDE))
        k = mod.get_function(name)
        if "nvrtc" not in _backend_note:
            _backend_note.append("nvrtc")
    except Exception as e:  # keep going with nvcc so one run still yields results
        print(f"[build] NVRTC failed for {name}: {e!r}"[:2000])
        d = tempfile.mkdtemp()
        cu, cub = os.path.join(d, "k.cu"), os.path.join(d, "k.cubin")
        open(cu, "w").write(src)
        subprocess.check_call(["nvcc", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a",
                               "-I" + INCLUDE, "-cubin", "-o", cub, cu])
        mod = cupy.RawModule(path=cub)
        k = mod.get_function(name)
        _backend_note.append("nvcc")
    k.max_dynamic_shared_size_bytes = smem_bytes(bm, bn, st)
    _cache[key] = k
    return k


def _ext_stream():
    return cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)


def launch(cfg, kind, a, sa, b, sb, out, M, N, K, G, group=None, count=None):
    bm, bn, st, f32 = cfg
    k = get_kernel(bm, bn, st, f32, kind)
    grid = ((N + bn - 1) // bn, (M + bm - 1) // bm, G)
    ptr = lambda t: np.uint64(0 if t is None else t.data_ptr())
    args = (ptr(a), ptr(sa), ptr(b), ptr(sb), ptr(out), ptr(group), ptr(count),
            np.int32(M), np.int32(N), np.int32(K), np.int32(G))
    with _ext_stream():
        k(grid, (2 * bm,), args, shared_mem=smem_bytes(bm, bn, st))


def calc_diff(x, y):
    x, y = x.double(), y.double()
    den = (x * x + y * y).sum()
    if den == 0:
        return 0.0
    return (1 - 2 * (x * y).sum() / den).item()


RESULTS = []


def check(label, out, ref, valid_rows_mask):
    """out/ref [..., rows, N]; valid_rows_mask [..., rows] bool: rows that must be written."""
    o = out.double()
    vm = valid_rows_mask
    ok = True
    msg = []
    if vm.any():
        ov, rv = o[vm], ref[vm]
        nan_bad = torch.isnan(ov).sum().item()
        diff = calc_diff(ov.nan_to_num(0.0), rv)
        rms = rv.pow(2).mean().sqrt().item() + 1e-30
        tol = 1e-2 * rv.abs() + 2e-3 * rms
        err = ((ov - rv).abs() / tol).nan_to_num(1e9).max().item()
        ok &= nan_bad == 0 and diff < 1e-3 and err <= 1.0
        msg.append(f"diff={diff:.2e} maxerr/tol={err:.3f} unwritten={nan_bad}")
    else:
        msg.append("no valid rows")
    if (~vm).any():
        touched = (~torch.isnan(o[~vm])).sum().item()
        ok &= touched == 0
        msg.append(f"untouched_bad={touched}")
    RESULTS.append((label, ok, " ".join(msg)))
    print(f"{'PASS' if ok else 'FAIL'} {label}: {' '.join(msg)}", flush=True)
    return ok


def rand_inputs(M, N, K, G=None, lead_a=None):
    dev = "cuda"
    ash = (M, K) if lead_a is None else (lead_a, M, K)
    a = torch.randn(*ash, device=dev) * (1 + torch.rand(*ash[:-1], 1, device=dev) * 4)
    bsh = (N, K) if G is None else (G, N, K)
    b = torch.randn(*bsh, device=dev) * 0.5
    qa, sa = quantize_1x128(a)
    qb, sb = quantize_128x128(b)
    return qa, sa, qb, sb


def out_buf(shape, f32):
    return torch.full(shape, float("nan"), device="cuda", dtype=torch.float32 if f32 else torch.bfloat16)


def test_dense(M, N, K, cfg=(128, 128, 4, False)):
    qa, sa, qb, sb = rand_inputs(M, N, K)
    out = out_buf((M, N), cfg[3])
    launch(cfg, 0, qa, sa, qb, sb, out, M, N, K, 1)
    ref = dequantize_1x128(qa, sa, torch.float64) @ dequantize_128x128(qb, sb, torch.float64).T
    torch.cuda.synchronize()
    check(f"dense M={M} N={N} K={K} cfg={cfg}", out, ref, torch.ones(M, dtype=torch.bool, device="cuda"))
    return qa, sa, qb, sb, out, ref


def test_contig(group, N, K, G, label, cfg=(128, 128, 4, False)):
    M = group.numel()
    qa, sa, qb, sb = rand_inputs(M, N, K, G=G)
    out = out_buf((M, N), cfg[3])
    launch(cfg, 1, qa, sa, qb, sb, out, M, N, K, G, group=group)
    ad = dequantize_1x128(qa, sa, torch.float64)
    bd = dequantize_128x128(qb, sb, torch.float64)
    ref = torch.zeros(M, N, dtype=torch.float64, device="cuda")
    for g in range(G):
        rows = (group == g).nonzero().flatten()
        if rows.numel():
            ref[rows] = ad[rows] @ bd[g].T
    torch.cuda.synchronize()
    check(f"contig {label} M={M} N={N} K={K} G={G} cfg={cfg}", out, ref, group >= 0)


def test_masked(G, Mmax, N, K, counts, cfg=(128, 128, 4, False)):
    qa, sa, qb, sb = rand_inputs(Mmax, N, K, G=G, lead_a=G)
    cnt = torch.tensor(counts, dtype=torch.int32, device="cuda")
    out = out_buf((G, Mmax, N), cfg[3])
    launch(cfg, 2, qa, sa, qb, sb, out, Mmax, N, K, G, count=cnt)
    ad = dequantize_1x128(qa, sa, torch.float64)
    bd = dequantize_128x128(qb, sb, torch.float64)
    ref = torch.einsum("gmk,gnk->gmn", ad, bd)
    rowmask = torch.arange(Mmax, device="cuda")[None, :] < cnt[:, None]
    torch.cuda.synchronize()
    check(f"masked G={G} Mmax={Mmax} N={N} K={K} counts={counts} cfg={cfg}", out, ref, rowmask)


def contiguous_groups(seg_lens, align, pad_with=-1):
    """Groups laid out as DeepGEMM's contiguous layout: each segment padded to `align` rows."""
    parts = []
    for g, n in enumerate(seg_lens):
        padded = (n + align - 1) // align * align
        parts.append(torch.full((n,), g, dtype=torch.int32))
        parts.append(torch.full((padded - n,), pad_with, dtype=torch.int32))
    return torch.cat(parts).cuda()


def run_checks(quick):
    torch.manual_seed(0)
    shapes = [(1, 1, 128), (1, 2112, 128), (127, 129, 256), (128, 2112, 7168), (129, 7168, 128),
              (200, 1, 384), (4096, 2112, 7168), (4096, 7168, 128), (257, 130, 1024)]
    if quick:
        shapes = shapes[:5]
    for M, N, K in shapes:
        test_dense(M, N, K)
    for cfg in [(128, 128, 4, True), (64, 64, 4, False), (64, 128, 3, False), (128, 64, 6, False),
                (64, 64, 6, True), (128, 128, 6, False), (128, 128, 2, False),
                (128, 160, 4, False), (128, 160, 5, True), (128, 192, 4, False), (128, 192, 5, True)]:
        test_dense(129, 2112, 768, cfg)
        test_dense(77, 131, 384, cfg)
    G = 4
    test_contig(contiguous_groups([128, 256, 128, 384], 128), 2112, 384, G, "aligned")
    test_contig(contiguous_groups([100, 3, 250, 77], 128), 2112, 7168, G, "padded-128")
    test_contig(contiguous_groups([100, 3, 250, 77], 1), 129, 512, G, "unaligned-sorted")
    torch.manual_seed(1)
    g_rand = torch.randint(-1, G, (333,), dtype=torch.int32).cuda()
    test_contig(g_rand, 2112, 384, G, "random-unsorted")
    test_contig(g_rand, 130, 256, G, "random-unsorted", cfg=(64, 64, 4, True))
    test_contig(g_rand, 2112, 384, G, "random-unsorted", cfg=(128, 160, 4, False))
    test_contig(contiguous_groups([100, 3, 250, 77], 128), 2112, 7168, G, "padded-128", cfg=(128, 192, 4, False))
    test_contig(torch.full((200,), -1, dtype=torch.int32).cuda(), 256, 128, G, "all-padding")
    g_gap = torch.tensor(([3] * 40 + [0] * 30 + [-1] * 10) * 3, dtype=torch.int32).cuda()
    test_contig(g_gap, 200, 256, G, "gapped-0-3")
    test_masked(4, 256, 2112, 384, [0, 1, 200, 256])
    test_masked(4, 256, 129, 7168, [256, 0, 129, 128])
    test_masked(3, 200, 130, 256, [200, 64, 65], cfg=(64, 64, 4, True))
    test_masked(4, 256, 2112, 384, [0, 1, 200, 256], cfg=(128, 192, 4, False))
    test_masked(4, 256, 2112, 384, [5, 256, 0, 129], cfg=(128, 160, 5, False))

    # torch blockwise _scaled_mm as a second reference.
    M, N, K = 256, 2112, 1024
    qa, sa, qb, sb = rand_inputs(M, N, K)
    out = out_buf((M, N), False)
    launch((128, 128, 4, False), 0, qa, sa, qb, sb, out, M, N, K, 1)
    try:
        ts = torch._scaled_mm(qa, qb.t(), scale_a=sa, scale_b=sb.t(), out_dtype=torch.bfloat16)
        torch.cuda.synchronize()
        d = calc_diff(out, ts)
        print(f"torch._scaled_mm blockwise vs kdsl: diff={d:.2e} (M={M} N={N} K={K})", flush=True)
        RESULTS.append((f"vs torch._scaled_mm blockwise M={M} N={N} K={K}", d < 1e-3, f"diff={d:.2e}"))
    except Exception as e:
        print(f"torch._scaled_mm blockwise unavailable: {e!r}"[:600], flush=True)
        RESULTS.append(("vs torch._scaled_mm blockwise", None, repr(e)[:200]))


def bench(fn, reps=30, warm=5):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    return float(np.median(ts))


def run_bench(cfgs_big, cfgs_small):
    print(f"device: {torch.cuda.get_device_name(0)}", flush=True)
    for (M, N, K), cfgs in [((4096, 7168, 16384), cfgs_big), ((128, 2112, 7168), cfgs_small)]:
        torch.manual_seed(0)
        qa, sa, qb, sb = rand_inputs(M, N, K)
        out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        fl = 2.0 * M * N * K
        line = lambda name, ms: print(f"  {name:40s} {ms*1e3:9.1f} us  {fl/ms/1e9:8.1f} TFLOPS", flush=True)
        print(f"shape M={M} N={N} K={K}", flush=True)
        for cfg in cfgs:
            ms = bench(lambda: launch(cfg, 0, qa, sa, qb, sb, out, M, N, K, 1))
            line(f"kdsl fp8 {cfg}", ms)
        try:
            ms = bench(lambda: torch._scaled_mm(qa, qb.t(), scale_a=sa, scale_b=sb.t(), out_dtype=torch.bfloat16))
            line("torch._scaled_mm blockwise", ms)
        except Exception as e:
            print(f"  torch._scaled_mm blockwise: unavailable ({type(e).__name__}: {str(e)[:200]})")
        ab = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        bb = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
        ms = bench(lambda: torch.matmul(ab, bb.T))
        line("torch.matmul bf16", ms)
        del ab, bb


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--no-check", action="store_true")
    args = ap.parse_args()
    t0 = time.time()
    if not args.no_check:
        run_checks(args.quick)
        print(f"[checks done in {time.time()-t0:.1f}s, backend={_backend_note}]", flush=True)
        npass = sum(1 for r in RESULTS if r[1])
        nfail = sum(1 for r in RESULTS if r[1] is False)
        print(f"SUMMARY: {npass} pass, {nfail} fail", flush=True)
    if not args.no_bench:
        run_bench([(128, 128, 4, False), (128, 160, 4, False), (128, 160, 5, False), (128, 192, 4, False),
                   (128, 192, 5, False), (128, 128, 4, True)],
                  [(128, 128, 4, False), (64, 64, 4, False), (64, 64, 8, False), (128, 64, 6, False),
                   (64, 128, 6, False)])
    print(f"[total {time.time()-t0:.1f}s]", flush=True)


if __name__ == "__main__":
    main()
