"""`kdsl tune --rewriter llm` against a real HTTP server on loopback (tests/chatserver.py)
that answers in the OpenAI chat-completions format with scripted answers: one correct
rewrite, and everything a model (or an attacker behind one) might send instead. Only the
correct rewrite may be accepted, and each other answer must be rejected for its own reason."""
import json

import pytest

from chatserver import ChatServer
from conftest import ROOT
from kdsl.cli import main

RELPOS = str(ROOT / "samples" / "relpos.kd")
LOG2E = "1.4426950408889634"
SCORE = f"(add:f32 (mul:f32 qk scale_log2) (mul:f32 (float:f32 (sub:i32 q kv)) {LOG2E}))"


def fence(*lines, lang=""):
    return f"```{lang}\n" + "\n".join(lines) + "\n```"


CORRECT = ("The q term is the same for a whole row, and softmax does not see a constant per row, so drop it:\n\n"
           + fence(f"def score_log2 = (sub:f32 (mul:f32 qk scale_log2) (mul:f32 (float:f32 kv) {LOG2E}))", lang="ir")
           + "\nThis saves an integer subtraction per element.")

# (script steps for one proposal, what its verdict must say)
SCRIPT = [
    ([CORRECT], "accepted"),
    # semantically wrong: only on the first row, only on the last partial kv tile, a flipped sign,
    # a scale hard-coded for D = 64 (right only at the default scale of one head dim)
    ([fence(f"def score_log2 = (add:f32 {SCORE} (where:f32 (eq:bool q 0) (float:f32 kv) 0.0))")], "semantics differ"),
    ([fence(f"def score_log2 = (add:f32 {SCORE} (where:f32 (ge:bool kv (mul:i32 (floordiv:i32 N 128) 128)) "
            "3.0 0.0))")], "semantics differ"),
    ([fence(f"def score_log2 = (add:f32 (mul:f32 qk scale_log2) (mul:f32 (float:f32 (sub:i32 kv q)) {LOG2E}))")],
     "semantics differ"),
    ([fence(f"def score_log2 = (add:f32 (mul:f32 qk 0.18033688011112042) (mul:f32 (float:f32 (sub:i32 q kv)) "
            f"{LOG2E}))")], "semantics differ"),
    # a mask smuggled into the score, and one declared outright (relpos has none)
    ([fence(f"def score_log2 = (where:f32 (le:bool kv q) {SCORE} -inf)")], "semantics differ"),
    ([fence("def mask = (le:bool kv q)")], "has no mask"),
    # malformed IR, prose, markdown around the IR
    ([fence("def score_log2 = (add:f32 (mul:f32 qk scale_log2)")], "malformed IR"),
    (["Increase the tile to 256 columns and use 4 stages; that should improve occupancy."], "no fenced code block"),
    (["Use `def score_log2 = (mul:f32 qk scale_log2)` here."], "no fenced code block"),
    ([fence("- **def score_log2** = `(mul:f32 qk scale_log2)`", "* attr tile_n = 256", lang="markdown")],
     "no 'def NAME = ...'"),
    # a type error, an unknown name, a def that is not offered
    ([fence("def score_log2 = (add:f32 (mul:f32 qk scale_log2) (sub:i32 q kv))")], "type error"),
    ([fence("def score_log2 = (add:f32 (mul:f32 qk scale_log2) bias)")], "unknown variable 'bias'"),
    ([fence("def fast_score = (mul:f32 qk scale_log2)")], "not offered"),
    # an illegal tile size, an attribute that is not tunable
    ([fence("attr tile_n = 100")], "illegal schedule"),
    ([fence("attr smem_bytes = 65536")], "not tunable"),
    # text that would run if evaluated
    ([fence("def score_log2 = __import__('os').system('touch PWNED')")], "malformed IR"),
    ([fence("attr stages = __import__('os').system('touch PWNED')")], "not JSON"),
    # transport: HTTP 500 (retried once, then given up), 429 with Retry-After before a (wrong) answer,
    # answers slower than the timeout, an answer past the size cap
    ([{"status": 500}, {"status": 500}], "HTTP 500 after 2 attempt(s)"),
    ([{"status": 429, "retry_after": "1"}, fence("def score_log2 = (add:f32 qk 1)")], "type error"),
    ([{"delay": 2.5, "text": CORRECT}, {"delay": 2.5, "text": CORRECT}], "no answer within 0.5 s"),
    ([{"huge": 3_000_000}], "larger than"),
]


