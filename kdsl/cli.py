"""The `kdsl` command line. User mistakes exit 1 with a located diagnostic; kdsl's own
failures exit 2; no Python traceback unless KDSL_DEBUG=1."""
from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path

from . import __version__, ir
from .errors import KdslError, SourceError

EMITS = ("ir", "cuda", "ptx", "cubin")


def _files_before_shapes(argv: list[str]) -> list[str]:
    """`kdsl bench --shapes A B prog.kd` would read prog.kd as a third shape (--shapes takes one
    or more): a .kd or .ir file among the shapes goes before --shapes instead."""
    if "--shapes" not in argv:
        return argv
    at = argv.index("--shapes")
    tail, files = [], []
    for i, a in enumerate(argv[at + 1:]):
        if a.startswith("-"):
            tail += argv[at + 1 + i:]
            break
        (files if a.endswith((".kd", ".ir")) else tail).append(a)
    return argv[:at] + files + ["--shapes"] + tail


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="kdsl", description="Compile kdsl attention and FP8 GEMM programs "
                                     "to CUDA kernels for NVIDIA Hopper.")
    parser.add_argument("--version", action="version", version=f"kdsl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    c = sub.add_parser("compile", help="compile every kernel in a .kd file (no GPU needed)",
                       description="Compile every kernel in FILE (or the one --kernel names). The .cu is always "
                       "written under OUT_DIR; ptx and cubin come from NVRTC. Prints one line per kernel.")
    c.add_argument("file", metavar="FILE.kd")
    c.add_argument("-o", "--out-dir", default="out", metavar="OUT_DIR", help="where to write outputs (default: out)")
    c.add_argument("--kernel", metavar="NAME", help="compile only this kernel")
    c.add_argument("--emit", choices=EMITS, default="cubin",
                   help="last stage to produce: ir (also printed), cuda, ptx, or cubin (default)")
    c.add_argument("--arch", default="sm_90a", help="target GPU architecture (default: sm_90a)")
    c.add_argument("--exact-math", action="store_true",
                   help="libm functions and IEEE division in score/mask instead of the hardware approximations")
    c.add_argument("--shape", metavar="M=..,N=..,K=..[,G=..]",
                   help="FP8 GEMMs: tile for this problem (default: the shapes kdsl bench times)")
    c.add_argument("--sms", type=int, metavar="N", help="FP8 GEMMs: tile for N multiprocessors (default 132)")
    c.add_argument("--attr", action="append", default=[], metavar="NAME=VALUE",
                   help="fix a schedule attr of every kernel it applies to: attention on Hopper (tile_n, consumers, "
                   "stages, schedule, poly_exp2, lazy_rescale, slope_step, tensor_row_sum, offset_table, key_table, key_mask), on sm_80/89 (tile_m, tile_n, warps), FP8 GEMMs "
                   "(tile_m, tile_n, stages, cluster, multicast, raster, store, stream_k); repeatable")
    ck = sub.add_parser("check", help="verify kernels against the float64 reference on the GPU",
                        description="For each kernel in FILE: N trials of fresh random inputs over awkward shapes, "
                        "outputs poisoned, guard bands and inputs checked, determinism checked, compared with the "
                        "same program evaluated by torch in float64. Exit 1 if any case fails.")
    ck.add_argument("files", metavar="FILE.kd", nargs="+")
    ck.add_argument("--kernel", metavar="NAME", help="check only this kernel")
    ck.add_argument("--trials", type=int, default=5, metavar="N", help="trials per shape (default 5)")
    ck.add_argument("--seed", type=int, metavar="S", help="random seed (printed, for reproduction)")
    ck.add_argument("--interpret", action="store_true",
                    help="run the tiled program on the CPU with numpy instead of the GPU (small shapes)")
    ck.add_argument("--grad", action="store_true",
                    help="check attention kernels' gradients too (dq, dk, dv by torch autograd against float64 "
                    "autograd of the reference; one trial per shape)")
    ck.add_argument("--shapes", nargs="+", metavar="SHAPE", default=[],
                    help="check at these shapes instead of the awkward ones, e.g. B=2,H=16,M=4096,N=4096,D=128"
                    "[,Hkv=4,Dv=64] (attention) or M=4096,N=7168,K=2048[,G=4] (GEMM); a kernel none is of the "
                    "kind of keeps the awkward ones")
    ck.add_argument("--hypothesis", type=int, metavar="N",
                    help="instead of the fixed shapes, search N Hypothesis cases per kernel and print the shrunk "
                    "failing case (needs kdsl[testing])")
    bn = sub.add_parser("bench", help="time kernels against their peers on the GPU",
                        description="Time each kernel of FILE (or the standard suite) and its peers in one process, "
                        "on the same inputs; writes JSON, markdown and a PNG plot to OUT_DIR.")
    bn.add_argument("files", metavar="FILE.kd", nargs="*")
    bn.add_argument("--suite", choices=["standard", "backward"],
                    help="the standard suite (every sample at fixed shapes), or the backward one (forward + backward "
                         "of plain and causal at head dims 64-256, every other sample, MLA, variants; implies --backward)")
    bn.add_argument("--vs", default="flex,cudnn,scaled_mm,cublas_bf16,read_b", metavar="PEERS",
                    help="comma-separated peers: flex, cudnn, scaled_mm, cublas_bf16, read_b (default: all)")
    bn.add_argument("--only", "--kernel", dest="only", metavar="KERNELS",
                    help="comma-separated kernel names: time only these cases (--kernel NAME, as compile and check "
                    "take it, is the same option)")
    bn.add_argument("--shapes", nargs="+", metavar="SHAPE", default=[],
                    help="FILE's kernels at these shapes, e.g. B=2,H=16,M=4096,N=4096,D=128[,Hkv=4,Dv=64] (attention) "
                    "or M=4096,N=7168,K=16384[,G=4] (GEMM); a kernel with no shape of its kind is timed at the "
                    "default one (attention B=2,H=16,M=N=8192,D=128)")
    bn.add_argument("--reps", type=int, default=100, help="timed repetitions per measurement (default 100)")
    bn.add_argument("--seed", type=int, metavar="S",
                    help="seed of every case's random inputs (default: a fresh one, printed for reproduction); "
                    "bool captures are drawn sorted along their last axis on odd seeds (runs of kept keys), "
                    "unsorted on even ones (scattered bits: more partial tiles)")
    bn.add_argument("--backward", action="store_true",
                    help="time attention kernels' forward + backward (gradients of q, k, v) against the peers' "
                    "(FP8 GEMM cases are left out)")
    bn.add_argument("-o", "--out-dir", default="bench/results", metavar="OUT_DIR")
    _tune_parser(sub)
    args = parser.parse_args(_files_before_shapes(sys.argv[1:] if argv is None else list(argv)))
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return {"compile": _compile, "check": _check, "bench": _bench, "tune": _tune}[args.command](args)
    except SourceError as e:
        print(str(e), file=sys.stderr)
        return 1
    except KdslError as e:
        print(f"{getattr(args, 'file', None) or 'kdsl'}: error: {e}", file=sys.stderr)
        return 1 if not _is_internal(e) else 2
    except Exception as e:  # a bug in kdsl, not in the user's program
        if os.environ.get("KDSL_DEBUG"):
            traceback.print_exc()
        print(f"kdsl: internal error: {type(e).__name__}: {e} (set KDSL_DEBUG=1 for a traceback)", file=sys.stderr)
        return 2


