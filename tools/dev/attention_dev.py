#!/usr/bin/env python3
"""Standalone GPU check + benchmark for kdsl/codegen/include/kdsl/attention_mma.cuh.

Builds the header with NVRTC (cupy.RawModule), runs it on torch tensors, compares against a
float64 torch reference, then benchmarks the relative-position-bias variant at
B=2, H=16, M=N=8192, D=128 (bf16) next to torch SDPA (flash backend).

  python3 tools/dev/attention_dev.py              # checks + benchmark (needs a GPU)
  python3 tools/dev/attention_dev.py --emit FILE  # write the CUDA source only (offline nvcc checks)
  python3 tools/dev/attention_dev.py --quick      # fewer cases
"""
import argparse
import math
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INCLUDE_DIR = os.path.join(REPO, "kdsl", "codegen", "include")
LOG2E = 1.4426950408889634

# Hand-written stand-ins for the generated Variant structs.
VARIANTS_SRC = r"""
#include "kdsl/attention_mma.cuh"

namespace relpos {  // relative position bias, no mask
struct Captures { int dummy; };
struct Variant {
  typedef relpos::Captures Captures;
  static constexpr bool kHasMask = false;
  static KDSL_DEVICE float score(const kdsl::AttnArgs& a, const Captures& c, float qk, int b, int h, int q, int kv) {
    return qk * a.scale_log2 + (float)(q - kv) * 1.44269504f;
  }
  static KDSL_DEVICE bool mask(const kdsl::AttnArgs& a, const Captures& c, int b, int h, int q, int kv) { return true; }
  static KDSL_DEVICE int tile(const kdsl::AttnArgs& a, const Captures& c, int b, int h, int q0, int q1, int k0, int k1) {
    return kdsl::kTileFull;
  }
};
}

namespace causal {  // top-left aligned causal mask
struct Captures { int dummy; };
struct Variant {
  typedef causal::Captures Captures;
  static constexpr bool kHasMask = true;
  static KDSL_DEVICE float score(const kdsl::AttnArgs& a, const Captures& c, float qk, int b, int h, int q, int kv) {
    return qk * a.scale_log2;
  }
  static KDSL_DEVICE bool mask(const kdsl::AttnArgs& a, const Captures& c, int b, int h, int q, int kv) { return kv <= q; }
  static KDSL_DEVICE int tile(const kdsl::AttnArgs& a, const Captures& c, int b, int h, int q0, int q1, int k0, int k1) {
    return k0 > q1 ? kdsl::kTileEmpty : (k1 <= q0 ? kdsl::kTileFull : kdsl::kTilePartial);
  }
};
}

namespace holes {  // kv blocks of 96 with (kv/96)%3==1 masked out; rows q%5==2 fully masked
struct Captures { int dummy; };
struct Variant {
  typedef holes::Captures Captures;
  static constexpr bool kHasMask = true;
  static KDSL_DEVICE float score(const kdsl::AttnArgs& a, const Captures& c, float qk, int b, int h, int q, int kv) {
    return qk * a.scale_log2 + (float)((kv % 7) - 3) * 0.25f;
  }
  static KDSL_DEVICE bool mask(const kdsl::AttnArgs& a, const Captures& c, int b, int h, int q, int kv) {
    return (q % 5 != 2) && ((kv / 96) % 3 != 1);
  }
  static KDSL_DEVICE int tile(const kdsl::AttnArgs& a, const Captures& c, int b, int h, int q0, int q1, int k0, int k1) {
    bool kv_all_hole = (k0 / 96 == k1 / 96) && ((k0 / 96) % 3 == 1);
    bool q_all_hole = (q0 == q1) && (q0 % 5 == 2);
    if (kv_all_hole || q_all_hole) return kdsl::kTileEmpty;
    bool kv_any_hole = false;
    for (int blk = k0 / 96; blk <= k1 / 96; ++blk) kv_any_hole |= (blk % 3 == 1);
    bool q_any_hole = false;
    for (int q = q0; q <= q1 && q <= q0 + 4; ++q) q_any_hole |= (q % 5 == 2);
    return (kv_any_hole || q_any_hole) ? kdsl::kTilePartial : kdsl::kTileFull;
  }
};
}

namespace nothing {  // everything masked: out = 0, lse = -inf
struct Captures { int dummy; };
struct Variant {
  typedef nothing::Captures Captures;
  static constexpr bool kHasMask = true;
  static KDSL_DEVICE float score(const kdsl::AttnArgs& a, const Captures& c, float qk, int b, int h, int q, int kv) {
    return qk * a.scale_log2;
  }
  static KDSL_DEVICE bool mask(const kdsl::AttnArgs& a, const Captures& c, int b, int h, int q, int kv) { return false; }
  static KDSL_DEVICE int tile(const kdsl::AttnArgs& a, const Captures& c, int b, int h, int q0, int q1, int k0, int k1) {
    return kdsl::kTileEmpty;
  }
};
}

namespace neginf {  // no mask, but score() itself returns -inf for odd rows (and kv%4==3)
struct Captures { int dummy; };
struct Variant {
  typedef neginf::Captures Captures;
  static constexpr bool kHasMask = false;
  static KDSL_DEVICE float score(const kdsl::AttnArgs& a, const Captures& c, float qk, int b, int h, int q, int kv) {
    return ((q & 1) || (kv & 3) == 3) ? kdsl::neg_inf() : qk * a.scale_log2;
  }
  static KDSL_DEVICE bool mask(const kdsl::AttnArgs& a, const Captures& c, int b, int h, int q, int kv) { return true; }
  static KDSL_DEVICE int tile(const kdsl::AttnArgs& a, const Captures& c, int b, int h, int q0, int q1, int k0, int k1) {
    return kdsl::kTileFull;
  }
};
}
"""

