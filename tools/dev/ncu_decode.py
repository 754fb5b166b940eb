#!/usr/bin/env python3
"""A decode call (B=1 H=16 M=1 N=32768 D=128 by default) for Nsight Compute: kdsl's kernels,
then cuDNN's, each launched `--reps` times after a warm-up, so that

    ncu --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
        --launch-skip 4 --launch-count 8 python3 tools/dev/ncu_decode.py

profiles both side by side (kdsl's main and combine kernels, then cuDNN's)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from devtools import decode_case  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="1,16,16,32768", help="B,H,Hkv,N")
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    import torch
    import kdsl
    B, H, Hkv, N = map(int, args.shape.split(","))
    q, k, v, cudnn = decode_case(B, H, Hkv, N)
    plain = kdsl.load(ROOT / "samples" / "plain.kd").plain
    plain(q, k, v)  # warm-up: build and plan (2 launches)
    cudnn()
    torch.cuda.synchronize()
    for _ in range(args.reps):
        plain(q, k, v)
    torch.cuda.synchronize()
    for _ in range(args.reps):
        cudnn()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
