#!/usr/bin/env python3
"""Is the FP8 promotion paying register-bank conflicts for its scale operand? A timing probe
over a cubin post-pass: in each run of promotion FFMAs (FFMA Rd, Ra, Rb, Rc with the wave's
scale in Rb), ptxas marks Rb `.reuse` on every other FFMA, so half of them read the scale from
the register file beside acc (Ra) and total (Rc), which ptxas gives opposite parities. Here the
reuse flag of slot b is set on every FFMA whose next instruction is an FFMA reading the same
Rb, so every FFMA after the first of a run reads the scale from the reuse cache; with it the
bit 45 that ptxas sets beside every reuse flag (without it cuobjdump does not show the flag).

The form is a define the kernel ignores (-DKDSL_DEV_REUSE=1: a separate cache key); the patch
is applied to the cubin of any build carrying it. tools/dev/fp8_forms.py does the rest
(timing in turns, error against the reference per variant):

    python3 tools/dev/fp8_reuse_patch.py --shapes "4096x7168x16384;4096x2112x7168" [fp8_forms.py options]
    python3 tools/dev/fp8_reuse_patch.py --check    (no GPU: patch one kernel and print what moved)

The instruction encoding (sm_90, 16 bytes): opcode in the low 12 bits (FFMA with register
operands 0x223), Rd bits 16-23, Ra 24-31, Rb 32-39, Rc bits 0-7 of the high word; in the high
word bit 45 and the reuse flags 58-61 (slot a, b, c).
"""
from __future__ import annotations

import dataclasses
import io
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools" / "dev"))

FFMA = 0x223
STAY = 1 << 45
REUSE_B = 1 << 59
DEFINE = "-DKDSL_DEV_REUSE=1"


def text_sections(cubin: bytes):
    """(offset, size) of every .text.* section (the cubin's functions)."""
    from elftools.elf.elffile import ELFFile
    for section in ELFFile(io.BytesIO(cubin)).iter_sections():
        if section.name.startswith(".text."):
            yield section["sh_offset"], section["sh_size"]


def promotion_ffmas(words) -> set[int]:
    """Indices of the FFMAs in promotion runs: 32 or more FFMAs with at most 4 other
    instructions between neighbours (straight-line code after a wave's wgmma wait)."""
    runs, cur, last = [], [], -10
    for i, (lo, _) in enumerate(words):
        if lo & 0xFFF != FFMA:
            continue
        if cur and i - last > 5:
            runs.append(cur)
            cur = []
        cur.append(i)
        last = i
    runs.append(cur)
    return {i for run in runs if len(run) >= 32 for i in run}


def patch(cubin: bytes) -> tuple[bytes, int]:
    out = bytearray(cubin)
    changed = 0
    for offset, size in text_sections(cubin):
        words = [struct.unpack_from("<QQ", cubin, offset + 16 * i) for i in range(size // 16)]
        runs = promotion_ffmas(words)
        for i in range(len(words) - 1):
            (lo, hi), (nlo, _) = words[i], words[i + 1]
            if i not in runs or i + 1 not in runs or hi & REUSE_B:
                continue
            if (lo >> 32) & 0xFF != (nlo >> 32) & 0xFF or (lo >> 32) & 0xFF == 0xFF:  # same Rb, not RZ
                continue
            if (lo >> 16) & 0xFF == (lo >> 32) & 0xFF:  # (Rb written by this FFMA: not a scale)
                continue
            struct.pack_into("<Q", out, offset + 16 * i + 8, hi | REUSE_B | STAY)
            changed += 1
    return bytes(out), changed


def install() -> None:
    """Patch the cubin of every build whose options carry DEFINE."""
    from kdsl.runtime import compiler
    original = compiler._build

    def build(*args, **kwargs):
        built = original(*args, **kwargs)
        if DEFINE in built.options and built.compiled.cubin:
            cubin, n = patch(built.compiled.cubin)
            print(f"  [reuse patch: {n} FFMAs]", flush=True)
            return dataclasses.replace(built, compiled=dataclasses.replace(built.compiled, cubin=cubin))
        return built

    compiler._build = build


def check() -> None:
    import re
    import kdsl
    from devtools import sass_text
    from kdsl.runtime.compiler import build
    kir = kdsl.load(ROOT / "samples" / "fp8_gemm.kd").ir["fp8_gemm"]
    cubin = build(kir.with_attrs(shape=[4096, 7168, 16384, 1], sms=132), "sm_90a", 0).compiled.cubin

    def ffmas(c):
        return [line.strip() for line in sass_text(c).splitlines() if "FFMA" in line and re.match(r"\s+/\*", line)]
    before = ffmas(cubin)
    patched, n = patch(cubin)
    after = ffmas(patched)
    same = [re.sub(r"\.reuse|\s", "", a) == re.sub(r"\.reuse|\s", "", b) for a, b in zip(before, after)]
    print(f"{n} FFMAs patched; .reuse {sum('.reuse' in x for x in before)} -> {sum('.reuse' in x for x in after)} "
          f"of {len(after)}; the same instructions but for .reuse: {all(same) and len(before) == len(after)}")
    for line in after[:6]:
        print("  ", line[:80])


def main() -> None:
    if "--check" in sys.argv:
        check()
        return
    install()
    import fp8_forms
    sys.argv = [sys.argv[0], "--form", f"reuse={DEFINE}", *sys.argv[1:]]
    fp8_forms.main()


if __name__ == "__main__":
    main()
