import pytest
from hypothesis import given, settings

from kdsl import ir
from kdsl.errors import SourceError
from kdsl.grammar import parse
from kdsl.passes.typecheck import check_program

from exprgen import bool_expr, float_expr

HEAD = "q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]\n"


def check(body, kind="attention"):
    return check_program(parse(f"{kind} t {{\n{HEAD if kind == 'attention' else ''}{body}\n}}", "t.kd"))[0]


def test_literals_adapt_to_float_context():
    k = check("score(s, b, h, i, j) = 30 * tanh(s / 30)")
    assert ir.print_expr(k.func("score")) == "(mul:f32 30.0 (tanh:f32 (div:f32 s 30.0)))"


def test_constants_fold():
    k = check("w = 4 * 256\nmask(b, h, i, j) = i - j < w")
    assert ir.print_expr(k.func("mask")) == "(lt:bool (sub:i32 q kv) 1024)"


@pytest.mark.parametrize("body,needle", [
    ("score(s, b, h, i, j) = s + (i - j)", "cannot add float and int"),
    ("score(s, b, h, i, j) = s * i", "cannot multiply float and int"),
    ("mask(b, h, i, j) = i / 2 < j", "'/' divides floats"),
    ("score(s, b, h, i, j) = s // 2.0", "'//' needs integers"),
    ("score(s, b, h, i, j) = exp(i)", "exp() needs a float"),
    ("score(s, b, h, i, j) = j <= i", "score() must return float, got bool"),
    ("mask(b, h, i, j) = i - j", "mask() must return bool, got int"),
    ("mask(b, h, i, j) = i and j", "'and' needs bool operands"),
    ("score(s, b, h, i, j) = s + foo", "unknown variable 'foo'"),
    ("score(s, b, h, i, j) = tanhh(s)", "unknown function 'tanhh'; did you mean 'tanh'?"),
    ("score(s, b, h, i, j) = where(i < j, s)", "where() takes 3 arguments, got 2"),
    ("score(s, b, h, i) = s", "score() takes 5 parameters"),
    ("mask(b, h, i, j, x) = true", "mask() takes 4 parameters"),
    ("bias: f32[H]\nscore(s, b, h, i, j) = s + bias[h, i]", "'bias' has 1 dimension, indexed with 2"),
    ("bias: f32[H]\nscore(s, b, h, i, j) = s + bias", "'bias' is a tensor; index it"),
    ("bias: f32[H]\nscore(s, b, h, i, j) = s + bias[1.5]", "an index must be an integer"),
    ("score(s, b, h, i, j) = s + q[0, 0, 0, 0]", "cannot be indexed"),
    ("foo(s) = s", "unknown function definition 'foo'"),
    ("score(s, b, h, i, j) = s\nscore(s, b, h, i, j) = s", "defined twice"),
    ("bias: f64[H]", "unknown element type 'f64'"),
    ("bias: f32[H, Z + 1]", "unknown variable 'Z'"),
    ("mask(b, h, i, j) = i // 0 < j", "division by zero"),
    # a constant that reads a tensor is typed before the declarations are (found by test_fuzz)
    ("w: e4m3[B]\nc = w[3]", "'w' must have element type f32 or bf16 or f16 or i32 or i8 or u8 or bool, not e4m3"),
    ("w: f64[B]\nc = w[3]", "unknown element type 'f64'"),
])
def test_type_errors(body, needle):
    with pytest.raises(SourceError) as e:
        check(body)
    assert needle in e.value.message, e.value.message
    assert e.value.span is not None


