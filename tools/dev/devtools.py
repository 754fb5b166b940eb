"""Helpers the tools/dev scripts share: NVRTC defines for A/B builds of one kernel source,
a cubin's disassembly, kdsl.hosttime's host timer, a decode call's inputs with cuDNN's call on them, and
the warm-up-then-profile loop of the Nsight Compute drivers."""
from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class extra_options:
    """NVRTC options added to every kernel built inside the block (the build's cache key
    includes them, so the variants never share a cubin)."""

    def __init__(self, options):
        self.options = list(options)

    def __enter__(self):
        from kdsl.runtime import nvrtc
        self.base = base = nvrtc.default_options
        nvrtc.default_options = lambda *a: base(*a) + self.options

    def __exit__(self, *exc):
        from kdsl.runtime import nvrtc
        nvrtc.default_options = self.base


def sass_text(cubin: bytes) -> str:
    """cuobjdump -sass of a cubin (kdsl.sass finds the tool)."""
    from kdsl.sass import find_cuobjdump
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([find_cuobjdump(), "-sass", f.name], capture_output=True, text=True,
                              check=True).stdout


def host_us(fn, n=2000, per=200) -> float:
    """kdsl.hosttime's median host microseconds per call (needs torch and a GPU)."""
    from kdsl.hosttime import host_us
    return host_us(fn, n, per)


def decode_case(B: int, H: int, Hkv: int, N: int, D: int = 128):
    """q [B, H, 1, D], k and v [B, Hkv, N, D] (bf16, standard normal, on the GPU) and a function
    running cuDNN SDPA on them (GQA when Hkv < H)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16)

    def cudnn():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=Hkv != H)
    return q, k, v, cudnn


def profile_once(calls) -> None:
    """Each call once to warm up (builds, plans, the peers' heuristics), then once more each
    between cudaProfilerStart / Stop: what `ncu --profile-from-start off` profiles."""
    import torch
    for call in calls:
        call()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for call in calls:
        call()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
