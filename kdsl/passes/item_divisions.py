"""Integer divisions the same for a whole work item, evaluated once at the item's start.

A grouped-query capture read at the key-value head, `kept[b, h // (H // Hkv), j]`, divides
twice by values known only at run time. Inside the Hopper kernel's kv loop the mask (or a key
part of the score) is evaluated on partial tiles only, behind a branch, and NVVM never hoists a
division out of a branch (it may not speculate one: a zero divisor is undefined behaviour), so
each partial tile divided again: about 70 instructions a tile a thread. Evaluated once before
the loop (the Variant's item_warm, attention_variant.cu.j2, called where attention_wgmma.cuh
takes an item), the same division inside the loop is redundant with it and NVVM's value
numbering reuses it: the tile's general path of `kept[b, h // (H // Hkv), j] and j <= i + (N -
M)` fell from 1006 to 944 SASS instructions at D=128 (`kept[b, h, j]`'s: 934; sm_90a), and the
kernel ran x1.075 (x1.054 at D=64; H200, 2x16x4096², KDSL_ITEM_WARM=0 against 1). Value
numbering needs the two spelled alike, which NVVM's rewriting of a signed division's zero guard
did not always leave them: the code generator now spells an item's division in a form that never
traps (cexpr.py, divisor.cuh floordiv_invariant), which NVVM hoists out of the loop by itself.

divisions() lists them: the largest integer divisions and remainders (//, %) of the Variant's
expressions whose operands read only the batch and head indices and the dims (no position, no
captured data: a load's value may change under the loop's stores), by a divisor that is not a
constant (a constant divisor is a shift or a multiplication already). Not one that a `where`
chooses (`where(h > 0, N // h, 0)`): evaluated unguarded, its divisor may be zero, and NVVM
may take a division it sees as proof that the divisor is not. The mask's only (MASK_FUNCS): a
score's key or offset part fills its table on every tile, unconditionally, and NVVM hoisted its
division already; warmed as well, `kn[b, h // (H // Hkv), j]` in a score ran x0.982 / x0.993 (D=64 /
128) against x1.075 / x1.054 (D=128 / 64) for a bitmap read so in a mask and x1.13 for the
bitmap alone (H200, 2x16x4096², KDSL_ITEM_WARM=0 against 1).
"""
from __future__ import annotations

from .. import ir
from .int_signs import item_level

MAX_DIVISIONS = 4  # each is a register live into the kv loop
MASK_FUNCS = ("mask", "tile_empty", "tile_full", "kv_lo", "kv_hi", "tile_keys")


def divides_by_value(e: ir.Expr) -> bool:
    """Whether e is an integer // or % by a divisor that is not a constant: per element some
    twenty instructions and their registers (a constant divisor is a shift or a multiplication)."""
    return isinstance(e, ir.Op) and e.op in ("floordiv", "mod") and e.ty == "i32" and not isinstance(e.args[1], ir.Const)


def divisions(k: ir.Kernel) -> tuple[ir.Expr, ...]:
    """The mask's item-invariant integer divisions by a non-constant divisor, largest first
    found, each once (at most MAX_DIVISIONS)."""
    found: list[ir.Expr] = []
    chosen: set[ir.Expr] = set()  # divisions a `where` evaluates on one of its branches only

    def visit(e: ir.Expr, guarded: bool) -> None:
        if divides_by_value(e) and item_level(e):
            if guarded:
                chosen.add(e)
            elif e not in found:
                found.append(e)
        kids = getattr(e, "args", ()) or getattr(e, "indices", ())
        for i, c in enumerate(kids):
            visit(c, guarded or (isinstance(e, ir.Op) and e.op == "where" and i > 0))

    for name, e in k.funcs:
        if name in MASK_FUNCS:
            visit(e, False)
    kept = [e for e in found if e not in chosen]
    return tuple([e for e in kept if not any(_inside(e, x) for x in kept if x is not e)][:MAX_DIVISIONS])


MAX_DIVISORS = 2  # each is a multiplier, two shifts and the sign's registers live into the kv loop


def divisors(k: ir.Kernel, row: str | None = "q") -> tuple[ir.Expr, ...]:
    """The divisors to prepare (kdsl/divisor.cuh): those of the Variant's integer // and %
    whose dividend varies over the item (`(i - j) % (h + 2)`, `j // W`) but whose divisor reads
    only the batch and head indices and the dims, and is not a constant. Each division is some
    25 instructions an element (ptxas recomputes the divisor's reciprocal for every one);
    prepared in item_warm, where it dominates every use, NVVM's value numbering reuses the
    multiplier and shifts and an element takes some 11. The Hopper backward has no item_warm
    and needs none: its elements' preparations merge within a step (backward alone, H200:
    x1.08-1.39 on seven kernels, and a step's item_warm changed nothing there).

    With `row` ("q"), also those whose divisor reads that position too while the dividend
    reads the other (`j % (i // 1024 + 1)`): the forward's thread holds two rows of a tile, and
    NVVM shares a row's preparation among its elements (item_warm, which has no row, leaves it
    out): growing_stride's forward ran x2.39 (H200, 2x16x4096²). Not the backward's (row None):
    its rows are keys, and preparing a key's divisor there ran x0.74 (key_rows), the query's
    x0.86 (growing_stride): its elements' preparations did not merge. At most MAX_DIVISORS, in
    the order found."""
    found: list[ir.Expr] = []
    for name, e in k.funcs:
        if name == "scale":
            continue
        for n in ir.walk(e):
            if not divides_by_value(n) or n.args[1] in found:
                continue
            if (item_level(n.args[1]) and not item_level(n.args[0])) \
                    or (row is not None and item_level(n.args[1], row) and not item_level(n.args[0], row)):
                found.append(n.args[1])
    return tuple(found[:MAX_DIVISORS])


def _inside(e: ir.Expr, outer: ir.Expr) -> bool:
    """e is a proper subexpression of outer (warming outer computes e too)."""
    return any(n == e for n in ir.walk(outer) if n is not outer)
