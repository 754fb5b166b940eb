"""The tuning loop on the CPU: a stand-in for the GPU timer whose costs favour the
hand-tuned schedule, so that the search's descent from a naive schedule, the acceptance
rule, the tuned IR file, the log and resuming from it are tested without a GPU
(tools/dev/tune_recovery.py measures the real thing). The guard's expression check runs as
always; its judge (tested in test_tune_guard.py, and run on the result here through
`kdsl check --interpret`) is replaced where only the loop is under test, to keep CI fast."""
import json

import pytest

import kdsl
from conftest import ROOT
from kdsl import ir
from kdsl.cli import main
from kdsl.passes import pipeline, tiling
from kdsl.passes.target import get_target
from kdsl.tune import log as tunelog
from kdsl.tune.loop import Options, source_digest, summary, tune_kernel, write_program
from kdsl.tune.rewriters import Search

H100 = get_target("sm_90a")
NAIVE = dict(tile_n=64, consumers=1, stages=2, math="exact")


class FakeBench:
    """Milliseconds as a function of the schedule, lowest at the hand-tuned table's choice."""
    def __init__(self):
        self.compared = 0

    @staticmethod
    def cost(k):
        low = pipeline.lower(k, H100, 128)
        bn, c, s = tiling.WGMMA_ATTENTION_TILES[128]
        return ((1.0 if low.attr("math") == "fast" else 1.4) * (1 + abs(low.attr("tile_n") - bn) / 256)
                * (1 + 0.3 * abs(low.attr("consumers") - c)) * (1 + 0.1 * abs(low.attr("stages") - s)))

    def time(self, k, rounds=5):
        return [self.cost(k)] * rounds

    def compare(self, best, cand):
        self.compared += 1
        b, c = self.cost(best), self.cost(cand)
        return c < 0.99 * b, {"best": b, "candidate": c, "best_interval": [b, b], "candidate_interval": [c, c]}


@pytest.fixture
def quick_judge(monkeypatch):
    from kdsl.tune.guard import Guard, Verdict
    monkeypatch.setattr(Guard, "_judge", lambda self, cand, res: Verdict(True, "accepted", "judged", cand, None, res))


def _naive_relpos():
    return kdsl.load(ROOT / "samples" / "relpos.kd", interpret=True).ir["relpos"].with_attrs(**NAIVE)


def _run(k, log_path, proposals, bench=None):
    opts = Options(proposals=proposals, budget_s=600, interpret=True, seed=1)
    log = tunelog.Log(log_path)
    return tune_kernel(k.name, k, H100, "sm_90a (test)", Search(), log, "digest", opts, bench or FakeBench())


def test_search_recovers_the_tuned_schedule_from_a_naive_one(tmp_path, quick_judge):
    bench = FakeBench()
    r = _run(_naive_relpos(), tmp_path / "log.jsonl", 200, bench)
    assert any("nothing more to propose" in n for n in r.notes)  # the descent converged
    low = pipeline.lower(r.best, H100, 128)
    bn, c, s = tiling.WGMMA_ATTENTION_TILES[128]
    assert (low.attr("tile_n"), low.attr("consumers"), low.attr("stages"), low.attr("math")) == (bn, c, s, "fast")
    assert r.best_ms == pytest.approx(FakeBench.cost(r.best)) and r.baseline_ms / r.best_ms > 2
    accepted = [e for e in r.entries if e["verdict"].startswith("accepted")]
    slower = [e for e in r.entries if "not faster" in e["verdict"]]
    assert accepted and slower and bench.compared == len(accepted) + len(slower)
    assert all(e["program"] for e in accepted)  # each acceptance logs the whole tuned overlay
    text = summary(r)
    assert "fast_1 " in text and f"best {r.baseline_ms / r.best_ms:.3f}x" in text


def test_tuned_program_file_loads_compiles_and_checks(tmp_path, capsys):
    r = _run(_naive_relpos(), tmp_path / "log.jsonl", 5)
    out = tmp_path / "relpos.tuned.ir"
    source = ROOT / "samples" / "relpos.kd"
    write_program(out, {"relpos": r}, {"relpos": r.original}, str(source), "abc", ["target sm_90a (test)"])
    text = out.read_text()
    assert text.startswith("# kdsl tune: tuned from") and "relpos: 5 proposals" in text
    mod = kdsl.load(out, interpret=True)
    assert mod.ir["relpos"] == r.best
    assert main(["check", str(out), "--interpret", "--trials", "1"]) == 0
    assert main(["compile", str(out), "--emit", "cuda", "-o", str(tmp_path / "cu")]) == 0
    low = pipeline.lower(r.best, H100, 64)
    cu = (tmp_path / "cu" / "relpos_d64.cu").read_text()
    assert f"attention_fwd_wgmma<kdsl::bf16_t, 64, 64, {low.attr('tile_n')}, {low.attr('consumers')}, " \
           f"{low.attr('stages')}," in cu
    capsys.readouterr()


def test_resume_continues_from_the_log(tmp_path, quick_judge):
    log = tmp_path / "log.jsonl"
    first = _run(_naive_relpos(), log, 10)
    assert len(first.entries) == 10
    second = _run(_naive_relpos(), log, 16)
    assert [e["index"] for e in second.entries] == list(range(16))
    assert "resumed from the log's last accepted program (verified again)" in second.notes
    # No proposal is judged twice against the same program.
    keys = [e["key"] for e in second.entries if e.get("key")]
    assert len(keys) == len(set(keys))
    assert FakeBench.cost(second.best) <= FakeBench.cost(first.best)


