import pytest

from kdsl import ast
from kdsl.errors import SourceError
from kdsl.grammar import parse

from conftest import SAMPLES


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_every_sample_parses(path):
    prog = parse(path.read_text(), str(path))
    assert prog.kernels and prog.kernels[0].name == path.stem


def test_spans_cover_the_expression():
    src = "attention a {\n  q: bf16[B, H, M, D]\n  score(s, b, h, i, j) = s + float(i - j)\n}\n"
    k = parse(src, "x.kd").kernels[0]
    fd = k.body[1]
    assert isinstance(fd, ast.FuncDef)
    assert (fd.body.span.line, fd.body.span.col, fd.body.span.end_col) == (3, 26, 41)


def test_precedence():
    k = parse("attention a { x = 1 + 2 * 3 - 4 // 2 }", "p.kd").kernels[0]
    e = k.body[0].value
    assert e.op == "sub" and e.lhs.op == "add" and e.lhs.rhs.op == "mul" and e.rhs.op == "floordiv"


def test_and_binds_tighter_than_or_and_not_tighter_than_and():
    e = parse("attention a { x = not p and q or r }", "p.kd").kernels[0].body[0].value
    assert e.op == "or" and e.lhs.op == "and" and e.lhs.lhs.op == "not"


@pytest.mark.parametrize("src,line,col,needle", [
    ("attention a { q: bf16[B, H, M D] }", 1, 31, "unexpected 'D'"),
    ("attention a {", 1, 13, "unexpected end of file"),
    ("attention a { q = 1 $ }", 1, 21, "unexpected character '$'"),
    ("attention a {\n  q = (1 + \n}", 3, 1, "unexpected '}'"),
    ("", 1, 1, "no kernels"),
    ("kernel a {}", 1, 1, "unexpected"),
])
def test_syntax_errors_are_located(src, line, col, needle):
    with pytest.raises(SourceError) as e:
        parse(src, "bad.kd")
    assert (e.value.span.line, e.value.span.col) == (line, col)
    assert needle in e.value.message


SMALL = "attention p { q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D] }"


def test_parser_tables_cached_in_kdsl_cache_dir_and_a_bad_cache_is_rebuilt(tmp_path, monkeypatch):
    """Lark's tables are cached (parse ~0.05 s less per process) in the user's kdsl cache
    directory; a corrupt or truncated cache file is rebuilt, and an unusable directory only
    means no cache."""
    from kdsl.grammar import parser
    monkeypatch.setenv("KDSL_CACHE_DIR", str(tmp_path))
    parser._lark.cache_clear()
    try:
        assert parser.parse(SMALL).kernels
        cached = list(tmp_path.glob("grammar-lark*.pickle"))
        assert len(cached) == 1
        good = cached[0].read_bytes()
        for bad in (b"garbage\n", good[:200]):
            cached[0].write_bytes(bad)
            parser._lark.cache_clear()
            assert parser.parse(SMALL).kernels
            again = cached[0].read_bytes()  # rewritten whole (a pickle need not be byte-identical)
            assert again.split(b"\n")[0] == good.split(b"\n")[0] and len(again) > len(bad)
        blocker = tmp_path / "not-a-dir"
        blocker.write_text("x")
        monkeypatch.setenv("KDSL_CACHE_DIR", str(blocker / "sub"))
        parser._lark.cache_clear()
        assert parser.parse(SMALL).kernels
    finally:
        parser._lark.cache_clear()
