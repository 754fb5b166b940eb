"""passes/simplify.py: a select between two arms that share an operand moves onto the part
that differs (where(c, x + a, x) is x + where(c, a, -0.0)), exactly: the same bits for every
x, a, b and c, signed zeros, infinities and NaN included."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kdsl import ir
from kdsl.passes.simplify import simplify
from kdsl.semantics import eval_numpy

X, A, B = (ir.Var("f32", n) for n in ("x", "a", "b"))
C = ir.Var("bool", "c")


def f(name, *args):
    return ir.Op("f32", name, args)


# (what the user wrote, the operator it should end on)
ARMS = [
    (f("where", C, f("add", X, A), X), "add"),
    (f("where", C, f("add", A, X), X), "add"),
    (f("where", C, X, f("add", X, B)), "add"),
    (f("where", C, f("sub", X, A), X), "sub"),
    (f("where", C, X, f("sub", X, B)), "sub"),
    (f("where", C, f("mul", A, X), X), "mul"),
    (f("where", C, f("add", X, A), f("add", B, X)), "add"),
    (f("where", C, f("mul", X, A), f("mul", X, B)), "mul"),
    (f("where", C, f("sub", X, A), f("sub", X, B)), "sub"),
]
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e38, -3.5, 2.0 ** -149]
VALUES = st.one_of(st.sampled_from(SPECIAL), st.floats(width=32, allow_nan=False))


@pytest.mark.parametrize("expr,outer", ARMS)
def test_the_select_moves_onto_the_part_that_differs(expr, outer):
    got = simplify(expr)
    assert isinstance(got, ir.Op) and got.op == outer and X in got.args
    assert sum(isinstance(n, ir.Op) and n.op == outer for n in ir.walk(got)) == 1


@pytest.mark.parametrize("expr,outer", ARMS)
@settings(max_examples=150, deadline=None)
@given(x=VALUES, a=VALUES, b=VALUES, c=st.booleans())
def test_the_moved_select_has_the_same_bits(expr, outer, x, a, b, c):
    env = {"x": np.float32(x), "a": np.float32(a), "b": np.float32(b), "c": np.bool_(c)}
    want = np.float32(eval_numpy(expr, env, {}, np.float32))
    got = np.float32(eval_numpy(simplify(expr), env, {}, np.float32))
    assert want.tobytes() == got.tobytes() or (np.isnan(want) and np.isnan(got)), (want, got)


@pytest.mark.parametrize("expr", [
    f("where", C, f("add", X, A), B),             # nothing shared
    f("where", C, f("sub", A, X), X),             # a - x is not x - something
    f("where", C, f("add", X, A), f("mul", X, B)),  # two different operators
])
def test_arms_without_a_shared_operand_stay(expr):
    assert simplify(expr) == expr
