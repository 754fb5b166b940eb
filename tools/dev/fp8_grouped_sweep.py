#!/usr/bin/env python3
"""Time the grouped FP8 GEMMs of the standard suite under several tile configurations
(kdsl.bench.run_gemm: the suite's inputs, L2 flushed, CUDA events), first the model's pick.

    python3 tools/dev/fp8_grouped_sweep.py [--reps 50]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

CONFIGS = {
    "fp8_grouped_contiguous": [{}, {"tile_m": 256, "tile_n": 128}, {"tile_m": 128, "tile_n": 192},
                               {"tile_m": 256, "tile_n": 112}, {"tile_m": 128, "tile_n": 128},
                               {"tile_m": 128, "tile_n": 160}],
    "fp8_grouped_masked": [{}, {"tile_m": 256, "tile_n": 128}, {"tile_m": 128, "tile_n": 192},
                           {"tile_m": 128, "tile_n": 96}, {"tile_m": 64, "tile_n": 128},
                           {"tile_m": 256, "tile_n": 96}, {"tile_m": 128, "tile_n": 64}],
}


class _One:
    """A stand-in module whose kernel carries fixed attrs (what run_gemm reads from a module)."""

    def __init__(self, mod, name, attrs):
        self.ir = mod.ir
        setattr(self, name, getattr(mod, name).with_attrs(**attrs) if attrs else getattr(mod, name))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    import torch
    import kdsl
    from kdsl import bench
    timer = bench.Timer(args.reps)
    bench.cold_build = lambda *a: {}  # not measured here
    print(torch.cuda.get_device_name(), flush=True)
    cases = [c for c in bench.standard_suite() if c.kernel in CONFIGS]
    for case in cases:
        mod = kdsl.load(case.file)
        for attrs in CONFIGS[case.kernel]:
            try:
                row = bench.run_gemm(case, _One(mod, case.kernel, attrs), timer, set())
                print(f"{case.kernel} {row.shape} {attrs or 'model pick'}: {row.ms * 1e3:8.1f} us "
                      f"{row.tflops:7.1f} TFLOPS err {row.error:.1e}", flush=True)
            except Exception as e:  # an illegal configuration: say so, go on
                print(f"{case.kernel} {attrs}: {type(e).__name__}: {str(e)[:160]}", flush=True)


if __name__ == "__main__":
    main()
