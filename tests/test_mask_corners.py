"""Mask analysis reads a table of blocks at the block's corners: a load whose indices that vary
over a tile each take at most two values on it (`blocks[b, h, i // 128, j // 128]`) is read at
those values in the tile predicates, so a block-sparse mask from a per-head table skips its
empty tiles and drops the check on its full ones, with no summary. Checked: the classes it
gives (exact where no tile straddles a block, sound where one does), soundness for random
tables on ragged shapes, the interpreter (which follows the kernel's tiles) against the
reference, and that a mask read per element gets no corners."""
import numpy as np
import pytest

import kdsl
from kdsl import interp, reference
from kdsl.backends import round_float32
from kdsl.check import ATTENTION_TOL, rel_frobenius
from kdsl.grammar import parse
from kdsl.passes import mask_analysis, pipeline, typecheck
from kdsl.passes.simplify import FALSE
from kdsl.passes.target import get_target
from kdsl.semantics import eval_numpy


def program(mask: str, capture: str = "blocks: bool[B, H, 8, 8]") -> str:
    return f"""attention sparse {{
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    {capture}
    mask(b, h, i, j) = {mask}
}}"""


def analysed(src: str):
    return mask_analysis.run(typecheck.check_program(parse(src, "sparse.kd"))[0])


def classes(k, caps, B, H, M, N, tm, tn):
    dims = {"B": B, "H": H, "Hkv": H, "M": M, "N": N, "D": 64}
    return {(q0, k0): interp._classify(k.func("tile_empty"), k.func("tile_full"), dims, caps, B, H,
                                       q0, min(q0 + tm, M) - 1, k0, min(k0 + tn, N) - 1)
            for q0 in range(0, M, tm) for k0 in range(0, N, tn)}


BLOCK_MASK = "blocks[b, h, min(i // 128, 7), min(j // 128, 7)]"