def test_only_the_correct_rewrite_is_accepted(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KDSL_LLM_API_KEY", "sk-test-secret-123")
    steps = [s for answers, _ in SCRIPT for s in answers]
    log = tmp_path / "tune.jsonl"
    with ChatServer(steps) as server:
        rc = main(["tune", RELPOS, "--rewriter", "llm", "--llm", server.url, "--model", "scripted-model",
                   "--verify-only", "--interpret", "--timeout", "0.5", "--retries", "1",
                   "--proposals", str(len(SCRIPT)), "--log", str(log)])
    assert rc == 0
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(entries) == len(SCRIPT)
    for entry, (_, expected) in zip(entries, SCRIPT):
        if expected == "accepted":
            assert entry["verdict"].startswith("accepted"), entry
        else:
            assert entry["verdict"].startswith("rejected: "), entry
            assert expected in entry["verdict"], (expected, entry["verdict"])
    assert sum(e["verdict"].startswith("accepted") for e in entries) == 1
    assert not (tmp_path / "PWNED").exists()
    # Every step was requested; the 429's Retry-After was honoured.
    assert len(server.requests) == len(steps)
    i429 = steps.index(next(s for s in steps if isinstance(s, dict) and s.get("status") == 429))
    assert server.requests[i429 + 1]["time"] - server.requests[i429]["time"] >= 1.0
    # The protocol: the model, the lowered IR and what may change, and the history of outcomes.
    first, second = server.requests[0], server.requests[1]
    assert first["path"] == "/v1/chat/completions" and first["body"]["model"] == "scripted-model"
    user = first["body"]["messages"][-1]["content"]
    assert "def score_log2 = " in user and "attr tile_n:" in user and "sm_90a" in user
    assert "accepted" in second["body"]["messages"][-1]["content"]
    # The key goes to the server, never into the log or the output.
    assert first["headers"]["Authorization"] == "Bearer sk-test-secret-123"
    assert "sk-test-secret" not in log.read_text() + capsys.readouterr().out


def test_client_gives_up_on_an_answer_that_is_not_a_chat_completion():
    from kdsl.tune.llm_client import Client, LlmError
    with ChatServer([{"raw": b'{"result": "def score_log2 = ..."}'}, {"status": 404}]) as server:
        client = Client(server.url, "m", timeout=5, retries=2, backoff=0.01)
        with pytest.raises(LlmError, match="not a chat completion"):
            client.complete([{"role": "user", "content": "x"}])
        with pytest.raises(LlmError, match="HTTP 404"):  # not retried: the request itself is wrong
            client.complete([{"role": "user", "content": "x"}])
        assert client.attempts == 1
        client.close()


def test_retry_after_as_an_http_date():
    import email.utils
    import time
    from kdsl.tune.llm_client import _retry_after
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 < _retry_after(later) <= 31
    assert _retry_after("2") == 2.0 and _retry_after("garbage") == 0.0 and _retry_after(None) == 0.0


@pytest.mark.parametrize("argv, message", [
    (["--interpret"], "add --verify-only"),
    (["--rewriter", "llm", "--verify-only", "--interpret"], "--llm URL"),
    (["--verify-only", "--interpret", "-o", "x.ir"], "drop -o"),
    (["--verify-only", "--interpret", "--budget", "soon"], "--budget 'soon'"),
    (["--verify-only", "--interpret", "--kernel", "nope"], "no kernel 'nope'"),
    (["--verify-only", "--interpret", "--llm", "http://x"], "go with --rewriter llm"),
    (["--rewriter", "llm", "--llm", "localhost:8000/v1", "--model", "m", "--verify-only", "--interpret"],
     "expected an http:// or https:// URL"),
    (["--verify-only", "--interpret", "--retries", "-1"], "--retries needs"),
])
def test_option_mistakes_exit_1_with_a_message(argv, message, capsys, tmp_path):
    assert main(["tune", RELPOS, "--log", str(tmp_path / "l.jsonl"), *argv]) == 1
    assert message in capsys.readouterr().err
