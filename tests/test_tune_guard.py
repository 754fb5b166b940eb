"""The guard's layers one at a time, and the protocol that feeds it.

Each semantic layer must stand on its own: with the float64 expression check switched off,
the judge (kdsl check through the interpreter) still rejects wrong rewrites, including ones
wrong only on the first row or in the last partial tile; with the judge switched off, the
expression check does."""
import pytest

import kdsl
from conftest import ROOT
from kdsl.passes.target import get_target
from kdsl.tune import exprcheck, protocol
from kdsl.tune.guard import Guard

TARGET = get_target("sm_90a")
LOG2E = "1.4426950408889634"


def _kernel(sample):
    mod = kdsl.load(ROOT / "samples" / f"{sample}.kd", interpret=True)
    return next(iter(mod.ir.values()))


def _verify(k, lines, guard=None):
    guard = guard or Guard(k, TARGET, interpret=True, seed=3)
    return guard.verify(protocol.extract(f"```\n{lines}\n```", k), k)


# (sample, proposal, wrong where) -- each is wrong by construction
WRONG = [
    ("causal", "def mask = (and:bool (le:bool kv q) (ne:bool q 0))", "the first row loses its only key"),
    ("causal", "def tile_full = true", "diagonal tiles skip the mask"),
    ("causal", "def tile_empty = (ge:bool k1 q0)", "diagonal tiles skipped"),
    ("plain", "def score_log2 = (add:f32 (mul:f32 qk scale_log2) (where:f32 (ge:bool kv (mul:i32 (floordiv:i32 N 128) "
              "128)) 3.0 0.0))", "the last partial kv tile weighs 8x"),
    ("plain", "def score_log2 = (add:f32 (mul:f32 qk scale_log2) (where:f32 (eq:bool q (sub:i32 M 1)) "
              "(float:f32 kv) 0.0))", "the last row"),
    ("softcap", "def score_log2 = (mul:f32 (tanh:f32 (div:f32 (mul:f32 qk scale) 3.0)) 43.2808512266689)",
     "capped at the wrong scale"),
    ("alibi", f"def score_log2 = (sub:f32 (mul:f32 qk scale_log2) (mul:f32 (mul:f32 (load:f32 slopes 0) "
              f"(float:f32 (abs:i32 (sub:i32 q kv)))) {LOG2E}))", "every head gets head 0's slope"),
]


@pytest.mark.parametrize("sample, lines, why", WRONG)
def test_judge_alone_rejects_wrong_rewrites(sample, lines, why, monkeypatch):
    monkeypatch.setattr(exprcheck, "check", lambda *a: None)
    v = _verify(_kernel(sample), lines)
    assert not v.accepted and v.stage == "judged", (why, v.reason)


@pytest.mark.parametrize("sample, lines, why", WRONG)
def test_expression_check_alone_rejects_wrong_rewrites(sample, lines, why, monkeypatch):
    monkeypatch.setattr(Guard, "_judge", lambda self, c, r: pytest.fail(f"reached the judge: {why}"))
    v = _verify(_kernel(sample), lines)
    assert not v.accepted and v.stage == "exprs", (why, v.reason)


RIGHT = [
    ("causal", "def mask = (ge:bool q kv)"),
    ("causal", "def tile_full = false"),
    ("softcap", "def score_log2 = (mul:f32 (tanh:f32 (mul:f32 qk (mul:f32 scale 0.03333333333333333))) 43.2808512266689)"),
    ("relpos", f"def score_log2 = (sub:f32 (mul:f32 qk scale_log2) (mul:f32 (float:f32 kv) {LOG2E}))"),
    ("natten2d", 'attr tile_n = 64\nattr consumers = 1\nattr math = "fast"'),
]


@pytest.mark.parametrize("sample, lines", RIGHT)
def test_correct_rewrites_pass_both_layers(sample, lines):
    v = _verify(_kernel(sample), lines)
    assert v.accepted, v.reason


def test_a_row_shift_is_refused_when_the_kernel_returns_lse():
    k = kdsl.compile("""attention with_lse {
        q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]; lse: f32[B, H, M]
        score(s, b, h, i, j) = s + float(i - j)
    }""", "lse.kd", interpret=True).ir["with_lse"]
    v = _verify(k, f"def score_log2 = (sub:f32 (mul:f32 qk scale_log2) (mul:f32 (float:f32 kv) {LOG2E}))")
    assert not v.accepted and "differs" in v.reason


