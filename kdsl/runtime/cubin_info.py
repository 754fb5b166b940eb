"""What a cubin says of its functions, read from the ELF itself (no GPU, no cuobjdump).

compiler.build asks whether ptxas gave a trial schedule local memory (spills). NVRTC's log
cannot tell: where the CUDA driver is loaded, NVRTC (>= 12.9) may serve the cubin from the
driver's compute cache, and then the log holds none of ptxas' warnings. The cubin always holds
each function's frame size: the per-thread local memory ptxas allocated, where spills land.
"""
from __future__ import annotations

import io
import struct

from elftools.elf.elffile import ELFFile

# .nv.info records: a format byte, an attribute byte, then a 16-bit field: the value itself
# (formats 1-3: none, a byte, a half-word), or the size of the bytes that follow (format 4)
EIFMT_SVAL = 4
EIATTR_FRAME_SIZE = 0x11  # SVAL: u32 symbol index, u32 frame bytes


def frame_bytes(cubin: bytes, entry: str) -> int:
    """The local-memory frame in bytes per thread of function `entry` (0: no spills)."""
    elf = ELFFile(io.BytesIO(cubin))
    symtab = elf.get_section_by_name(".symtab")
    index = next((i for i, s in enumerate(symtab.iter_symbols()) if s.name == entry), None)
    if index is None:
        raise ValueError(f"cubin has no function {entry!r}")
    info = elf.get_section_by_name(".nv.info")
    return max((size for attr, payload in _records(info.data() if info else b"") if attr == EIATTR_FRAME_SIZE
                for sym, size in [struct.unpack_from("<II", payload)] if sym == index), default=0)


def _records(data: bytes):
    i = 0
    while i + 2 <= len(data):
        fmt, attr = data[i], data[i + 1]
        if fmt == EIFMT_SVAL:
            (size,) = struct.unpack_from("<H", data, i + 2)
            yield attr, data[i + 4:i + 4 + size]
            i += 4 + size
        else:
            yield attr, data[i + 2:i + 4]
            i += 4
