"""Type checking: AST kernel -> IR kernel, every user mistake reported at its span.

Types are i32, f32 and bool and are kept apart: `s + float(q - kv)`, not `s + (q - kv)`.
Integer literals (and constants bound to them) adapt to a float context, so
`30 * tanh(s / 30)` reads naturally. Constants are folded here; dims become i32 Vars.
Helper functions (`near(i, j) = abs(i - j) < W`) are inlined at each call (helper_calls.py),
so the IR and every pass after this one never see them.
"""
from __future__ import annotations

import difflib
import math

from .. import ast, ir
from ..errors import SourceError, Span
from ..semantics import FoldError, fold
from . import tiling
from .helper_calls import HelperCalls

ATTN_ELEMS = ("bf16", "f16")
# captured tensors' element types and the scalar type a load of each gives: 1-byte masks and
# ids (torch.bool, int8, uint8) read a quarter of an i32 tensor's bytes
CAPTURE_DTYPES = {"f32": "f32", "bf16": "f32", "f16": "f32", "i32": "i32", "i8": "i32", "u8": "i32", "bool": "bool"}
DTYPES = ("bf16", "f16", "f32", "i32", "i8", "u8", "bool", "e4m3")
SCORE_PARAMS = ("s", "b", "h", "q", "kv")
MASK_PARAMS = ("b", "h", "q", "kv")
_FUNC_ARITY = {"where": 3, "min": 2, "max": 2, "abs": 1, "int": 1, "float": 1, **{f: 1 for f in ir.FLOAT_FUNCS}}
_OP_WORDS = {"add": "add", "sub": "subtract", "mul": "multiply", "div": "divide", "floordiv": "floor-divide",
             "mod": "take the remainder of", "min": "take min of", "max": "take max of"}

# An integer literal whose type is decided by its context (Go-style untyped constant).
LITERAL_INT = "int-literal"


def check_program(program: ast.Program) -> list[ir.Kernel]:
    names: dict[str, Span] = {}
    kernels = []
    for k in program.kernels:
        if k.name in names:
            raise SourceError(f"kernel '{k.name}' is defined twice (first at line {names[k.name].line})", k.name_span)
        names[k.name] = k.name_span
        kernels.append(_AttentionChecker(k).run() if k.kind == "attention" else _GemmChecker(k).run())
    return kernels


