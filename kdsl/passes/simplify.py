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
    return e
