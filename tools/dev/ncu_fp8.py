#!/usr/bin/env python3
"""FP8 GEMM calls for Nsight Compute: kdsl's kernel at the tiles the model picks (and at any
attrs given) and torch's blockwise _scaled_mm on the same inputs, each launched once between
cudaProfilerStart / Stop after a warm-up, so that

    ncu --profile-from-start off --section SpeedOfLight --section MemoryWorkloadAnalysis \
        --section WarpStateStats --section SourceCounters \
        python3 tools/dev/ncu_fp8.py 4096,7168,16384 4096,7168,16384:cluster=2,multicast=a

profiles exactly those launches (where does the main loop stall: on the "full" barrier, on
the wgmma wait, on the ping-pong turn? how close to its limit is L2?)."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from devtools import profile_once  # noqa: E402


def parse(spec: str):
    shape, _, attrs = spec.partition(":")
    m, n, k = map(int, shape.split(","))
    kv = dict(item.split("=") for item in attrs.split(",") if item)
    return (m, n, k), {key: int(v) if v.isdigit() else v for key, v in kv.items()}


def main() -> None:
    import torch
    import kdsl
    from kdsl import fp8
    gemm = kdsl.load(ROOT / "samples" / "fp8_gemm.kd").fp8_gemm
    calls = []
    for spec in sys.argv[1:] or ["4096,7168,16384"]:
        (m, n, k), attrs = parse(spec)
        a, sa = fp8.quantize_1x128(torch.randn(m, k, device="cuda"))
        b, sb = fp8.quantize_128x128(torch.randn(n, k, device="cuda"))
        fn = gemm.with_attrs(**attrs)
        fn(a, sa, b, sb)
        lk = next(iter(fn._loaded.values()))[0].kernel
        print(f"{spec}: tiles {lk.attr('tile_m')}x{lk.attr('tile_n')}x{lk.attr('stages')} "
              f"cluster {lk.attr('cluster')} {lk.attr('multicast')}", flush=True)
        calls.append(lambda fn=fn, a=a, sa=sa, b=b, sb=sb: fn(a, sa, b, sb))
        if not attrs:
            calls.append(lambda a=a, sa=sa, b=b, sb=sb: torch._scaled_mm(
                a, b.t(), scale_a=sa, scale_b=sb.t(), out_dtype=torch.bfloat16))
    profile_once(calls)


if __name__ == "__main__":
    main()
