"""Lark parse tree -> kdsl.ast, and the one place where Lark's exceptions become SourceErrors."""
from __future__ import annotations

import functools
from pathlib import Path

import lark

from .. import ast
from ..errors import SourceError, Span

_GRAMMAR = Path(__file__).with_name("kdsl.lark")

# Friendly names for the tokens Lark reports as expected.
_TOKEN_NAMES = {
    "NAME": "a name", "INT": "an integer", "FLOAT": "a number", "KIND": "'attention' or 'gemm'",
    "LBRACE": "'{'", "RBRACE": "'}'", "LPAR": "'('", "RPAR": "')'", "LSQB": "'['", "RSQB": "']'",
    "COMMA": "','", "COLON": "':'", "EQUAL": "'='", "SEMICOLON": "';'", "CMP": "a comparison",
    "PLUS": "'+'", "MINUS": "'-'", "STAR": "'*'", "SLASH": "'/'", "PERCENT": "'%'",
}


@functools.cache
def _lark() -> lark.Lark:
    return lark.Lark(_GRAMMAR.read_text(), parser="lalr", propagate_positions=True, maybe_placeholders=True)


def parse(text: str, file: str = "<string>") -> ast.Program:
    """Parse kdsl source into an AST; every syntax problem becomes a located SourceError."""
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        raise SourceError("file contains a NUL byte: not a kdsl source file", Span(file, line, 1, line, 1, text))
    try:
        tree = _lark().parse(text)
    except lark.exceptions.UnexpectedCharacters as e:
        span = Span(file, e.line, e.column, e.line, e.column, text)
        raise SourceError(f"unexpected character {text[e.pos_in_stream]!r}", span) from None
    except lark.exceptions.UnexpectedToken as e:
        tok = e.token
        if tok.type == "$END":
            line = max(1, text.rstrip().count("\n") + 1)
            col = len(text.rstrip().splitlines()[-1]) if text.strip() else 1
            span = Span(file, line, max(col, 1), line, max(col, 1), text)
            raise SourceError(f"unexpected end of file; expected {_expected(e.expected)}", span) from None
        span = Span(file, tok.line, tok.column, tok.end_line, tok.end_column - 1, text)
        raise SourceError(f"unexpected {str(tok)!r}; expected {_expected(e.expected)}", span) from None
    except lark.exceptions.UnexpectedEOF:  # pragma: no cover - LALR reports $END as UnexpectedToken
        raise SourceError("unexpected end of file", Span(file, 1, 1, 1, 1, text)) from None
    program = _Builder(file, text).transform(tree)
    if not program.kernels:
        raise SourceError("no kernels in file: expected 'attention NAME { ... }' or 'gemm NAME { ... }'",
                          Span(file, 1, 1, 1, 1, text))
    return program


def _expected(names) -> str:
    shown = sorted({_TOKEN_NAMES.get(n, repr(n.lower()) if n.isalpha() else n) for n in names})
    return ", ".join(shown[:6]) + (", ..." if len(shown) > 6 else "")


class _Builder(lark.Transformer):
    """Builds frozen AST nodes; spans come from Lark's propagated positions."""

    def __init__(self, file: str, text: str):
        super().__init__()
        self.file, self.text = file, text

    def _span(self, meta) -> Span:
        return Span(self.file, meta.line, meta.column, meta.end_line, meta.end_column - 1, self.text)

    def _tok(self, tok) -> Span:
        return Span(self.file, tok.line, tok.column, tok.end_line, tok.end_column - 1, self.text)

    def start(self, kernels):
        return ast.Program(self.file, self.text, tuple(kernels))

    @lark.v_args(meta=True)
    def kernel(self, meta, items):
        kind, name, *body = items
        return ast.Kernel(self._span(meta), str(kind), str(name), self._tok(name), tuple(body))

    @lark.v_args(meta=True)
    def decl(self, meta, items):
        name, dtype, *rest = items
        block = rest.pop() if rest and isinstance(rest[-1], tuple) else None
        dims = tuple(d for d in rest if d is not None)
        return ast.Decl(self._span(meta), str(name), self._tok(name), str(dtype), self._tok(dtype), dims, block)

    def block(self, items):
        return (items[0], items[1])

    @lark.v_args(meta=True)
    def binding(self, meta, items):
        name, value = items
        return ast.Binding(self._span(meta), str(name), self._tok(name), value)

    @lark.v_args(meta=True)
    def funcdef(self, meta, items):
        name, *params, body = items
        ps = tuple((str(p), self._tok(p)) for p in params if p is not None)
        return ast.FuncDef(self._span(meta), str(name), self._tok(name), ps, body)

    # --- expressions -------------------------------------------------------------
    @lark.v_args(meta=True)
    def int_lit(self, meta, items):
        return ast.Num(self._span(meta), int(items[0]), False)

    @lark.v_args(meta=True)
    def float_lit(self, meta, items):
        return ast.Num(self._span(meta), float(items[0]), True)

    @lark.v_args(meta=True)
    def inf_lit(self, meta, items):
        return ast.Num(self._span(meta), float("inf"), True)

    @lark.v_args(meta=True)
    def true_lit(self, meta, items):
        return ast.Bool(self._span(meta), True)

    @lark.v_args(meta=True)
    def false_lit(self, meta, items):
        return ast.Bool(self._span(meta), False)

    @lark.v_args(meta=True)
    def name(self, meta, items):
        return ast.Name(self._span(meta), str(items[0]))

    @lark.v_args(meta=True)
    def call(self, meta, items):
        func, *args = items
        return ast.Call(self._span(meta), str(func), self._tok(func), tuple(a for a in args if a is not None))

    @lark.v_args(meta=True)
    def index(self, meta, items):
        tensor, *idx = items
        return ast.Index(self._span(meta), str(tensor), self._tok(tensor), tuple(idx))

    @lark.v_args(meta=True)
    def neg(self, meta, items):
        return ast.Unary(self._span(meta), "neg", items[0])

    @lark.v_args(meta=True)
    def not_(self, meta, items):
        return ast.Unary(self._span(meta), "not", items[0])

    @lark.v_args(meta=True)
    def cmp(self, meta, items):
        lhs, op, rhs = items
        ops = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}
        return ast.Binary(self._span(meta), ops[str(op)], lhs, rhs)


def _binary(op):
    @lark.v_args(meta=True)
    def build(self, meta, items):
        return ast.Binary(self._span(meta), op, items[0], items[1])
    return build


for _op in ("add", "sub", "mul", "div", "floordiv", "mod"):
    setattr(_Builder, _op, _binary(_op))
_Builder.or_ = _binary("or")
_Builder.and_ = _binary("and")
