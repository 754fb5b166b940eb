"""The FFMA yield rewrite of FP8 GEMM cubins (runtime/cubin_patch.py), offline: it changes
scheduling hints only, on the promotion FFMAs only, as many as the attr asks for; the attr
reaches the cache key and the lowered IR, and bad values are refused."""
import re
import struct
import subprocess
import tempfile

import pytest

from kdsl.errors import KdslError
from kdsl.grammar import parse
from kdsl.passes import pipeline
from kdsl.passes.target import get_target
from kdsl.runtime import cubin_patch
from kdsl.runtime.compiler import build
from kdsl.sass import find_cuobjdump

from conftest import ROOT

SHAPE = [4096, 7168, 16384, 1]  # a 256 x 128 tile: two 64-FFMA promotion runs a warpgroup


def gemm(**attrs):
    path = ROOT / "samples" / "fp8_gemm.kd"
    k = pipeline.check(parse(path.read_text(), str(path)))[0]
    return k.with_attrs(shape=SHAPE, sms=132, tile_m=256, tile_n=128, **attrs)


def instructions(cubin, entry):
    off, size = cubin_patch.text_section(cubin, entry)
    return [struct.unpack_from("<QQ", cubin, off + 16 * i) for i in range(size // 16)]


@pytest.mark.parametrize("sixteenths", [4, 8, 16])
def test_only_reuse_and_yield_bits_of_promotion_ffmas_change(sixteenths):
    plain, patched = build(gemm(ffma_yield=0)), build(gemm(ffma_yield=sixteenths))
    assert patched.kernel.attr("ffma_yield") == sixteenths and plain.cache_key != patched.cache_key
    entry = plain.generated.entry
    before, after = instructions(plain.compiled.cubin, entry), instructions(patched.compiled.cubin, entry)
    assert len(before) == len(after)
    blocks = cubin_patch.ffma_blocks(before)
    assert len(blocks) >= 2 and all(len(b) >= cubin_patch.MIN_RUN for b in blocks)
    in_blocks = {i for b in blocks for i in b[: len(b) * sixteenths // 16]}
    changed = [i for i, (x, y) in enumerate(zip(before, after)) if x != y]
    assert changed and set(changed) <= in_blocks
    for i in changed:
        (lo0, hi0), (lo1, hi1) = before[i], after[i]
        assert lo0 == lo1 and lo0 & 0xFFF == cubin_patch.FFMA
        assert hi0 & cubin_patch.REUSE_BITS and hi0 & cubin_patch.YIELD_BIT
        assert hi1 == hi0 & ~(cubin_patch.REUSE_BITS | cubin_patch.YIELD_BIT)
    # every promotion FFMA in the asked-for share that had a reuse flag lost it
    assert all(not after[i][1] & cubin_patch.REUSE_BITS for i in in_blocks)
    # and outside the text section the file is byte for byte the same
    off, size = cubin_patch.text_section(plain.compiled.cubin, entry)
    a, b = plain.compiled.cubin, patched.compiled.cubin
    assert a[:off] == b[:off] and a[off + size:] == b[off + size:]


def test_the_disassembly_differs_only_by_reuse_flags():
    tool = find_cuobjdump()
    assert tool, "cuobjdump is needed for the SASS check: pip install 'kdsl[sass]'"

    def sass(cubin):
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(cubin)
            f.flush()
            text = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True, check=True).stdout
        return [re.sub(r"\s+", " ", re.sub(r"/\*.*?\*/|\.reuse", "", line)).strip() for line in text.splitlines()]

    plain, patched = build(gemm(ffma_yield=0)), build(gemm(ffma_yield=16))
    a, b = sass(plain.compiled.cubin), sass(patched.compiled.cubin)
    assert a == b and sum("QGMMA" in line for line in a) > 0


def test_zero_leaves_the_cubin_alone_and_bad_values_are_refused():
    k = build(gemm(ffma_yield=0))
    assert cubin_patch.ffma_yield(k.compiled.cubin, k.generated.entry, 0) == (k.compiled.cubin, 0)
    with pytest.raises(KdslError, match="ffma_yield must be an integer from 0 to 16"):
        pipeline.lower(gemm(ffma_yield=17), get_target("sm_90a"))
    with pytest.raises(KdslError, match="no section .text.nope"):
        cubin_patch.text_section(k.compiled.cubin, "nope")
    with pytest.raises(KdslError, match="not a 64-bit"):
        cubin_patch.text_section(b"\x7fELF\x01\x01" + bytes(64), "x")