def _is_internal(e: KdslError) -> bool:
    from .errors import CompileError
    return isinstance(e, CompileError)


def _compile(args) -> int:
    from .passes import pipeline
    from .passes.target import get_target
    from .codegen import emit
    from .runtime.module import load

    target = get_target(args.arch)
    module = load(args.file, exact_math=args.exact_math)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    gemm_attrs, attrs = _gemm_options(args), _attr_options(args)
    _require_kernel(args.kernel, [module], args.file)
    kernels = [k for name, k in module.ir.items() if args.kernel in (None, name)]
    todo = [(_with_options(k, target, gemm_attrs, attrs), d) for k in kernels for d in pipeline.head_dims(k)]
    if args.emit == "cubin" and len(todo) > 1:
        from concurrent.futures import ThreadPoolExecutor
        from .runtime.compiler import prebuild
        from .runtime.workers import cpus
        for k, d in todo:  # all at once, in compiler processes
            prebuild(k, args.arch, d)
        # Threads wait for those builds and run the SASS reports (cuobjdump) side by side;
        # lines are printed in order.
        with ThreadPoolExecutor(min(len(todo), cpus())) as ex:
            for line in ex.map(lambda kd: _compile_one(*kd, target, args, out, emit, pipeline), todo):
                print(line)
        return 0
    for k, d in todo:
        print(_compile_one(k, d, target, args, out, emit, pipeline))
    return 0