def test_tile_predicates_must_hold_for_other_tile_sizes():
    """A predicate that is exact only on the 128-row grid (k0 > q0 there means k0 > q1)
    would break the day the tile changes: refused."""
    v = _verify(_kernel("causal"), "def tile_empty = (gt:bool k0 q0)")
    assert not v.accepted and v.stage == "exprs" and "tile_empty" in v.reason


def test_tile_predicates_that_read_the_tile_summary_are_checked_per_tile():
    """Predicates over (qmin e) ... (tmax e) are evaluated as the GPU's summary holds them, per
    tile (the check once stopped on them with an AttributeError): the derived ones pass, one
    that calls a block full from its documents' first ids alone is refused."""
    k = _kernel("document_mask")
    assert exprcheck.check(k, k, TARGET, 0) is None
    dense = kdsl.load(ROOT / "bench" / "variants.kd", interpret=True).ir["bool_attn_mask"]
    assert exprcheck.check(dense, dense, TARGET, 0) is None  # (tmin e) / (tmax e) over whole blocks
    wrong = protocol.extract("```\ndef tile_full = (and:bool (eq:bool (qmin:i32 (load:i32 doc_q b q)) (kvmin:i32 "
                             "(load:i32 doc_kv b kv))) (le:bool k1 q0))\n```", k).apply(k)
    problem = exprcheck.check(k, wrong, TARGET, 0)
    assert problem is not None and "tile_full holds for a tile with masked elements" in problem, problem


def test_the_interpreter_judges_the_candidates_own_tile_sizes():
    """The judge's shapes sit at the candidate's tile edges (tile +- 1), not the original's."""
    k = _kernel("causal")
    guard = Guard(k, TARGET, interpret=True)
    cand = protocol.extract("```\nattr tile_n = 80\nattr consumers = 1\n```", k).apply(k)
    shapes = guard._attention_shapes(cand)
    assert {s.M for s in shapes} >= {65, 131} and {s.N for s in shapes} >= {79, 81, 165}


@pytest.mark.parametrize("answer, reason", [
    ("<think>```\ndef score_log2 = (mul:f32 qk scale_log2)\n```</think>no code", "no fenced code block"),
    ("```\nprint('hi')\n```", "no 'def NAME"),
    ("```\n" + "\n".join(f"attr stages = {i}" for i in range(3)) + "\n```", "replaced twice"),
    ("```\n" + "\n".join(f"attr a{i} = 1" for i in range(protocol.MAX_LINES + 1)) + "\n```", "lines, over"),
    ("x" * (protocol.MAX_ANSWER_CHARS + 1), "characters, over"),
    ("```\ndef score_log2 = " + "(neg:f32 " * 300 + "qk" + ")" * 300 + "\n```", "deeper than"),
])
def test_extract_refuses_with_a_reason(answer, reason):
    with pytest.raises(protocol.ProposalError, match=reason):
        protocol.extract(answer, _kernel("relpos"))


def test_extract_takes_only_the_last_block_with_replacement_lines():
    k = _kernel("relpos")
    p = protocol.extract("try this\n```\nattr stages = 2\n```\nno, better:\n```ir\nwhatever\n  attr stages = 4\n"
                         "attr tile_n = 64\nprose in the block is ignored\n```\n```\nnot code\n```", k)
    assert p.attrs == (("stages", 4), ("tile_n", 64)) and not p.defs
    assert p.lines() == "attr stages = 4\nattr tile_n = 64"


def test_messages_show_the_ir_the_offer_and_the_history():
    k = _kernel("causal")
    from kdsl import ir
    from kdsl.passes import pipeline
    low = ir.print_ir(pipeline.lower(k, TARGET, 64))
    history = [{"lines": "attr tile_n = 64", "verdict": "rejected: not faster beyond noise",
                "time_ms": {"candidate": 1.5, "best": 1.2}, "resources": {"registers": 168, "spill_ops": 0}}]
    user = protocol.messages(low, k, TARGET, "sm_90a (H100)", history, (64, 128))[-1]["content"]
    for part in ("def tile_empty = (gt:bool k0 q1)", "- def mask", "- def tile_full", "attr stages: 2, 3",
                 "head dims 64, 128", "sm_90a (H100)", "rejected: not faster", "registers 168"):
        assert part in user, part
