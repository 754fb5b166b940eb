"""Every attention sample (and bench/variants.kd) at lengths 1, 63, 129 and 1000, with M != N
and with GQA, plus small and ragged FP8 GEMMs in each configuration family (tile_m 64 and 128,
a 2-CTA cluster, row-by-row stores): a workload for compute-sanitizer.

    compute-sanitizer --tool memcheck --error-exitcode 1 python3 tools/dev/sanitize.py
    compute-sanitizer --tool racecheck --error-exitcode 1 python3 tools/dev/sanitize.py --quick
    ... python3 tools/dev/sanitize.py --fp8    (the FP8 samples only)
    ... python3 tools/dev/sanitize.py --stream (variants whose score streams a captured table)
    ... python3 tools/dev/sanitize.py --offset-table (variants whose offset part comes from a table)
    ... python3 tools/dev/sanitize.py --head-dim 256 (every head dim of the shapes replaced)
    ... python3 tools/dev/sanitize.py --few-items (few query tiles and long keys at head dims
        64 and 32: the split-KV forward on two consumer warpgroups, forward_query_warpgroups)

Racecheck at shapes whose keys wrap the forward's ring (--few-items; any N over a few tiles)
reports the ring's words read a stage before: racecheck credits an mbarrier arrival only with
the arriving thread's own reads (tools/dev/racecheck_mbarrier_probe.cu). There run it with
every consumer thread arriving, KDSL_DEFINES=KDSL_RACECHECK_ARRIVALS=1 (attention_wgmma.cuh).
    ... python3 tools/dev/sanitize.py --backward (attention only: each call's forward and its
        backward kernel, with q, k and v requiring grad; D 64 / 128 take the wgmma backward)
    ... KDSL_BWD_KERNEL=KIND python3 tools/dev/sanitize.py --backward (the backward kind forced;
        a program whose head dims it cannot take is skipped, said so)
    ... python3 tools/dev/sanitize.py --backward --learned (float captured tensors require grad
        too: the backward that adds their gradients, KDSL_CAPTURE_GRADS)
    ... python3 tools/dev/sanitize.py --fp8 --compiled-launch (each FP8 call made twice, the
        second launched by the compiled launch path, runtime/fast_launch.py, once it is built)
    ... python3 tools/dev/sanitize.py --backward --files tools/dev/key_scores.kd (those files'
        programs instead; --files last, paths from the repository root)
"""
import pathlib
import sys

import torch

import kdsl
from kdsl import fp8
from kdsl import ir
from kdsl.cases import head_dim_pairs
from kdsl.testing import attention_inputs

ROOT = pathlib.Path(__file__).resolve().parents[2]
quick = "--quick" in sys.argv
files = sorted((ROOT / "samples").glob("*.kd")) + ([] if quick else [ROOT / "bench" / "variants.kd"])
if "--fp8" in sys.argv:
    files = sorted((ROOT / "samples").glob("fp8_*.kd"))
backward = "--backward" in sys.argv
learned = backward and "--learned" in sys.argv
compiled_launch, by_cpp = "--compiled-launch" in sys.argv, 0
if compiled_launch:
    from kdsl.runtime import fast_launch
    fast_launch.start()
    assert fast_launch.wait(), "the compiled launch path did not build"
if "--files" in sys.argv:  # these .kd files instead (held-out sets, key scores)
    files = [ROOT / a for a in sys.argv[sys.argv.index("--files") + 1:] if a.endswith(".kd")]
stream_only = "--stream" in sys.argv
table_only = "--offset-table" in sys.argv  # variants whose score's offset part comes from a table
if stream_only or table_only:
    files = [ROOT / "bench" / "variants.kd"]
FP8_CONFIGS = [{}, {"tile_m": 64, "tile_n": 48, "cluster": 1}, {"tile_m": 128, "tile_n": 64, "cluster": 2, "multicast": "a"},
               {"tile_m": 128, "tile_n": 64, "cluster": 1, "store": "rows"},
               {"tile_m": 256, "tile_n": 64, "cluster": 1},  # ping-pong
               {"tile_m": 192, "tile_n": 64, "cluster": 1},  # three warpgroups in turns
               {"tile_m": 256, "tile_n": 128, "cluster": 2, "multicast": "a"}]  # the model's dense pick from K = 2048
shapes = [(1, 2, 2, 1, 1, 64), (1, 2, 2, 63, 63, 128), (1, 2, 2, 129, 129, 64), (1, 2, 2, 1000, 1000, 128),
          (2, 2, 2, 63, 1000, 128), (1, 4, 2, 129, 63, 64), (1, 4, 1, 1000, 129, 128)]
if quick:
    shapes = shapes[1:3] + shapes[-1:]
if "--few-items" in sys.argv:
    shapes = [(1, 2, 2, 1000, 1500, 64), (1, 1, 1, 700, 2000, 64), (1, 4, 2, 400, 1500, 32)]