class _Checker(HelperCalls):
    def __init__(self, kernel: ast.Kernel):
        self.k = kernel
        self.decls: dict[str, ast.Decl] = {}
        self.consts: dict[str, ir.Const] = {}
        self.dims: dict[str, Span] = {}  # runtime dimension symbols
        self.bindings: dict[str, ast.Binding] = {}
        self.funcdefs: dict[str, ast.FuncDef] = {}
        self.params: dict[str, tuple] = {}  # function -> (canonical, user's) parameter names
        self.start_helpers(kernel)
        seen: set[str] = set()
        for st in kernel.body:  # each name once, reported at its second definition
            if st.name in seen:
                raise SourceError(f"'{st.name}' is defined twice in kernel '{self.k.name}'", st.name_span)
            seen.add(st.name)
        # functions first, so that a constant may call a helper defined after it
        for st in sorted(kernel.body, key=lambda st: not isinstance(st, ast.FuncDef)):
            self._collect(st)

    # --- collecting statements ---------------------------------------------------------
    def _collect(self, st):
        name, span = st.name, st.name_span
        if isinstance(st, ast.Decl):
            self.decls[name] = st
        elif isinstance(st, ast.Binding):
            if name in self.ENTRY_POINTS:  # `mask = j <= i`: its names would be unknown variables
                params = "s, b, h, i, j" if name == "score" else "b, h, i, j"
                raise SourceError(f"'{name}' is a function of the positions, not a constant: write "
                                  f"{name}({params}) = ...", span)
            self.bindings[name] = st
            if name != "scale":
                self.consts[name] = self._const_value(st.value)
        else:
            if name in _FUNC_ARITY:
                raise SourceError(f"'{name}' is a built-in function and cannot be redefined; give yours another name",
                                  span)
            seen_params: set[str] = set()
            for p, p_span in st.params:
                if p in seen_params:
                    raise SourceError(f"parameter '{p}' appears twice", p_span)
                seen_params.add(p)
            self.funcdefs[name] = st

    def _const_value(self, e: ast.Expr) -> ir.Const:
        typed = self.expr(e, {})
        if not isinstance(typed, ir.Const):
            raise SourceError("a constant must be computable at compile time (numbers and other constants)", e.span)
        return typed

    def _block_size(self, e: ast.Expr) -> int:
        c = self._coerce(self._const_value(e), "i32", e.span)
        if c.ty != "i32":
            raise SourceError(f"a block size must be an integer, got {_tyname(c.ty)}", e.span)
        return c.value

    # --- shapes ------------------------------------------------------------------------
    def shape(self, d: ast.Decl, bind_new: bool) -> tuple[ir.Expr, ...]:
        out = []
        for e in d.dims:
            if isinstance(e, ast.Name) and e.id not in self.consts:
                if e.id not in self.dims:
                    if not bind_new:
                        raise SourceError(f"unknown dimension '{e.id}'", e.span)
                    if e.id in ir.BUILTIN_VARS:
                        raise SourceError(f"'{e.id}' is reserved and cannot name a dimension", e.span)
                    self.dims[e.id] = e.span
                out.append(ir.Var("i32", e.id))
                continue
            typed = self._coerce(self.expr(e, {}), "i32", e.span)
            if typed.ty != "i32":
                raise SourceError(f"a dimension must be an integer expression, got {_tyname(typed.ty)}", e.span)
            if isinstance(typed, ir.Const) and typed.value < 1:
                raise SourceError(f"a dimension must be at least 1, got {typed.value}", e.span)
            out.append(typed)
        return tuple(out)

    def dtype(self, d: ast.Decl, allowed) -> str:
        if d.dtype not in DTYPES:
            hint = _suggest(d.dtype, DTYPES)
            raise SourceError(f"unknown element type '{d.dtype}'{hint}", d.dtype_span)
        if d.dtype not in allowed:
            raise SourceError(f"'{d.name}' must have element type {' or '.join(allowed)}, not {d.dtype}", d.dtype_span)
        return d.dtype

    def rank(self, d: ast.Decl, *ranks: int):
        if len(d.dims) not in ranks:
            want = " or ".join(str(r) for r in ranks)
            raise SourceError(f"'{d.name}' must have {want} dimensions, got {len(d.dims)}", d.span)

    def require(self, name: str) -> ast.Decl:
        if name not in self.decls:
            raise SourceError(f"{self.k.kind} kernel '{self.k.name}' must declare '{name}'", self.k.name_span)
        return self.decls[name]

    def same_dim(self, want, got, want_src, got_src, span: Span, what: str):
        """want, got: one dim expression or a tuple of them; *_src: the AST they came from,
        quoted in the message as the user wrote it."""
        if want != got:
            raise SourceError(f"{what}: got {_quote(got_src)}, expected {_quote(want_src)}", span)

    # --- expressions -------------------------------------------------------------------
    def expr(self, e: ast.Expr, env: dict[str, ir.Var]) -> ir.Expr:
        if isinstance(e, ast.Num):
            return ir.Const("f32", e.value) if e.is_float else ir.Const(LITERAL_INT, e.value)
        if isinstance(e, ast.Bool):
            return ir.Const("bool", e.value)
        if isinstance(e, ast.Name):
            return self._name(e, env)
        if isinstance(e, ast.Unary):
            x = self.expr(e.x, env)
            if e.op == "not":
                self._want(x, "bool", e.x.span, "'not' needs a bool")
                return _fold(ir.Op("bool", "not", (x,)), e.span)
            if x.ty == "bool":
                raise SourceError("cannot negate a bool; use 'not'", e.span)
            return _fold(ir.Op(x.ty, "neg", (x,)), e.span)
        if isinstance(e, ast.Binary):
            return self._binary(e, env)
        if isinstance(e, ast.Call):
            return self._call(e, env)
        if isinstance(e, ast.Index):
            return self._index(e, env)
        raise TypeError(e)  # pragma: no cover

    def _name(self, e: ast.Name, env) -> ir.Expr:
        if e.id in env:
            return env[e.id]
        if e.id in self.consts:
            return self.consts[e.id]
        if e.id in self.dims:
            return ir.Var("i32", e.id)
        if e.id in self.decls:
            d = self.decls[e.id]
            raise SourceError(f"'{e.id}' is a tensor; index it, e.g. {e.id}[{', '.join('...' for _ in d.dims)}]", e.span)
        known = list(env) + list(self.consts) + list(self.dims)
        raise SourceError(f"unknown variable '{e.id}'{_suggest(e.id, known)}", e.span)

    def _binary(self, e: ast.Binary, env) -> ir.Expr:
        a, b = self.expr(e.lhs, env), self.expr(e.rhs, env)
        if e.op in ("and", "or"):
            self._want(a, "bool", e.lhs.span, f"'{e.op}' needs bool operands")
            self._want(b, "bool", e.rhs.span, f"'{e.op}' needs bool operands")
            return _fold(ir.Op("bool", e.op, (a, b)), e.span)
        a, b = self._unify(a, b, e, _OP_WORDS.get(e.op, "compare"))
        if e.op == "div":  # float division: integer literals become floats, 7/2 is 3.5
            a, b = self._coerce(a, "f32", e.span), self._coerce(b, "f32", e.span)
        if e.op in ("lt", "le", "gt", "ge", "eq", "ne"):
            if a.ty == "bool" and e.op not in ("eq", "ne"):
                raise SourceError("cannot order bools; only == and != apply", e.span)
            return _fold(ir.Op("bool", e.op, (a, b)), e.span)
        if a.ty == "bool":
            raise SourceError(f"cannot {_OP_WORDS[e.op]} bools", e.span)
        if e.op == "div" and a.ty == "i32":
            raise SourceError("'/' divides floats; use '//' for integer division or float(...) to convert", e.span)
        if e.op in ("floordiv", "mod") and a.ty == "f32":
            raise SourceError(f"'{'//' if e.op == 'floordiv' else '%'}' needs integers; use int(...) to convert", e.span)
        if e.op in ("floordiv", "mod") and isinstance(b, ir.Const) and b.value == 0:
            raise SourceError("division by zero", e.rhs.span)
        return _fold(ir.Op(a.ty, e.op, (a, b)), e.span)

    def _unify(self, a, b, e, verb):
        """Bring two operands to one type; only untyped integer literals convert implicitly."""
        if a.ty == LITERAL_INT and b.ty == LITERAL_INT:
            return a, b
        if "bool" in (a.ty, b.ty) and LITERAL_INT in (a.ty, b.ty):  # e.g. keep[b, i, j] + 1, (i < j) == 0
            raise SourceError(f"cannot {verb} bool and integer: a bool is not a number; convert explicitly with "
                              f"int(...) or float(...), or compare with == / != to another bool", e.span)
        if a.ty == LITERAL_INT:
            a = self._coerce(a, b.ty, e.span)
        if b.ty == LITERAL_INT:
            b = self._coerce(b, a.ty, e.span)
        if a.ty != b.ty:
            raise SourceError(f"cannot {verb} {_tyname(a.ty)} and {_tyname(b.ty)}: "
                              f"convert explicitly with float(...) or int(...)", e.span)
        return a, b

    def _coerce(self, x: ir.Expr, ty: str, span: Span) -> ir.Expr:
        if x.ty != LITERAL_INT:
            return x
        if ty == "f32":
            return ir.Const("f32", float(x.value))
        if ty == "bool":
            raise SourceError("expected a bool, got an integer", span)
        if not -2**31 <= x.value < 2**31:
            raise SourceError(f"integer {x.value} does not fit in i32", span)
        return ir.Const("i32", x.value)

    def _want(self, x, ty, span, msg):
        if x.ty != ty:
            raise SourceError(f"{msg}, got {_tyname(x.ty)}", span)

    def _call(self, e: ast.Call, env) -> ir.Expr:
        if e.func in self.funcdefs:
            return self.inline_call(self.funcdefs[e.func], e, env)
        if e.func not in _FUNC_ARITY:
            known = list(_FUNC_ARITY) + [n for n in self.funcdefs if n not in self.ENTRY_POINTS]
            raise SourceError(f"unknown function '{e.func}'{_suggest(e.func, known)}", e.func_span)
        n = _FUNC_ARITY[e.func]
        if len(e.args) != n:
            raise SourceError(f"{e.func}() takes {n} argument{'s' if n > 1 else ''}, got {len(e.args)}", e.span)
        args = [self.expr(a, env) for a in e.args]
        if e.func in ir.FLOAT_FUNCS:
            x = self._coerce(args[0], "f32", e.span)
            self._want(x, "f32", e.args[0].span, f"{e.func}() needs a float (convert with float(...))")
            return _fold(ir.Op("f32", e.func, (x,)), e.span)
        if e.func in ("int", "float"):
            ty = "i32" if e.func == "int" else "f32"
            x = self._coerce(args[0], ty, e.span)
            return _fold(ir.Op(ty, e.func, (x,)), e.span)
        if e.func == "abs":
            x = self._coerce(args[0], "i32", e.span)
            if x.ty == "bool":
                raise SourceError("abs() needs a number, got bool", e.args[0].span)
            return _fold(ir.Op(x.ty, "abs", (x,)), e.span)
        if e.func in ("min", "max"):
            a, b = self._unify(args[0], args[1], e, f"take {e.func} of")
            a, b = self._coerce(a, "i32", e.span), self._coerce(b, "i32", e.span)
            if a.ty == "bool":
                raise SourceError(f"{e.func}() needs numbers, got bool", e.span)
            return _fold(ir.Op(a.ty, e.func, (a, b)), e.span)
        cond, a, b = args  # where
        self._want(cond, "bool", e.args[0].span, "where()'s first argument must be a bool")
        a, b = self._unify(a, b, e, "choose between")
        a, b = self._coerce(a, "i32", e.span), self._coerce(b, "i32", e.span)
        return _fold(ir.Op(a.ty, "where", (cond, a, b)), e.span)

    def _index(self, e: ast.Index, env) -> ir.Expr:
        d = self.decls.get(e.tensor)
        if d is None:
            known = [n for n, x in self.decls.items() if self.is_capture(n)]
            hint = _suggest(e.tensor, known) or self._declaration_hint(e, env)
            raise SourceError(f"unknown tensor '{e.tensor}'{hint}", e.tensor_span)
        if not self.is_capture(e.tensor):
            raise SourceError(f"'{e.tensor}' is a kernel operand and cannot be indexed in an expression; "
                              "declare a separate captured tensor", e.tensor_span)
        if len(e.indices) != len(d.dims):
            raise SourceError(f"'{e.tensor}' has {len(d.dims)} dimension{'s' if len(d.dims) != 1 else ''}, "
                              f"indexed with {len(e.indices)}", e.span)
        idx = []
        for i in e.indices:
            x = self._coerce(self.expr(i, env), "i32", i.span)
            self._want(x, "i32", i.span, "an index must be an integer")
            idx.append(x)
        # (a constant reading a tensor is typed while statements are collected, before the
        # declarations' element types are checked: an e4m3 or unknown one got a KeyError there)
        return ir.Load(CAPTURE_DTYPES[self.dtype(d, tuple(CAPTURE_DTYPES))], e.tensor, tuple(idx))

    ENTRY_POINTS: tuple[str, ...] = ()  # the functions a kernel of this kind defines; any other is a helper
    BUILTINS = _FUNC_ARITY

    def _declaration_hint(self, e: ast.Index, env) -> str:
        """How to declare a tensor read but never declared: an axis indexed by a bare position,
        batch or head takes that dim's name as q and k declare it (`slope[h]`: `slope: f32[H]`)."""
        axes = {"b": ("q", 0), "h": ("q", 1), "q": ("q", 2), "kv": ("k", 2)}
        dims = []
        for i in e.indices:
            x = env.get(i.id) if isinstance(i, ast.Name) else None
            operand, axis = axes.get(x.name, (None, 0)) if isinstance(x, ir.Var) else (None, 0)
            d = self.decls.get(operand)
            dims.append(d.dims[axis].span.source() if d is not None and axis < len(d.dims) else "...")
        return (f"; declare it in the kernel, e.g. {e.tensor}: f32[{', '.join(dims)}] (i32, i8 or u8 for ids, "
                "bool for a mask)")

    def is_capture(self, name: str) -> bool:  # overridden per kind
        return False

    def function(self, fd: ast.FuncDef, canonical: tuple[str, ...], result: str) -> ir.Expr:
        if len(fd.params) != len(canonical):
            raise SourceError(f"{fd.name}() takes {len(canonical)} parameters ({', '.join(canonical)}), "
                              f"got {len(fd.params)}", fd.name_span)
        env = {}
        for (p, span), c in zip(fd.params, canonical):
            if p in env:
                raise SourceError(f"parameter '{p}' appears twice", span)
            env[p] = ir.Var(ir.BUILTIN_VARS[c], c)
        self.params[fd.name] = tuple((c, p) for (p, _), c in zip(fd.params, canonical))
        body = self._coerce(self.expr(fd.body, env), result, fd.body.span)
        if body.ty != result:
            raise SourceError(f"{fd.name}() must return {_tyname(result)}, got {_tyname(body.ty)}", fd.body.span)
        return body


