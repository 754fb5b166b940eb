#!/usr/bin/env python3
"""One GPU session for the FP8 GEMM (issue 8): its GPU tests, then the standard suite's FP8
shapes against torch's blockwise _scaled_mm in the same process (kdsl.bench: same inputs, L2
flushed, CUDA events), host time per eager launch, and a sweep of the tile configurations
the model ranks next for each dense shape (data for passes/gemm_tiles.py). Prints markdown
tables and writes them, with JSON, to --out.

    python3 tools/dev/fp8_gpu_check.py [--out DIR] [--no-tests] [--no-sweep] [--sanitize] [--budget S]

On the device machine (lark carried as a wheel in .whl/):
    python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 KDSL_CACHE_DIR=/tmp/kc
    python3 tools/dev/fp8_gpu_check.py --out $OUT 2>&1 | tee $OUT/fp8_check.log
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
START = time.monotonic()


def elapsed() -> float:
    return time.monotonic() - START


def log(msg: str) -> None:
    print(f"[{elapsed():6.1f}s] {msg}", flush=True)


def prebuild_for_tests(sms: int) -> None:
    """Start compiling (in processes, side by side) the configurations the GPU tests will
    ask for, which their first calls would otherwise compile one after another."""
    import kdsl
    from kdsl.cases import gemm_shapes
    from kdsl.runtime import compiler
    sys.path.insert(0, str(ROOT / "tests"))
    spec = importlib.util.spec_from_file_location("fp8_gpu_tests", ROOT / "tests/gpu/test_fp8_gpu.py")
    t = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(t)
    ir = {n: kdsl.load(ROOT / "samples" / f"{n}.kd").ir[n] for n in
          ("fp8_gemm", "fp8_gemm_accumulate", "fp8_grouped_contiguous", "fp8_grouped_masked")}
    todo = [("fp8_gemm", (m, n, 256, 1), cfg) for cfg in t.CONFIGS for m, n in t._edges(cfg)]
    todo += [("fp8_gemm", (m, n, k, 1), {}) for m, n, k in t.DENSE_SHAPES + [(300, 2112, 1024), (256, 512, 512)]]
    for cfg in t.GROUPED_CFGS.values():
        todo += [("fp8_grouped_contiguous", (m, 512, 512, 4), cfg) for m in (768, 333)]
        todo.append(("fp8_grouped_masked", (256, 512, 768, 5), cfg))
    todo += [("fp8_gemm_accumulate", (m, n, k, 1), cfg) for cfg in t.ACCUMULATE_CFGS for m, n, k in t.ACCUMULATE_SHAPES]
    for name, k in ir.items():
        todo += [(name, (c.M, c.N, c.K, c.G), {}) for c in gemm_shapes(k.attr("grouping"))]
    todo += SMOKE
    for name, shape, cfg in todo:
        try:
            compiler.prebuild(ir[name].with_attrs(shape=list(shape), sms=sms, **cfg), "sm_90a")
        except Exception:  # noqa: BLE001 - the test that needs it reports the problem
            pass
    log(f"prebuilding {len(todo)} test configurations")
    compiler.finish_prebuilds()
    log("prebuilt")


SMOKE = [  # (sample, (M, N, K, G), attrs): one small call per configuration family; the
    # row-by-row store (TMA_STORE false: N * 2 bytes not a multiple of 16) early, since it
    # was the first family to fail on the H100
    ("fp8_gemm", (256, 512, 512, 1), {"tile_m": 128, "tile_n": 128, "cluster": 1}),
    ("fp8_gemm", (129, 300, 384, 1), {"tile_m": 64, "tile_n": 48, "cluster": 1}),
    ("fp8_gemm", (129, 136, 256, 1), {"tile_m": 128, "tile_n": 128, "cluster": 1, "store": "rows"}),
    ("fp8_gemm", (256, 512, 512, 1), {"tile_m": 128, "tile_n": 128, "cluster": 2, "multicast": "a"}),
    ("fp8_gemm", (256, 512, 512, 1), {"tile_m": 128, "tile_n": 128, "cluster": 2, "multicast": "b"}),
    ("fp8_gemm", (512, 512, 512, 1), {"tile_m": 256, "tile_n": 128, "cluster": 1}),
    ("fp8_gemm", (256, 520, 512, 1), {"tile_m": 128, "tile_n": 160, "cluster": 1}),
    ("fp8_gemm", (129, 130, 384, 1), {"store": "rows"}),
    ("fp8_grouped_contiguous", (384, 512, 512, 3), {}),
    ("fp8_grouped_masked", (256, 512, 512, 3), {}),
    ("fp8_gemm_accumulate", (256, 512, 512, 1), {}),
]


def smoke_child() -> None:
    """One call per SMOKE entry, judged; prints a line before and after each (a hang shows
    as a start line with no end). Stops at the first failure, naming its configuration: a
    CUDA error poisons the context, so every later call would only repeat it."""
    import kdsl
    from kdsl.backends import Torch
    from kdsl.cases import GemmCase
    from kdsl.check import gemm_case
    for name, (m, n, k, g), attrs in SMOKE:
        print(f"start {name} {m}x{n}x{k} G={g} {attrs}", flush=True)
        fn = getattr(kdsl.load(ROOT / "samples" / f"{name}.kd"), name).with_attrs(**attrs)
        try:
            res = gemm_case(Torch("cuda"), fn.ir, fn, GemmCase(m, n, k, g, seed=1))
            print(f"end {'ok' if res.passed else 'FAIL'} error {res.error:.2e} {res.problems}", flush=True)
            failed = not res.passed
        except Exception as e:  # noqa: BLE001 - reported with the configuration that raised it
            print(f"end ERROR {type(e).__name__}: {str(e)[:300]}", flush=True)
            failed = True
        if failed:
            cfg = config_of(fn.ir, (m, n, k, g), gemm_tiles_sms())
            print(f"FIRST FAILURE: {name} {m}x{n}x{k} G={g} attrs {attrs} -> config {label(cfg)} {cfg}", flush=True)
            sys.exit(1)


def gemm_tiles_sms() -> int:
    import torch
    from kdsl.runtime.launch import _sm_count
    return _sm_count(torch.cuda.current_device())


def smoke(timeout: float = 120.0) -> tuple[bool, str]:
    """The SMOKE calls in a child process that is killed if a kernel hangs: (all passed, report)."""
    log("smoke: one call per configuration family, in a child process")
    try:
        r = subprocess.run([sys.executable, __file__, "--smoke-child"], capture_output=True, text=True,
                           timeout=timeout)
        text, hung = r.stdout + r.stderr[-2000:], False
        if r.returncode:
            return False, "## Smoke: one call per configuration family (stopped at the first failure)\n\n```\n" \
                + text.strip() + "\n```\n"
    except subprocess.TimeoutExpired as e:
        text, hung = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), True
    lines = ["## Smoke: one call per configuration family", "", "```", text.strip(),
             "(killed after %.0fs: the last started call hung)" % timeout if hung else "", "```"]
    return not hung, "\n".join(lines) + "\n"


def run_tests() -> int:
    import pytest
    log("GPU tests: tests/gpu/test_fp8_gpu.py")
    # -x: after a CUDA error every later test fails on the poisoned context; the first names it
    return int(pytest.main(["-q", "-x", "-p", "no:cacheprovider", "-rf", str(ROOT / "tests/gpu/test_fp8_gpu.py")]))


def config_of(kernel, shape, sms) -> dict:
    from kdsl.passes import gemm_tiles, pipeline
    from kdsl.passes.target import get_target
    low = pipeline.lower(kernel.with_attrs(shape=list(shape), sms=sms), get_target("sm_90a"))
    return {a: low.attr(a) for a in gemm_tiles.CONFIG_ATTRS}


def label(cfg: dict) -> str:
    mc = "" if cfg["cluster"] == 1 else f" x2({cfg['multicast']})"
    return f"{cfg['tile_m']}x{cfg['tile_n']}x{cfg['stages']}{mc}{' rows' if cfg['store'] == 'rows' else ''}"


def bench_suite(reps: int, sms: int):
    """The standard suite's FP8 cases through kdsl.bench (the cold-build column is skipped:
    it measures compile time in fresh processes, not what this session is for)."""
    import kdsl
    from kdsl import bench
    from kdsl.runtime import compiler
    cases = [c for c in bench.standard_suite() if c.kind == "gemm"]
    modules = {c.file: kdsl.load(c.file) for c in cases}
    configs = []
    for c in cases:
        s = c.shape
        shape = (s["M"], s["N"], s["K"], s.get("G", 1))
        kernel = modules[c.file].ir[c.kernel]
        compiler.prebuild(kernel.with_attrs(shape=list(shape), sms=sms), "sm_90a")  # all at once, in processes
        configs.append(config_of(kernel, shape, sms))
    bench.cold_build = lambda *a, **kw: {}
    log(f"benchmarking {len(cases)} FP8 cases against torch._scaled_mm")
    rows = bench.run(cases, modules, reps, {"scaled_mm"}, progress=False)
    return cases, rows, configs


def suite_tables(rows, configs, device: str) -> str:
    lines = [f"## FP8 standard suite on {device} (kdsl vs torch._scaled_mm blockwise, same process, same inputs)", "",
             "| kernel | shape | tiles | err | kdsl µs | kdsl TFLOPS | torch µs | torch TFLOPS | ratio |",
             "|---|---|---|---|---|---|---|---|---|"]
    ratios = []
    for r, cfg in zip(rows, configs):
        if r.failure:
            lines.append(f"| {r.kernel} | {r.shape} | {label(cfg)} | FAILED: {r.failure} | | | | | |")
            continue
        p = r.peers.get("scaled_mm", {})
        if "ms" in p:
            ratio = p["ms"] / r.ms
            ratios.append(ratio)
            peer = f"{p['ms'] * 1e3:.1f} | {p['tflops']:.0f} | {ratio:.2f}"
        else:
            peer = " | | "
        lines.append(f"| {r.kernel} | {r.shape} | {label(cfg)} | {r.error:.1e} | {r.ms * 1e3:.1f} | {r.tflops:.0f} | "
                     f"{peer} |")
    if ratios:
        lines += ["", f"dense: min ratio {min(ratios):.2f}, median {statistics.median(ratios):.2f} over "
                      f"{len(ratios)} shapes (targets: >= 1.0 each, median >= 1.1)"]
    for r in rows:
        if r.kernel != "fp8_gemm" and not r.failure:
            target = 1100 if "contiguous" in r.kernel else 900
            lines.append(f"{r.kernel} {r.shape}: {r.tflops:.0f} TFLOPS (target >= {target})")
    return "\n".join(lines) + "\n"


def launch_times() -> str:
    """Host time per eager launch (kdsl.hosttime)."""
    import torch

    import kdsl
    from kdsl import fp8
    from kdsl import hosttime as lo
    gemm = kdsl.load(ROOT / "samples" / "fp8_gemm.kd").fp8_gemm
    a, sa = fp8.quantize_1x128(torch.randn(128, 7168, device="cuda"))
    b, sb = fp8.quantize_128x128(torch.randn(2112, 7168, device="cuda"))
    out = torch.empty(128, 2112, device="cuda", dtype=torch.bfloat16)
    rows = [("kdsl fp8_gemm 128x2112x7168, out= given", lo.host_us(lambda: gemm(a, sa, b, sb, out=out))),
            ("kdsl fp8_gemm 128x2112x7168, allocating", lo.host_us(lambda: gemm(a, sa, b, sb))),
            ("torch._scaled_mm blockwise", lo.host_us(lambda: torch._scaled_mm(
                a, b.t(), scale_a=sa, scale_b=sb.t(), out_dtype=torch.bfloat16)))]
    lines = ["## Host time per eager launch", "", "| call | host µs |", "|---|---|"]
    lines += [f"| {n} | {us:.1f} |" for n, us in rows]
    return "\n".join(lines) + "\n"


def sweep(reps: int, sms: int, budget: float, per_shape: int = 5) -> str:
    """For each dense shape of the suite, the next configurations by modelled cycles (and the
    best without a cluster), timed against the pick."""
    import torch

    import kdsl
    from kdsl import bench, fp8
    from kdsl.passes import gemm_tiles
    from kdsl.runtime import compiler
    mod = kdsl.load(ROOT / "samples" / "fp8_gemm.kd")
    kernel, fn = mod.ir["fp8_gemm"], mod.fp8_gemm
    plans = []
    for m in (4096, 128):
        for n, k in bench.GEMM_NK:
            p = gemm_tiles.Problem(m, n, k, 1, "dense", 2)
            found, _ = gemm_tiles.candidates(p, sms, 227 * 1024, {})
            found.sort(key=lambda c: gemm_tiles.cycles(p, c["tile_m"], c["tile_n"], c["multicast"], sms, b_scale_load=c["b_scale_load"]))
            picks = found[:per_shape] + [c for c in found if c["cluster"] == 1][:1]
            picks = [dict(t) for t in dict.fromkeys(tuple(sorted(c.items())) for c in picks)]
            plans.append(((m, n, k), picks))
            for c in picks:
                compiler.prebuild(kernel.with_attrs(shape=[m, n, k, 1], sms=sms, **c), "sm_90a")
    compiler.finish_prebuilds()
    timer = bench.Timer(reps)
    lines = ["## Sweep: the model's next configurations per dense shape (first row: its pick)", "",
             "| shape | tiles | model cycles | µs | TFLOPS | vs pick |", "|---|---|---|---|---|---|"]
    for (m, n, k), picks in plans:
        if elapsed() > budget:
            lines.append(f"| (budget of {budget:.0f}s spent: sweep stopped) | | | | | |")
            break
        a, sa = fp8.quantize_1x128(torch.randn(m, k, device="cuda"))
        b, sb = fp8.quantize_128x128(torch.randn(n, k, device="cuda"))
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        base = None
        p = gemm_tiles.Problem(m, n, k, 1, "dense", 2)
        for c in picks:
            g = fn.with_attrs(**c)
            try:
                t = timer(lambda: g(a, sa, b, sb, out=out))
            except Exception as e:  # noqa: BLE001 - a failing configuration is a finding, not a stop
                lines.append(f"| {m}x{n}x{k} | {label(c)} | | FAILED: {type(e).__name__}: {str(e)[:80]} | | |")
                continue
            base = base or t
            cyc = gemm_tiles.cycles(p, c["tile_m"], c["tile_n"], c["multicast"], sms, b_scale_load=c["b_scale_load"])
            lines.append(f"| {m}x{n}x{k} | {label(c)} | {cyc:.3g} | {t * 1e3:.1f} | {2 * m * n * k / t / 1e9:.0f} | "
                         f"{base / t:.2f} |")
    return "\n".join(lines) + "\n"


def sanitize(out: Path) -> str:
    """Each tool's summary line in the report; its whole output in OUT/fp8_TOOL.log, and the
    first report it printed (where a hazard or an error is) in the report."""
    lines = ["## compute-sanitizer on small and ragged FP8 shapes (tools/dev/sanitize.py --fp8)", ""]
    for tool in ("memcheck", "racecheck"):
        r = subprocess.run(["compute-sanitizer", "--tool", tool, "--error-exitcode", "1", sys.executable,
                            str(ROOT / "tools/dev/sanitize.py"), "--fp8", "--quick"],
                           capture_output=True, text=True, timeout=600)
        text = (r.stdout + r.stderr).strip()
        (out / f"fp8_{tool}.log").write_text(text + "\n")
        lines.append(f"- {tool}: exit {r.returncode}: " + " / ".join(text.splitlines()[-3:]))
        if r.returncode:
            first = [ln for ln in text.splitlines() if ln.startswith("=========")][:24]
            lines += ["", "```", *first, "```", ""]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "fp8_check_out"))
    ap.add_argument("--no-tests", action="store_true")
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--sanitize", action="store_true")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--budget", type=float, default=170.0, help="seconds after which optional parts are skipped")
    ap.add_argument("--smoke-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.smoke_child:
        smoke_child()
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import torch
    device = torch.cuda.get_device_name()
    from kdsl.runtime.launch import _sm_count
    sms = _sm_count(torch.cuda.current_device())
    log(f"{device}, {sms} SMs, torch {torch.__version__}")
    report = [f"# FP8 GEMM check on {device} ({sms} SMs)", ""]

    def section(text: str) -> None:  # printed, and the report rewritten: a cut-off run keeps what it did
        report.append(text)
        print(text, flush=True)
        (out / "fp8_check.md").write_text("\n".join(report))

    if not args.no_tests:
        prebuild_for_tests(sms)  # the smoke child finds these in the disk cache
        alive, text = smoke()
        section(text)
        if not alive:
            log("a smoke call failed or hung (the report names it): stopping here")
            return 1
        rc = run_tests()
        section(f"GPU tests (tests/gpu/test_fp8_gpu.py): pytest exit {rc} (0 = all passed)\n")
    cases, rows, configs = bench_suite(args.reps, sms)
    section(suite_tables(rows, configs, device))
    (out / "fp8_suite.json").write_text(json.dumps(
        {"device": device, "sms": sms, "rows": [{**r.__dict__, "config": c} for r, c in zip(rows, configs)]}, indent=1))
    section(launch_times())
    if not args.no_sweep and elapsed() < args.budget:
        section(sweep(max(20, args.reps // 2), sms, args.budget))
    if args.sanitize:
        section(sanitize(out))
    log(f"report: {out / 'fp8_check.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
