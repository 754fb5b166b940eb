#!/usr/bin/env python3
"""Where decode time goes: kdsl's split-KV kernels against cuDNN SDPA, same process.

For each decode shape: event-timed medians (L2 flushed, as kdsl bench times them) of kdsl at
its own split count and at forced ones, and of cuDNN; then one torch.profiler pass over each,
listing the device kernels and their mean durations.

    python3 tools/dev/decode_profile.py [--reps 200] [--splits 4,8,16,24,32]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from devtools import decode_case  # noqa: E402

SHAPES = [(1, 16, 16, 4096), (1, 16, 16, 32768), (1, 32, 8, 8192), (64, 16, 16, 4096)]


def kernels_of(fn, torch, n=50):
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    rows = [(e.key, e.device_time_total / max(1, e.count), e.count) for e in prof.key_averages()
            if e.device_time_total > 0]
    return sorted(rows, key=lambda r: -r[1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--splits", default="4,8,12,16,24,32")
    ap.add_argument("--attrs", default="consumers=1;consumers=1,tile_n=64,stages=6",
                    help="';'-separated schedule attrs of further kdsl kernels to time (k=v,k=v)")
    args = ap.parse_args()
    import torch
    import kdsl
    from kdsl.bench import Timer
    from kdsl.runtime import attention_launch, splitkv
    timer = Timer(args.reps)
    plain = kdsl.load(ROOT / "samples" / "plain.kd").plain
    others = {}
    for spec in filter(None, args.attrs.split(";")):
        attrs = {k: int(v) for k, v in (kv.split("=") for kv in spec.split(","))}
        others[spec] = attention_launch.AttentionKernel(plain.ir.with_attrs(**attrs))
    own = splitkv.kv_splits
    print(torch.cuda.get_device_name(), flush=True)
    for B, H, Hkv, N in SHAPES:
        q, k, v, cudnn = decode_case(B, H, Hkv, N)
        print(f"\n== B={B} H={H} Hkv={Hkv} N={N} D=128", flush=True)
        ref = cudnn()
        t_cudnn = timer(cudnn)
        plain._plans.clear()
        splitkv.kv_splits = own
        out = plain(q, k, v)
        err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
        t_own = timer(lambda: plain(q, k, v))
        chosen = next(iter(plain._plans.values())).combine
        print(f"cuDNN {t_cudnn * 1e3:8.1f} us | kdsl {t_own * 1e3:8.1f} us (own splits, "
              f"{'combine' if chosen else 'no combine'}) ratio cuDNN/kdsl {t_cudnn / t_own:.3f} err {err:.1e}",
              flush=True)
        for s in [int(x) for x in args.splits.split(",")]:
            splitkv.kv_splits = lambda items, tiles, sms, s=s: max(1, min(s, tiles))
            plain._plans.clear()
            try:
                o = plain(q, k, v)
                e = ((o.float() - ref.float()).norm() / ref.float().norm()).item()
                t = timer(lambda: plain(q, k, v))
                print(f"   splits={s:3d}: {t * 1e3:8.1f} us  ratio cuDNN/kdsl {t_cudnn / t:.3f} err {e:.1e}", flush=True)
            except Exception as ex:  # a forced count the launcher refuses
                print(f"   splits={s:3d}: {type(ex).__name__}: {ex}", flush=True)
        splitkv.kv_splits = own
        for spec, kern in others.items():
            for s in (None, 4, 8, 16):
                splitkv.kv_splits = own if s is None else (lambda items, tiles, sms, s=s: max(1, min(s, tiles)))
                kern._plans.clear()
                o = kern(q, k, v)
                e = ((o.float() - ref.float()).norm() / ref.float().norm()).item()
                t = timer(lambda: kern(q, k, v))
                print(f"   [{spec}] splits={s or 'own'}: {t * 1e3:8.1f} us  ratio cuDNN/kdsl {t_cudnn / t:.3f} "
                      f"err {e:.1e}", flush=True)
            splitkv.kv_splits = own
            kern._plans.clear()
            print(f"  kdsl [{spec}] kernels:")
            for key, us, count in kernels_of(lambda: kern(q, k, v), torch):
                print(f"     {us:8.2f} us x{count:4d}  {key[:100]}")
        plain._plans.clear()
        for name, fn in (("kdsl", lambda: plain(q, k, v)), ("cuDNN", cudnn)):
            print(f"  {name} kernels:")
            for key, us, count in kernels_of(fn, torch):
                print(f"     {us:8.2f} us x{count:4d}  {key[:100]}")


if __name__ == "__main__":
    main()
