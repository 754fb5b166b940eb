"""passes/key_mask.py: a mask's part gathered per key, which the Hopper kernel votes into one bit
a key of a partial tile (attr key_mask): which masks have one, the identity mask == mask_keyed
with kb = the part at kv (both values of kb, as the kernel evaluates the rest), the tiling's
default and refusals, and the build."""
import numpy as np
import pytest

from kdsl import ir
from kdsl.errors import KdslError
from kdsl.passes import key_mask

from conftest import lowered

CAPS = "\n    flag: bool[B, N]\n    kind: i32[B, H, N]\n    rows: i32[B, M]\n    lens: i32[B]"


def program(mask: str, score: str | None = None) -> str:
    score_line = f"\n    score(s, b, h, i, j) = {score}" if score else ""
    return (f"attention x {{\n    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]{CAPS}{score_line}\n"
            f"    mask(b, h, i, j) = {mask}\n}}\n")


KEYED = ["flag[b, j]",                                # a validity per key
         "flag[b, j] or abs(i - j) < 256",            # Longformer's global tokens by flag
         "not flag[b, j] and j <= i",
         "kind[b, h, j] > 2 and j <= i",              # a key's type per head
         "flag[b, j] or rows[b, i] != 0 and j <= i",  # the arm beside the bit reads the query's data
         "(flag[b, j] and kind[b, h, j] > 0) or abs(i - j) < 64",  # one part of two gathers
         # parts that divide the key, beside arms that are key intervals (both, in the last two)
         "j % 3 != 0 or abs(i - j) < 200",
         "(j // 32) % 4 == h % 4 or j == i",
         "j <= i and (i - j < 128 or j % 4 == 0)",
         "flag[b, j] and rows[b, i] != 0 or j == i"]
# a part, but not taken: an arm per element beside a part that gathers nothing (no gain measured),
# or both arms per element (measured slower: passes/key_mask.py)
PART_ONLY = ["(j // 32) % 4 == h % 4 or (i - j) % 5 == 0",
             "flag[b, j] != (j <= i)"]


@pytest.mark.parametrize("mask,bits", [
    *((m, True) for m in KEYED),
    *((m, False) for m in PART_ONLY),
    ("j <= i", False),                                # positions alone: kv_bounds.py's interval
    ("j < lens[b]", False),                           # a bound read per batch: one compare an element
    ("flag[b, j] or kind[b, h, j] > 2 and j <= i", False),  # two distinct key parts
    ("rows[b, i] == kind[b, h, j]", False),           # the key's data against the query's
])
def test_which_masks_take_key_bits(mask, bits):
    assert key_mask.applies(lowered(program(mask)), 128) == bits


@pytest.mark.parametrize("mask", KEYED + PART_ONLY)
def test_the_arms_the_bit_chooses_are_the_mask(mask):
    """The identity the kernel relies on, at random positions, heads and data: the mask is the
    rest with the part true where the part holds, else the rest with it false."""
    from kdsl.semantics import eval_numpy
    k = lowered(program(mask), 64)
    assert k.attr("key_mask") == int(mask in KEYED)
    whole = k.func("mask")
    part = key_mask.part(whole)
    arms = key_mask.rests(whole, part)
    assert not any(ir.uses(part, v) for v in ("q", "qf")) and ir.uses(part, "kv")
    rng = np.random.default_rng()
    caps = {"flag": rng.integers(0, 2, (2, 2048)).astype(bool), "kind": rng.integers(0, 4, (2, 4, 2048)),
            "rows": rng.integers(0, 2, (2, 2048)), "lens": rng.integers(0, 2048, 2)}
    for _ in range(60):
        q, kv, h, b = (int(rng.integers(0, n)) for n in (2048, 2048, 4, 2))
        env = {"B": 2, "H": 4, "M": 2048, "N": 2048, "D": 64, "b": b, "h": h, "q": q, "kv": kv,
               "qf": float(q), "kvf": float(kv), "dqkf": float(q - kv)}
        want = bool(eval_numpy(whole, env, caps, np.float64))
        bit = bool(eval_numpy(part, env, caps, np.float64))
        got = bool(eval_numpy(arms[0] if bit else arms[1], env, caps, np.float64))
        assert got == want, (ir.print_expr(part), q, kv)