def _with_options(k, target, gemm_attrs: dict, attrs: dict):
    """k with --shape / --sms (FP8 GEMMs) and the --attr values its kernel family takes."""
    from .passes.gemm_tiles import HINT_ATTRS
    from .passes.tiling import SCHEDULE_ATTRS, family
    legal = SCHEDULE_ATTRS[family(k, target)] + (HINT_ATTRS if k.kind == "gemm" else ())
    return k.with_attrs(**(gemm_attrs if k.kind == "gemm" else {}), **{n: v for n, v in attrs.items() if n in legal})


def _attr_options(args) -> dict:
    """--attr NAME=VALUE pairs; NAME must be some kernel family's schedule attr."""
    from .passes.gemm_tiles import HINT_ATTRS
    from .passes.tiling import SCHEDULE_ATTRS
    names = sorted({n for names in (*SCHEDULE_ATTRS.values(), HINT_ATTRS) for n in names})
    attrs: dict = {}
    for item in args.attr:
        name, eq, value = item.partition("=")
        if not eq or name not in names:
            raise KdslError(f"--attr: expected NAME=VALUE with NAME one of {', '.join(names)}, got '{item}'")
        attrs[name] = (int(value) if value.lstrip("-").isdigit() else
                       value.lower() == "true" if value.lower() in ("true", "false") else value)
    return attrs


def _gemm_options(args) -> dict:
    """--shape and --sms as FP8 GEMM kernel attrs (user mistakes: KdslError)."""
    attrs: dict = {}
    if args.shape:
        dims = dict(part.partition("=")[::2] for part in args.shape.split(","))
        if not {"M", "N", "K"} <= set(dims) <= {"M", "N", "K", "G"} or not all(v.isdigit() for v in dims.values()):
            raise KdslError(f"--shape: expected M=..,N=..,K=..[,G=..] with positive integers, got '{args.shape}'")
        attrs["shape"] = [int(dims["M"]), int(dims["N"]), int(dims["K"]), int(dims.get("G", 1))]
    if args.sms is not None:
        if args.sms < 1:
            raise KdslError(f"--sms: expected a positive number of multiprocessors, got {args.sms}")
        attrs["sms"] = args.sms
    return attrs


def _require_kernel(name: str | None, modules, where: str) -> None:
    """--kernel NAME must name a kernel of the files (a user mistake: KdslError naming the ones there)."""
    if name is not None and not any(name in m.ir for m in modules):
        names = [n for m in modules for n in m.ir]
        raise KdslError(f"no kernel '{name}' in {where}; kernels: {', '.join(names)}")


