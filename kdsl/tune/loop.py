"""The tuning loop: ask the rewriter, guard the proposal, time it, keep it only if faster.

Per kernel, until --proposals proposals are logged (resumed runs included) or --budget
seconds of this run have passed. The log (JSONL) gets one object per proposal, flushed as it
is written: the answer's text, its replacement lines, `verdict` ("accepted ..." or
"rejected: <reason>"), the stage that decided, the judged error, times and resources. A run
given the same log resumes: it skips what was judged already, and starts from the program
of the last accepted proposal, after verifying that program again (a log is only a file).
With verify_only each proposal is judged on its own against the starting program, untimed.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import ir
from ..passes import pipeline
from . import log as tunelog
from . import protocol
from .guard import Guard
from .llm_client import LlmError
from .rewriters import Context, fenced, tried_key

MAX_LOGGED_TEXT = 16 * 1024


@dataclass
class Options:
    proposals: int = 100
    budget_s: float = 900.0
    verify_only: bool = False
    interpret: bool = False
    shapes: list = field(default_factory=list)  # per kernel kind: list of shape dicts (bench.parse_shape)
    seed: int = 0
    progress: bool = False


@dataclass
class Result:
    kernel: str
    original: ir.Kernel
    best: ir.Kernel
    entries: list                      # this kernel's log entries, resumed ones included
    baseline_ms: float | None = None   # the starting program, on the tuning shapes
    best_ms: float | None = None
    notes: list = field(default_factory=list)


def source_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def overlay(original: ir.Kernel, current: ir.Kernel) -> str:
    """The replacement lines that turn the original into current (its tuned blocks)."""
    defs = [(n, e) for n, e in current.funcs if original.func(n) != e]
    attrs = [(n, v) for n, v in current.attrs if original.attr(n) != v]
    return protocol.Proposal(tuple(defs), tuple(attrs)).lines()


def tune_kernel(name: str, original: ir.Kernel, target, target_text: str, rewriter, log: tunelog.Log,
                digest: str, opts: Options, bench=None) -> Result:
    guard = Guard(original, target, opts.interpret, opts.seed)
    head_dims = pipeline.head_dims(original)
    entries = log.entries(name, digest)
    result = Result(name, original, original, entries)
    current = _resume(original, guard, entries, result) if not opts.verify_only else original
    tried = {e["key"] for e in entries if e.get("key")}
    if bench is not None:
        result.baseline_ms = _median(bench.time(original))
        result.best_ms = result.baseline_ms if current is original else _median(bench.time(current))
    start = time.monotonic()
    bar = _bar(opts, name, len(entries))
    while len(entries) < opts.proposals and time.monotonic() - start < opts.budget_s:
        ctx = Context(current, ir.print_ir(pipeline.lower(current, target, head_dims[0])), target, target_text,
                      head_dims, entries, tried)
        entry = {"kernel": name, "source_sha256": digest, "index": len(entries), "rewriter": rewriter.name}
        if bench is not None and not opts.interpret:
            _prebuild_upcoming(rewriter, ctx, original, target, head_dims)
        t0 = time.monotonic()
        try:
            answer = rewriter.propose(ctx)
        except LlmError as e:
            answer, entry["verdict"], entry["stage"] = "", f"rejected: no answer from the model: {e}", "request"
        if answer is None:
            result.notes.append(f"{rewriter.name} has nothing more to propose")
            break
        if "verdict" not in entry:
            entry["text"] = answer[:MAX_LOGGED_TEXT]
            current = _judge(answer, original, current, guard, bench, opts, entry, result)
            if entry.get("key"):
                tried.add(entry["key"])
        entry["seconds"] = round(time.monotonic() - t0, 3)
        log.append(entry)
        entries.append(entry)
        if bar is not None:
            bar.update(1)
            bar.set_postfix_str(entry["verdict"][:40])
    if bar is not None:
        bar.close()
    if len(entries) < opts.proposals and time.monotonic() - start >= opts.budget_s:
        result.notes.append(f"stopped at the budget ({opts.budget_s:g} s)")
    result.best = current
    return result


def _judge(answer, original, current, guard, bench, opts, entry, result) -> ir.Kernel:
    try:
        proposal = protocol.extract(answer, original)
    except protocol.ProposalError as e:
        entry.update(verdict=f"rejected: {e}", stage="parse")
        return current
    entry["lines"] = proposal.lines()
    base = original if opts.verify_only else current
    entry["key"] = tried_key(base, entry["lines"])
    v = guard.verify(proposal, base)
    entry.update(stage=v.stage, error=v.error, resources=v.resources or None)
    if not v.accepted:
        entry["verdict"] = v.reason
        return current
    if opts.verify_only or bench is None:
        entry["verdict"] = "accepted (verified; not timed)"
        return current
    try:
        faster, times = bench.compare(current, v.candidate)
    except Exception as e:  # noqa: BLE001 - a candidate that fails when timed is only a rejection
        entry.update(verdict=f"rejected: failed when timed: {type(e).__name__}: {str(e)[:300]}", stage="timed")
        return current
    entry["time_ms"] = {k: (round(x, 5) if isinstance(x, float) else x) for k, x in times.items()}
    if not faster:
        entry["verdict"] = (f"rejected: not faster beyond noise ({times['candidate']:.4g} ms vs "
                            f"{times['best']:.4g} ms; intervals overlap or it is slower)")
        return current
    entry["verdict"] = f"accepted: {times['best'] / times['candidate']:.3f}x faster than the best so far"
    entry["program"] = overlay(original, v.candidate)
    result.best_ms = times["candidate"]
    return v.candidate


def _resume(original, guard, entries, result) -> ir.Kernel:
    programs = [e["program"] for e in entries if e.get("verdict", "").startswith("accepted") and e.get("program")]
    if not programs:
        return original
    try:
        v = guard.verify(protocol.extract(fenced(programs[-1]), original), original)
    except protocol.ProposalError as e:
        v = None
        result.notes.append(f"the log's last accepted program does not parse ({e}); starting over")
    if v is not None and not v.accepted:
        result.notes.append(f"the log's last accepted program fails the guard now ({v.reason}); starting over")
    if v is None or not v.accepted:
        return original
    result.notes.append("resumed from the log's last accepted program (verified again)")
    return v.candidate


def _prebuild_upcoming(rewriter, ctx, original, target, head_dims, ahead: int = 8) -> None:
    """Start building the search's next candidates in compiler processes, so that NVRTC runs
    in parallel with the judging and timing of the current one (a no-op for kernels already
    started or cached)."""
    from ..runtime.compiler import prebuild
    for lines in getattr(rewriter, "upcoming", lambda c, n: [])(ctx, ahead):
        try:
            candidate = protocol.extract(fenced(lines), original).apply(ctx.current)
            for d in head_dims:
                prebuild(candidate, target.arch, d)
        except Exception:  # noqa: BLE001 - a candidate that does not build is the guard's to report
            continue


def _median(xs):
    import statistics
    return statistics.median(xs)


def _bar(opts, name, done):
    if not opts.progress:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=opts.proposals, initial=done, desc=f"tune {name}", unit="proposal")


def summary(r: Result) -> str:
    """A fast_p-style summary: how many proposals were correct, and how many were correct
    and faster than the starting program by more than p."""
    n = len(r.entries)
    correct = [e for e in r.entries if e.get("stage") == "judged" and
               (e["verdict"].startswith("accepted") or "not faster" in e["verdict"])]
    stages: dict = {}
    for e in r.entries:
        if e["verdict"].startswith("rejected"):
            stages[e.get("stage", "?")] = stages.get(e.get("stage", "?"), 0) + 1
    lines = [f"{r.kernel}: {n} proposals, {len(correct)} correct ({_pct(len(correct), n)}); rejected by stage: "
             + (", ".join(f"{s} {c}" for s, c in sorted(stages.items())) or "none")]
    if r.baseline_ms:
        speedups = [r.baseline_ms / e["time_ms"]["candidate"] for e in correct if e.get("time_ms")]
        fast = ", ".join(f"fast_{p:g} {_pct(sum(s > p for s in speedups), n)}" for p in (1.0, 1.1, 1.5, 2.0))
        lines.append(f"  {fast}; best {r.baseline_ms / r.best_ms:.3f}x ({r.baseline_ms:.4g} ms -> "
                     f"{r.best_ms:.4g} ms)")
    lines += [f"  {note}" for note in r.notes]
    return "\n".join(lines)


def _pct(a, n) -> str:
    return f"{100 * a / n:.0f}%" if n else "-"


def write_program(path: Path, results: dict, module_ir: dict, source: str, digest: str, header: list[str]) -> None:
    """The tuned program as IR text, loadable by kdsl.load / compile / bench / check."""
    lines = [f"# kdsl tune: tuned from {source} (sha256 {digest}); {line}" if i == 0 else f"# {line}"
             for i, line in enumerate(header)]
    lines.append("# Blocks and attributes the source does not have were verified against it by kdsl tune's guard.")
    for name, k in module_ir.items():
        r = results.get(name)
        best = r.best if r else k
        if r is not None:
            for text in summary(r).splitlines():
                lines.append("# " + text.strip())
            if k.func("mask") is not None and best.func("mask") != k.func("mask"):
                lines.append(f"# original mask (the tuned one below was verified equal): {ir.print_expr(k.func('mask'))}")
        lines.append(ir.print_ir(best).rstrip())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