WRAPPER_TMPL = r"""
extern "C" __global__ void __launch_bounds__({threads}, 1)
{name}(const void* q, const void* k, const void* v, void* o, float* lse,
       int B, int H, int Hkv, int M, int N, float scale_log2) {{
  kdsl::AttnArgs a;
  a.q = q; a.k = k; a.v = v; a.o = o; a.lse = lse;
  a.B = B; a.H = H; a.Hkv = Hkv; a.M = M; a.N = N; a.scale_log2 = scale_log2;
  {ns}::Captures c; c.dummy = 0;
  kdsl::attention_fwd<{elem}, {D}, {BM}, {BN}, {NW}, {ns}::Variant>(a, c);
}}
"""

ELEMS = {"bf16": "kdsl::bf16_t", "fp16": "kdsl::f16_t"}

# Default tile per head dim (must match the header's recommendation).
DEFAULT_CFG = {64: (128, 64, 4), 128: (128, 64, 4), 256: (128, 64, 8)}
BENCH_CFGS = {128: [(128, 64, 4), (128, 64, 8), (128, 128, 8), (64, 64, 4)],
              64: [(128, 64, 4), (128, 128, 8), (64, 64, 4), (64, 128, 4)],
              256: [(64, 64, 4), (64, 32, 4), (128, 64, 8)]}


def kname(ns, dt, D, cfg):
    return "attn_%s_%s_d%d_%d_%d_%d" % (ns, dt, D, cfg[0], cfg[1], cfg[2])


def smem_bytes(D, cfg):
    BM, BN, _ = cfg
    return 2 * D * (BM + 4 * BN)


def kernel_list(quick=False):
    ks = []
    for dt in ("bf16", "fp16"):
        for D in (64, 128):
            ks.append(("relpos", dt, D, DEFAULT_CFG[D]))
            ks.append(("causal", dt, D, DEFAULT_CFG[D]))
    ks += [("holes", "bf16", 128, DEFAULT_CFG[128]), ("holes", "fp16", 64, DEFAULT_CFG[64]),
           ("nothing", "bf16", 128, DEFAULT_CFG[128]), ("neginf", "fp16", 128, DEFAULT_CFG[128])]
    if not quick:
        ks += [("relpos", "bf16", 256, DEFAULT_CFG[256]), ("causal", "fp16", 256, DEFAULT_CFG[256])]
    for D, cfgs in BENCH_CFGS.items():
        for cfg in cfgs:
            ks.append(("relpos", "bf16", D, cfg))
            if not quick and D == 128:
                ks.append(("causal", "bf16", D, cfg))
    seen, out = set(), []
    for k in ks:
        if k not in seen:
            seen.add(k)
            out.append(k)
    return out


def build_source(kernels):
    src = [VARIANTS_SRC]
    for ns, dt, D, cfg in kernels:
        src.append(WRAPPER_TMPL.format(threads=cfg[2] * 32, name=kname(ns, dt, D, cfg), ns=ns,
                                       elem=ELEMS[dt], D=D, BM=cfg[0], BN=cfg[1], NW=cfg[2]))
    return "\n".join(src)


