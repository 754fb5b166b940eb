"""Lark parse tree -> kdsl.ast, and the one place where Lark's exceptions become SourceErrors."""
from __future__ import annotations

import functools
import io
import sys
from pathlib import Path

import lark

from .. import ast
from ..cachefiles import atomic_write, kept_dirs, make_key
from ..errors import SourceError, Span
from . import hints

_GRAMMAR = Path(__file__).with_name("kdsl.lark")

# Language limits (docs/language.md, "Names and limits"). They keep every later pass, which
# recurses over expressions, far from Python's recursion limit, and generated file names short.
MAX_DEPTH = 64                 # operators and calls nested inside one another
MAX_NAME = 128                 # characters in a name
MAX_INT_LITERAL = 2**63 - 1    # largest integer literal
RESERVED_NAMES = {"nan"}       # how the IR text writes a NaN constant
_EXPR_RULES = {"or_", "and_", "not_", "cmp", "add", "sub", "mul", "div", "floordiv", "mod", "neg", "int_lit",
               "float_lit", "inf_lit", "true_lit", "false_lit", "name", "call", "index"}

# Friendly names for the tokens Lark reports as expected.
_TOKEN_NAMES = {
    "NAME": "a name", "INT": "an integer", "FLOAT": "a number", "KIND": "'attention' or 'gemm'",
    "LBRACE": "'{'", "RBRACE": "'}'", "LPAR": "'('", "RPAR": "')'", "LSQB": "'['", "RSQB": "']'",
    "COMMA": "','", "COLON": "':'", "EQUAL": "'='", "SEMICOLON": "';'", "CMP": "a comparison",
    "PLUS": "'+'", "MINUS": "'-'", "STAR": "'*'", "SLASH": "'/'", "PERCENT": "'%'",
}


_OPTIONS = {"parser": "lalr", "propagate_positions": True, "maybe_placeholders": True}


@functools.cache
def _lark() -> lark.Lark:
    """The parser. Building Lark's LALR tables takes ~0.05 s, a tenth of a kernel's cold
    build, so they are kept as a file, as Python keeps bytecode: named by a hash of the
    grammar, the options and Lark's and Python's versions (any change makes a new file). A
    missing, unreadable or corrupt file, or nowhere to write one, costs the rebuild only."""
    grammar = _GRAMMAR.read_text()
    name = f"kdsl-grammar-{make_key(grammar, repr(_OPTIONS), lark.__version__, sys.version)}.lark"
    for d in _table_dirs():
        try:
            with open(d / name, "rb") as f:
                return lark.Lark.load(f)
        except Exception:  # noqa: BLE001 - missing, torn or foreign: build the tables instead
            continue
    parser = build_tables()
    tables = io.BytesIO()
    parser.save(tables)
    for d in _table_dirs():
        try:
            d.mkdir(parents=True, exist_ok=True)
            atomic_write(d / name, tables.getvalue())
            break
        except OSError:
            continue
    return parser


def build_tables() -> lark.Lark:
    """The parser with its tables built from the grammar (what a first run pays once)."""
    return lark.Lark(_GRAMMAR.read_text(), **_OPTIONS)


def _table_dirs() -> list[Path]:
    return kept_dirs(_GRAMMAR.parent)


def parse(text: str, file: str = "<string>") -> ast.Program:
    """Parse kdsl source into an AST; every syntax problem becomes a located SourceError."""
    # Lines as editors count them: '\r\n' and a lone '\r' end a line, and Lark counts '\n'
    # only. A leading byte-order mark is not part of the program.
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        raise SourceError("file contains a NUL byte: not a kdsl source file", Span(file, line, 1, line, 1, text))
    try:
        tree = _lark().parse(text)
    except lark.exceptions.UnexpectedCharacters as e:
        span = Span(file, e.line, e.column, e.line, e.column, text)
        message = f"unexpected character {text[e.pos_in_stream]!r}"
        raise SourceError(hints.with_hint(message, hints.character_hint(text, e.pos_in_stream)), span) from None
    except lark.exceptions.UnexpectedToken as e:
        tok = e.token
        if tok.type == "$END":
            body = text.rstrip()
            line = body.count("\n") + 1
            col = len(body.split("\n")[-1])
            span = Span(file, line, max(col, 1), line, max(col, 1), text)
            raise SourceError(f"unexpected end of file; expected {_expected(e.expected)}", span) from None
        span = Span(file, tok.line, tok.column, tok.end_line, tok.end_column - 1, text)
        message = f"unexpected {str(tok)!r}; expected {_expected(e.expected)}"
        hint = hints.token_hint(text, tok.start_pos, str(tok), tok.type)
        raise SourceError(hints.with_hint(message, hint), span) from None
    except lark.exceptions.UnexpectedEOF:  # pragma: no cover - LALR reports $END as UnexpectedToken
        raise SourceError("unexpected end of file", Span(file, 1, 1, 1, 1, text)) from None
    _check_limits(tree, file, text)
    program = _Builder(file, text).transform(tree)
    if not program.kernels:
        raise SourceError("no kernels in file: expected 'attention NAME { ... }' or 'gemm NAME { ... }'",
                          Span(file, 1, 1, 1, 1, text))
    return program


def _check_limits(tree: lark.Tree, file: str, text: str) -> None:
    """Enforce the limits on names, literals and nesting, iteratively (the tree may be deeper
    than Python's recursion allows), at the first offending token."""
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, lark.Token):
            span = Span(file, node.line, node.column, node.end_line, node.end_column - 1, text)
            if node.type == "NAME" and len(node) > MAX_NAME:
                raise SourceError(f"name is {len(node)} characters long; the limit is {MAX_NAME}", span)
            if node.type == "NAME" and node in RESERVED_NAMES:
                raise SourceError(f"'{node}' is reserved; choose another name", span)
            if node.type == "INT" and (len(node.lstrip("0")) > 19 or int(node) > MAX_INT_LITERAL):
                raise SourceError(f"integer literal too large (the limit is {MAX_INT_LITERAL}, 2**63 - 1)", span)
            continue
        if not isinstance(node, lark.Tree):
            continue  # an absent optional part
        if node.data in _EXPR_RULES:
            depth += 1
            if depth > MAX_DEPTH:
                m = node.meta
                raise SourceError(f"expression nests operators and calls more than {MAX_DEPTH} deep "
                                  "(kdsl's limit)", Span(file, m.line, m.column, m.line, m.column, text))
        stack.extend((c, depth) for c in reversed(node.children))


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
        accumulate = rest.pop() if rest and isinstance(rest[-1], Span) else None
        block = rest.pop() if rest and isinstance(rest[-1], tuple) else None
        dims = tuple(d for d in rest if d is not None)
        return ast.Decl(self._span(meta), str(name), self._tok(name), str(dtype), self._tok(dtype), dims, block,
                        accumulate)

    def block(self, items):
        return (items[0], items[1])

    @lark.v_args(meta=True)
    def accumulate(self, meta, items):
        return self._span(meta)

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
