"""Helper functions (`near(i, j) = abs(i - j) < W`), inlined by the type checker at each call.

A call types its arguments in the caller's scope, then the helper's body with each parameter
standing for its argument's typed expression, so the IR is the expression written out and no
pass after the type checker sees a helper. The limits keep what inlining writes out within
the language's own (docs/language.md, "Helper functions").
"""
from __future__ import annotations

from .. import ast, ir
from ..errors import SourceError, Span
from ..grammar.parser import MAX_DEPTH

# Operations one call of a helper may write out once inlined: a helper that calls another
# twice, which calls another twice, ... doubles at each level.
MAX_INLINED_NODES = 4096


class HelperCalls:
    """The type checker's helper calls (a mixin of typecheck._Checker, whose expr, _name,
    _call, _index, funcdefs, decls, ENTRY_POINTS and BUILTINS it uses)."""

    def start_helpers(self, kernel: ast.Kernel) -> None:
        self.expanding: list[tuple[str, Span]] = []  # helpers being inlined, innermost last, with their calls
        self.called: set[str] = set()  # helpers inlined at least once
        self.call_depth = _call_depths(kernel)  # id(ast.Call) -> its depth in its statement
        self.nesting = 0  # depth of the innermost helper call being inlined

    def inline_call(self, fd: ast.FuncDef, e: ast.Call, env) -> ir.Expr:
        """A call of a helper function: its body typed with each parameter standing for its
        argument's typed expression (an untyped literal argument stays untyped, so `band(i, j,
        96)` and `soft(s, 20)` read as they would written out). A mistake inside the body is
        reported there, naming the call that reached it."""
        if fd.name in self.ENTRY_POINTS:
            raise SourceError(f"{fd.name}() is the kernel's own function and cannot be called; move the part you "
                              f"want to share into a helper function, e.g. part(i, j) = ...", e.func_span)
        chain = [name for name, _ in self.expanding]
        if fd.name in chain:
            loop = " -> ".join(chain[chain.index(fd.name):] + [fd.name])
            raise SourceError(f"helper function '{fd.name}' calls itself ({loop}); helpers cannot recurse",
                              e.func_span)
        if len(e.args) != len(fd.params):
            n = len(fd.params)
            raise SourceError(f"{fd.name}() takes {n} argument{'s' if n != 1 else ''} "
                              f"({', '.join(p for p, _ in fd.params)}), got {len(e.args)}", e.span)
        inner = {p: self.expr(a, env) for (p, _), a in zip(fd.params, e.args)}
        # the call's depth in the written-out expression: a helper call counts as one level of
        # nesting, as a call of a built-in does, and its body's root sits one below it
        at = self.nesting + self.call_depth.get(id(e), 1)
        if at > MAX_DEPTH:
            raise SourceError(f"helper calls nest operators and calls more than {MAX_DEPTH} deep once inlined "
                              "(kdsl's limit)", e.span)
        self.called.add(fd.name)
        self.expanding.append((fd.name, e.span))
        outer, self.nesting = self.nesting, at
        try:
            body = self.expr(fd.body, inner)
        except SourceError as err:
            if err.span is None or not _within(err.span, fd.body.span):
                raise
            raise SourceError(f"{err.message} (in {fd.name}(), called at line {e.span.line} column "
                              f"{e.span.col})", err.span) from None
        finally:
            self.expanding.pop()
            self.nesting = outer
        depth, size = _depth_and_size(body)
        if at + depth > MAX_DEPTH:
            raise SourceError(f"this call of {fd.name}() nests operators and calls {at + depth} deep once "
                              f"inlined; kdsl's limit is {MAX_DEPTH}", e.span)
        if size > MAX_INLINED_NODES:
            raise SourceError(f"this call of {fd.name}() writes out more than {MAX_INLINED_NODES} operations once "
                              "its helper calls are inlined (kdsl's limit); name a shared part once instead of "
                              "calling it repeatedly in nested helpers", e.span)
        return body

    def unused_helpers(self) -> None:
        """A helper no kernel function calls is not typed (its parameters have no types until a
        call gives them some), but its names must resolve: a misspelt helper is an error
        whether or not it is called yet."""
        for name, fd in self.funcdefs.items():
            if name in self.ENTRY_POINTS or name in self.called:
                continue
            params = {p for p, _ in fd.params}
            for node in _walk_ast(fd.body):
                if isinstance(node, ast.Name) and node.id not in params:
                    self._name(node, {})
                elif isinstance(node, ast.Call) and node.func not in self.BUILTINS and node.func not in self.funcdefs:
                    self._call(node, {})
                elif isinstance(node, ast.Index) and node.tensor not in self.decls:
                    self._index(node, {})


def _within(span: Span, outer: Span) -> bool:
    return (outer.line, outer.col) <= (span.line, span.col) and (span.end_line, span.end_col) <= \
        (outer.end_line, outer.end_col)


def _call_depths(kernel: ast.Kernel) -> dict[int, int]:
    """The depth of every call in its statement's expression, the root's 1 (the parser's count)."""
    roots = []
    for st in kernel.body:
        roots += [st.body] if isinstance(st, ast.FuncDef) else [st.value] if isinstance(st, ast.Binding) else \
            list(st.dims) + list(st.block or ())
    depths, stack = {}, [(r, 1) for r in roots]
    while stack:
        e, d = stack.pop()
        if isinstance(e, ast.Call):
            depths[id(e)] = d
        stack += [(c, d + 1) for c in _children(e)]
    return depths


def _depth_and_size(e: ir.Expr) -> tuple[int, int]:
    """An IR expression's depth and its node count written out as a tree, shared parts
    counted by identity once each (so an exponential tree costs its distinct nodes)."""
    memo: dict[int, tuple[int, int]] = {}
    stack = [(e, False)]
    while stack:  # post-order: a node's children are done when it is popped the second time
        x, done = stack.pop()
        kids = getattr(x, "args", ()) or getattr(x, "indices", ())
        if done:
            parts = [memo[id(c)] for c in kids]
            memo[id(x)] = (1 + max((d for d, _ in parts), default=0), min(1 + sum(n for _, n in parts), 1 << 40))
        elif id(x) not in memo:
            stack.append((x, True))
            stack += [(c, False) for c in kids if id(c) not in memo]
    return memo[id(e)]


def _children(e: ast.Expr):
    return {ast.Unary: lambda: (e.x,), ast.Binary: lambda: (e.lhs, e.rhs), ast.Call: lambda: e.args,
            ast.Index: lambda: e.indices}.get(type(e), lambda: ())()


def _walk_ast(e: ast.Expr):
    yield e
    for child in _children(e):
        yield from _walk_ast(child)
