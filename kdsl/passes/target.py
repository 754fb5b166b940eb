"""What the passes need to know about the GPU they generate code for."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import KdslError


@dataclass(frozen=True)
class Target:
    arch: str            # NVRTC --gpu-architecture, e.g. "sm_90a"
    sm: int              # 90, 89, 80
    smem_per_block: int  # opt-in dynamic shared memory limit, bytes
    has_wgmma: bool      # sm_90a only
    sms: int = 132       # multiprocessors the FP8 GEMM's tiles are chosen for when the
                         # device's own count is not known (H100 SXM / H200: 132)


_TARGETS = {
    "sm_90a": Target("sm_90a", 90, 227 * 1024, True),
    "sm_90": Target("sm_90", 90, 227 * 1024, False),
    "sm_89": Target("sm_89", 89, 99 * 1024, False),
    "sm_80": Target("sm_80", 80, 163 * 1024, False),
}


def get_target(arch: str) -> Target:
    if arch not in _TARGETS:
        raise KdslError(f"unsupported architecture '{arch}'; choose one of {', '.join(_TARGETS)}")
    return _TARGETS[arch]
