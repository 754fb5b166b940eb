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


def _trees(depth: int):
    """Random f32 trees of where / + / - / * over x, a, b and constants, conditions c and d:
    arms that share operands at any depth, as a score's nested selects do."""
    leaf = st.sampled_from([X, A, B, ir.Const("f32", 2.0), ir.Const("f32", -0.0), ir.Const("f32", 0.0),
                            ir.Const("f32", 1.0)])
    if depth == 0:
        return leaf
    sub = _trees(depth - 1)
    cond = st.sampled_from([C, ir.Var("bool", "d")])
    ops = st.sampled_from(["add", "sub", "mul"])

    def shared(n, c, t, u, v, form):
        """A select whose arms share t: one of the forms _where_of_arms takes apart."""
        return [f("where", c, f(n, t, u), t), f("where", c, t, f(n, t, v)), f("where", c, f(n, u, t), t),
                f("where", c, f(n, t, u), f(n, t, v)), f("where", c, f(n, u, t), f(n, v, t))][form]
    return st.one_of(leaf,
                     st.builds(lambda n, p, q: f(n, p, q), ops, sub, sub),
                     st.builds(lambda c, p, q: f("where", c, p, q), cond, sub, sub),
                     st.builds(shared, ops, cond, sub, sub, sub, st.integers(0, 4)))


@settings(max_examples=300, deadline=None)
@given(expr=_trees(4), x=VALUES, a=VALUES, b=VALUES, c=st.booleans(), d=st.booleans())
def test_simplified_trees_have_the_same_bits(expr, x, a, b, c, d):
    """Every rule of simplify.py at once, on nested trees: the same value as the tree as written,
    a zero's sign aside (x + 0.0 folds to x, which is -0.0 where x is: no score, index or mask
    can tell, since exp(-0.0) is exp(0.0))."""
    env = {"x": np.float32(x), "a": np.float32(a), "b": np.float32(b), "c": np.bool_(c), "d": np.bool_(d)}
    with np.errstate(all="ignore"):
        want = np.float32(eval_numpy(expr, env, {}, np.float32))
        got = np.float32(eval_numpy(simplify(expr), env, {}, np.float32))
    assert want == got or (np.isnan(want) and np.isnan(got)), \
        (ir.print_expr(expr), ir.print_expr(simplify(expr)), want, got)


@pytest.mark.parametrize("name, value", [("eq", True), ("le", True), ("ge", True), ("ne", False), ("lt", False),
                                         ("gt", False)])
def test_an_integer_compared_with_itself_folds(name, value):
    """An interval exact over a block has equal bounds (`h % 4 <= h % 4`); the fold is the value
    at every integer, wrap included. Not for floats: NaN == NaN is false."""
    x = ir.Op("i32", "mod", (ir.Var("i32", "h"), ir.Const("i32", 4)))
    assert simplify(ir.Op("bool", name, (x, x))) == ir.Const("bool", value)
    hs = np.array([0, 1, 7, 2**31 - 1, -2**31], np.int64)
    assert np.all(eval_numpy(ir.Op("bool", name, (x, x)), {"h": hs}, {}) == value)
    s = ir.Var("f32", "s")
    assert isinstance(simplify(ir.Op("bool", name, (s, s))), ir.Op)