def test_resume_refuses_a_tampered_log(tmp_path, quick_judge):
    log = tmp_path / "log.jsonl"
    _run(_naive_relpos(), log, 6)
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    last = max(i for i, e in enumerate(entries) if e["verdict"].startswith("accepted"))
    entries[last]["program"] += "\ndef score_log2 = (mul:f32 qk scale_log2)"  # drops relpos' bias
    log.write_text("".join(json.dumps(e) + "\n" for e in entries) + "{not json\n")
    r = _run(_naive_relpos(), log, 7)
    assert any("fails the guard now" in n for n in r.notes)
    assert r.entries[-1]["index"] == 6 and tunelog.Log(log).unreadable == 1


def test_verify_only_judges_each_proposal_on_its_own(tmp_path, capsys):
    """No accumulation, no timing, no output file; the summary counts by stage."""
    log = tmp_path / "v.jsonl"
    assert main(["tune", str(ROOT / "samples" / "causal.kd"), "--verify-only", "--interpret", "--proposals", "6",
                 "--log", str(log)]) == 0
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(entries) == 6 and all(e["verdict"] == "accepted (verified; not timed)" for e in entries)
    assert all("time_ms" not in e for e in entries)
    out = capsys.readouterr().out
    assert "causal: 6 proposals, 6 correct (100%)" in out and "tuned program" not in out


def test_budget_stops_the_loop(tmp_path, quick_judge):
    opts = Options(proposals=1000, budget_s=0.5, verify_only=True, interpret=True)
    r = tune_kernel("relpos", _naive_relpos(), H100, "t", Search(), tunelog.Log(tmp_path / "l.jsonl"), "d", opts)
    assert 1 <= len(r.entries) < 1000 and any("budget" in n for n in r.notes)


def test_overlay_and_digest():
    from kdsl.tune.loop import overlay
    k = _naive_relpos()
    tuned = k.with_attrs(tile_n=128).with_func("score_log2", ir.Var("f32", "qk"))
    assert overlay(k, tuned) == "def score_log2 = qk\nattr tile_n = 128"
    assert source_digest("a") != source_digest("b")


def test_gpu_path_records_registers_and_spills_from_the_cubin(monkeypatch):
    """Without --interpret the guard builds each candidate with NVRTC (no GPU needed for that)
    and reads its SASS; only the judge and the timer need the device."""
    from kdsl.tune import protocol
    from kdsl.tune.guard import Guard, Verdict
    monkeypatch.setattr(Guard, "_judge", lambda self, cand, res: Verdict(True, "accepted", "judged", cand, None, res))
    k = kdsl.load(ROOT / "samples" / "causal.kd", interpret=True).ir["causal"]
    v = Guard(k, H100, interpret=False).verify(protocol.extract("```\nattr tile_n = 64\n```", k), k)
    assert v.accepted and v.resources["registers"] > 0 and v.resources["spill_ops"] >= 0
    assert v.resources["smem_bytes"] == tiling.attention_wgmma_smem_bytes(128, 128, 64, 2, 3)


def test_shapes_and_budget_parse_or_say_why():
    from kdsl.errors import KdslError
    from kdsl.tune.command import parse_budget
    from kdsl.bench import parse_shape
    assert parse_shape("B=2,H=16,M=8192,N=8192,D=128", "attention") == dict(B=2, H=16, M=8192, N=8192, D=128)
    assert parse_shape("M=128,N=7168,K=512,G=4", "gemm") == dict(M=128, N=7168, K=512, G=4)
    assert parse_shape("B=1,H=8,M=5,N=9,D=64,Hkv=2,Dv=128", "attention") == dict(B=1, H=8, M=5, N=9, D=64, Hkv=2, Dv=128)
    for bad in ("B=2,H=16,M=8192,N=8192", "B=2,H=16,M=0,N=1,D=64", "B=2,X=1", "B=two"):
        with pytest.raises(ValueError):
            parse_shape(bad, "attention")
    assert (parse_budget("15m"), parse_budget("90s"), parse_budget("1h"), parse_budget("2.5")) == (900, 90, 3600, 2.5)
    for bad in ("0", "-1m", "10 minutes", ""):
        with pytest.raises(KdslError, match="--budget"):
            parse_budget(bad)


@pytest.mark.skipif(__import__("conftest").gpu_available(), reason="on a GPU this would tune")
def test_tuning_without_a_gpu_says_so(capsys, tmp_path):
    assert main(["tune", str(ROOT / "samples" / "relpos.kd"), "--log", str(tmp_path / "l.jsonl")]) == 1
    assert "error:" in capsys.readouterr().err


def test_a_candidate_that_fails_when_timed_is_rejected(tmp_path, quick_judge):
    class Failing(FakeBench):
        def compare(self, best, cand):
            raise RuntimeError("CUDA_ERROR_LAUNCH_FAILED")
    r = _run(_naive_relpos(), tmp_path / "log.jsonl", 2, Failing())
    assert [e["verdict"] for e in r.entries] == ["rejected: failed when timed: RuntimeError: CUDA_ERROR_LAUNCH_FAILED"] * 2
    assert r.best == r.original
