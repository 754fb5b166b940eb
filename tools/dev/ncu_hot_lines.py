#!/usr/bin/env python3
"""The hot SASS lines of one kernel from Nsight Compute's source page, exported as CSV:

    ncu -i REPORT --page source --csv --print-source sass --launch-skip I --launch-count 1 > k.csv
    python3 tools/dev/ncu_hot_lines.py k.csv[.gz] [--min 0.5] [--kernel NAME]

prints, per line with at least --min % of the kernel's warp-state samples: its index, share,
executions, the instruction and its three largest stall reasons (in % of all samples), then the
kernel's stall reasons summed over every line."""
from __future__ import annotations

import argparse
import csv
import gzip
import io
from collections import Counter


def rows(path: str, kernel: str | None = None):
    """(kernel name, its source rows): a report of several kernels exports a block each, headed
    by a "Kernel Name" line; kernel picks one by exact name (default: the first)."""
    raw = gzip.open(path, "rt") if path.endswith(".gz") else open(path)
    blocks, name = {}, "?"
    for ln in raw.read().splitlines():
        if ln.startswith('"Kernel Name"'):
            name = ln.split(",")[1].strip('"')
            blocks.setdefault(name, [])
        else:
            blocks.setdefault(name, []).append(ln)
    if kernel is not None and kernel not in blocks:
        raise SystemExit(f"no kernel {kernel!r} in {path}: {', '.join(blocks)}")
    name = kernel if kernel is not None else next(iter(blocks))
    return name, list(csv.DictReader(io.StringIO("\n".join(blocks[name]))))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--min", type=float, default=0.5, help="smallest share of samples shown, in %%")
    ap.add_argument("--kernel", help="the kernel's name, where the report holds several (default: the first)")
    args = ap.parse_args()
    name, table = rows(args.csv, args.kernel)
    reasons = [k for k in (table[0] if table else {}) if k.startswith("stall_") and "(Not Issued)" not in k]
    total = sum(int(r["Warp Stall Sampling (All Samples)"] or 0) for r in table) or 1
    executed = sum(int(r["Instructions Executed"] or 0) for r in table)
    print(f"== {name}: {total} samples, {executed} warp instructions")
    overall = Counter()
    for i, r in enumerate(table):
        samples = int(r["Warp Stall Sampling (All Samples)"] or 0)
        per = {k[6:]: int(r[k] or 0) for k in reasons}
        overall.update(per)
        if 100 * samples / total < args.min:
            continue
        top = ", ".join(f"{k} {100 * v / total:.1f}" for k, v in sorted(per.items(), key=lambda kv: -kv[1])[:3] if v)
        print(f"{i:5d} {100 * samples / total:5.1f}% ex {int(r['Instructions Executed'] or 0):9d}  "
              f"{r['Source'].strip()[:60]:60s} {top}")
    print("stall reasons over the kernel: " +
          ", ".join(f"{k} {100 * v / total:.1f}" for k, v in overall.most_common(10) if v))


if __name__ == "__main__":
    main()
