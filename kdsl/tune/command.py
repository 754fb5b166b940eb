"""`kdsl tune FILE`: checks the options, finds the target, builds the rewriter, runs the loop
per kernel, prints the summaries and writes the tuned program."""
from __future__ import annotations

import datetime
import re
import sys
from pathlib import Path

from ..errors import KdslError
from . import log as tunelog
from .loop import Options, source_digest, summary, tune_kernel, write_program


def parse_budget(text: str) -> float:
    """'15m', '90s', '1h', '1.5m' or plain seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not m or float(m.group(1)) <= 0:
        raise KdslError(f"--budget '{text}': expected a positive duration such as 15m, 90s or 1h")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def run(args) -> int:
    from ..runtime.module import load
    _check_options(args)
    module = load(args.file, interpret=True)  # the IR only; kernels are built per candidate
    names = [args.kernel] if args.kernel else list(module.ir)
    if args.kernel and args.kernel not in module.ir:
        raise KdslError(f"no kernel '{args.kernel}' in {args.file}; kernels: {', '.join(module.ir)}")
    target, target_text = _target(args)
    text = Path(args.file).read_text(encoding="utf-8")
    digest = source_digest(text)
    stem = Path(args.file).name.rsplit(".", 1)[0]
    log = tunelog.Log(Path(args.log) if args.log else Path("out") / f"{stem}.tune.jsonl")
    opts = Options(proposals=args.proposals, budget_s=parse_budget(args.budget), verify_only=args.verify_only,
                   interpret=args.interpret, seed=args.seed, progress=sys.stderr.isatty())
    rewriter = _rewriter(args)
    results = {}
    try:
        for name in names:
            k = module.ir[name]
            bench = None if args.verify_only else _bench(k, args, target)
            results[name] = r = tune_kernel(name, k, target, target_text, rewriter, log, digest, opts, bench)
            print(summary(r))
    finally:
        if hasattr(rewriter, "client"):
            rewriter.client.close()
    print(f"log: {log.path}")
    if not args.verify_only:
        out = Path(args.output) if args.output else Path("out") / f"{stem}.tuned.ir"
        header = [f"target {target_text}, rewriter {rewriter.name}, {datetime.date.today().isoformat()}"]
        write_program(out, results, module.ir, args.file, digest, header)
        print(f"tuned program: {out} (kdsl compile / kdsl.load / kdsl bench accept it)")
    return 0


def _check_options(args) -> None:
    if args.proposals < 1:
        raise KdslError(f"--proposals needs a number >= 1, got {args.proposals}")
    if args.retries < 0:
        raise KdslError(f"--retries needs a number >= 0, got {args.retries}")
    if args.timeout <= 0:
        raise KdslError(f"--timeout needs a positive number of seconds, got {args.timeout:g}")
    if args.interpret and not args.verify_only:
        raise KdslError("--interpret runs only the guard on the CPU (no timing): add --verify-only")
    if args.verify_only and args.output:
        raise KdslError("--verify-only judges proposals without tuning anything: drop -o")
    if args.rewriter == "llm" and not (args.llm and args.model):
        raise KdslError("--rewriter llm needs --llm URL (an OpenAI-compatible endpoint) and --model NAME")
    if args.llm and not re.match(r"https?://[^\s/]+", args.llm):
        raise KdslError(f"--llm '{args.llm}': expected an http:// or https:// URL, e.g. http://localhost:8000/v1")
    if args.rewriter != "llm" and (args.llm or args.model):
        raise KdslError("--llm and --model go with --rewriter llm")


def _target(args):
    from ..passes.target import get_target
    if args.interpret:
        return get_target(args.arch or "sm_90a"), f"{args.arch or 'sm_90a'} (CPU interpreter, no timing)"
    from ..runtime.launch import _driver
    cupy, _, _ = _driver()  # NoGpuError with the reason when there is no GPU
    sm = int(cupy.cuda.Device().compute_capability)
    arch = args.arch or {90: "sm_90a"}.get(sm, f"sm_{sm}")
    name = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"]
    return get_target(arch), f"{arch} ({name.decode() if isinstance(name, bytes) else name})"


def _rewriter(args):
    from .rewriters import Llm, Search
    if args.rewriter == "search":
        return Search()
    from .llm_client import Client
    return Llm(Client(args.llm, args.model, timeout=args.timeout, retries=args.retries))


def _bench(k, args, target):
    from ..bench import file_cases, parse_shape
    from .measure import Bench
    if args.shapes:
        try:
            shapes = [parse_shape(s, k.kind) for s in args.shapes]
        except ValueError as e:
            raise KdslError(f"--shapes: {e}") from None
    else:
        shapes = [c.shape for c in file_cases(args.file, _OneKernel(k))]
    return Bench(k, shapes, target.arch)


class _OneKernel:
    """What bench.file_cases reads of a module: its IR by kernel name."""
    def __init__(self, k):
        self.ir = {k.name: k}
