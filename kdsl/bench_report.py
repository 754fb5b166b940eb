"""`kdsl bench`'s results: the markdown table (with the FP8 summary and the host-time rows),
the JSON and the figure (kdsl.benchplot), from the rows kdsl.bench measured."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from .bench import PEER_NAMES, Row

BACKWARD_CONVENTION = ["Rows marked fwd+bwd: a forward and the gradients of q, k and v, TFLOPS at 3.5 times the forward's "
                       "work (FlashAttention's convention); err: the worst of dq, dk and dv against float64 autograd "
                       "of the reference, delta taken from kdsl's own output (kdsl.check.reference_grads)."]


def markdown(rows: list[Row], device: str, host: list = (), seed: int | None = None) -> str:
    backward = BACKWARD_CONVENTION if any(r.family == "backward" for r in rows) else []
    inputs = [f"Inputs: random, from seed {seed} (kdsl bench --seed {seed} draws them again)."] if seed is not None else []
    lines = [f"# kdsl bench on {device}", "", *inputs,
             "TFLOPS count only the work the mask leaves (2·(D + Dv) per kept (q, kv) pair; FP8: 2·rows·N·K over valid rows).",
             "Times: median of CUDA-event-timed launches, L2 flushed before each, kdsl and its peers timed in "
             "turns (5 blocks each, interleaved, each round starting one function later). Ratio = peer time / "
             "kdsl time on the same work (> 1: kdsl faster; defined when the inputs' mask kept nothing); in brackets the lowest and highest of the five blocks' ratios (a range that "
             "straddles 1 is a tie).",
             "Cold build: what a first call waits for on a first run (parse, codegen, NVRTC), measured per kernel "
             "in a fresh process with kdsl's cache empty and the CUDA driver's compute cache off; per-step "
             "times in the JSON.", *backward, "",
             "| kernel | shape | err | kdsl µs | kdsl TFLOPS | GB/s | peer | peer µs | peer TFLOPS | ratio | cold build s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.failure:
            lines.append(f"| {r.kernel} | {r.shape} | FAILED: {_cell(r.failure)} | | | | | | | | |")
            continue
        peers = list(r.peers.items()) or [("-", {})]
        for name, p in peers:
            peer = PEER_NAMES.get(name, name)
            if "error" in p:
                pus, pt, ratio = "", f"could not run: {_cell(p['error'], 70)}", ""
            elif p:
                pus, pt, ratio = f"{p['ms'] * 1e3:.1f}", f"{p['tflops']:.1f}", f"{p['ms'] / r.ms:.2f}"
                if p.get("ratio_range"):
                    ratio += " [{:.2f}, {:.2f}]".format(*p["ratio_range"])
            else:
                pus, pt, ratio = "", "", ""
            gb = f"{r.gbps:.0f}" if r.gbps == r.gbps else ""
            lines.append(f"| {r.kernel} | {r.shape} | {r.error:.1e} | {r.ms * 1e3:.1f} | {r.tflops:.1f} | {gb} | {peer} | "
                         f"{pus} | {pt} | {ratio} | {_seconds(r.compile.get('cold_build_s'))} |")
    return "\n".join(lines + fp8_summary(rows) + host_table(host)) + "\n"


def host_table(host: list) -> list[str]:
    """kdsl.hosttime's rows: host microseconds per eager launch, kdsl's and torch._scaled_mm's
    called alike, sampled in turns in this run."""
    if not host:
        return []
    from .hosttime import FP8_HOST_SHAPE
    m, n, k = FP8_HOST_SHAPE
    lines = ["", f"Host time per eager launch, fp8_gemm M={m} N={n} K={k} (µs; a sleep kernel queued ahead, "
                 f"the calls sampled in turns):", "",
             f"| call | kdsl launch path | kdsl µs | {PEER_NAMES['scaled_mm']} µs | kdsl / peer |",
             "|---|---|---|---|---|"]
    for h in host:
        lines.append(f"| {h.call} | {h.path} | {h.kdsl_us:.1f} | {h.peer_us:.1f} | {h.ratio:.2f} |")
    return lines


def fp8_summary(rows: list[Row]) -> list[str]:
    """The dense FP8 rows' ratios to torch's blockwise _scaled_mm, as issue 8's bar reads them:
    the lowest and the median over the shapes that ran."""
    ratios = [r.tflops / r.peers["scaled_mm"]["tflops"] for r in rows
              if not r.failure and r.kernel == "fp8_gemm" and "tflops" in r.peers.get("scaled_mm", {})]
    if not ratios:
        return []
    return ["", f"FP8 dense against {PEER_NAMES['scaled_mm']}: lowest {min(ratios):.2f}, median "
                f"{statistics.median(ratios):.2f} over {len(ratios)} shapes."]


def _cell(text: str, limit: int | None = None) -> str:
    """text as one markdown table cell, its first `limit` characters: an error message's newlines
    ended the row mid-table and its pipes split the cell (an Inductor error, eighty-second session)."""
    return " ".join(str(text).split())[:limit].replace("|", "\\|")


def _seconds(x) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def plot(rows: list[Row], path: Path, device: str) -> None:
    from . import benchplot
    fig = benchplot.figure(rows, device, PEER_NAMES)  # selects the Agg backend before pyplot loads
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt
    plt.close(fig)


def write_results(rows: list[Row], out_dir: Path, device: str, stem: str, host: list = (),
                  seed: int | None = None) -> dict:
    import dataclasses
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / f"{stem}.json", "md": out_dir / f"{stem}.md", "png": out_dir / f"{stem}.png"}
    paths["json"].write_text(json.dumps({"device": device, "seed": seed, "rows": [dataclasses.asdict(r) for r in rows],
                                         "host": [dataclasses.asdict(h) for h in host]}, indent=1))
    paths["md"].write_text(markdown(rows, device, host, seed))
    try:
        plot(rows, paths["png"], device)
    except ImportError:
        paths.pop("png")
    return paths
