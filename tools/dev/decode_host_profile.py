#!/usr/bin/env python3
"""Where the host time of a split-KV decode call goes: host us per call at 25 / 50 / 200 calls
per sample (a long sleep kernel queued ahead, so the GPU never drains the queue), then a
cProfile of 200 calls.

    python3 tools/dev/decode_host_profile.py
"""
import cProfile
import pstats
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import kdsl  # noqa: E402
from devtools import host_us  # noqa: E402


rel = kdsl.load(ROOT / "samples" / "relpos.kd").relpos
plain = kdsl.load(ROOT / "samples" / "plain.kd").plain if (ROOT / "samples" / "plain.kd").exists() else None
q = torch.randn(1, 16, 1, 128, device="cuda", dtype=torch.bfloat16)
k = torch.randn(1, 16, 4096, 128, device="cuda", dtype=torch.bfloat16)
qp = torch.randn(1, 16, 128, 128, device="cuda", dtype=torch.bfloat16)
out, outp = torch.empty_like(q), torch.empty_like(qp)
calls = {"relpos decode (split-KV)": lambda: rel(q, k, k, out=out),
         "relpos M=128 (one launch)": lambda: rel(qp, k, k, out=outp),
         "torch sdpa decode": lambda: torch.nn.functional.scaled_dot_product_attention(q, k, k)}
for name, fn in calls.items():
    print(name, " ".join(f"{per}/sample: {host_us(fn, 1000, per):.1f} us" for per in (25, 50, 200)), flush=True)
fn = calls["relpos decode (split-KV)"]
torch.cuda._sleep(100_000_000)
prof = cProfile.Profile()
prof.enable()
for _ in range(200):
    fn()
prof.disable()
torch.cuda.synchronize()
pstats.Stats(prof).sort_stats("tottime").print_stats(22)

# The decode ceiling: B=1 H=16 N=32768 D=128 reads 268 MB of K and V. Time a plain read of
# the same bytes (a sum over them, reinterpreted as fp32) beside kdsl and cuDNN, in turns.
from kdsl import bench  # noqa: E402
kv = torch.randn(2, 1, 16, 32768, 128, device="cuda", dtype=torch.bfloat16)
k32, v32 = kv[0], kv[1]
flat = kv.view(torch.float32).view(-1)
pl = kdsl.load(ROOT / "samples" / "plain.kd").plain
o32 = torch.empty_like(q)
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402


def cudnn():
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return torch.nn.functional.scaled_dot_product_attention(q, k32, v32)


times = bench.Timer(60).in_turns({"read 268 MB (sum)": lambda: flat.sum(), "kdsl plain decode": lambda: pl(q, k32, v32, out=o32),
                                  "cuDNN decode": cudnn})
for name, ms in times.items():
    print(f"{name}: {ms * 1e3:.1f} us, {kv.numel() * 2 / ms / 1e9:.0f} GB/s")