class _AttentionChecker(_Checker):
    OPERANDS = ("q", "k", "v", "out", "lse")
    ENTRY_POINTS = ("score", "mask")

    def is_capture(self, name):
        return name not in self.OPERANDS

    def run(self) -> ir.Kernel:
        q, k, v = self.require("q"), self.require("k"), self.require("v")
        for d in (q, k, v):
            self.rank(d, 4)
            self.dtype(d, ATTN_ELEMS)
        for d in (k, v):
            if d.dtype != q.dtype:
                raise SourceError(f"'{d.name}' must have the same element type as q ({q.dtype})", d.dtype_span)
        qs, ks, vs = self.shape(q, True), self.shape(k, True), self.shape(v, True)
        self.same_dim(qs[0], ks[0], q.dims[0], k.dims[0], k.dims[0].span, "k's batch dimension must match q's")
        # v may have a head dim of its own (MLA: q, k 192 and v 128); out has v's.
        self.same_dim(ks[:3], vs[:3], k.dims[:3], v.dims[:3], v.span, "v must have k's batch, heads and length")
        self.same_dim(qs[3], ks[3], q.dims[3], k.dims[3], k.dims[3].span, "k's head dimension must match q's")
        for d, shape, what in ((q, qs, "head dimension"), (v, vs, "value head dimension (v's last)")):
            if isinstance(shape[3], ir.Const) and tiling.head_dim_problem(shape[3].value):
                x = shape[3].value
                named = (f" (a head dim written as a name, such as D, takes {x} at the call, padded with zeros)"
                         if 1 <= x <= tiling.MAX_HEAD_DIM else "")
                raise SourceError(f"{what} {x} is not supported: it {tiling.head_dim_problem(x)}{named}",
                                  d.dims[3].span)
        tensors = [ir.Tensor("input", n, q.dtype, s) for n, s in (("q", qs), ("k", ks), ("v", vs))]
        out_shape, out_src = qs[:3] + vs[3:], q.dims[:3] + v.dims[3:]
        if "out" in self.decls:
            o = self.decls["out"]
            self.rank(o, 4)
            self.dtype(o, (q.dtype,))
            self.same_dim(out_shape, self.shape(o, False), out_src, o.dims, o.span,
                          "out must have q's batch, heads and length and v's head dimension")
        tensors.append(ir.Tensor("output", "out", q.dtype, out_shape))
        if "lse" in self.decls:
            ld = self.decls["lse"]
            self.rank(ld, 3)
            self.dtype(ld, ("f32",))
            self.same_dim(qs[:3], self.shape(ld, False), q.dims[:3], ld.dims, ld.span,
                          f"lse must have shape {_quote(q.dims[:3])}")
            tensors.append(ir.Tensor("output", "lse", "f32", qs[:3]))
        for d in self.decls.values():
            if d.accumulate is not None:
                raise SourceError("'accumulate' applies to a gemm kernel's out only", d.accumulate)
        for name, d in self.decls.items():
            if name in self.OPERANDS:
                continue
            if d.block is not None:
                raise SourceError("block(...) scaling applies to FP8 gemm operands only", d.span)
            if name == "scale":  # calls pass captures by name too: mod.t(q, k, v, scale=x) would be ambiguous
                raise SourceError("'scale' names the softmax scale (`scale = ...` in a kernel, `scale=` in a call) "
                                  "and cannot name a captured tensor; give the tensor another name, e.g. 'scale_t'",
                                  d.name_span)
            self.dtype(d, tuple(CAPTURE_DTYPES))
            if not d.dims:  # (an index names each axis: a tensor of none could never be read)
                raise SourceError(f"captured tensor '{name}' has no dimensions; declare a scalar as {name}: "
                                  f"{d.dtype}[1] and read {name}[0], or make it a constant ({name} = ...)", d.span)
            tensors.append(ir.Tensor("capture", name, d.dtype, self.shape(d, True)))
        funcs = []
        scale_b = self.bindings.get("scale")
        if scale_b is not None:
            span = scale_b.value.span
            s = self._coerce(self.expr(scale_b.value, {}), "f32", span)
            self._want(s, "f32", span, "scale must be a float")
            if any(isinstance(n, ir.Load) for n in ir.walk(s)):
                raise SourceError("scale must be computable from constants and dimensions, not tensor elements", span)
            if isinstance(s, ir.Const) and not math.isfinite(s.value):
                raise SourceError(f"scale must be finite, got {ir.print_expr(s)}", span)
        else:
            d_span = q.dims[3].span
            s = _fold(ir.Op("f32", "rsqrt", (_fold(ir.Op("f32", "float", (qs[3],)), d_span),)), d_span)
        funcs.append(("scale", s))
        for name, fd in self.funcdefs.items():
            if name == "score":
                funcs.append(("score", self.function(fd, SCORE_PARAMS, "f32")))
            elif name == "mask":
                funcs.append(("mask", self.function(fd, MASK_PARAMS, "bool")))
        self.unused_helpers()
        return ir.Kernel("attention", self.k.name, tuple(tensors), tuple(funcs),
                         source=f"{self.k.span.file}:{self.k.span.line}", params=tuple(self.params.items()))