if "--head-dim" in sys.argv:
    d = int(sys.argv[sys.argv.index("--head-dim") + 1])
    shapes = [s[:5] + (d,) for s in shapes]
n = 0
for f in files:
    mod = kdsl.load(f)
    for name, kir in mod.ir.items():
        fn = getattr(mod, name)
        if stream_only and (kir.kind != "attention" or not fn._lowered(128, 128).attr("stream_capture")):
            continue
        if table_only and (kir.kind != "attention" or not fn._lowered(128, 128).attr("offset_table")):
            continue
        if backward and kir.kind != "attention":
            continue
        if kir.kind == "attention":
            literal = {d: dv for d, dv in head_dim_pairs(kir)} if isinstance(kir.tensor("q").shape[3], ir.Const) \
                else None  # a program that fixes its head dims (mla: 192 / 128) runs at those
            for (B, H, Hkv, M, N, D) in shapes:
                if "Hkv" not in kir.dims:
                    Hkv = H
                D, Dv = next(iter(literal.items())) if literal else (D, 0)
                q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, N, D, Dv=Dv)
                if backward:
                    q, k, v = (t.requires_grad_() for t in (q, k, v))
                if learned:
                    caps = {c: t.detach().requires_grad_() if t.is_floating_point() else t for c, t in caps.items()}
                out = fn(q, k, v, **caps)
                n += 1
                if backward:
                    out = out[0] if isinstance(out, tuple) else out
                    try:
                        (out.float() * torch.randn_like(out, dtype=torch.float32)).sum().backward()
                    except kdsl.KdslError as e:  # a backward kind forced where it cannot run (mla's head dims)
                        if "KDSL_BWD_KERNEL" not in str(e):
                            raise
                        print(f"skipped {name}'s backward: {e}")
                        break
                    n += 1
        else:
            g = kir.attr("grouping")
            for cfg in FP8_CONFIGS:
                # K = 1280: 10 K blocks, more than any configuration's stages, so every kind
                # refills ring stages (racecheck's hazards need refills; the others above only
                # refill in grouped contiguous, with 3 groups a tile)
                for (G, M, N, K) in [(2, 1, 129, 128), (2, 129, 200, 256), (3, 300, 256, 384), (2, 129, 200, 1280),
                                     (2, 256, 200, 1280)]:  # (M % 4 == 0: A's scales by TMA, the ring wrapping)
                    a, sa = fp8.quantize_1x128(torch.randn((G, M, K) if g == "masked" else (M, K), device="cuda"))
                    b, sb = fp8.quantize_128x128(torch.randn((N, K) if g == "dense" else (G, N, K), device="cuda"))
                    extra = () if g == "dense" else ((torch.randint(-1, G, (M,), device="cuda", dtype=torch.int32),)
                                                     if g == "contiguous" else
                                                     (torch.randint(0, M + 1, (G,), device="cuda", dtype=torch.int32),))
                    out_shape = (G, M, N) if g == "masked" else (M, N)
                    out = torch.zeros(out_shape, device="cuda") if kir.attr("accumulate") else None
                    try:
                        kernel = fn.with_attrs(**cfg)
                        kernel(a, sa, b, sb, *extra, out=out)
                    except kdsl.KdslError:  # this configuration cannot pair the shape's tiles
                        continue
                    n += 1
                    if compiled_launch:
                        served = len(kernel.fast_gemm or ())
                        kernel(a, sa, b, sb, *extra, out=out)
                        n += 1
                        by_cpp += served > 0
            if g == "dense":  # stream-K: more tiles than SMs (132), tiles split over CTAs
                a, sa = fp8.quantize_1x128(torch.randn(2000, 384, device="cuda"))
                b, sb = fp8.quantize_128x128(torch.randn(1500, 384, device="cuda"))
                out = torch.zeros(2000, 1500, device="cuda") if kir.attr("accumulate") else None
                fn.with_attrs(stream_k=True, cluster=1, tile_m=128, tile_n=128)(a, sa, b, sb, out=out)
                n += 1
            if g == "contiguous":  # 192-row tiles from the stream's counter: more tiles than SMs, twice
                ids = torch.randint(-1, 3, (3000,), device="cuda", dtype=torch.int32).sort().values
                a, sa = fp8.quantize_1x128(torch.randn(3000, 384, device="cuda"))
                b, sb = fp8.quantize_128x128(torch.randn(3, 1024, 384, device="cuda"))
                counted = fn.with_attrs(tile_m=192, tile_n=96, cluster=1)
                for _ in range(2):
                    counted(a, sa, b, sb, ids)
                    n += 1
torch.cuda.synchronize()
print(f"sanitize workload: {n} launches ok" + (f", {by_cpp} of them by the compiled launch path" if compiled_launch else ""))
