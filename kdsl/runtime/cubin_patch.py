"""Post-passes over a cubin's SASS: control bits ptxas sets conservatively, rewritten in place.

Hopper instructions are 16 bytes. The high 64-bit word carries the scheduling control bits
(Volta onwards): stall cycles (bits 41-44), the yield hint (bit 45), the write / read
barriers (46-48, 49-51), the wait mask (52-57) and one operand-reuse flag per source slot
(58-61). The low 12 bits of the low word name the opcode.

`ffma_yield` serves the FP8 GEMM's promotion, a run of 64+ FFMAs per m64 wave that follows
the wave's wgmma wait. ptxas marks the shared scale operand `.reuse` on every other FFMA,
and an instruction that sets a reuse flag also clears the yield hint, since the reuse cache
only survives if the same warp issues next. The run then holds the sub-partition's issue
slot while the other math warpgroup's warp beside it waits to issue its wgmmas, which keep
the tensor core busy. Clearing the reuse flags on part of the run (and letting those
instructions yield) gives the other warp its slot at the cost of a register-bank read
(DeepGEMM reported the same rewrite as "FFMA interleaving"). Only scheduling hints change:
every instruction computes what it computed before.
"""
from __future__ import annotations

import struct

from ..errors import KdslError

FFMA = 0x223             # FFMA Rd, Ra, Rb, Rc (register operands)
YIELD_BIT = 1 << 45      # set: do not yield (what ptxas writes beside a reuse flag)
REUSE_BITS = 0xF << 58
MIN_RUN = 32             # FFMAs in one promotion block; shorter runs are left alone
MAX_GAP = 4              # other instructions allowed between two FFMAs of one block


def text_section(cubin: bytes, entry: str) -> tuple[int, int]:
    """(offset, size) of `.text.<entry>` in a 64-bit little-endian ELF cubin."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2 or cubin[5] != 1:
        raise KdslError("cubin patch: not a 64-bit little-endian ELF")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)

    def header(i):  # name, offset, size
        base = shoff + i * shentsize
        name, = struct.unpack_from("<I", cubin, base)
        offset, size = struct.unpack_from("<QQ", cubin, base + 0x18)
        return name, offset, size

    _, str_off, str_size = header(shstrndx)
    want = f".text.{entry}".encode()
    for i in range(shnum):
        name, offset, size = header(i)
        end = cubin.index(b"\0", str_off + name)
        if cubin[str_off + name:end] == want:
            return offset, size
    raise KdslError(f"cubin patch: no section .text.{entry}")


def ffma_blocks(words: list[tuple[int, int]]) -> list[list[int]]:
    """Indices of the FFMAs of each promotion block: MIN_RUN or more FFMAs with at most
    MAX_GAP other instructions between neighbours."""
    blocks, cur, last = [], [], -1
    for i, (lo, _) in enumerate(words):
        if lo & 0xFFF != FFMA:
            continue
        if cur and i - last > MAX_GAP + 1:
            if len(cur) >= MIN_RUN:
                blocks.append(cur)
            cur = []
        cur.append(i)
        last = i
    if len(cur) >= MIN_RUN:
        blocks.append(cur)
    return blocks


def ffma_yield(cubin: bytes, entry: str, sixteenths: int) -> tuple[bytes, int]:
    """The cubin with the reuse flags of the first sixteenths/16 of each promotion block's
    FFMAs cleared and those FFMAs allowed to yield; and how many instructions changed."""
    if not 0 <= sixteenths <= 16:
        raise KdslError(f"cubin patch: ffma_yield must be 0..16 sixteenths, got {sixteenths}")
    if sixteenths == 0:
        return cubin, 0
    offset, size = text_section(cubin, entry)
    words = [struct.unpack_from("<QQ", cubin, offset + 16 * i) for i in range(size // 16)]
    out = bytearray(cubin)
    changed = 0
    for block in ffma_blocks(words):
        for i in block[: len(block) * sixteenths // 16]:
            lo, hi = words[i]
            if hi & REUSE_BITS:
                struct.pack_into("<Q", out, offset + 16 * i + 8, hi & ~(REUSE_BITS | YIELD_BIT))
                changed += 1
    return bytes(out), changed
