"""What an integer expression's form proves about its sign, for the passes and code generation.

Two facts from the runtime make a form enough: a call where an integer value of the positions,
the batch and head indices and the sizes would leave i32 is refused (runtime/bounds.py
check_integer_ranges), so a sum or product of non-negative leaves does not wrap; and so is one
where a divisor of the batch and head indices and the sizes alone is 0 at some (b, h) that
divides by it (check_divisors). A value read from a captured tensor has neither guarantee: the
data's range is the caller's.
"""
from __future__ import annotations

from .. import ir

# i32 variables: the query and key positions (and a tile's ends) ...
POSITIONS = frozenset({"q", "kv", "q0", "q1", "k0", "k1", "kvt"})
# ... never negative, nor are the batch and head indices
NONNEGATIVE_VARS = POSITIONS | {"b", "h"}


def nonnegative(e: ir.Expr, sizes: frozenset[str] = frozenset()) -> bool:
    """Whether the i32 e is >= 0 whatever it reads, from its form: a sum or product of positions,
    sizes (dims named in `sizes`) and constants >= 0, a max with one, a floor quotient or
    remainder of two. Not abs (abs(-2^31) wraps)."""
    if isinstance(e, ir.Const):
        return e.ty == "i32" and e.value >= 0
    if isinstance(e, ir.Var):
        return e.name in NONNEGATIVE_VARS or e.name in sizes
    if not isinstance(e, ir.Op) or e.ty != "i32":
        return False
    if e.op == "max":
        return any(nonnegative(x, sizes) for x in e.args)
    if e.op in ("add", "mul", "min", "floordiv", "mod"):
        return all(nonnegative(x, sizes) for x in e.args)
    if e.op == "where":
        return nonnegative(e.args[1], sizes) and nonnegative(e.args[2], sizes)
    return False


def item_level(e: ir.Expr, position: str | None = None) -> bool:
    """Whether e reads the batch and head indices and the sizes at most: no position, no
    captured data, no tile summary, no score (a float; every other integer variable is a size).
    position ("q" or "kv"): that position too (a row's value: the same for a row's elements)."""
    return not any(isinstance(n, ir.Load) or (isinstance(n, ir.Op) and n.op in ir.TILE_REDUCTIONS)
                   or (isinstance(n, ir.Var) and ((n.name in POSITIONS and n.name != position) or n.ty != "i32"))
                   for n in ir.walk_distinct(e))


def positive_divisor(e: ir.Expr) -> bool:
    """Whether the divisor e of a launched kernel's `//` or `%` is >= 1 wherever it divides: a
    positive constant, a max with one, a min of two, whatever they read (`max(blk[b], 1)`); or
    a divisor of the batch and head indices and the sizes alone, non-negative by its form (`8 *
    H`, `16 * (h + 1)`, `H // Hkv`): the runtime refuses a call where it would be 0 or wrap, so
    it is >= 1 in every kernel that runs. Not a position's (`j // (i + W)` may divide by 0 under
    a `where` that the runtime takes to guard it)."""
    if isinstance(e, ir.Const):
        return e.ty == "i32" and e.value > 0
    if isinstance(e, ir.Op) and e.op == "max" and any(positive_divisor(x) for x in e.args):
        return True
    if isinstance(e, ir.Op) and e.op == "min" and all(positive_divisor(x) for x in e.args):
        return True
    return item_nonnegative(e)


def item_nonnegative(e: ir.Expr) -> bool:
    """Whether e reads the batch and head indices and the sizes alone and is >= 0 by its form
    (`N`, `32 * (h % 4 + 1)`): a factor that keeps the order of what it multiplies."""
    return e.ty == "i32" and item_level(e) and nonnegative_form(e)


def nonnegative_form(e: ir.Expr) -> bool:
    """Whether e is >= 0 by its form, every i32 variable but a position being a size or b, h."""
    sizes = frozenset(n.name for n in ir.walk_distinct(e) if isinstance(n, ir.Var) and n.ty == "i32")
    return nonnegative(e, sizes)
