#!/usr/bin/env python3
"""Which kernels torch's blockwise _scaled_mm (cuBLASLt) launches for given shapes, with their
grid and block sizes and device times (torch.profiler): the tile, cluster and split-K a peer
chose, to compare with kdsl's pick where kdsl runs behind.

    python3 tools/dev/peer_kernels.py --shapes "512x4096x7168;2048x2048x7168"
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", required=True, help="';'-separated MxNxK")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile
    from kdsl import fp8
    print(torch.cuda.get_device_name(), flush=True)
    for spec in filter(None, args.shapes.split(";")):
        m, n, k = (int(d) for d in spec.split("x"))
        a, sa = fp8.quantize_1x128(torch.randn(m, k, device="cuda"))
        b, sb = fp8.quantize_128x128(torch.randn(n, k, device="cuda"))

        def run():
            return torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb.t(), out_dtype=torch.bfloat16)
        run()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(args.reps):
                run()
            torch.cuda.synchronize()
        with tempfile.TemporaryDirectory() as d:  # the trace holds each kernel's launch geometry
            prof.export_chrome_trace(f"{d}/t.json")
            trace = json.loads(Path(f"{d}/t.json").read_text())
        print(f"\n{m}x{n}x{k}")
        seen = {}
        for e in trace["traceEvents"]:
            if e.get("cat") != "kernel":
                continue
            x = e.get("args", {})
            key = (e["name"], str(x.get("grid")), str(x.get("block")), x.get("registers per thread"),
                   x.get("shared memory"))
            seen.setdefault(key, []).append(e["dur"])
        for (name, grid, block, regs, smem), times in seen.items():
            print(f"  {len(times)}x {sorted(times)[len(times) // 2]:8.1f} us  grid {grid} block {block} regs {regs} "
                  f"smem {smem}  {name[:240]}")

if __name__ == "__main__":
    main()