# ----------------------------------------------------------------------------------------
def reference(ns, q, k, v, scale_log2):
    """float64 reference: returns (out, lse) with out=0 / lse=-inf for fully masked rows."""
    import torch
    B, H, M, D = q.shape
    Hkv, N = k.shape[1], k.shape[2]
    qf, kf, vf = q.double(), k.double(), v.double()
    if Hkv != H:
        kf = kf.repeat_interleave(H // Hkv, dim=1)
        vf = vf.repeat_interleave(H // Hkv, dim=1)
    dev = q.device
    qi = torch.arange(M, device=dev).view(M, 1)
    ki = torch.arange(N, device=dev).view(1, N)
    s = (qf @ kf.transpose(-1, -2)) * scale_log2
    ninf = torch.tensor(float("-inf"), dtype=torch.float64, device=dev)
    if ns == "relpos":
        s = s + (qi - ki).double() * 1.44269504
    elif ns == "causal":
        s = torch.where(ki <= qi, s, ninf)
    elif ns == "holes":
        s = s + ((ki % 7) - 3).double() * 0.25
        keep = (qi % 5 != 2) & ((ki // 96) % 3 != 1)
        s = torch.where(keep, s, ninf)
    elif ns == "nothing":
        s = torch.full_like(s, float("-inf"))
    elif ns == "neginf":
        drop = ((qi & 1) == 1) | ((ki & 3) == 3)
        s = torch.where(drop, ninf, s)
    s = s * math.log(2.0)  # natural units
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    p = torch.exp(s - m)
    l = p.sum(dim=-1, keepdim=True)
    out = (p @ vf) / torch.where(l > 0, l, torch.ones_like(l))
    lse = torch.where(l > 0, m + torch.log(l), torch.full_like(l, float("-inf"))).squeeze(-1)
    return out, lse


class Runner:
    def __init__(self, kernels):
        import cupy
        self.cupy = cupy
        t0 = time.time()
        self.mod = cupy.RawModule(code=build_source(kernels),
                                  options=("-std=c++17", "--gpu-architecture=sm_90a",
                                           "-I" + INCLUDE_DIR),
                                  name_expressions=None)
        self.kernels = {}
        for key in kernels:
            ns, dt, D, cfg = key
            f = self.mod.get_function(kname(*key))
            f.max_dynamic_shared_size_bytes = smem_bytes(D, cfg)
            self.kernels[key] = f
        print("NVRTC build of %d kernels: %.1f s" % (len(kernels), time.time() - t0), flush=True)
        for key, f in self.kernels.items():
            print("  %-36s regs=%3d local=%d B smem=%d B" % (
                kname(*key), f.num_regs, f.local_size_bytes, smem_bytes(key[2], key[3])))

    def launch(self, key, q, k, v, o, lse, scale_log2):
        import numpy as np
        ns, dt, D, cfg = key
        BM, BN, NW = cfg
        B, H, M, _ = q.shape
        Hkv, N = k.shape[1], k.shape[2]
        grid = ((M + BM - 1) // BM, H, B)
        args = (np.uint64(q.data_ptr()), np.uint64(k.data_ptr()), np.uint64(v.data_ptr()),
                np.uint64(o.data_ptr()), np.uint64(0 if lse is None else lse.data_ptr()),
                np.int32(B), np.int32(H), np.int32(Hkv), np.int32(M), np.int32(N),
                np.float32(scale_log2))
        self.kernels[key](grid, (NW * 32, 1, 1), args, shared_mem=smem_bytes(D, cfg))


def run_case(runner, key, B, H, Hkv, M, N, with_lse=True, seed=0):
    import torch
    ns, dt, D, cfg = key
    tdt = torch.bfloat16 if dt == "bf16" else torch.float16
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(B, H, M, D, device="cuda", dtype=torch.float32, generator=g).to(tdt)
    k = torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.float32, generator=g).to(tdt)
    v = torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.float32, generator=g).to(tdt)
    guard = 4096
    obuf = torch.full((B * H * M * D + guard,), float("nan"), device="cuda", dtype=tdt)
    obuf[B * H * M * D:] = 7.0
    o = obuf[:B * H * M * D].view(B, H, M, D)
    lbuf = torch.full((B * H * M + guard,), float("nan"), device="cuda", dtype=torch.float32)
    lbuf[B * H * M:] = 7.0
    lse = lbuf[:B * H * M].view(B, H, M) if with_lse else None
    scale_log2 = LOG2E / math.sqrt(D)
    runner.launch(key, q, k, v, o, lse, scale_log2)
    torch.cuda.synchronize()
    ref_o, ref_lse = reference(ns, q, k, v, scale_log2)
    of = o.double()
    nan = bool(torch.isnan(of).any())
    num = torch.linalg.norm((of - ref_o).flatten())
    den = torch.linalg.norm(ref_o.flatten())
    err = float(num / den) if float(den) > 0 else float(num)
    guard_ok = bool((obuf[B * H * M * D:] == 7.0).all()) and bool((lbuf[B * H * M:] == 7.0).all())
    lse_err = 0.0
    lse_ok = True
    if with_lse:
        lk = lse.double()
        inf_ref = torch.isinf(ref_lse)
        lse_ok = bool((torch.isinf(lk) == inf_ref).all()) and not bool(torch.isnan(lk).any())
        if lse_ok and bool((~inf_ref).any()):
            lse_err = float((lk[~inf_ref] - ref_lse[~inf_ref]).abs().max())
        if lse_ok and bool(inf_ref.any()):
            lse_ok = bool((lk[inf_ref] < 0).all())
        lse_ok = lse_ok and lse_err <= 1e-2
    ok = (not nan) and err <= 2e-2 and guard_ok and lse_ok
    return ok, err, lse_err, nan, guard_ok, lse_ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--emit", help="write the CUDA source to this file and exit")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-bench", action="store_true")
    args = ap.parse_args()
    kernels = kernel_list(args.quick)
    if args.emit:
        with open(args.emit, "w") as f:
            f.write(build_source(kernels))
        print("wrote", args.emit, "with", len(kernels), "kernels")
        return 0

    import torch
    print("device:", torch.cuda.get_device_name(), "| torch", torch.__version__, flush=True)
    runner = Runner(kernels)

    cases = []  # (key, B, H, Hkv, M, N)
    for dt in ("bf16", "fp16"):
        for D in (64, 128):
            cfg = DEFAULT_CFG[D]
            for ns in ("relpos", "causal"):
                key = (ns, dt, D, cfg)
                cases += [(key, 1, 2, 2, 1, 1), (key, 1, 2, 2, 1, 300), (key, 1, 2, 2, 300, 1),
                          (key, 2, 3, 3, 63, 65), (key, 1, 2, 2, 127, 129),
                          (key, 1, 8, 2, 1000, 1000), (key, 1, 2, 1, 129, 1000),
                          (key, 1, 2, 2, 1000, 127), (key, 1, 2, 2, 256, 512)]
    cases += [(("holes", "bf16", 128, DEFAULT_CFG[128]), 1, 4, 2, 517, 700),
              (("holes", "fp16", 64, DEFAULT_CFG[64]), 2, 2, 1, 300, 1000),
              (("nothing", "bf16", 128, DEFAULT_CFG[128]), 1, 2, 2, 130, 200),
              (("neginf", "fp16", 128, DEFAULT_CFG[128]), 1, 2, 2, 200, 333)]
    if not args.quick:
        for ns, dt in (("relpos", "bf16"), ("causal", "fp16")):
            key = (ns, dt, 256, DEFAULT_CFG[256])
            cases += [(key, 1, 2, 2, 1, 1), (key, 1, 4, 2, 127, 333), (key, 1, 2, 2, 300, 129)]
    for D, cfgs in BENCH_CFGS.items():
        for cfg, ns in [(c, n) for c in cfgs for n in ("relpos", "causal")]:
            key = (ns, "bf16", D, cfg)
            if key in runner.kernels and cfg != DEFAULT_CFG[D]:
                cases += [(key, 1, 2, 2, 1, 1), (key, 1, 4, 2, 333, 1000), (key, 2, 2, 2, 1000, 129)]

    print("\n%-36s %-18s %10s %10s %s" % ("kernel", "B,H,Hkv,M,N", "rel_err", "lse_err", "status"))
    n_fail = 0
    for i, (key, B, H, Hkv, M, N) in enumerate(cases):
        ok, err, lerr, nan, guard_ok, lse_ok = run_case(runner, key, B, H, Hkv, M, N,
                                                        with_lse=(i % 4 != 3), seed=i)
        n_fail += not ok
        status = "ok" if ok else "FAIL%s%s%s" % (" nan" if nan else "", "" if guard_ok else " oob",
                                                 "" if lse_ok else " lse")
        print("%-36s %-18s %10.2e %10.2e %s" % (kname(*key), "%d,%d,%d,%d,%d" % (B, H, Hkv, M, N),
                                                err, lerr, status), flush=True)

    # determinism
    import torch
    key = ("causal", "bf16", 128, DEFAULT_CFG[128])
    g = torch.Generator(device="cuda").manual_seed(123)
    q = torch.randn(2, 4, 777, 128, device="cuda", generator=g).bfloat16()
    k = torch.randn(2, 4, 901, 128, device="cuda", generator=g).bfloat16()
    v = torch.randn(2, 4, 901, 128, device="cuda", generator=g).bfloat16()
    o1, o2 = torch.empty_like(q), torch.empty_like(q)
    l1 = torch.empty(2, 4, 777, device="cuda")
    l2 = torch.empty_like(l1)
    runner.launch(key, q, k, v, o1, l1, LOG2E / math.sqrt(128))
    runner.launch(key, q, k, v, o2, l2, LOG2E / math.sqrt(128))
    torch.cuda.synchronize()
    det = bool(torch.equal(o1.view(torch.int16), o2.view(torch.int16))) and bool(
        torch.equal(l1.view(torch.int32), l2.view(torch.int32)))
    print("deterministic (bitwise, 2 runs):", det)
    n_fail += not det
    print("\nCORRECTNESS: %d/%d passed" % (len(cases) + 1 - n_fail, len(cases) + 1), flush=True)

    if not args.no_bench:
        bench(runner)
    return 1 if n_fail else 0


def time_fn(fn, reps=25, warmup=5):
    import torch
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


def bench(runner):
    for D in (128, 64, 256):
        bench_d(runner, D)


def bench_d(runner, D):
    import torch
    B, H, M, N = 2, 16, 8192, 8192
    flops = 4.0 * B * H * M * N * D
    g = torch.Generator(device="cuda").manual_seed(7)
    q = torch.randn(B, H, M, D, device="cuda", generator=g).bfloat16()
    k = torch.randn(B, H, N, D, device="cuda", generator=g).bfloat16()
    v = torch.randn(B, H, N, D, device="cuda", generator=g).bfloat16()
    o = torch.empty_like(q)
    lse = torch.empty(B, H, M, device="cuda")
    scale_log2 = LOG2E / math.sqrt(D)
    print("\nBENCH relpos bf16 B=%d H=%d M=N=%d D=%d (flops = 4*B*H*M*N*D = %.3e)" % (
        B, H, M, D, flops))
    for cfg in BENCH_CFGS[D]:
        key = ("relpos", "bf16", D, cfg)
        if key not in runner.kernels:
            continue
        ms = time_fn(lambda: runner.launch(key, q, k, v, o, lse, scale_log2))
        # spot-check a few rows of two heads against float64
        errs = []
        for (bb, hh, r0) in ((0, 0, 0), (1, 15, M - 200)):
            rows = slice(r0, r0 + 200)
            qs = q[bb:bb + 1, hh:hh + 1, rows]
            s = (qs.double() @ k[bb, hh].double().T) * scale_log2
            qi = torch.arange(r0, r0 + 200, device="cuda").view(-1, 1)
            ki = torch.arange(N, device="cuda").view(1, -1)
            s = (s + (qi - ki).double() * 1.44269504) * math.log(2.0)
            ref = torch.softmax(s, dim=-1) @ v[bb, hh].double()
            got = o[bb:bb + 1, hh:hh + 1, rows].double()
            errs.append(float(torch.linalg.norm(got - ref) / torch.linalg.norm(ref)))
        print("  kdsl mma   BM=%3d BN=%3d NW=%d : %8.3f ms  %6.1f TFLOPS   (spot rel_err %.1e)" % (
            cfg[0], cfg[1], cfg[2], ms, flops / ms / 1e9, max(errs)), flush=True)
    try:
        from torch.nn.attention import sdpa_kernel, SDPBackend
        f = torch.nn.functional.scaled_dot_product_attention
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            ms = time_fn(lambda: f(q, k, v))
        print("  torch SDPA flash (no bias)      : %8.3f ms  %6.1f TFLOPS" % (ms, flops / ms / 1e9))
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            ms = time_fn(lambda: f(q, k, v, is_causal=True))
        print("  torch SDPA flash causal         : %8.3f ms  %6.1f TFLOPS (causal flops /2: %.1f)" % (
            ms, flops / ms / 1e9, flops / 2 / ms / 1e9))
    except Exception as ex:  # noqa: BLE001
        print("  torch SDPA failed:", ex)
    key = ("causal", "bf16", D, DEFAULT_CFG[D])
    if key in runner.kernels:
        ms = time_fn(lambda: runner.launch(key, q, k, v, o, lse, scale_log2))
        print("  kdsl mma causal %s          : %8.3f ms  %6.1f TFLOPS (causal flops /2)" % (
            DEFAULT_CFG[D], ms, flops / 2 / ms / 1e9), flush=True)


if __name__ == "__main__":
    sys.exit(main())
