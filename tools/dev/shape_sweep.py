#!/usr/bin/env python3
"""kdsl against FlexAttention (and cuDNN for plain / causal) at shapes and variants the
standard suite does not time: other batch/length mixes, odd lengths, M != N, grouped-query
heads under masks, fp16, head dims 64, 80 and 256. Same harness as `kdsl bench` (one process,
timed in turns, L2 flushed); prints kernel, shape, kdsl TFLOPS and the ratio to each peer.

    python3 tools/dev/shape_sweep.py [--reps 50] [--only causal_gqa,plain]
    python3 tools/dev/shape_sweep.py --file my_variants.kd [--shapes "B=2,H=16,M=4096,N=4096,D=128;..."]

--file times every attention kernel of a file at each of --shapes; a kernel whose k has its own
head count gets Hkv = H / 4, one whose v has its own head dim gets Dv = 2 D (at most 256).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
SAMPLES, UNSEEN = ROOT / "samples", ROOT / "tools" / "dev" / "unseen.kd"


def cases():
    from kdsl.bench import Case

    def c(file, name, B, H, M, N, D, Hkv=None, ints=None):
        shape = dict(B=B, H=H, M=M, N=N, D=D, **({"Hkv": Hkv} if Hkv else {}))
        return Case(str(file), name, shape, ints=ints or {})
    s = lambda name: SAMPLES / f"{name}.kd"  # noqa: E731
    return [
        c(s("plain"), "plain", 4, 32, 4096, 4096, 128),
        c(s("plain"), "plain", 4, 16, 3000, 3000, 128),
        c(s("plain"), "plain", 4, 16, 512, 4096, 128),
        c(s("plain"), "plain", 8, 16, 2048, 2048, 80),
        c(s("causal"), "causal", 1, 32, 16384, 16384, 128),
        c(s("causal"), "causal", 16, 16, 1024, 1024, 128),
        c(s("causal"), "causal", 8, 16, 2048, 2048, 64),
        c(s("causal"), "causal", 2, 16, 4096, 4096, 256),
        c(UNSEEN, "causal_gqa", 2, 32, 4096, 4096, 128, Hkv=8),
        c(UNSEEN, "gemma2_gqa", 1, 16, 8192, 8192, 256, Hkv=8),
        c(UNSEEN, "causal_f16", 4, 16, 4096, 4096, 128),
        c(UNSEEN, "head_tables", 4, 16, 4096, 4096, 128),
        c(s("sliding_window"), "sliding_window", 4, 16, 4096, 4096, 64),
        c(s("alibi"), "alibi", 2, 16, 8192, 8192, 64),
        c(s("softcap"), "softcap", 2, 16, 4096, 4096, 256),
        c(UNSEEN, "clamped_causal", 4, 16, 4096, 4096, 128),
        c(UNSEEN, "sigmoid_logits", 4, 16, 4096, 4096, 128),
        c(s("softcap"), "softcap", 4, 32, 1024, 1024, 64),
    ]


FILE_SHAPES = "B=2,H=16,M=4096,N=4096,D=128;B=4,H=16,M=2048,N=2048,D=64"


def file_cases(path: str, shapes: str):
    """Every attention kernel of `path` at each shape ("B=..,H=..,M=..,N=..,D=..;..."), with
    Hkv = H / 4 and Dv = 2 D (at most 256) where the program leaves them free."""
    import kdsl
    from kdsl import bench
    mod = kdsl.load(path)
    out = []
    for text in filter(None, shapes.split(";")):
        shape = bench.parse_shape(text, "attention")
        shape.setdefault("Hkv", max(1, shape["H"] // 4))
        shape.setdefault("Dv", min(256, 2 * shape["D"]))
        out += [c for c in bench.file_cases(path, mod, [shape]) if c.kind == "attention"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--only", default="")
    ap.add_argument("--file", help="time every attention kernel of this .kd file instead")
    ap.add_argument("--shapes", default=FILE_SHAPES, help="with --file: shapes separated by ';'")
    args = ap.parse_args()
    import torch
    import kdsl
    from kdsl import bench
    only = set(filter(None, args.only.split(",")))
    todo = [c for c in (file_cases(args.file, args.shapes) if args.file else cases()) if not only or c.kernel in only]
    modules = {f: kdsl.load(f) for f in {c.file for c in todo}}
    print(torch.cuda.get_device_name(), flush=True)
    for row in bench.run(todo, modules, args.reps, {"flex", "cudnn"}, progress=False):
        if row.failure:
            print(f"{row.kernel:16s} {row.shape:42s} FAILED {row.failure}", flush=True)
            continue
        peers = "  ".join(f"{n} {p['ms'] and row.ms and p['ms'] / row.ms:.2f}" if "ms" in p else f"{n} error {p['error']}"
                          for n, p in row.peers.items())
        print(f"{row.kernel:16s} {row.shape:42s} err {row.error:.1e} {row.ms * 1e3:9.1f} us {row.tflops:6.1f} TFLOPS  "
              f"{peers}", flush=True)


if __name__ == "__main__":
    main()
