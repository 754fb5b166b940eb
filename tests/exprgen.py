"""Hypothesis strategies for random, well-typed kdsl score and mask expressions (surface
syntax), bounded so scores stay finite: used by CPU pass tests and GPU kernel tests."""
from hypothesis import strategies as st

INT_LEAVES = ["i", "j", "b", "h", "(i - j)", "(j - i)", "N", "M"]
SMALL = st.integers(min_value=1, max_value=9)


@st.composite
def int_expr(draw, depth=2):
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(INT_LEAVES + [str(draw(SMALL))]))
    a, b = draw(int_expr(depth=depth - 1)), draw(int_expr(depth=depth - 1))
    c = draw(SMALL)
    return draw(st.sampled_from([
        f"({a} + {b})", f"({a} - {b})", f"({a} * {c})", f"({a} // {c})", f"({a} % {c})", f"abs({a})",
        f"min({a}, {b})", f"max({a}, {b})", f"where({a} < {b}, {a}, {b})",
    ]))


@st.composite
def bool_expr(draw, depth=2):
    if depth == 0 or draw(st.booleans()):
        a, b = draw(int_expr()), draw(int_expr())
        return f"({a} {draw(st.sampled_from(['<', '<=', '>', '>=', '==', '!=']))} {b})"
    x, y = draw(bool_expr(depth=depth - 1)), draw(bool_expr(depth=depth - 1))
    return draw(st.sampled_from([f"({x} and {y})", f"({x} or {y})", f"(not {x})"]))


@st.composite
def float_expr(draw, depth=2):
    """Bounded float expressions: |value| stays within a few tens for |s| of a few."""
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(["s", "s", f"float({draw(int_expr(depth=1))}) / 64",
                                     f"{draw(st.integers(-4, 4))}.5"]))
    a, b = draw(float_expr(depth=depth - 1)), draw(float_expr(depth=depth - 1))
    return draw(st.sampled_from([
        f"({a} + {b})", f"({a} - {b})", f"({a} * 0.5)", f"tanh({a})", f"sin({a})", f"cos({a})",
        f"sigmoid({a})", f"abs({a})", f"min({a}, {b})", f"max({a}, {b})", f"({a} / 3)",
        f"where({draw(bool_expr(depth=1))}, {a}, {b})", f"-{a}",
    ]))


def program(score: str | None, mask: str | None, name: str = "gen") -> str:
    lines = [f"attention {name} {{", "    q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]"]
    if score:
        lines.append(f"    score(s, b, h, i, j) = {score}")
    if mask:
        lines.append(f"    mask(b, h, i, j) = {mask}")
    return "\n".join(lines + ["}"]) + "\n"
