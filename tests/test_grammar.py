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


@pytest.mark.parametrize("expr,at,hint", [
    # at: where the error points, as the text from there on
    ("torch.tanh(s)", ".tanh(s)", "call a function by its name, tanh(s) for torch.tanh(s)"),
    ("s.clamp(-5, 5)", ".clamp(-5, 5)", "clamp with min(max(x, lo), hi)"),
    ("where((j <= i) & (i - j < 9), s, 0.0)", "& (i", "conditions combine with 'and', 'or' and 'not', not & or &&"),
    ("where(j <= i || j == 0, s, 0.0)", "|| j", "conditions combine with 'or'"),
    ("where(!(j <= i), s, 0.0)", "!(j", "negate a condition with 'not'"),
    ("s if j <= i else -inf", "j <= i else", "choose with where(cond, a, b), not a if c else b"),
    ("s ** 2", "* 2", "kdsl has no power operator; write s * s"),
    ("s + bias[h][i - j]", "[i - j]", "index with one pair of brackets: bias[h, i - j], not bias[h][i - j]"),
    ("where(i >= j >= i - 128, s, 0.0)", ">= i - 128", "comparisons do not chain; write a <= b and b <= c"),
    ("where(j <= i, s, float('-inf'))", "'-inf'", "write -inf for float('-inf')"),
])
def test_python_habits_get_the_kdsl_form(expr, at, hint):
    """A parse that fails on a Python or C habit says what to write instead, at the same place."""
    head = "score(s, b, h, i, j) = "
    with pytest.raises(SourceError) as e:
        parse(f"attention a {{\n{head}{expr}\n}}", "bad.kd")
    assert (e.value.span.line, e.value.span.col) == (2, len(head) + expr.rindex(at) + 1), e.value.message
    assert hint in e.value.message, e.value.message


def test_no_hint_where_no_habit_shows():
    with pytest.raises(SourceError) as e:
        parse("attention a { q = 1 $ }", "bad.kd")
    assert e.value.message == "unexpected character '$'"


# --- the parse tables kept on disk (parser._lark) ------------------------------------------
BAD_SOURCES = ["attention a { q: bf16[B, H, M D] }", "attention a { q = 1 $ }", "attention a {"]


def _outcome(src):
    try:
        return parse(src, "t.kd")
    except SourceError as e:
        return ("error", str(e), e.span.line, e.span.col)


@pytest.fixture
def tables(tmp_path, monkeypatch):
    """Parse tables kept in tmp_path/tables only; counts how often Lark builds them."""
    import lark
    from kdsl.grammar import parser
    builds = []
    real_init = lark.Lark.__init__
    monkeypatch.setattr(lark.Lark, "__init__", lambda self, *a, **k: (builds.append(1), real_init(self, *a, **k))[1])
    monkeypatch.setattr(parser, "_table_dirs", lambda: [tmp_path / "tables"])
    parser._lark.cache_clear()
    yield tmp_path / "tables", builds
    parser._lark.cache_clear()


def _fresh_process_parse(srcs):
    from kdsl.grammar import parser
    parser._lark.cache_clear()  # as a new process finds it
    return [_outcome(s) for s in srcs]


def test_parse_tables_are_kept_and_parse_exactly_as_built_ones(tables):
    d, builds = tables
    srcs = [p.read_text() for p in SAMPLES] + BAD_SOURCES
    built = _fresh_process_parse(srcs)
    assert len(builds) == 1 and len(list(d.glob("kdsl-grammar-*.lark"))) == 1
    loaded = _fresh_process_parse(srcs)
    assert len(builds) == 1, "the kept tables were not used"
    assert loaded == built  # same ASTs (spans included) and the same located errors


@pytest.mark.parametrize("damage", [b"", b"garbage", "truncate"])
def test_damaged_parse_tables_are_rebuilt(tables, damage):
    d, builds = tables
    srcs = [SAMPLES[0].read_text()] + BAD_SOURCES
    want = _fresh_process_parse(srcs)
    (path,) = d.glob("kdsl-grammar-*.lark")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2] if damage == "truncate" else damage)
    assert _fresh_process_parse(srcs) == want and len(builds) == 2
    assert _fresh_process_parse(srcs) == want and len(builds) == 2  # rewritten whole


def test_nowhere_to_keep_parse_tables_costs_only_the_build(tables, monkeypatch, tmp_path):
    from kdsl.grammar import parser
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setattr(parser, "_table_dirs", lambda: [blocker / "tables", blocker])
    srcs = [SAMPLES[0].read_text()] + BAD_SOURCES
    first = _fresh_process_parse(srcs)
    assert _fresh_process_parse(srcs) == first and len(tables[1]) == 2
    assert isinstance(first[0], ast.Program)