def _check(args) -> int:
    from .check import format_table, iter_check_module, resolve_seed
    from .runtime.module import load

    modules = [load(f) for f in args.files]  # all diagnostics before any GPU work
    _require_kernel(args.kernel, modules, ", ".join(args.files))
    if args.grad and args.hypothesis is not None:
        raise KdslError("--grad checks gradients at the fixed shapes; it does not combine with --hypothesis")
    if args.shapes and args.hypothesis is not None:
        raise KdslError("--shapes fixes the shapes a Hypothesis search would draw; it does not combine with --hypothesis")
    shapes = _parsed_shapes(args.shapes)
    ok = True
    for path, module in zip(args.files, modules):
        if args.kernel and args.kernel not in module.kernels:
            continue
        if args.hypothesis is not None:
            ok &= _search(path, module, args)
            continue
        seed = resolve_seed(args.seed)
        print(f"kdsl check {path}: seed {seed} (reproduce with --seed {seed})", flush=True)
        for name, rs in iter_check_module(module, args.kernel, args.trials, seed, args.interpret, args.grad,
                                          shapes):
            print(format_table(name, rs), flush=True)  # as each kernel is judged: big checks take minutes
            ok &= all(r.passed for r in rs)
    print("all kernels pass" if ok else "FAILED")
    return 0 if ok else 1


def _parsed_shapes(texts: list[str]) -> list[dict]:
    """`--shapes` of check and bench as bench.parse_shape's dicts (a malformed one: KdslError)."""
    from . import bench
    try:
        return [bench.parse_shape(text, bench.shape_kind(text)) for text in texts]
    except ValueError as e:
        raise KdslError(f"--shapes: {e}") from None


def _search(path, module, args) -> bool:
    from .testing import format_search, search_module
    if args.hypothesis < 1:
        raise KdslError(f"--hypothesis needs a number of examples >= 1, got {args.hypothesis}")
    results, seed = search_module(module, args.kernel, args.hypothesis, args.seed, args.interpret)
    print(f"kdsl check {path}: Hypothesis search, seed {seed} (reproduce with --seed {seed})")
    for name, failure in results.items():
        print(format_search(name, args.hypothesis, failure))
    return all(f is None for f in results.values())


def _bench(args) -> int:
    import dataclasses
    import datetime
    import re
    from . import bench, bench_report
    from .check import resolve_seed
    from .runtime.module import load

    if not args.files and not args.suite:
        raise KdslError("give .kd files to benchmark, or --suite standard (or backward)")
    args.backward = args.backward or args.suite == "backward"
    peers = {p.strip() for p in args.vs.split(",") if p.strip()}
    unknown = peers - set(bench.PEER_NAMES)
    if unknown:
        raise KdslError(f"unknown peer(s) {sorted(unknown)}; choose from {', '.join(bench.PEER_NAMES)}")
    if args.shapes and not args.files:
        raise KdslError(f"--shapes applies to the kernels of .kd files; the {args.suite} suite's shapes are fixed")
    shapes = _parsed_shapes(args.shapes)
    cases = {"standard": bench.standard_suite, "backward": bench.backward_suite}[args.suite]() if args.suite else []
    files = sorted({c.file for c in cases} | set(args.files))
    modules = {f: load(f) for f in files}
    for f in args.files:
        cases += bench.file_cases(f, modules[f], shapes)
    if args.only:
        wanted = {n.strip() for n in args.only.split(",") if n.strip()}
        missing = wanted - {c.kernel for c in cases}
        if missing:
            raise KdslError(f"--only: no case for kernel(s) {sorted(missing)}; kernels: "
                            f"{', '.join(dict.fromkeys(c.kernel for c in cases))}")
        cases = [c for c in cases if c.kernel in wanted]
    if args.backward:
        cases = [c for c in cases if c.kind == "attention"]
        if not cases:
            raise KdslError("--backward times attention kernels, and these cases have none")
    from .runtime.launch import _driver
    _driver()  # NoGpuError with the reason, before any work
    import torch
    device = torch.cuda.get_device_name()
    seed = resolve_seed(args.seed)
    print(f"kdsl bench: inputs from seed {seed} (reproduce with --seed {seed})", flush=True)
    cases = [dataclasses.replace(c, seed=seed) for c in cases]
    rows = bench.run(cases, modules, args.reps, peers, progress=sys.stderr.isatty(), backward=args.backward)
    host = bench.host_time(cases, modules)
    stem = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-") + "-" + datetime.date.today().isoformat()
    stem += "-" + (args.suite or "files") + ("-partial" if args.only else "") + (
        "-backward" if args.backward and args.suite != "backward" else "")
    paths = bench_report.write_results(rows, Path(args.out_dir), device, stem, host, seed)
    print(bench_report.markdown(rows, device, host, seed))
    print("results: " + ", ".join(str(p) for p in paths.values()))
    return 0 if not any(r.failure for r in rows) else 1


