"""Offline cubin inspection with cuobjdump (no GPU needed): registers, shared and local
memory, spills, and whether the SASS uses tensor-core instructions."""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from .errors import KdslError

TENSOR_CORE_OPS = ("HGMMA", "QGMMA", "IGMMA", "HMMA", "IMMA")


@dataclass(frozen=True)
class SassReport:
    registers: int
    shared_static: int
    local_bytes: int            # per-thread stack frame + local memory (spills land here)
    spill_ops: int              # STL/LDL instructions
    tensor_ops: dict[str, int]  # opcode -> count
    other_ops: dict = None      # TMA loads/stores/reductions (UTMALDG/UTMASTG/UTMAREDG), bulk and global
                                # reductions (UBLKRED, REDG), special functions (MUFU), global and shared
                                # loads (LDG, LDS; LDS.U16 & co. by width too), stmatrix (STSM), memory barriers (MEMBAR: a proxy
                                # fence is one), warp votes (VOTE) and shuffles (SHFL) -> count
    tensor_shapes: dict = None  # a tensor opcode with its shape ("HGMMA.64x128x16") -> count

    @property
    def has_tensor_cores(self) -> bool:
        return bool(self.tensor_ops)


def find_cuobjdump() -> str | None:
    found = shutil.which("cuobjdump")
    if found:
        return found
    for base in sys.path:
        for p in glob.glob(os.path.join(base, "nvidia", "cu1*", "bin", "cuobjdump")):
            return p
    p = "/usr/local/cuda/bin/cuobjdump"
    return p if os.path.exists(p) else None


def inspect(cubin: bytes, entry: str | None = None) -> SassReport | None:
    """The report of function `entry` (or of the whole cubin when None): a module may hold
    helper kernels beside its entry point (tile summary, split-KV combine). None when
    cuobjdump is not installed; KdslError when it cannot disassemble."""
    tool = find_cuobjdump()
    if tool is None:
        return None
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(tool) + os.pathsep + env.get("PATH", "")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        try:
            res = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True, env=env, check=True)
            sass = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True, env=env, check=True)
        except subprocess.CalledProcessError as e:
            raise KdslError(f"cuobjdump failed ({tool}): {e.stderr.strip()} "
                            "(it needs nvdisasm beside it: pip install 'kdsl[sass]')") from None
    usage, code = res.stdout, sass.stdout
    if entry is not None:
        usage = _section(usage, rf"Function {re.escape(entry)}:")
        code = _section(code, rf"Function : {re.escape(entry)}\s")
    def field(name):
        m = re.search(rf"\b{name}:(\d+)", usage)
        return int(m.group(1)) if m else 0
    ops: dict[str, int] = {}
    shapes: dict[str, int] = {}
    for m in re.finditer(r"\b(HGMMA|QGMMA|IGMMA|HMMA|IMMA)\.(\w+)", code):
        ops[m.group(1)] = ops.get(m.group(1), 0) + 1
        shape = f"{m.group(1)}.{m.group(2)}"
        shapes[shape] = shapes.get(shape, 0) + 1
    other: dict[str, int] = {}
    for m in re.finditer(r"\b(UTMALDG|UTMASTG|UTMAREDG|UBLKRED|UBLKPF|REDG|MUFU|LDG|LDS|STSM|MEMBAR)(\.[A-Z0-9]+)?",
                         code):  # (UBLKPF: a bulk prefetch into L2)
        other[m.group(1)] = other.get(m.group(1), 0) + 1
        if m.group(1) in ("MUFU", "LDS") and m.group(2):  # which function: MUFU.EX2, ...; LDS.U16: its width
            other[m.group(1) + m.group(2)] = other.get(m.group(1) + m.group(2), 0) + 1
    other["BAR.SYNC"] = len(re.findall(r"\bBAR\.SYNC\b", code))  # CTA barrier 0 and named ones
    # CTA barriers (barrier 0) with a memory barrier among the 32 instructions before them: a
    # proxy fence before a __syncthreads, which waits for the thread's outstanding global
    # reductions and stores
    ins = re.findall(r"/\*[0-9a-f]{4,}\*/\s+([^;]*);", code)
    other["BAR.SYNC.FENCED"] = sum(1 for i, op in enumerate(ins) if re.search(r"\bBAR\.SYNC\.\w+ 0x0\s*$", op)
                                   and any("MEMBAR" in prev for prev in ins[max(0, i - 32):i]))
    # wgmma waits: about one per HGMMA where ptxas serialized them (its C7520 remark), which no
    # error reports
    other["WARPGROUP.DEPBAR"] = len(re.findall(r"\bWARPGROUP\.DEPBAR\b", code))
    # warp votes (__ballot_sync): the backward's 32-wide search for its next step
    other["VOTE"] = len(re.findall(r"\bVOTE\.", code))
    # warp shuffles (__shfl_sync): a partial tile's key values handed to its elements (passes/key_values.py)
    other["SHFL"] = len(re.findall(r"\bSHFL\.", code))
    # integer compares and min / max: a partial tile's per-element key bounds and clamps
    other["ISETP"] = len(re.findall(r"\bISETP\.", code))
    other["VIMNMX"] = len(re.findall(r"\bVIMNMX\b", code))
    # subroutine calls: the 64-bit integer division's (a divisor prepared per element)
    other["CALL"] = len(re.findall(r"\bCALL\.", code))
    # 1-byte global loads: a bool / u8 / i8 mask read element by element
    other["LDG.8"] = len(re.findall(r"\bLDG(?:\.\w+)*?\.[US]8\b", code))
    spills = len(re.findall(r"\b(?:STL|LDL)(?:\.\w+)*\s", code))
    return SassReport(field("REG"), field("SHARED"), field("LOCAL") + field("STACK"), spills, ops, other, shapes)


def _section(text: str, header: str) -> str:
    """From `header` to the next function's header in cuobjdump's output."""
    m = re.search(header, text)
    if m is None:
        return text
    rest = text[m.end():]
    nxt = re.search(r"Function ?: ?\w+", rest)
    return rest[:nxt.start()] if nxt else rest
