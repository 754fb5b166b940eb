"""Typed-free syntax tree of a .kd file: frozen dataclasses, each with its source Span."""
from __future__ import annotations

from dataclasses import dataclass

from .errors import Span


@dataclass(frozen=True)
class Expr:
    span: Span


@dataclass(frozen=True)
class Num(Expr):
    value: int | float
    is_float: bool


@dataclass(frozen=True)
class Bool(Expr):
    value: bool


@dataclass(frozen=True)
class Name(Expr):
    id: str


@dataclass(frozen=True)
class Unary(Expr):
    op: str  # 'neg' | 'not'
    x: Expr


@dataclass(frozen=True)
class Binary(Expr):
    op: str  # add sub mul div floordiv mod and or lt le gt ge eq ne
    lhs: Expr
    rhs: Expr


@dataclass(frozen=True)
class Call(Expr):
    func: str
    func_span: Span
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Index(Expr):
    tensor: str
    tensor_span: Span
    indices: tuple[Expr, ...]


@dataclass(frozen=True)
class Decl:
    """`name: dtype[dims] block(r, c)? accumulate?` — an input/output tensor or a captured
    tensor; `accumulate` (its span) marks a gemm's out that the product is added into."""

    span: Span
    name: str
    name_span: Span
    dtype: str
    dtype_span: Span
    dims: tuple[Expr, ...]
    block: tuple[Expr, Expr] | None
    accumulate: Span | None = None


@dataclass(frozen=True)
class Binding:
    """`name = expr` — a compile-time constant, or `scale = expr`."""

    span: Span
    name: str
    name_span: Span
    value: Expr


@dataclass(frozen=True)
class FuncDef:
    """`score(s, b, h, q, kv) = expr` or `mask(b, h, q, kv) = expr`."""

    span: Span
    name: str
    name_span: Span
    params: tuple[tuple[str, Span], ...]
    body: Expr


Stmt = Decl | Binding | FuncDef


@dataclass(frozen=True)
class Kernel:
    span: Span
    kind: str  # 'attention' | 'gemm'
    name: str
    name_span: Span
    body: tuple[Stmt, ...]


@dataclass(frozen=True)
class Program:
    file: str
    text: str
    kernels: tuple[Kernel, ...]
