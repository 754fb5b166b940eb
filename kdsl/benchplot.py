"""The `kdsl bench` figure: one panel per family, each in its own unit, and the ratio of
kdsl to the best peer on a log axis with a line at 1.0.

One TFLOPS axis for everything hid the decode rows (~0.3 TFLOPS next to ~800) and left
the ratios to be read off bar heights; decode is timed in µs, where it is bound."""
from __future__ import annotations

import math

# Panels: (family, title, what is drawn per row, axis label). Decode rows are latency-bound:
# µs, lower is better; the others are TFLOPS of the work the mask leaves.
PANELS = [
    ("prefill", "Prefill attention — TFLOPS (higher is better; fwd+bwd rows at 3.5x the forward's work)", "tflops",
     "TFLOPS (work the mask leaves)"),
    ("decode", "Decode attention (M = 1) — µs per call (lower is better)", "us", "µs per call"),
    ("fp8", "FP8 block-scaled GEMM — TFLOPS (higher is better)", "tflops", "TFLOPS"),
]
RATIO_TITLE = "kdsl / best peer — same work, > 1: kdsl faster"
# Yardsticks, not peers: cuBLAS bf16 computes a different (wider) product; reading b once is
# a floor under any GEMM's time, not a GEMM.
NOT_PEERS = {"cublas_bf16", "read_b"}
COLORS = {"kdsl": "#d62728", "flex": "#1f77b4", "cudnn": "#2ca02c", "scaled_mm": "#9467bd", "cublas_bf16": "#7f7f7f",
          "read_b": "#bcbd22"}


def family(row) -> str:
    """The row's panel; rows written before the field existed are recognised by shape."""
    if row.family == "backward":  # forward + backward rows (kdsl.bench_backward), labelled fwd+bwd
        return "prefill"
    if row.family:
        return row.family
    if "K=" in row.shape:
        return "fp8"
    return "decode" if " M=1 " in f" {row.shape} " else "prefill"


def best_peer(row):
    """(peer name, kdsl TFLOPS / that peer's) against the fastest peer that ran, or None."""
    ran = {n: p["tflops"] for n, p in row.peers.items() if "tflops" in p and n not in NOT_PEERS}
    if not ran or not row.tflops > 0:
        return None
    name = max(ran, key=ran.get)
    return name, row.tflops / ran[name]


def figure(rows, device: str, peer_names: dict):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if not r.failure]
    by_family = {f: [r for r in ok if family(r) == f] for f, *_ in PANELS}
    heights = [max(1, len(by_family["prefill"])), max(1, len(by_family["decode"]) + len(by_family["fp8"]))]
    fig = plt.figure(figsize=(22, 4 + 0.55 * max(heights)), layout="constrained")
    grid = fig.add_gridspec(2, 3, height_ratios=[max(1, len(by_family["decode"])), max(1, len(by_family["fp8"]))])
    axes = {"prefill": fig.add_subplot(grid[:, 0]), "decode": fig.add_subplot(grid[0, 1]),
            "fp8": fig.add_subplot(grid[1, 1]), "ratio": fig.add_subplot(grid[:, 2])}
    for fam, title, metric, xlabel in PANELS:
        _bars(axes[fam], by_family[fam], metric, title, xlabel, peer_names)
    _ratios(axes["ratio"], [r for f, *_ in PANELS for r in by_family[f]], peer_names)
    fig.suptitle(f"kdsl bench — {device}", fontsize=14)
    return fig


def _label(r) -> str:
    return f"{r.kernel}  {r.shape}"


def _bars(ax, rows, metric, title, xlabel, peer_names):
    ax.set_title(title, fontsize=11)
    if not rows:
        ax.text(0.5, 0.5, "no rows", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    names = ["kdsl"] + sorted({n for r in rows for n, p in r.peers.items() if "tflops" in p})
    height = 0.8 / len(names)
    for i, n in enumerate(names):
        vals = [_value(r.tflops, r.ms) if n == "kdsl" else _value(**_peer(r, n)) for r in rows]
        vals = [v[metric] for v in vals]
        ys = [y + i * height for y in range(len(rows))]
        bars = ax.barh(ys, [v if v == v else 0 for v in vals], height, label=peer_names.get(n, n),
                       color=COLORS.get(n))
        ax.bar_label(bars, labels=[_fmt(v) for v in vals], fontsize=6, padding=2)
    ax.set_yticks([y + height * (len(names) - 1) / 2 for y in range(len(rows))], [_label(r) for r in rows],
                  fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.margins(x=0.12)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.06 if len(rows) > 6 else -0.2),
              ncol=len(names), frameon=False)


def _ratios(ax, rows, peer_names):
    ax.set_title(RATIO_TITLE, fontsize=11)
    pairs = [(r, best_peer(r)) for r in rows]
    pairs = [(r, b) for r, b in pairs if b]
    if not pairs:
        ax.text(0.5, 0.5, "no peer ran", ha="center", va="center", transform=ax.transAxes)
        return
    ratios = [b[1] for _, b in pairs]
    colors = ["#2ca02c" if x >= 1 else "#d62728" for x in ratios]
    # Bars grow from 1.0 on a log axis, so 2x faster and 2x slower are equally long.
    bars = ax.barh(range(len(pairs)), [x - 1 for x in ratios], left=1.0, color=colors)
    ax.bar_label(bars, labels=[f"{x:.2f}" for x in ratios], fontsize=7, padding=2)
    ax.set_yticks(range(len(pairs)), [f"{_label(r)}  vs {peer_names.get(b[0], b[0])}" for r, b in pairs],
                  fontsize=7)
    ax.axvline(1.0, color="black", linewidth=1.2)
    ax.set_xscale("log")
    lo, hi = min(ratios + [1.0]) / 1.5, max(ratios + [1.0]) * 1.5
    ax.set_xlim(lo, hi)
    ticks = [t for t in (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1, 2, 4, 8, 16) if lo <= t <= hi]
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()
    for i in range(1, len(pairs)):  # a rule between families
        if family(pairs[i][0]) != family(pairs[i - 1][0]):
            ax.axhline(i - 0.5, color="0.6", linewidth=0.8, linestyle="--")
    ax.invert_yaxis()
    ax.set_xlabel("kdsl TFLOPS / best peer TFLOPS (log scale)")


def _peer(r, name):
    p = r.peers.get(name, {})
    return {"tflops": p.get("tflops", math.nan), "ms": p.get("ms", math.nan)}


def _value(tflops, ms):
    return {"tflops": tflops, "us": ms * 1e3}


def _fmt(v) -> str:
    return "" if v != v else f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 1 else f"{v:.2f}"
