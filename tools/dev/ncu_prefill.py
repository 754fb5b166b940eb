#!/usr/bin/env python3
"""Prefill calls of plain attention for Nsight Compute: kdsl's kernel and cuDNN's on the same
inputs, launched once each between cudaProfilerStart / Stop after a warm-up, so that

    ncu --profile-from-start off --section SpeedOfLight --section MemoryWorkloadAnalysis \
        python3 tools/dev/ncu_prefill.py 2,16,8192,128 2,16,8192,192

profiles exactly those launches (is a head dim's kernel bound by L2's bandwidth, as its 128
query rows a CTA per K/V tile read would suggest?)."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from devtools import profile_once  # noqa: E402


def main() -> None:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import kdsl
    plain = kdsl.load(ROOT / "samples" / "plain.kd").plain
    calls = []
    for spec in sys.argv[1:] or ["2,16,8192,128"]:
        B, H, S, D = map(int, spec.split(","))
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))

        def cudnn(q=q, k=k, v=v):
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v)
        calls += [lambda q=q, k=k, v=v: plain(q, k, v), cudnn]
    profile_once(calls)


if __name__ == "__main__":
    main()
