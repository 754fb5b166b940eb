#!/usr/bin/env python3
"""One FP8 GEMM configuration, launched a few times, with its plan's grid and the cluster
occupancy the driver reports: a workload for ncu when comparing clustered and unclustered
launches of the same tiles.

    python3 tools/dev/fp8_cluster_probe.py M N K '{"cluster": 2, "multicast": "a"}' [launches]
"""
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import kdsl  # noqa: E402
from kdsl import fp8  # noqa: E402
from kdsl.runtime.driver import max_active_clusters  # noqa: E402

m, n, k = map(int, sys.argv[1:4])
attrs = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
launches = int(sys.argv[5]) if len(sys.argv) > 5 else 3
fn = kdsl.load(ROOT / "samples" / "fp8_gemm.kd").fp8_gemm.with_attrs(**attrs)
a, sa = fp8.quantize_1x128(torch.randn((m, k), device="cuda"))
b, sb = fp8.quantize_128x128(torch.randn((n, k), device="cuda"))
out = fn(a, sa, b, sb)
plan = next(iter(fn._plans.values()))
lk = next(iter(fn._loaded.values()))[0].kernel
clusters = max_active_clusters(plan.loaded.fn_ptr, plan.grid, plan.block, plan.loaded.smem) if lk.attr("cluster") > 1 else "-"
print(f"tiles {lk.attr('tile_m')}x{lk.attr('tile_n')}x{lk.attr('stages')} cluster {lk.attr('cluster')} "
      f"{lk.attr('multicast')} raster {lk.attr('raster')} grid {plan.grid} block {plan.block} smem {plan.loaded.smem} "
      f"max active clusters {clusters}", flush=True)
for _ in range(launches):
    fn(a, sa, b, sb, out=out)
torch.cuda.synchronize()
