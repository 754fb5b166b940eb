"""The FP8 GEMM kernel's parameters as its template declares them, so that launch tests find a
parameter's slot by name: a parameter added to the kernel moves no index written into a test."""
from __future__ import annotations

import re
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parents[1] / "kdsl" / "codegen" / "templates" / "fp8_gemm.cu.j2"


def fp8_kernel_params() -> list[tuple[str, str]]:
    """(name, kind) of each parameter of the generated kernel, in order; kind as
    driver.ArgPack names them: tmap, ptr or i32."""
    signature = re.search(r"\{\{ entry \}\}\((.*?)\)\s*\{", TEMPLATE.read_text(), re.S).group(1)
    params = []
    for decl in signature.split(","):
        words = re.findall(r"[\w:]+|\*", decl)
        kind = "tmap" if "kdsl::TmaDesc" in words else "ptr" if "*" in words else "i32"
        params.append((words[-1], kind))
    return params


def fp8_slots(*names: str) -> list[int]:
    """The parameter slots of these names."""
    order = [name for name, _ in fp8_kernel_params()]
    return [order.index(name) for name in names]
