#!/usr/bin/env python3
"""Where T5's lse disagreement comes from (bench/NOTES.md, twentieth session): the kernel's lse
stood up to 1.97 from the float64 reference computed on the GPU, with the bucket's log and
division approximate or exact alike, while the CPU interpreter agreed with the reference
computed on the CPU. On the same inputs (steep biases: 4 logits a bucket) this prints the
largest lse gap between each pair of: the kernel (table and per-element), the reference on the
GPU, the reference on the CPU and the CPU interpreter; and the offsets d at which the GPU's and
the CPU's float64 buckets differ.

    python3 tools/dev/t5_probe.py
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def main() -> None:
    import math
    import torch
    import kdsl
    from exprgen import program
    from kdsl import reference
    from kdsl.testing import attention_inputs
    from gpu.test_offset_table_gpu import SCORES
    src = program(SCORES["t5"], None, "t5", ("lse: f32[B, H, M]", "bias: f32[H, 32]", "freq: f32[H]"))
    gpu, interp = kdsl.compile(src, "t5.kd"), kdsl.compile(src, "t5.kd", interpret=True)
    gen = torch.Generator(device="cuda").manual_seed(3)
    q, k, v, caps = attention_inputs(gpu.ir["t5"], 1, 2, 2, 200, 200, 64, generator=gen)
    caps["bias"] = (4.0 * torch.arange(32, device="cuda", dtype=torch.float32)).repeat(2, 1)
    cpu = {n: t.cpu() for n, t in caps.items()}
    lse = {"kernel, table": gpu.t5.with_attrs(offset_table=1)(q, k, v, **caps)[1].cpu().double(),
           "kernel, per element": gpu.t5.with_attrs(offset_table=0)(q, k, v, **caps)[1].cpu().double(),
           "reference on the GPU": reference.attention(gpu.ir["t5"], q, k, v, caps)[1].cpu(),
           "reference on the CPU": reference.attention(gpu.ir["t5"], q.cpu(), k.cpu(), v.cpu(), cpu)[1],
           "CPU interpreter": interp.t5(q.cpu(), k.cpu(), v.cpu(), **cpu)[1].double()}
    names = list(lse)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            gap = (lse[a] - lse[b]).abs()
            row = int(gap.flatten().argmax()) % 200
            print(f"{a:22s} vs {b:22s} max |lse gap| {float(gap.max()):.3e} (row {row})")
    d = torch.arange(1, 200, dtype=torch.float64)
    bucket = {dev: (8 + (torch.log(d.to(dev) / 8.0) / math.log(16.0) * 8.0).trunc()).cpu() for dev in ("cuda", "cpu")}
    differ = [int(x) for x, a, b in zip(d, bucket["cuda"], bucket["cpu"]) if a != b and x >= 8]
    print("offsets whose float64 bucket differs between the GPU and the CPU:", differ or "none")


if __name__ == "__main__":
    main()
