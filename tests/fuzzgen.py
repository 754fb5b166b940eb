"""Whole kdsl programs for fuzzing the compiler, good and bad, and the harness that runs one
through every compile stage. Used by tests/test_fuzz.py (CI) and tools/fuzz.py (long runs).

Three families of programs (docs/language.md is the contract they probe):
  mutations   the samples with tokens deleted, inserted, replaced, duplicated or swapped
  grammar     random kernels from the grammar: any statement, any expression, ill-typed too
  edges       well-formed kernels with one edge in them: constants at the limits of their
              types, C++ keywords and kdsl's own identifiers as names, nesting around the
              depth limit, masks whose tile analysis blows up, helper functions, odd line endings
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

from hypothesis import strategies as st

from kdsl import ir
from kdsl.codegen import emit, emit_backward
from kdsl.errors import SourceError, source_lines
from kdsl.grammar import parse
from kdsl.grammar.parser import MAX_DEPTH, MAX_NAME
from kdsl.passes import pipeline
from kdsl.passes.target import get_target

from exprgen import bool_expr, float_expr, int_expr

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_TEXTS = [p.read_text() for p in sorted((ROOT / "samples").glob("*.kd"))]
ATTN_HEAD = "q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]"
_TARGET = get_target("sm_90a")


class InternalError(AssertionError):
    """The compiler did something other than compile or give a located diagnostic."""


def compile_all(text: str) -> str | None:
    """Parse, check, lower (every head dim) and generate CUDA for every kernel of `text` (and
    an attention kernel's backward at its first head dim).
    Returns None if it compiled, the diagnostic if it got a located one; raises anything else
    (any other exception, a diagnostic without a valid location, a broken IR round trip)."""
    try:
        kernels = pipeline.check(parse(text, "fuzz.kd"))
        for k in kernels:
            for n, d in enumerate(pipeline.head_dims(k)):
                lowered = pipeline.lower(k, _TARGET, d)
                if n == 0 and ir.parse_ir(ir.print_ir(lowered)) != [lowered]:  # head dims differ in attrs only
                    raise InternalError(f"IR text does not round-trip:\n{ir.print_ir(lowered)}")
                sources = [emit.generate(lowered).source]
                if k.kind == "attention" and n == 0:  # the backward's too (the score's derivative)
                    sources.append(emit_backward.generate_backward(lowered, _TARGET).source)
                if any("{{" in s or "{%" in s for s in sources):
                    raise InternalError("template syntax left in the generated source")
    except SourceError as e:
        _check_located(e)
        return str(e)
    return None


def _check_located(e: SourceError) -> None:
    span = e.span
    if span is None:
        raise InternalError(f"diagnostic without a location: {e.message}")
    lines = source_lines(span.text)
    if not (1 <= span.line <= len(lines) and 1 <= span.col <= len(lines[span.line - 1]) + 1):
        raise InternalError(f"diagnostic located outside the file ({span.line}:{span.col}): {e.message}")
    str(e)  # rendering must not fail either


# ------------------------------------------------------------------------------ mutations

_TOKEN = re.compile(r"[A-Za-z_][A-Za-z_0-9]*|[0-9]+\.?[0-9]*(?:[eE][-+]?[0-9]+)?|//|==|!=|<=|>=|\s+|.", re.S)
EDGE_NUMBERS = ["0", "1", "-1", "7/2", "1/0", "0.0", "-0.0", "1e39", "1e-50", "inf", "-inf", "2147483647",
                "2147483648", "-2147483648", "9223372036854775807", "9223372036854775808", "1" + "0" * 40,
                "3e9", "int(3e9)", "int(inf)", "log(-1.0)", "exp(710.0)", "0.125", "128", "64", "96"]
WEIRD_NAMES = ["a", "b", "c", "o", "B", "H", "Hkv", "M", "N", "D", "s", "qk", "kv", "q0", "k1", "scale",
               "scale_log2", "lse", "out", "group", "count", "int", "float", "class", "this", "template",
               "namespace", "new", "delete", "auto", "kdsl", "KDSL_DEVICE", "INFINITY", "NULL", "__global__",
               "threadIdx", "dim_L", "cap_x", "Captures", "Variant", "main", "std", "x_d64", "L",
               "nan", "input", "def", "attr", "load"]  # the last: words of the IR text
VOCAB = (["attention", "gemm", "block", "and", "or", "not", "true", "false", "score", "mask", "where", "min",
          "max", "abs", "exp", "tanh", "sigmoid", "rsqrt", "{", "}", "(", ")", "[", "]", ",", ":", ";", "=",
          "==", "<", "<=", "+", "-", "*", "/", "//", "%", "#", "\n", " ", "\r", "\r\n", "\f", "\t", "\v",
          "\ufeff", "\x00", "é", "bf16", "f16", "f32", "i32", "i8", "bool", "e4m3", "bf16[B, H, M, D]"]
         + EDGE_NUMBERS + WEIRD_NAMES)


@st.composite
def mutations(draw) -> str:
    tokens = _TOKEN.findall(draw(st.sampled_from(SAMPLE_TEXTS)))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(tokens)))
        kind = draw(st.sampled_from(["delete", "insert", "replace", "duplicate", "swap"]))
        piece = draw(st.one_of(st.sampled_from(VOCAB), st.text(max_size=3)))
        if kind == "delete" and tokens:
            del tokens[min(i, len(tokens) - 1):i + draw(st.integers(1, 8))]
        elif kind == "insert":
            tokens.insert(i, piece)
        elif kind == "replace" and tokens:
            tokens[min(i, len(tokens) - 1)] = piece
        elif kind == "duplicate":
            tokens[i:i] = tokens[i:i + draw(st.integers(1, 30))]
        elif kind == "swap" and tokens:
            j = draw(st.integers(0, len(tokens) - 1))
            i = min(i, len(tokens) - 1)
            tokens[i], tokens[j] = tokens[j], tokens[i]
    return "".join(tokens)


# ------------------------------------------------------------------------------ grammar

FUNCS = ["where", "min", "max", "abs", "int", "float", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh",
         "sin", "cos", "tan", "sigmoid", "foo"]
BINARY = ["+", "-", "*", "/", "//", "%", "<", "<=", ">", ">=", "==", "!=", "and", "or"]


DIMS = ["B", "H", "M", "N", "D", "K", "G", "T", "L"]
EXPR_NAMES = DIMS + ["s", "b", "h", "i", "j", "c", "w"]
_LEAF = st.one_of(st.sampled_from(EXPR_NAMES), st.sampled_from(EDGE_NUMBERS),
                  st.sampled_from(["true", "false", "inf", "0.5", "3"]), st.integers(-10, 300).map(str))


@st.composite
def _any_expr(draw, depth) -> str:
    if depth <= 0 or draw(st.integers(0, 3)) == 0:
        return draw(_LEAF)
    sub = any_expr(depth - 1)
    kind = draw(st.sampled_from(["binary", "binary", "unary", "call", "index"]))
    if kind == "binary":
        return f"({draw(sub)} {draw(st.sampled_from(BINARY))} {draw(sub)})"
    if kind == "unary":
        return f"{draw(st.sampled_from(['-', 'not ', '+']))}{draw(sub)}"
    if kind == "call":
        args = draw(st.lists(sub, min_size=0, max_size=3))
        return f"{draw(st.sampled_from(FUNCS))}({', '.join(args)})"
    return f"{draw(st.sampled_from(EXPR_NAMES))}[{', '.join(draw(st.lists(sub, min_size=1, max_size=3)))}]"


@functools.cache
def any_expr(depth: int):
    """Any expression the grammar allows, typed or not (one strategy object per depth)."""
    return _any_expr(depth)


@st.composite
def grammar_programs(draw) -> str:
    kernels = []
    for _ in range(draw(st.integers(1, 2))):
        kind = draw(st.sampled_from(["attention", "attention", "gemm"]))
        name = draw(st.sampled_from(["t", "t_d64", "x", "int", "k" * 3]))
        stmts = [ATTN_HEAD] if kind == "attention" and draw(st.booleans()) else []
        for _ in range(draw(st.integers(0, 5))):
            what = draw(st.sampled_from(["decl", "binding", "funcdef"]))
            lhs = draw(st.sampled_from(["q", "k", "v", "out", "lse", "a", "b", "group", "count", "bias", "c",
                                        "w", "scale", "score", "mask", "foo"] + WEIRD_NAMES))
            e = any_expr(draw(st.integers(0, 3)))
            if what == "decl":
                dtype = draw(st.sampled_from(["bf16", "f16", "f32", "i32", "i8", "u8", "bool", "e4m3", "f64"]))
                shape = ", ".join(draw(st.lists(st.one_of(st.sampled_from(DIMS), e), max_size=4)))
                block = draw(st.sampled_from(["", " block(1, 128)", " block(128, 128)", " block({}, 1)"]))
                block = block.format(draw(e)) if "{}" in block else block
                stmts.append(f"{lhs}: {dtype}[{shape}]{block}")
            elif what == "binding":
                stmts.append(f"{lhs} = {draw(e)}")
            else:
                params = draw(st.lists(st.sampled_from(["s", "b", "h", "i", "j", "x"]), max_size=6))
                stmts.append(f"{lhs}({', '.join(params)}) = {draw(e)}")
        sep = draw(st.sampled_from(["\n    ", "; ", " "]))
        kernels.append(f"{kind} {name} {{\n    {sep.join(stmts)}\n}}\n")
    return "".join(kernels)


# ------------------------------------------------------------------------------ edges

def attention(body: str, name: str = "t") -> str:
    return f"attention {name} {{\n    {ATTN_HEAD}\n    {body}\n}}\n"


EDGE_FLOATS = ["inf", "-inf", "0.0", "-0.0", "1e39", "1e308", "1e-320", "3.4e38", "0.1", "7/2", "1/0", "0.0/0.0",
               "2147483648", "9223372036854775807", "-9223372036854775807"]
FLOAT_FNS = ["exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh", "sin", "cos", "tan", "sigmoid", "abs", "-",
             "float", ""]


@st.composite
def constant_edges(draw) -> str:
    """Constants folded at the edges of their types, used as ints, floats and scales."""
    x, y = draw(st.sampled_from(EDGE_FLOATS)), draw(st.sampled_from(EDGE_FLOATS))
    f = draw(st.sampled_from(FLOAT_FNS))
    c = draw(st.sampled_from([f"{f}({x})", f"{x} {draw(st.sampled_from(BINARY[:6]))} {y}", f"int({f}({x}))",
                              f"min({x}, {y})", f"max({x}, {y})", f"where({x} < {y}, {x}, {y})", f"{f}({x}) * 0"]))
    use = draw(st.sampled_from(["score(s, b, h, i, j) = s + c", "score(s, b, h, i, j) = s * float(c)",
                                "mask(b, h, i, j) = i - j < c", "mask(b, h, i, j) = float(i) < c",
                                "scale = c", "x: f32[c]\nscore(s, b, h, i, j) = s + x[0]",
                                "mask(b, h, i, j) = i // c < j % c"]))
    return attention(f"c = {c}\n    {use}")


NAME_USES = ["score(s, b, h, i, j) = s + {n}[h]", "score(s, b, h, i, j) = s + float({n}[min(i - j, 0) + 1])",
             "mask(b, h, i, j) = {n}[h] > 0.0", ""]


@st.composite
def name_edges(draw) -> str:
    """Captures, dims and kernels named like C++ keywords and kdsl's own identifiers."""
    names = draw(st.lists(st.sampled_from(WEIRD_NAMES + ["true", "and", "x" * MAX_NAME, "y" * (MAX_NAME + 1)]),
                          min_size=1, max_size=4, unique=True))
    dim = draw(st.sampled_from(["H", "L", "int", "dim_L", "a", "N"]))
    body = "\n    ".join(f"{n}: {draw(st.sampled_from(['f32', 'i32', 'bf16', 'u8', 'bool']))}[{dim}]" for n in names)
    uses = [draw(st.sampled_from(NAME_USES)).format(n=n) for n in names[:1]]
    kernel = attention(body + "\n    " + "\n    ".join(uses), draw(st.sampled_from(["t", "int", "x"])))
    if draw(st.booleans()):
        kernel += draw(st.sampled_from(["gemm t_d64 { a: e4m3[M, K] block(1, 128); b: e4m3[N, K] block(128, 128); "
                                        "out: bf16[M, N] }\n", attention("", "x_d128"), attention("", "t2")]))
    return kernel


WRAPS = ["-({})", "abs({})", "({} % 7)", "({} // 3)", "min({}, i)", "max({}, j - 3)", "({} + i)", "({} - j)",
         "where({} < i, i, j)", "where(i < j, {}, 2)", "int(float({}))", "({} * 2)"]


@st.composite
def deep_edges(draw) -> str:
    """Nesting around the depth limit, in masks (whose tile analysis grows fastest), scores,
    shapes and constants. A short pattern of wrappers repeats to the depth: cheap to draw."""
    depth = draw(st.one_of(st.integers(1, 12), st.integers(MAX_DEPTH // 2 - 4, MAX_DEPTH // 2 + 4),
                           st.integers(MAX_DEPTH - 4, MAX_DEPTH + 4), st.integers(300, 600)))
    pattern = draw(st.lists(st.sampled_from(WRAPS), min_size=1, max_size=6))
    e = draw(st.sampled_from(["(i - j)", "i", "(j - i)"]))
    for n in range(depth):
        e = pattern[n % len(pattern)].replace("{}", e)
    where = draw(st.sampled_from(["mask", "score", "index", "shape", "const"]))
    if where == "mask":
        return attention(f"mask(b, h, i, j) = {e} < 3 and {e} >= -5")
    if where == "score":
        return attention(f"score(s, b, h, i, j) = s + float({e})")
    if where == "index":
        return attention(f"bias: f32[N]\n    score(s, b, h, i, j) = s + bias[{e}]")
    unary = draw(st.sampled_from(["-", "+", "not ", "abs(", "float("]))
    chain = unary * depth + "1" + (")" * depth if unary.endswith("(") else "")
    return attention(f"x: f32[{chain}]" if where == "shape" else f"c = {chain}")


@st.composite
def typed_edges(draw) -> str:
    """Well-typed scores and masks (tests/exprgen.py) with an edge constant spliced in."""
    score, mask = draw(float_expr(depth=3)), draw(bool_expr(depth=2))
    edge = draw(st.sampled_from(EDGE_FLOATS))
    if draw(st.booleans()):
        score = re.sub(r"\bs\b", f"(s + {edge})", score, count=1)
    shift = draw(st.sampled_from(["2147483647", "-1", "0", "-2147483648"]))
    mask = re.sub(r"\bi\b", f"({draw(int_expr(depth=2))} + {shift})", mask, count=1)
    return attention(f"score(s, b, h, i, j) = {score}\n    mask(b, h, i, j) = {mask}")


HELPER_NAMES = ["f", "g", "near", "exp", "score", "mask", "b", "W"]


@st.composite
def helper_edges(draw) -> str:
    """Helper functions calling each other (recursion, wrong arities, shadowing, doubling
    chains), called from the score, the mask and constants."""
    stmts = []
    for n in range(draw(st.integers(1, 4))):
        name = draw(st.sampled_from(HELPER_NAMES + [f"h{n}"]))
        params = draw(st.lists(st.sampled_from(["x", "y", "i", "j", "s", "b", "N"]), max_size=3))
        e = draw(any_expr(draw(st.integers(0, 2))))
        callee = draw(st.sampled_from(HELPER_NAMES + [f"h{m}" for m in range(4)]))
        args = ", ".join(draw(st.lists(st.sampled_from(params + ["1", "2.5", "i"]), max_size=3)))
        body = draw(st.sampled_from([e, f"{callee}({args})", f"{callee}({args}) + {callee}({args})",
                                     f"where({e}, {callee}({args}), {e})"]))
        stmts.append(f"{name}({', '.join(params)}) = {body}")
    callee = draw(st.sampled_from(HELPER_NAMES + ["h0", "h1"]))
    args = ", ".join(draw(st.lists(st.sampled_from(["s", "b", "h", "i", "j", "3", "0.5"]), max_size=3)))
    stmts.append(draw(st.sampled_from([f"score(s, b, h, i, j) = s + {callee}({args})",
                                       f"score(s, b, h, i, j) = {callee}({args})",
                                       f"mask(b, h, i, j) = {callee}({args})",
                                       f"mask(b, h, i, j) = {callee}({args}) < j",
                                       f"W = {callee}({args})\n    mask(b, h, i, j) = i - j < W"])))
    return attention("\n    ".join(stmts))


@st.composite
def layout(draw, program) -> str:
    """The same program with other line endings, form feeds, tabs or a byte-order mark."""
    text = draw(program)
    how = draw(st.sampled_from(["as is", "as is", "crlf", "cr", "formfeed", "tabs", "bom"]))
    return {"as is": text, "crlf": text.replace("\n", "\r\n"), "cr": text.replace("\n", "\r"),
            "formfeed": text.replace("\n    ", "\n\f    "), "tabs": text.replace("    ", "\t"),
            "bom": "\ufeff" + text}[how]


def programs():
    """Every family, about equally often."""
    edges = st.one_of(constant_edges(), name_edges(), deep_edges(), typed_edges(), helper_edges())
    return layout(st.one_of(mutations(), grammar_programs(), edges, edges))