def test_the_default_and_refusals():
    src = program(KEYED[1])
    assert lowered(src, 64).attr("key_mask") == 1
    assert lowered(src, 64, key_mask=0).attr("key_mask") == 0
    assert lowered(program("j <= i"), 64).attr("key_mask") == 0
    assert lowered(src, 256).attr("tile_n") == 80 and lowered(src, 256).attr("key_mask") == 1
    assert lowered(src, 256, key_mask=0).attr("key_mask") == 0
    with pytest.raises(KdslError, match="key_mask = 1 needs a mask with one part read per key and by no query"):
        lowered(program("j <= i"), key_mask=1)
    with pytest.raises(KdslError, match="key_mask = 1 needs tile_n <= 128"):
        lowered(src, 64, key_mask=1, tile_n=192, consumers=1)


def test_the_build_votes_and_gathers_less():
    """global flags beside a window at head dim 128: with the bits the partial tile's per-element
    gathers go (a few a tile, and votes), and nothing spills."""
    from kdsl.grammar import parse
    from kdsl.passes import pipeline
    from kdsl.runtime.compiler import build
    from kdsl.sass import find_cuobjdump, inspect
    if not find_cuobjdump():
        pytest.skip("cuobjdump is needed for the SASS check: pip install 'kdsl[sass]'")
    k = pipeline.check(parse(program(KEYED[1]), "t.kd"))[0]
    reps = {}
    for bits in (0, 1):
        built = build(k.with_attrs(key_mask=bits), "sm_90a", 128)
        reps[bits] = rep = inspect(built.compiled.cubin, built.generated.entry)
        assert rep.local_bytes == 0 and rep.spill_ops == 0, bits
    assert reps[1].other_ops["VOTE"] >= reps[0].other_ops["VOTE"] + 4
    assert reps[0].other_ops["LDG"] - reps[1].other_ops["LDG"] >= 16, (reps[0].other_ops, reps[1].other_ops)


@pytest.mark.parametrize("mask,by_keys", [(KEYED[1], (False, True)),   # the window beside the flag
                                          (KEYED[2], (True, False)),   # causal beside it
                                          (KEYED[4], (False, True)),   # a row's flag and causal: reads data
                                          (KEYED[8], (True, True)),    # both arms intervals
                                          (KEYED[0], (False, False)),  # the flag alone: both constants
                                          ("flag[b, j] or (i - j) % 7 == 0", (False, False))])  # per element
def test_an_arm_that_is_a_key_interval_takes_two_bounds_a_row(mask, by_keys):
    """An arm beside the bit as kv_lo <= kv <= kv_hi (kv_bounds.solve), turned into its bits by word
    operations (attention_wgmma_parts.cuh interval_bits); else a constant or tested per element."""
    import re
    from kdsl.codegen.emit import generate
    src = generate(lowered(program(mask), 64)).source
    got = re.search(r"kKeyArmKeys\[2\] = \{KDSL_KEY_ARM_KEYS && (\w+),\s*KDSL_KEY_ARM_KEYS && (\w+)\}", src)
    assert got and tuple(x == "true" for x in got.groups()) == by_keys


def test_a_per_kv_head_key_part_divides_once_a_tile():
    """Regression: the vote evaluated the key part behind `kv < N &&`, a branch per vote word, and
    NVVM never speculates a division, so kept[b, h // (H // Hkv), j] divided twice per word (16
    more MUFU.RCP than kept[b, h, j]; x1.54 slower, H200 D=128). Unconditional, it is computed once a
    tile at most (an item's, by Variant::item_warm: a few more in the producer and consumers)."""
    from kdsl.grammar import parse
    from kdsl.passes import pipeline
    from kdsl.runtime.compiler import build
    from kdsl.sass import find_cuobjdump, inspect
    if not find_cuobjdump():
        pytest.skip("cuobjdump is needed for the SASS check: pip install 'kdsl[sass]'")
    rcp = {}
    for name, index in (("per_kv_head", "b, h // (H // Hkv), j"), ("per_head", "b, h, j")):
        src = (f"attention {name} {{\n    q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]\n"
               f"    kept: bool[B, {'Hkv' if 'Hkv' in index else 'H'}, N]\n"
               f"    mask(b, h, i, j) = kept[{index}] and j <= i + (N - M)\n}}\n")
        k = pipeline.check(parse(src, "t.kd"))[0]
        built = build(k, "sm_90a", 128)
        assert built.kernel.attr("key_mask") == 1
        rcp[name] = inspect(built.compiled.cubin, built.generated.entry).other_ops["MUFU.RCP"]
    assert rcp["per_kv_head"] <= rcp["per_head"] + 8, rcp
