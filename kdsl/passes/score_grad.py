"""The score's derivatives, for the backward pass (kdsl/attention_bwd.cuh).

The forward's softmax reads g(s), the program's score of s = scale * q.k. Its gradient in s is
dL/ds = P * (dP - rowsum(dO * O)) * g'(s); this pass writes g'(s) as an IR expression by the
chain rule, over the same variables and captured tensors as g. Integer and boolean parts
(positions, masks, int()) do not depend on s: their derivative is 0, which makes where() and
min/max pick the derivative of the branch they pick; int(x) is differentiated as its flat
pieces, as torch does.

The same rules give the score's derivative in each value it loads from a captured float
tensor (capture_grads): a learned bias table's gradient is the sum, over the (q, kv) elements
that read an entry, of dL/dg = P (dP - delta) times that derivative.
"""
from __future__ import annotations

import math

from .. import ir
from .invariant_factors import invariant
from .simplify import const, op

ZERO, ONE = ir.Const("f32", 0.0), ir.Const("f32", 1.0)


def score_grad(k: ir.Kernel) -> ir.Expr:
    """d score / d s for kernel k (1 when the program writes no score: g(s) = s)."""
    score = k.func("score")
    return ONE if score is None else derivative(score, "s")


def capture_grads(k: ir.Kernel) -> list[tuple[ir.Load, ir.Expr]]:
    """(load, d score / d load) for each distinct load of a float captured tensor in the score,
    in the order the score reads them; a load whose derivative is 0 everywhere is left out."""
    score = k.func("score")
    loads = [] if score is None else [n for n in ir.walk(score) if isinstance(n, ir.Load) and n.ty == "f32"]
    pairs = [(load, derivative(score, load)) for load in dict.fromkeys(loads)]
    return [(load, d) for load, d in pairs if d != ZERO]


def capture_grad_tensors(k: ir.Kernel) -> list[str]:
    """The captured tensors with a gradient (capture_grads' loads), in the order the score reads
    them: the backward kernel's gradient buffers, in its parameter order."""
    return list(dict.fromkeys(load.tensor for load, _ in capture_grads(k)))


def step_uniform(load: ir.Load) -> bool:
    """Whether a load reads one entry for every (q, kv) element of a (b, h): its index uses no
    position. The backward kernels sum such a load's gradient shares in registers over a step
    (fixed b and h) and add them once a warp, instead of one atomic an element into one entry."""
    return all(invariant(i) for i in load.indices)


def derivative(e: ir.Expr, var: "str | ir.Load") -> ir.Expr:
    """d e / d var for an f32 expression e and var an f32 variable (its name) or one load of a
    captured tensor (each read of the same element counts)."""
    if isinstance(e, ir.Load) and e == var:
        return ONE
    if e.ty != "f32" or isinstance(e, (ir.Const, ir.Load)):
        return ZERO
    if isinstance(e, ir.Var):
        return ONE if e.name == var else ZERO
    return _op(e, [derivative(a, var) if a.ty == "f32" else ZERO for a in e.args], var)


def _op(e: ir.Op, d: list, var: str) -> ir.Expr:
    a = e.args
    f = lambda name, *args: op("f32", name, *args)  # noqa: E731 - a short constructor, folding as it builds
    if all(x == ZERO for x in d):
        return ZERO
    if e.op in ("add", "sub"):
        return f(e.op, d[0], d[1])
    if e.op == "neg":
        return f("neg", d[0])
    if e.op == "float":  # of a float: the identity (of an int it is flat, caught above)
        return d[0]
    if e.op == "mul":
        return f("add", _times(d[0], a[1]), _times(a[0], d[1]))
    if e.op == "div":  # (a0 / a1)' = a0' / a1 - a0 a1' / a1^2
        return f("sub", f("div", d[0], a[1]), f("div", _times(a[0], d[1]), f("mul", a[1], a[1])))
    if e.op in ("min", "max"):
        first = ir.Op("bool", "le" if e.op == "min" else "ge", (a[0], a[1]))
        return f("where", first, d[0], d[1])
    if e.op == "abs":
        return f("where", ir.Op("bool", "ge", (a[0], ZERO)), d[0], f("neg", d[0]))
    if e.op == "where":
        return f("where", a[0], d[1], d[2])
    x, dx = a[0], d[0]
    rule = {
        "exp": lambda: e,
        "exp2": lambda: f("mul", e, const("f32", math.log(2.0))),
        "log": lambda: f("div", ONE, x),
        "log2": lambda: f("div", ONE, f("mul", x, const("f32", math.log(2.0)))),
        "sqrt": lambda: f("div", const("f32", 0.5), e),
        "rsqrt": lambda: f("div", f("mul", const("f32", -0.5), e), x),
        "tanh": lambda: f("sub", ONE, f("mul", e, e)),
        "sin": lambda: f("cos", x),
        "cos": lambda: f("neg", f("sin", x)),
        "tan": lambda: f("add", ONE, f("mul", e, e)),
        "sigmoid": lambda: f("mul", e, f("sub", ONE, e)),
    }.get(e.op)
    if rule is None:
        raise ValueError(f"no derivative rule for op '{e.op}'")
    return _times(rule(), dx)


def _times(x: ir.Expr, y: ir.Expr) -> ir.Expr:
    """x * y, dropping a factor of 1 (simplify folds only constants with constants)."""
    if x == ONE:
        return y
    if y == ONE:
        return x
    if ZERO in (x, y):
        return ZERO
    return op("f32", "mul", x, y)
