"""Hypothesis strategies for random, well-typed kdsl score and mask expressions (surface
syntax), bounded so scores stay finite: used by CPU pass tests and GPU kernel tests."""
import functools

from hypothesis import strategies as st

INT_LEAVES = ["i", "j", "b", "h", "(i - j)", "(j - i)", "N", "M"]
SMALL = st.integers(min_value=1, max_value=9)
# Divisors: mostly constants, else values of the batch and head indices and the sizes that are
# at least 1 for any shape (every call divides by them; passes/int_signs.py proves the ones
# positive by their form, not `H - h`)
ITEM_DIVISORS = ["(h + 1)", "(2 * H)", "H", "(b + 2)", "(3 * h + b + 1)", "(N // 64 + 1)", "max(h, 1)", "(H - h)"]
# ... and values of a position that are at least 1 (prepared per row, or divided unsigned: passes/item_divisions.py,
# codegen/cexpr.py)
POSITION_DIVISORS = ["(i // 64 + 1)", "(j % 7 + 1)", "max(i - j, 1)"]
DIVISOR = st.one_of(SMALL.map(str), SMALL.map(str), st.sampled_from(ITEM_DIVISORS), st.sampled_from(POSITION_DIVISORS))


# Each form is drawn first and only the operands it uses after it, which keeps drawing
# cheap (tests/fuzzgen.py draws thousands of these).
_INT_FORMS = ["({a} + {b})", "({a} - {b})", "({a} * {c})", "({a} // {d})", "({a} % {d})", "abs({a})",
              "min({a}, {b})", "max({a}, {b})", "where({a} < {b}, {a}, {b})"]
_FLOAT_FORMS = ["({a} + {b})", "({a} - {b})", "({a} * 0.5)", "tanh({a})", "sin({a})", "cos({a})",
                "sigmoid({a})", "abs({a})", "min({a}, {b})", "max({a}, {b})", "({a} / 3)",
                "where({cond}, {a}, {b})", "-{a}"]


@functools.cache
def _sub(kind: str, depth: int):
    """One strategy object per kind and depth: building a fresh one per draw costs more than
    the draw (Hypothesis validates each new strategy)."""
    return {"int": int_expr, "bool": bool_expr, "float": float_expr}[kind](depth=depth)


def _fill(draw, form, operand, **extra):
    a = draw(operand)
    b = draw(operand) if "{b}" in form else ""
    return form.format(a=a, b=b, **{k: draw(v) for k, v in extra.items() if "{" + k + "}" in form})


@st.composite
def int_expr(draw, depth=2):
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(INT_LEAVES + [str(draw(SMALL))]))
    return _fill(draw, draw(st.sampled_from(_INT_FORMS)), _sub("int", depth - 1), c=SMALL, d=DIVISOR)


@st.composite
def bool_expr(draw, depth=2):
    if depth == 0 or draw(st.booleans()):
        a, b = draw(_sub("int", 2)), draw(_sub("int", 2))
        return f"({a} {draw(st.sampled_from(['<', '<=', '>', '>=', '==', '!=']))} {b})"
    form = draw(st.sampled_from(["({a} and {b})", "({a} or {b})", "(not {a})"]))
    return _fill(draw, form, _sub("bool", depth - 1))


@st.composite
def float_expr(draw, depth=2):
    """Bounded float expressions: |value| stays within a few tens for |s| of a few."""
    if depth == 0 or draw(st.booleans()):
        return _float_leaf(draw)
    return _fill(draw, draw(st.sampled_from(_FLOAT_FORMS)), _sub("float", depth - 1), cond=_sub("bool", 1))


def _float_leaf(draw):
    leaf = draw(st.sampled_from(["s", "s", "float", "half"]))
    if leaf == "float":
        return f"float({draw(_sub('int', 1))}) / 64"
    if leaf == "half":
        return f"{draw(st.integers(-4, 4))}.5"
    return leaf


def program(score: str | None, mask: str | None, name: str = "gen", decls: tuple[str, ...] = ()) -> str:
    """An attention program over bf16 q, k, v (GQA-shaped), with more declarations (captured
    tensors, an lse output) after them."""
    lines = [f"attention {name} {{", "    q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]",
             *(f"    {d}" for d in decls)]
    if score:
        lines.append(f"    score(s, b, h, i, j) = {score}")
    if mask:
        lines.append(f"    mask(b, h, i, j) = {mask}")
    return "\n".join(lines + ["}"]) + "\n"