@pytest.mark.parametrize("src,needle", [
    ("attention t { k: bf16[B, H, N, D]; v: bf16[B, H, N, D] }", "must declare 'q'"),
    ("attention t { q: bf16[B, H, M]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D] }", "must have 4 dimensions"),
    ("attention t { q: bf16[B, H, M, 100]; k: bf16[B, H, N, 100]; v: bf16[B, H, N, 100] }",
     "head dimension 100 is not supported: it must be a multiple of 16 from 16 to 256"),
    ("attention t { q: bf16[B, H, M, 512]; k: bf16[B, H, N, 512]; v: bf16[B, H, N, 512] }", "from 16 to 256"),
    ("attention t { q: bf16[B, H, M, 64]; k: bf16[B, H, N, 64]; v: bf16[B, H, N, 264] }",
     "value head dimension (v's last) 264 is not supported"),
    ("attention t { q: f32[B, H, M, D]; k: f32[B, H, N, D]; v: f32[B, H, N, D] }", "bf16 or f16"),
    ("attention t { q: bf16[B, H, M, D]; k: f16[B, H, N, D]; v: bf16[B, H, N, D] }", "same element type"),
    ("attention t { q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, M, E] }", "v must have k's batch, heads"),
    ("attention t { q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]; out: bf16[B, H, N, D] }",
     "out must have q's batch, heads and length and v's head dimension"),
    ("attention t { q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, E]; out: bf16[B, H, M, D] }",
     "out must have q's batch, heads and length and v's head dimension: got [B, H, M, D], expected [B, H, M, E]"),
    ("gemm g { a: e4m3[M, K] block(1, 128); b: e4m3[N, K] block(128, 128) }", "must declare 'out'"),
    ("gemm g { a: e4m3[M, K] block(1, 64); b: e4m3[N, K] block(128, 128); out: bf16[M, N] }", "block(1, 128)"),
    ("gemm g { a: e4m3[M, 100] block(1, 128); b: e4m3[N, 100] block(128, 128); out: bf16[M, N] }",
     "multiple of 128"),
    ("gemm g { a: e4m3[M, K] block(1, 128); b: e4m3[G, N, K] block(128, 128); out: bf16[M, N] }",
     "must declare 'group'"),
    ("gemm g { a: e4m3[M, K] block(1, 128); b: e4m3[N, K] block(128, 128); out: bf16[N, M] }", "out must have shape"),
    ("gemm g { a: e4m3[M, K] block(1, 128); b: e4m3[N, K] block(128, 128); out: bf16[M, N]; x = 1 }",
     "no constants"),
    ("gemm g { a: e4m3[M, K] block(1, 128); b: e4m3[N, K] block(128, 128); out: bf16[M, N] accumulate }",
     "declare out f32, not bf16"),
    ("gemm g { a: e4m3[M, K] block(1, 128) accumulate; b: e4m3[N, K] block(128, 128); out: f32[M, N] }",
     "'accumulate' applies to a gemm kernel's out only"),
    ("attention t { q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]; out: bf16[B, H, M, D] accumulate }",
     "'accumulate' applies to a gemm kernel's out only"),
])
def test_shape_errors(src, needle):
    with pytest.raises(SourceError) as e:
        check_program(parse(src, "t.kd"))
    assert needle in e.value.message, e.value.message


def test_gqa_and_free_capture_dims():
    k = check("bias: f32[H, T]\nscore(s, b, h, i, j) = s + bias[h, min(max(i - j + N, 0), T - 1)]")
    assert k.dims["Hkv"] == ("k", 1) and k.dims["T"] == ("bias", 1)


def test_gemm_groupings():
    kinds = {}
    for name, body in {
        "dense": "a: e4m3[M, K] block(1, 128); b: e4m3[N, K] block(128, 128); out: bf16[M, N]",
        "contiguous": "a: e4m3[M, K] block(1, 128); b: e4m3[G, N, K] block(128, 128); group: i32[M]; out: bf16[M, N]",
        "masked": "a: e4m3[G, M, K] block(1, 128); b: e4m3[G, N, K] block(128, 128); count: i32[G]; out: f32[G, M, N]",
    }.items():
        kinds[name] = check(body, "gemm").attr("grouping")
    assert kinds == {"dense": "dense", "contiguous": "contiguous", "masked": "masked"}


def test_a_capture_named_scale_is_refused_at_its_name():
    """Regression: a captured tensor named 'scale' compiled, but `mod.t(q, k, v, scale=x)` then
    passed x as the softmax scale: the name clashes with the `scale=` argument of every call."""
    with pytest.raises(SourceError) as e:
        check("w: f32[H]\nscale: f32[H]\nscore(s, b, h, i, j) = s * scale[h]")
    assert "'scale' names the softmax scale" in e.value.message and "another name" in e.value.message
    assert (e.value.span.line, e.value.span.col, e.value.span.end_col) == (4, 1, 5)
    renamed = check("scale_t: f32[H]\nscore(s, b, h, i, j) = s * scale_t[h]")
    assert [t.name for t in renamed.tensors if t.role == "capture"] == ["scale_t"]


@settings(max_examples=150, deadline=None)
@given(score=float_expr(depth=3), mask=bool_expr(depth=3))
def test_expressions_quoted_for_users_read_back_as_the_same_ir(score, mask):
    """ir.format_expr, which launch errors use to quote a program's expressions, writes kdsl
    source: re-checked, the text gives the same IR (precedence and parentheses kept)."""
    body = f"tbl: f32[N]\nscore(s, b, h, i, j) = {score} + tbl[min(max(i - j, 0), N - 1)]\nmask(b, h, i, j) = {mask}"
    k = check(body)
    params = dict(k.params)
    again = check("tbl: f32[N]\n" + "\n".join(
        f"{f}({', '.join(user for _, user in params[f])}) = {ir.format_expr(k.func(f), k.param_names(f))}"
        for f in ("score", "mask")))
    assert again.funcs == k.funcs


def test_accumulate_is_a_kernel_attr_located_at_its_word():
    body = "a: e4m3[M, K] block(1, 128); b: e4m3[N, K] block(128, 128); out: f32[M, N] accumulate"
    k = check(body, "gemm")
    assert k.attr("accumulate") is True and k.tensor("out").dtype == "f32"
    assert check(body.replace(" accumulate", ""), "gemm").attr("accumulate") is None
    with pytest.raises(SourceError) as e:
        check_program(parse("gemm g {\n a: e4m3[M, K] block(1, 128)\n b: e4m3[N, K] block(128, 128)\n"
                            " out: bf16[M, N] accumulate\n}", "t.kd"))
    assert (e.value.span.line, e.value.span.col, e.value.span.end_col) == (4, 18, 27)