class _GemmChecker(_Checker):
    def run(self) -> ir.Kernel:
        for name, fd in self.funcdefs.items():
            raise SourceError(f"a gemm kernel has no functions to define ('{name}')", fd.name_span)
        for name, b in self.bindings.items():
            raise SourceError(f"a gemm kernel takes no constants or scale ('{name}')", b.name_span)
        known = {"a", "b", "out", "group", "count"}
        for name, d in self.decls.items():
            if name not in known:
                raise SourceError(f"unknown gemm operand '{name}'; a gemm declares a, b, out and, "
                                  "when grouped, group (contiguous) or count (masked)", d.name_span)
        a, b, out = self.require("a"), self.require("b"), self.require("out")
        self.rank(a, 2, 3)
        self.rank(b, 2, 3)
        for d, want in ((a, (1, 128)), (b, (128, 128))):
            self.dtype(d, ("e4m3",))
            if d.block is None:
                raise SourceError(f"'{d.name}' needs its scaling block, e.g. block{want}", d.span)
            got = tuple(self._block_size(x) for x in d.block)
            if got != want:
                raise SourceError(f"'{d.name}' supports block{want} scaling, got block{got}", d.block[0].span)
        self.dtype(out, ("bf16", "f32"))
        for d in self.decls.values():
            if d.accumulate is not None and d is not out:
                raise SourceError("'accumulate' applies to a gemm kernel's out only", d.accumulate)
        if out.accumulate is not None and out.dtype != "f32":
            raise SourceError(f"'accumulate' adds into out in fp32: declare out f32, not {out.dtype} "
                              "(a bf16 running sum would be rounded at every call)", out.accumulate)
        sa, sb = self.shape(a, True), self.shape(b, True)
        if len(a.dims) == 3 and len(b.dims) == 2:
            raise SourceError("a 3-D 'a' (masked grouping) needs a 3-D 'b' [G, N, K]", b.span)
        kind = {2: "dense", 3: "contiguous"}[len(b.dims)] if len(a.dims) == 2 else "masked"
        self.same_dim(sa[-1], sb[-1], a.dims[-1], b.dims[-1], b.dims[-1].span, "b's K must match a's")
        if isinstance(sa[-1], ir.Const) and sa[-1].value % 128:
            raise SourceError(f"K must be a multiple of 128, got {sa[-1].value}", a.dims[-1].span)
        if kind == "masked":
            self.same_dim(sa[0], sb[0], a.dims[0], b.dims[0], b.dims[0].span, "b's group count must match a's")
        out_shape, out_src = sa[:-1] + (sb[-2],), a.dims[:-1] + (b.dims[-2],)
        self.rank(out, len(out_shape))
        self.same_dim(out_shape, self.shape(out, False), out_src, out.dims, out.span,
                      f"out must have shape {_quote(out_src)}")
        tensors = [ir.Tensor("input", "a", "e4m3", sa, (1, 128)), ir.Tensor("input", "b", "e4m3", sb, (128, 128))]
        extra = {"contiguous": ("group", sa[:1], a.dims[:1]), "masked": ("count", sb[:1], b.dims[:1])}.get(kind)
        for name in ("group", "count"):
            if name in self.decls and (extra is None or extra[0] != name):
                raise SourceError(f"'{name}' does not belong to a {kind} gemm", self.decls[name].name_span)
        if extra:
            d = self.require(extra[0])
            self.dtype(d, ("i32",))
            self.same_dim(extra[1], self.shape(d, False), extra[2], d.dims, d.span,
                          f"'{extra[0]}' must have shape {_quote(extra[2])}")
            tensors.append(ir.Tensor("input", extra[0], "i32", extra[1]))
        tensors.append(ir.Tensor("output", "out", out.dtype, out_shape))
        attrs = (("grouping", kind),) + ((("accumulate", True),) if out.accumulate is not None else ())
        return ir.Kernel("gemm", self.k.name, tuple(tensors), (), attrs, source=f"{self.k.span.file}:{self.k.span.line}")


