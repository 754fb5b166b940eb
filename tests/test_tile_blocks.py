"""passes/tile_blocks.py: a score's key block `j // c` that no kv tile straddles is read from a
key of the tile (kvt), once a tile: which divisions it takes, that the tiled program (the CPU
interpreter, which follows the kernel's tiles) still matches the reference, the loads it saves,
and an IR file written for another tile width refused."""
import numpy as np
import pytest

import kdsl
from kdsl import ir, reference
from kdsl.backends import round_float32
from kdsl.check import ATTENTION_TOL, rel_frobenius
from kdsl.errors import KdslError
from kdsl.grammar import parse
from kdsl.passes import pipeline
from kdsl.passes.target import get_target
from kdsl.runtime.compiler import build
from kdsl.sass import find_cuobjdump, inspect


def program(score: str, capture: str = "bias: f32[H, 64, 64]", mask: str = "") -> str:
    return f"""attention blocks {{
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    {capture}
    score(s, b, h, i, j) = {score}
    {f"mask(b, h, i, j) = {mask}" if mask else ""}
}}"""


def lowered(src: str, d: int = 128, arch: str = "sm_90a") -> ir.Kernel:
    return pipeline.lower(pipeline.check(parse(src, "<test>"))[0], get_target(arch), d)


BLOCK_BIAS = "s + bias[h, min(i // 128, 63), min(j // 128, 63)]"


@pytest.mark.parametrize("score,arch,by_tile", [
    (BLOCK_BIAS, "sm_90a", True),                                            # 128-key tiles, blocks of 128
    ("s + bias[h, min(i // 256, 63), min(j // 256, 63)]", "sm_90a", True),  # blocks of two tiles
    (BLOCK_BIAS, "sm_80", True),                                             # the mma kernel's 64-key tiles
    ("s + bias[h, min(i // 64, 63), min(j // 64, 63)]", "sm_90a", False),   # a 128-key tile spans two blocks
    ("s + bias[h, min(i // 96, 63), min(j // 96, 63)]", "sm_90a", False),   # 96 is no multiple of 128
    ("s + bias[h, 0, min((j + 1) // 128, 63)]", "sm_90a", False),           # shifted: a tile may straddle
])
def test_a_key_block_no_tile_straddles_is_read_by_tile(score, arch, by_tile):
    k = lowered(program(score), arch=arch)
    assert ir.uses(k.func("score_log2"), "kvt") == by_tile
    assert not ir.uses(k.func("score"), "kvt")  # the backward's (and the reference's) score as written
    if by_tile:
        assert not any(isinstance(n, ir.Op) and n.op == "floordiv" and n.args[0] == ir.Var("i32", "kv")
                       for n in ir.walk(k.func("score_log2")))


def test_a_key_part_another_pass_takes_stays_as_it_is():
    # a bias per key block alone is the key table's (passes/key_table.py), which reads kv itself
    k = lowered(program("s + kb[b, min(j // 128, 63)]", "kb: f32[B, 64]"))
    assert k.attr("key_table") and not ir.uses(k.func("score_log2"), "kvt")


@pytest.mark.parametrize("shape", [(1, 2, 300, 259), (2, 1, 129, 1000), (1, 3, 1, 385)])
@pytest.mark.parametrize("mask", ["", "j <= i + N - M"])
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])  # 128- and 64-key tiles
def test_the_tiled_program_matches_the_reference(shape, mask, arch):
    src = program(BLOCK_BIAS, mask=mask)
    assert ir.uses(lowered(src, 64, arch).func("score_log2"), "kvt")  # what the interpreter runs
    mod = kdsl.compile(src, "blocks.kd", interpret=True, arch=arch)
    B, H, M, N = shape
    rng = np.random.default_rng()
    q = round_float32(rng.standard_normal((B, H, M, 64), dtype=np.float32), "bf16")
    k, v = (round_float32(rng.standard_normal((B, H, N, 64), dtype=np.float32), "bf16") for _ in range(2))
    bias = rng.standard_normal((H, 64, 64), dtype=np.float32) * 4
    out = mod.blocks(q, k, v, bias)
    ref, _ = reference.attention(mod.ir["blocks"], q, k, v, {"bias": bias})
    assert rel_frobenius(out, ref) <= ATTENTION_TOL


def test_the_block_is_loaded_once_a_row_a_tile():
    """block_bias_2d (held-out set 18) loaded its entry per element: 134 global loads in the
    kernel (sm_90a, head dim 128); by tile, a few."""
    if not find_cuobjdump():
        pytest.skip("cuobjdump is needed for the SASS check: pip install 'kdsl[sass]'")
    built = build(pipeline.check(parse(program(BLOCK_BIAS), "<test>"))[0], "sm_90a", 128)
    rep = inspect(built.compiled.cubin, built.generated.entry)
    assert rep.other_ops.get("LDG", 0) <= 16 and rep.local_bytes == 0, rep


def test_an_ir_file_written_for_another_tile_width_is_refused():
    k = lowered(program(BLOCK_BIAS))
    with pytest.raises(KdslError, match=r"kvt .* tile_n = 96"):
        pipeline.lower(k.with_attrs(tile_n=96), get_target("sm_90a"), 128)
