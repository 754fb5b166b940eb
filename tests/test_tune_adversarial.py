"""The guard under attack, as CI runs it: `kdsl tune --verify-only --interpret` judges
generated adversarial proposals (tests/tuneadversary.py) served by a loopback chat endpoint,
on the CPU. Every wrong one must be rejected and every correct one accepted: the guard is
neither fooled nor so strict that it refuses the rewrites it exists to let through."""
import json

from chatserver import ChatServer
from conftest import ROOT
from kdsl.cli import main
from tuneadversary import proposals


def test_generated_adversarial_proposals(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    items = proposals(seed=10)
    assert len(items) >= 200 and sum(ok for _, ok, _ in items) >= 30
    log = tmp_path / "adversarial.jsonl"
    with ChatServer([text for text, _, _ in items]) as server:
        assert main(["tune", str(ROOT / "samples" / "alibi.kd"), "--rewriter", "llm", "--llm", server.url,
                     "--model", "adversary", "--verify-only", "--interpret", "--proposals", str(len(items)),
                     "--log", str(log)]) == 0
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(entries) == len(items)
    wrong_accepted = [(label, e["lines"]) for e, (_, ok, label) in zip(entries, items)
                      if not ok and e["verdict"].startswith("accepted")]
    right_rejected = [(label, e["verdict"]) for e, (_, ok, label) in zip(entries, items)
                      if ok and not e["verdict"].startswith("accepted")]
    assert not wrong_accepted, wrong_accepted
    assert not right_rejected, right_rejected
    assert all(e["verdict"].startswith(("accepted", "rejected: ")) for e in entries)
    assert not (tmp_path / "PWNED").exists()
