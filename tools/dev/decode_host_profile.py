#!/usr/bin/env python3
"""Where the host time of an attention call goes: host us per call at 25 / 50 / 200 calls per
sample (a long sleep kernel queued ahead, so the GPU never drains the queue), then the hot
path's pieces timed alone, then the decode ceiling (a read of the same bytes) in turns.

    python3 tools/dev/decode_host_profile.py
"""
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
# The hot path's pieces, each alone (host_us: a sleep kernel queued ahead of the launches).
from kdsl.runtime import torch_ops  # noqa: E402
rel(qp, k, k, out=outp)
plan = rel._plan_for(qp, k, k, (), outp, None, None)
pieces = {
    "torch_ops.compiling()": torch_ops.compiling,
    "_plan_for (plan key + dict)": lambda: rel._plan_for(qp, k, k, (), outp, None, None),
    "4 x data_ptr()": lambda: [x.data_ptr() for x in (qp, k, k, outp)],
    "_summary_pointer": lambda: rel._summary_pointer(plan, [], None),
    "_work_counter": lambda: rel._work_counter(plan),
    "plan.capturing()": plan.capturing,
    "plan.current_stream()": plan.current_stream,
    "whole call, M=128": lambda: rel(qp, k, k, out=outp),
    "torch a.view(-1) (a dispatcher round trip)": lambda: qp.view(-1),
    "torch.empty_like(q)": lambda: torch.empty_like(q),
}
for name, f in pieces.items():
    print(f"{name:45s} {host_us(f, 1000, 200):6.2f} us", flush=True)

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
