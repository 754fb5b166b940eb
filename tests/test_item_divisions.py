"""passes/item_divisions.py: the integer divisions the same for a whole work item, which the
Variant's item_warm evaluates where the Hopper kernel takes an item (so that NVVM reuses them
inside the kv loop instead of dividing again on every partial tile)."""
import pytest

from kdsl import ir
from kdsl.passes import item_divisions

from conftest import lowered


def program(mask: str, caps: str = "", score: str | None = None) -> str:
    score_line = f"\n    score(s, b, h, i, j) = {score}" if score else ""
    return (f"attention x {{\n    q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]{caps}"
            f"{score_line}\n    mask(b, h, i, j) = {mask}\n}}\n")


def divisions(text: str) -> list[str]:
    return sorted(ir.format_expr(e) for e in item_divisions.divisions(lowered(text)))


@pytest.mark.parametrize("mask,caps,want", [
    # a capture read at the key-value head: the head's group, once an item
    ("kept[b, h // (H // Hkv), j] and j <= i", "\n    kept: bool[B, Hkv, N]", ["h // (H // Hkv)"]),
    ("(h // (H // Hkv)) % 2 == 0 or j <= i", "", ["h // (H // Hkv)"]),  # % 2: a mask of the bits
    ("j <= i + N % (b + 1)", "", ["N % (b + 1)"]),
    ("j <= i and h % 3 != 0", "", []),                    # a constant divisor: NVVM multiplies
    ("j // (N // 4) <= i // (M // 4)", "", []),           # positions: per element, not per item
    ("j <= i + where(h > 0, N // h, 0)", "", []),         # chosen by a where: h may be 0 there
    ("j <= i + where(h > 0, N // h, 0) + N // h", "", []),  # also evaluated unguarded: still not
    # data: a load may change under the loop's stores (its divisor alone is the item's)
    ("j <= i + lens[b] // (H // Hkv)", "\n    lens: i32[B]", ["H // Hkv"]),
])
def test_which_divisions_are_the_items(mask, caps, want):
    assert divisions(program(mask, caps)) == want


def test_the_masks_only_each_once():
    """The mask's functions (the mask, its tile predicates, its key bounds) count each division
    once; a score's are left to NVVM (its table fill is unconditional, hoisted already)."""
    text = program("kept[b, h // (H // Hkv), j]", "\n    kept: bool[B, Hkv, N]; kb: f32[B, Hkv, N]",
                   score="s + kb[b, h // (H // Hkv), j]")
    assert divisions(text) == ["h // (H // Hkv)"]
    assert divisions(program("j <= i", "\n    kb: f32[B, Hkv, N]", score="s + kb[b, h // (H // Hkv), j]")) == []


def test_item_warm_evaluates_them_in_both_widths():
    """The Variant's item_warm holds each division as the mask's functions spell it (32 bits, in
    the form NVVM may hoist: divisor.cuh floordiv_invariant) and as the key bounds' do (64 bits,
    signed, cexpr.WideEmitter); a kernel without one has an empty body."""
    from kdsl.codegen.emit import generate
    src = generate(lowered(program("kept[b, h // (H // Hkv), j] and j <= i + (N - M)",
                                   "\n    kept: bool[B, Hkv, N]"), 128)).source
    warm = src.split("item_warm(")[1].split("}")[0]
    assert "kdsl::keep_alive(kdsl::floordiv_invariant(h, kdsl::floordiv_invariant(a.H, a.Hkv)));" in warm
    assert "kdsl::keep_alive(kdsl::floordiv(((kdsl::i64)h)" in warm
    plain = generate(lowered(program("j <= i"), 128)).source
    assert "keep_alive" not in plain.split("item_warm(")[1].split("}")[0]


def test_the_masks_divisions_of_an_item_take_the_form_nvvm_hoists():
    """group_dilation's `(i - j) % (h // (H // Hkv) + 1)`: the mask divides h by H // Hkv in the
    form that never traps (divisor.cuh floordiv_invariant), so that NVVM hoists it, and the
    divisor it prepares from the quotient, out of the kv loop. Divided signed, its forward's
    partial tiles divided and prepared again on every group of eight keys (14 calls of the 64-bit
    division routine at D=128); hoisted, it ran x1.80 (D=128) and x1.95 (D=64) though ptxas then
    spilled 40 B (H200, 2x16x4096², KDSL_INVARIANT_DIVISION=0 against 1). A division reading a
    position stays signed; the 64-bit bounds' (cexpr.WideEmitter) stay signed."""
    from kdsl.codegen.emit import generate
    src = generate(lowered(program("j <= i and (i - j < 64 or (i - j) % (h // (H // Hkv) + 1) == 0)"), 128)).source
    mask = src.split("bool mask(")[1].split("}")[0]
    assert "kdsl::floormod_by<true, false>((q - kv), (kdsl::floordiv_invariant(h, kdsl::floordiv_invariant(a.H, a.Hkv)) + 1))" in mask
    bounds = generate(lowered(program("j <= i + (N - M) + N // (H // Hkv)"), 128)).source
    assert "kdsl::floordiv(((kdsl::i64)" in bounds and "floordiv_invariant(((kdsl::i64)" not in bounds
    per_row = generate(lowered(program("j <= i and (i - j) % (i // (h + 1) + 1) == 0"), 128)).source
    assert "floordiv_invariant" not in per_row.split("bool mask(")[1].split("}")[0]


def test_the_mma_backward_divides_each_element_plainly():
    """Prepared divisors serve the Hopper kernels only (test_divisor_header.py): the mma.sync
    backward (sm_80), whose elements' preparations no one measured merging, divides as before."""
    from kdsl.codegen.emit_backward import generate_backward
    from kdsl.grammar import parse
    from kdsl.passes import pipeline
    from kdsl.passes.target import get_target
    k = pipeline.check(parse(program("j <= i and (i - j) % (h + 2) == 0"), "t.kd"))[0]
    ampere = generate_backward(pipeline.lower(k, get_target("sm_80"), 128), get_target("sm_80")).source
    assert "floormod_by" not in ampere and "kdsl::floormod((q - kv), (h + 2))" in ampere


@pytest.mark.parametrize("mask,want", [
    ("(i - j) % (h + 2) == 0", ["h + 2"]),                 # the item's
    ("j % (i // 1024 + 1) == 0", ["q // 1024 + 1"]),       # a row's: the query position's
    ("i % (j + 1) == 0", []),                              # a key's: per element, no sharing
    ("(i + j) % (i - j + 1) == 0", []),                    # both positions
    ("i % (h + 1) == 0", ["h + 1"]),                       # the item's (the tile's corners divide by it too)
    ("i % (i // 64 + 1) == 0", []),                        # the dividend a row's too: once a row anyway
])
def test_which_divisors_are_prepared(mask, want):
    got = item_divisions.divisors(lowered(program(mask)))
    assert sorted(ir.format_expr(e) for e in got) == want


def test_the_backward_prepares_the_items_divisors_only():
    """row=None (the backward's): a position's divisor is not prepared, the item's is."""
    k = lowered(program("i % (j + 1) == 0 or j % (i + 1) == 0 or j % (h + 1) == 0"))
    assert [ir.format_expr(e) for e in item_divisions.divisors(k, row=None)] == ["h + 1"]
    assert [ir.format_expr(e) for e in item_divisions.divisors(k)] == ["q + 1", "h + 1"]