def _tyname(ty: str) -> str:
    return {"i32": "int", "f32": "float", "bool": "bool", LITERAL_INT: "int"}[ty]


_PYTHON_WORDS = {"True": "true", "False": "false"}


def _suggest(name: str, known) -> str:
    if name in _PYTHON_WORDS:
        return f"; did you mean '{_PYTHON_WORDS[name]}'?"
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean '{close[0]}'?" if close else ""


def _quote(dims) -> str:
    """Dims as the user wrote them: one AST expression, or a tuple shown as a shape."""
    if isinstance(dims, tuple):
        return "[" + ", ".join(d.span.source() for d in dims) + "]"
    return dims.span.source()


def _fold(e: ir.Expr, span: Span) -> ir.Expr:
    """Constant-fold an op whose operands are all constants, by the one definition of the
    semantics (kdsl.semantics, shared with the interpreter); a constant with no value
    (integer overflow, int() of NaN, ...) is an error at its span."""
    if not isinstance(e, ir.Op) or not all(isinstance(a, ir.Const) for a in e.args):
        return e
    try:
        v = fold(e.op, None if e.ty == LITERAL_INT else e.ty, [a.value for a in e.args])
    except FoldError as err:
        raise SourceError(f"cannot compute this constant: {err}", span) from None
    return ir.Const(e.ty, v)