def test_aligned_tiles_are_empty_or_full_as_their_block_is():
    k = analysed(program(BLOCK_MASK))
    assert k.attr("mask_tiles") == "data-dependent" and mask_analysis.summary_slots(k) == []
    rng = np.random.default_rng()
    blocks = rng.random((2, 3, 8, 8)) < 0.5
    for (q0, k0), cls in classes(k, {"blocks": blocks}, 2, 3, 1024, 1024, 128, 128).items():
        want = np.where(blocks[:, :, q0 // 128, k0 // 128], "full", "empty")
        assert (cls == want).all(), (q0, k0)
    # 64-row tiles lie inside one block as well
    for (q0, k0), cls in classes(k, {"blocks": blocks}, 2, 3, 512, 512, 64, 128).items():
        assert (cls == np.where(blocks[:, :, q0 // 128, k0 // 128], "full", "empty")).all()


def test_a_tile_across_two_blocks_is_decided_by_both():
    """176-key tiles straddle 128-key blocks: a tile is empty only where every block it touches
    is false, full only where every one is true."""
    k = analysed(program(BLOCK_MASK))
    blocks = np.zeros((1, 1, 8, 8), bool)
    blocks[0, 0, 0, 0] = blocks[0, 0, 0, 1] = True  # keys 0..255 of the first row block
    cls = classes(k, {"blocks": blocks}, 1, 1, 128, 1024, 128, 176)
    assert cls[(0, 0)][0, 0] == "full"       # keys 0..175: blocks 0 and 1
    assert cls[(0, 176)][0, 0] == "partial"  # keys 176..351: blocks 1 and 2
    assert cls[(0, 352)][0, 0] == "partial"  # keys 352..527: blocks 2 to 4, three: not read
    assert cls[(0, 528)][0, 0] == "empty"    # keys 528..703: blocks 4 and 5, both false


@pytest.mark.parametrize("mask,capture", [
    (BLOCK_MASK, "blocks: bool[B, H, 8, 8]"),
    ("blocks[b, h, min(i // 50, 7), j // 64] and j <= i + N - M", "blocks: bool[B, H, 8, 8]"),
    ("tbl[h, i // 64, j // 96] > 2", "tbl: u8[H, 8, 8]"),
    ("tbl[h, min(i // 40, 7), min(j // 96, 7)] != 1 or j < 5", "tbl: i8[H, 8, 8]"),
    ("not blocks[b, h, 7 - i // 64, j // 64]", "blocks: bool[B, H, 8, 8]"),
])
def test_tile_classes_are_sound_for_random_tables(mask, capture):
    k = analysed(program(mask, capture))
    name, dtype = capture.split(":")[0], capture.split(":")[1].split("[")[0].strip()
    rng = np.random.default_rng()
    for _ in range(6):
        B, H, M, N = 2, 2, int(rng.integers(1, 450)), int(rng.integers(1, 450))
        shape = (H, 8, 8) if dtype != "bool" else (B, H, 8, 8)
        table = rng.random(shape) < rng.random() if dtype == "bool" else \
            rng.integers(*((0, 5) if dtype == "u8" else (-2, 3)), shape).astype(np.uint8 if dtype == "u8" else np.int8)
        caps = {name: table}
        grid = {"B": B, "H": H, "Hkv": H, "M": M, "N": N, "D": 64, "b": np.arange(B).reshape(B, 1, 1, 1),
                "h": np.arange(H).reshape(1, H, 1, 1), "q": np.arange(M).reshape(1, 1, M, 1),
                "kv": np.arange(N).reshape(1, 1, 1, N)}
        keep = np.broadcast_to(eval_numpy(k.func("mask"), grid, caps), (B, H, M, N))
        for tm, tn in ((128, 128), (64, 176), (128, 64)):
            for (q0, k0), cls in classes(k, caps, B, H, M, N, tm, tn).items():
                block = keep[:, :, q0:q0 + tm, k0:k0 + tn]
                assert not ((cls == "empty") & block.any(axis=(2, 3))).any(), (mask, q0, k0)
                assert not ((cls == "full") & ~block.all(axis=(2, 3))).any(), (mask, q0, k0)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("shape", [(1, 2, 300, 259), (2, 1, 129, 1000), (1, 3, 1, 385)])
@pytest.mark.parametrize("mask", [BLOCK_MASK, "j <= i + N - M and " + BLOCK_MASK.replace("128", "64")])
def test_the_tiled_program_matches_the_reference(mask, shape, arch):
    """The causal form keeps its key interval on the tiles whose block is true (kv_bounds' "interval
    where the rest holds", the rest read at the corners)."""
    src = program(mask)
    low = pipeline.lower(typecheck.check_program(parse(src, "sparse.kd"))[0], get_target(arch), 64)
    assert low.func("tile_empty") != FALSE
    if "j <= i" in mask and arch == "sm_90a":
        assert low.attr("kv_bounds") == "interval where the rest holds"
    mod = kdsl.compile(src, "sparse.kd", interpret=True, arch=arch)
    B, H, M, N = shape
    rng = np.random.default_rng()
    q = round_float32(rng.standard_normal((B, H, M, 64), dtype=np.float32), "bf16")
    k, v = (round_float32(rng.standard_normal((B, H, N, 64), dtype=np.float32), "bf16") for _ in range(2))
    blocks = rng.random((B, H, 8, 8)) < 0.5
    out = mod.sparse(q, k, v, blocks)
    ref, _ = reference.attention(mod.ir["sparse"], q, k, v, {"blocks": blocks})
    assert rel_frobenius(out, ref) <= ATTENTION_TOL


@pytest.mark.parametrize("mask,capture", [
    ("j <= i and sel[b, h, i, j] > 0", "sel: u8[B, H, M, N]"),   # a dense mask: per element
    ("blocks[b, h, (i // 8) % 8, (j // 8) % 8]", "blocks: bool[B, H, 8, 8]"),  # 8 blocks a tile
])
def test_a_table_no_tile_is_narrow_on_gets_no_corners(mask, capture):
    """No load of the table in the tile predicates (the dense mask's summary, (tmax e), may
    name it: the summary kernel reads it, not the tile test)."""
    k = analysed(program(mask, capture))

    def loads_outside_summaries(e):
        if isinstance(e, pipeline.ir.Op) and e.op in pipeline.ir.TILE_REDUCTIONS:
            return
        if isinstance(e, pipeline.ir.Load):
            yield e
        for a in getattr(e, "args", ()) + getattr(e, "indices", ()):
            yield from loads_outside_summaries(a)
    assert not any(n.tensor == capture.split(":")[0] for n in loads_outside_summaries(k.func("tile_empty")))
