"""Constant folding and boolean identities, so derived expressions stay small."""
from __future__ import annotations

from dataclasses import replace

from .. import ir
from ..semantics import FoldError, fold

TRUE, FALSE = ir.Const("bool", True), ir.Const("bool", False)


def const(ty: str, v) -> ir.Const:
    return ir.Const(ty, float(v) if ty == "f32" else (bool(v) if ty == "bool" else int(v)))


def op(ty: str, name: str, *args: ir.Expr) -> ir.Expr:
    """Build an op, folding it when that is exact. Only the new node is simplified, so
    building bottom-up costs O(1) per node: passes build their expressions from parts
    they built the same way (or call simplify() on the result)."""
    return _simplify_node(ir.Op(ty, name, tuple(args)))


def simplify(e: ir.Expr) -> ir.Expr:
    if isinstance(e, ir.Load):
        return replace(e, indices=tuple(simplify(i) for i in e.indices))
    if not isinstance(e, ir.Op):
        return e
    return _simplify_node(replace(e, args=tuple(simplify(a) for a in e.args)))


def _simplify_node(e: ir.Op) -> ir.Expr:
    """Fold or simplify one op whose operands are already simplified."""
    args = e.args
    if all(isinstance(a, ir.Const) for a in args):
        try:
            return ir.Const(e.ty, fold(e.op, e.ty, [a.value for a in args]))
        except FoldError:  # no value at compile time (i32 overflow, ...): the kernel computes it
            return e
    consts = [a.value if isinstance(a, ir.Const) else None for a in args]
    if e.op == "and":
        if FALSE in args:
            return FALSE
        rest = [a for a in args if a != TRUE]
        return rest[0] if len(rest) == 1 else (TRUE if not rest else e)
    if e.op == "or":
        if TRUE in args:
            return TRUE
        rest = [a for a in args if a != FALSE]
        return rest[0] if len(rest) == 1 else (FALSE if not rest else e)
    if e.op in ("not", "neg") and isinstance(args[0], ir.Op) and args[0].op == e.op:
        return args[0].args[0]  # -(-x) is x exactly: f32 negation flips the sign bit, i32's wraps back
    if e.op == "where" and isinstance(args[0], ir.Const):
        return args[1] if args[0].value else args[2]
    if e.op == "where" and args[1] == args[2]:
        return args[1]
    if e.op == "where":
        shared = _where_of_arms(e)
        if shared is not None:
            return shared
    if e.op in ("add", "sub") and consts[1] == 0:
        return args[0]
    if e.op == "add" and consts[0] == 0:
        return args[1]
    if e.op == "mul" and e.ty == "i32" and 0 in consts:
        return const("i32", 0)
    if e.op == "mul" and consts[1] == 1:
        return args[0]
    if e.op == "mul" and consts[0] == 1:
        return args[1]
    if e.op in ("min", "max") and args[0] == args[1]:
        return args[0]
    if e.op in _REFLEXIVE and args[0] == args[1] and args[0].ty == "i32":  # (a float may be NaN)
        return const("bool", _REFLEXIVE[e.op])
    return e


# x cmp x for an integer x (interval bounds of a value exact over a block: `x <= x`)
_REFLEXIVE = {"eq": True, "le": True, "ge": True, "ne": False, "lt": False, "gt": False}


# The operand that leaves x unchanged, exactly (x + -0.0 is x for every x, -0.0 included).
_IDENTITY = {("add", "f32"): -0.0, ("sub", "f32"): 0.0, ("mul", "f32"): 1.0,
             ("add", "i32"): 0, ("sub", "i32"): 0, ("mul", "i32"): 1}


def _where_of_arms(e: ir.Op) -> ir.Expr | None:
    """where(c, x + a, x) as x + where(c, a, -0.0), and likewise for -, * and two arms
    x op a, x op b: the same value in either branch, so exact, and the select moves onto the
    part that differs. That part may then be one the kernel evaluates once per key or offset
    (`where(special[b, j], s + 2.0, s)`: passes/key_table.py) rather than per element."""
    c, p, n = e.args
    for name in ("add", "sub", "mul"):
        ident = _IDENTITY.get((name, e.ty))
        if ident is None:
            continue
        for x, a in _split(p, name):
            for y, b in _split(n, name):
                if x == y:
                    return op(e.ty, name, x, op(e.ty, "where", c, a, b))
            if n == x:
                return op(e.ty, name, x, op(e.ty, "where", c, a, const(e.ty, ident)))
        for y, b in _split(n, name):
            if p == y:
                return op(e.ty, name, y, op(e.ty, "where", c, const(e.ty, ident), b))
    return None


def _split(e: ir.Expr, name: str) -> list[tuple[ir.Expr, ir.Expr]]:
    """(x, a) with e == x op a: the left operand first, and the right one too where op commutes."""
    if not (isinstance(e, ir.Op) and e.op == name):
        return []
    x, a = e.args
    return [(x, a), (a, x)] if name in ("add", "mul") else [(x, a)]