def _tune_parser(sub) -> None:
    t = sub.add_parser("tune", help="rewrite hot IR blocks in a verify-and-time loop (search or a language model)",
                       description="Propose replacements for a kernel's score, mask, tile predicates and schedule "
                       "attributes; keep a proposal only if the guard verifies it against the original program and "
                       "it runs faster beyond noise. See docs/tune.md.")
    t.add_argument("file", metavar="FILE", help="a .kd program, or an .ir file (e.g. an earlier kdsl tune output)")
    t.add_argument("--kernel", metavar="NAME", help="tune only this kernel (default: each in turn)")
    t.add_argument("--shapes", nargs="+", metavar="SHAPE",
                   help="timing shapes, e.g. B=2,H=16,M=8192,N=8192,D=128 or M=4096,N=7168,K=16384 "
                   "(default: kdsl bench's shapes for the kernel)")
    t.add_argument("--budget", default="15m", help="wall-clock budget per kernel for this run (default 15m)")
    t.add_argument("--proposals", type=int, default=200, metavar="N",
                   help="proposals per kernel, counting those in a resumed log (default 200)")
    t.add_argument("--rewriter", choices=["search", "llm"], default="search",
                   help="search: built-in, offline (default); llm: an OpenAI-compatible chat endpoint")
    t.add_argument("--llm", metavar="URL", help="endpoint base URL, e.g. http://localhost:8000/v1")
    t.add_argument("--model", metavar="NAME", help="model name the endpoint serves")
    t.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                   help="per request to the model (default 60); the API key is read from KDSL_LLM_API_KEY "
                   "or OPENAI_API_KEY")
    t.add_argument("--retries", type=int, default=3, metavar="N",
                   help="retries of a request after HTTP 429 / 5xx, a timeout or a dropped connection, with "
                   "exponential backoff honouring Retry-After (default 3)")
    t.add_argument("--verify-only", action="store_true", help="run only the guard: judge proposals, time nothing")
    t.add_argument("--interpret", action="store_true",
                   help="with --verify-only: judge through the CPU interpreter (no GPU)")
    t.add_argument("--arch", help="target architecture (default: the GPU's; sm_90a with --interpret)")
    t.add_argument("--log", metavar="FILE.jsonl", help="proposal log, resumed if it exists (default out/STEM.tune.jsonl)")
    t.add_argument("-o", "--output", metavar="OUT", help="tuned program as IR text (default out/STEM.tuned.ir)")
    t.add_argument("--seed", type=int, default=0, help="seed of the guard's random inputs (default 0)")


def _tune(args) -> int:
    from .tune.command import run
    return run(args)


