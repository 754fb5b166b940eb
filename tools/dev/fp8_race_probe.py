#!/usr/bin/env python3
"""compute-sanitizer racecheck on the FP8 GEMM where a CTA refills pipeline stages, once per
form of the scale copies' completion (KDSL_FP8_SCALE_COMPLETION in fp8_gemm_config.cuh):

    0  cp.async.mbarrier.arrive.noinc, one counted arrival per producer lane (the kernel)
    1  cp.async.mbarrier.arrive without .noinc, only the leader's arrival counted (before)
    2  cp.async.wait_all, then a plain arrival per lane (diagnostic: the completion
       mechanism racecheck has modelled longest)

Every case is sized so that its CTAs reuse ring stages (units x K blocks + 1 > stages), which
the racecheck hazards need and which tools/dev/sanitize.py's FP8 shapes only do for grouped
contiguous: ragged groups with empty ones and M % 4 != 0, a 2-CTA cluster, and dense and
masked controls. Each call is also judged against the float64 reference. Prints, and writes
to OUT/race_probe.md, hazards per case and form (with the SASS at each reported offset when
cuobjdump is there); each form's whole sanitizer output is OUT/race_form<F>.log.

    python3 tools/dev/fp8_race_probe.py --out DIR [--forms 0,1,2] [--cases a,b] [--repeat N]

Environment as for tools/dev/fp8_gpu_check.py (lark on PYTHONPATH); compute-sanitizer on PATH.
tools/dev/fp8_gemm_dev_notes.md says how to read the table.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
FORMS = {0: "noinc (kernel)", 1: "net-zero (before)", 2: "wait_all (diagnostic)"}
# label: (sample, (M, N, K, G), attrs, group layout for contiguous)
CASES = {
    "gc-logged": ("fp8_grouped_contiguous", (300, 256, 384, 3), {}, "random"),
    "gc-ragged-empty": ("fp8_grouped_contiguous", (301, 256, 1024, 5), {}, "ragged"),
    "gc-128x64": ("fp8_grouped_contiguous", (333, 256, 1024, 3), {"tile_m": 128, "tile_n": 64, "cluster": 1}, "ragged"),
    "gc-cluster": ("fp8_grouped_contiguous", (300, 256, 768, 3),
                   {"tile_m": 128, "tile_n": 64, "cluster": 2, "multicast": "a"}, "random"),
    # 192-row tiles taken from the stream's counter (176 tiles: more than the SMs)
    "gc-192-counter": ("fp8_grouped_contiguous", (3000, 1024, 384, 3), {"tile_m": 192, "tile_n": 96, "cluster": 1},
                       "ragged"),
    "dense-reuse": ("fp8_gemm", (129, 256, 2048, 1), {}, None),
    "masked-reuse": ("fp8_grouped_masked", (200, 256, 1536, 3), {}, None),
    # 256-row tiles (their K loop is unrolled by KDSL_FP8_UNROLL_KB_256), clustered and with turns
    "dense-256-cluster": ("fp8_gemm", (600, 512, 1024, 1),
                          {"tile_m": 256, "tile_n": 128, "cluster": 2, "multicast": "a"}, None),
    "masked-256": ("fp8_grouped_masked", (300, 256, 1536, 3), {"tile_m": 256, "tile_n": 128, "cluster": 1}, None),
    # even stage counts with an odd block count (K = 1920; written for the paired-ring trial, which
    # left pairs half used there); the masked one has warpgroups with no rows
    "dense-pairs": ("fp8_gemm", (300, 384, 1920, 1), {"tile_m": 128, "tile_n": 128, "stages": 4}, None),
    "masked-pairs": ("fp8_grouped_masked", (200, 256, 1920, 3), {"tile_m": 128, "tile_n": 128, "stages": 4}, None),
    "cluster-pairs": ("fp8_gemm", (600, 512, 1920, 1), {"tile_m": 256, "tile_n": 128, "cluster": 2, "multicast": "a",
                                                         "store": "rows", "stages": 4}, None),
}
MARK = "@@probe"


def with_form(form: int) -> None:
    """Compile every kernel of this process with the given completion form (a define, so
    the cache keeps the forms apart)."""
    from kdsl.runtime import nvrtc
    base = nvrtc.default_options
    nvrtc.default_options = lambda *a: base(*a) + [f"-DKDSL_FP8_SCALE_COMPLETION={form}"]


def kernel(label: str, sms: int):
    import kdsl
    sample, (m, n, k, g), attrs, _ = CASES[label]
    fn = getattr(kdsl.load(ROOT / "samples" / f"{sample}.kd"), sample).with_attrs(**attrs)
    return fn, fn.ir.with_attrs(shape=[m, n, k, g], sms=sms, **attrs)


def group_ids(layout: str, m: int, g: int, gen):
    """Expert per row: uniform over [-1, G) ("random"), or sorted segments of random lengths
    with about a third of the experts empty and padding rows scattered ("ragged")."""
    import torch
    if layout == "random":
        return torch.randint(-1, g, (m,), generator=gen, dtype=torch.int32)
    present = [e for e in range(g) if torch.rand((), generator=gen) > 0.33] or [g - 1]
    cuts = sorted(torch.randint(0, m + 1, (len(present) - 1,), generator=gen).tolist())
    ids = torch.full((m,), -1, dtype=torch.int32)
    for e, lo, hi in zip(present, [0] + cuts, cuts + [m]):
        ids[lo:hi] = e
    ids[torch.rand(m, generator=gen) < 0.05] = -1
    return ids


def run_case(label: str, fn, seed: int) -> str:
    """One judged call: 'ok err' or 'FAIL err problems'."""
    import torch

    from kdsl import fp8, reference
    from kdsl.check import FP8_TOL, fp8_difference
    sample, (m, n, k, g), _, layout = CASES[label]
    gen = torch.Generator().manual_seed(seed)
    kind = fn.ir.attr("grouping")
    a, sa = fp8.quantize_1x128(torch.randn((g, m, k) if kind == "masked" else (m, k), generator=gen).cuda())
    b, sb = fp8.quantize_128x128(torch.randn((n, k) if kind == "dense" else (g, n, k), generator=gen).cuda())
    extra, valid = (), None
    if kind == "contiguous":
        ids = group_ids(layout, m, g, gen).cuda()
        extra, valid = (ids,), (ids >= 0).reshape(m, 1).expand(m, n)
    elif kind == "masked":
        counts = torch.randint(0, m + 1, (g,), generator=gen, dtype=torch.int32).cuda()
        extra = (counts,)
        valid = (torch.arange(m, device="cuda").reshape(1, m, 1) < counts.reshape(g, 1, 1)).expand(g, m, n)
    out = fn(a, sa, b, sb, *extra)
    torch.cuda.synchronize()
    ref = reference.fp8_gemm(a, sa, b, sb, *(() if kind == "dense" else
                                             ((extra[0], None) if kind == "contiguous" else (None, extra[0]))))
    if valid is not None:
        out, ref = out[valid], ref[valid]
    err = fp8_difference(out, ref) if out.numel() else 0.0
    return f"{'ok' if err <= FP8_TOL else 'FAIL'} {err:.1e} (seed {seed})"


def child(form: int, labels: list[str], repeat: int, cubins: Path) -> None:
    os.environ["KDSL_PREBUILD"] = "0"  # no background builds of other kernels in this process
    from kdsl.runtime import compiler
    from kdsl.runtime.launch import _sm_count
    with_form(form)
    import torch
    sms = _sm_count(torch.cuda.current_device())
    for label in labels:
        fn, k = kernel(label, sms)
        (cubins / f"form{form}_{label}.cubin").write_bytes(compiler.build(k, "sm_90a").compiled.cubin)
        for r in range(repeat):
            print(f"{MARK} start {label} {r}", flush=True)
            verdict = run_case(label, fn, seed=int(time.time_ns() % 2**31))
            print(f"{MARK} end {label} {r} {verdict}", flush=True)


def sass_at(cubin: Path, offsets: set[int]) -> dict[int, str]:
    from kdsl.sass import find_cuobjdump
    tool = find_cuobjdump()
    if tool is None or not cubin.exists():
        return {}
    text = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True).stdout
    found = {}
    for line in text.splitlines():
        hit = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if hit and int(hit.group(1), 16) in offsets:
            found[int(hit.group(1), 16)] = hit.group(2)
    return found


def summarise(form: int, text: str, cubins: Path) -> list[str]:
    """Per case: hazards reported between its start and end marks, the offset pairs and what
    SASS sits there; the calls' verdicts."""
    rows, label, block = [], None, []
    sections: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.startswith(MARK):
            parts = line.split()
            if parts[1] == "start":
                label, block = parts[2], []
            else:
                sections.setdefault(parts[2], []).append(" ".join(parts[4:]) + "\n" + "\n".join(block))
                label = None
        elif label is not None:
            block.append(line)
    for lab, runs in sections.items():
        hazards, pairs, verdicts = 0, set(), []
        for run in runs:
            verdict, _, body = run.partition("\n")
            verdicts.append(verdict.split(" (")[0])
            hazards += sum(int(x) for x in re.findall(r"\[(\d+) hazards\]", body))
            cur = None
            for line in body.splitlines():
                if (m := re.search(r"Race reported between (\w+) access at (\S+?)\+0x([0-9a-f]+)", line)):
                    cur = (m.group(1), int(m.group(3), 16), m.group(2))
                elif (m := re.search(r"and (\w+) access at (\S+?)\+0x([0-9a-f]+)", line)) and cur:
                    pairs.add((cur, (m.group(1), int(m.group(3), 16), m.group(2))))
        # offsets in kdsl's kernels are looked up in its cubin; other kernels' (torch's) named
        sass = sass_at(cubins / f"form{form}_{lab}.cubin", {p[1] for pair in pairs for p in pair})

        def where(acc):
            kind, off, fn = acc
            return f"{kind} {off:#x} `{sass.get(off, '?') if fn.startswith('kdsl_') else fn}`"
        desc = "; ".join(f"{where(a)} / {where(b)}" for a, b in sorted(pairs)) or "-"
        rows.append(f"| {FORMS[form]} | {lab} | {', '.join(verdicts)} | {len(pairs)} | {hazards} | {desc} |")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "race_probe_out"))
    ap.add_argument("--forms", default="0,1,2")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--repeat", type=int, default=2, help="judged calls per case (racecheck is dynamic)")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    out = Path(args.out)
    (out / "cubins").mkdir(parents=True, exist_ok=True)
    labels = [c for c in args.cases.split(",") if c]
    if args.child is not None:
        child(args.child, labels, args.repeat, out / "cubins")
        return 0
    from kdsl.runtime import nvrtc
    ver = subprocess.run(["compute-sanitizer", "--version"], capture_output=True, text=True).stdout.strip()
    lines = ["# FP8 racecheck probe (tools/dev/fp8_race_probe.py)", "",
             f"NVRTC {nvrtc.version()}; {ver.splitlines()[-1] if ver else 'compute-sanitizer: not found'}", "",
             "| form | case | calls | offset pairs | hazards | reported pairs (SASS) |", "|---|---|---|---|---|---|"]
    for form in (int(f) for f in args.forms.split(",")):
        t0 = time.monotonic()
        cmd = ["compute-sanitizer", "--tool", "racecheck", "--print-limit", "1000", sys.executable, __file__,
               "--out", str(out), "--cases", ",".join(labels), "--repeat", str(args.repeat), "--child", str(form)]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=540)
            text = r.stdout + r.stderr
        except subprocess.TimeoutExpired as e:
            text = (e.stdout or b"").decode() + "\n(killed after 540 s)\n"
        (out / f"race_form{form}.log").write_text(text)
        summary = [ln for ln in text.splitlines() if "RACECHECK SUMMARY" in ln]
        print(f"form {form} ({FORMS[form]}): {time.monotonic() - t0:.0f} s; "
              f"{summary[-1] if summary else 'no summary line'}", flush=True)
        lines += summarise(form, text, out / "cubins")
    report = "\n".join(lines) + "\n"
    (out / "race_probe.md").write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