def _compile_one(k: ir.Kernel, d: int, target, args, out: Path, emit, pipeline) -> str:
    lowered = pipeline.lower(k, target, d)
    gen = emit.generate(lowered)
    stem = gen.entry.removeprefix("kdsl_")
    (out / f"{stem}.cu").write_text(gen.source)
    (out / f"{stem}.ir").write_text(ir.print_ir(lowered))
    if args.emit == "ir":
        print(ir.print_ir(lowered), end="")
    label = f"{k.name}[D={d}]" if k.kind == "attention" else k.name
    tile = f"tile {lowered.attr('tile_m')}x{lowered.attr('tile_n')}, {lowered.attr('threads')} threads"
    if k.kind == "gemm":
        m, n, kk, g = lowered.attr("shape")
        tile += (f", {lowered.attr('stages')} stages, cluster {lowered.attr('cluster')} (multicast "
                 f"{lowered.attr('multicast')}), {lowered.attr('store')} store, a_scale by {lowered.attr('scale_load')}, "
                 f"b_scale by {lowered.attr('b_scale_load')}, "
                 f"for M={m} N={n} K={kk} G={g} on "
                 f"{lowered.attr('sms')} SMs")
    if args.emit in ("ir", "cuda"):
        return f"{label}: {tile} -> {out / stem}.cu"
    from .passes import streaming
    from .runtime.compiler import build
    built = build(k, args.arch, d, want_cubin=args.emit == "cubin")
    if built.kernel != lowered:  # ptxas spilled a trial (tile, row sums by P V, slope step): the fallback's files
        trial, lowered = lowered, built.kernel
        (out / f"{stem}.cu").write_text(built.generated.source)
        (out / f"{stem}.ir").write_text(ir.print_ir(lowered))
        what = (f"the {trial.attr('tile_n')}-key trial tile" if trial.attr("tile_n") != lowered.attr("tile_n")
                else "the trial row sums by P V" if trial.attr("tensor_row_sum") != lowered.attr("tensor_row_sum")
                else "the trial slope step")
        tile = (f"tile {lowered.attr('tile_m')}x{lowered.attr('tile_n')} (ptxas spilled {what}), "
                f"{lowered.attr('threads')} threads")
    # per-element work taken elsewhere (tiling.SLOPE_STEP, TENSOR_ROW_SUM: the tensor cores; OFFSET_TABLE, KEY_TABLE)
    tile += "".join(f", {what}" for attr, what in (("slope_step", "slope step"), ("tensor_row_sum", "row sums by P V"),
                                                   ("offset_table", "offset table"), ("key_table", "key table"),
                                                   ("key_mask", "key mask bits"))
                    if lowered.attr(attr))
    # tensors copied by TMA with the K tiles (passes/streaming.py), a key block read by tile (tile_blocks.py)
    streams = streaming.streamed(lowered)
    tile += f", streamed {' and '.join(streams)}" if streams else ""
    score = lowered.func("score_log2")
    tile += ", key blocks by tile" if score is not None and ir.uses(score, "kvt") else ""
    (out / f"{stem}.ptx").write_text(built.compiled.ptx)
    if args.emit == "ptx":
        return f"{label}: {tile} -> {out / stem}.ptx"
    (out / f"{stem}.cubin").write_bytes(built.compiled.cubin)
    from .sass import inspect
    rep = inspect(built.compiled.cubin, built.generated.entry)
    if rep is None:
        return f"{label}: {tile}, smem {lowered.attr('smem_bytes')} B (cuobjdump not found: no SASS report) -> {out / stem}.cubin"
    tc = ", ".join(f"{op} x{n}" for op, n in sorted(rep.tensor_ops.items())) or "NONE"
    regs = f"{rep.registers} regs"
    if lowered.attr("producer_regs"):  # warp-specialised: the launch cap, then each role's after setmaxnreg
        regs += f" at launch (setmaxnreg: producer {lowered.attr('producer_regs')}, consumers {lowered.attr('consumer_regs')})"
    others = "".join(f", {op} x{rep.other_ops.get(op, 0)}" for op in ("UTMALDG", "UTMASTG", "UTMAREDG", "MUFU")
                     if op in ("UTMALDG", "MUFU") or rep.other_ops.get(op))
    return (f"{label}: {tile}, {regs}, smem {lowered.attr('smem_bytes')} B dynamic, "
            f"spill/local {rep.local_bytes} B ({rep.spill_ops} STL/LDL), tensor cores: {tc}{others} "
            f"-> {out / stem}.cubin")


if __name__ == "__main__":
    sys.exit(main())
