"""Which programs a change left instruction for instruction the same: a digest of the SASS
of every program a launch can build (every call's, the split-KV one, the one-warpgroup decode
ones), per kernel and head dim. No GPU needed.

    python tools/dev/sass_same.py --json A.json FILE.kd ... [--head-dims 64,128] [--also plain:32,96] [--backward]
        [--backward-only] [--entries]
    python tools/dev/sass_same.py --compare A.json B.json

kdsl is imported from PYTHONPATH: run the first form once against a copy of an older commit
(git worktree) and once against this tree, then compare. A benchmark row measured on the
older commit still describes this tree's kernel where every program it can launch has the
same digest (the cubin's SASS, not its bytes: the ELF carries no timing-relevant difference
once the instructions, registers and shared memory agree, and those are in the text).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import tempfile
from pathlib import Path

from devtools import sass_text

# (one consumer warpgroup, split_kv): the programs launch.py's _load can ask for (short rows at head
# dims <= 64 also take two warpgroups: the tile a kernel the tiling gives two has)
_OPCODE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z0-9_.]+)")
PROGRAMS = {"every-call": (False, False), "split": (False, True),
            "one-wg": (True, False), "one-wg-split": (True, True)}


def digest(text: str) -> str:
    """'<whole text>/<opcode sequence>': two programs whose SASS differs only in register names
    or immediates share the second half."""
    ops = " ".join(m.group(1) for m in _OPCODE.finditer(text))
    return "/".join(hashlib.sha256(x.encode()).hexdigest()[:16] for x in (text, ops))


def digests(files: list[str], head_dims: list[int], also: dict[str, list[int]], backward: bool = False,
            forward: bool = True, entries: bool = False) -> dict:
    from kdsl.errors import KdslError
    from kdsl.grammar import parse
    from kdsl.passes import pipeline, score_grad
    from kdsl.runtime.compiler import build
    from kdsl.runtime.programs import Program
    out = {}
    for file in files:
        for k in pipeline.check(parse(Path(file).read_text(), file)):
            if k.kind != "attention":
                continue
            dims = head_dims + also.get(k.name, [])
            if len(pipeline.head_dims(k)) == 1:  # a head dim written in the declaration (MLA)
                dims = list(pipeline.head_dims(k))
            for d in dims:
                programs = [(prog, k.with_attrs(consumers=1) if one_wg else k, Program(split_kv=split))
                            for prog, (one_wg, split) in PROGRAMS.items()] if forward else []
                if backward:  # the backward's module (its kernel and helpers) as autograd builds it
                    programs.append(("backward", k, Program(backward=True)))
                    if score_grad.capture_grads(k):  # and the one that adds captured tensors' gradients
                        programs.append(("backward-grads", k, Program(backward=True, capture_grads=True)))
                for prog, kk, program in programs:
                    name = f"{Path(file).stem}:{k.name}:D={d}:{prog}"
                    try:
                        b = build(kk, "sm_90a", d, program=program)
                    except KdslError as e:
                        out[name] = f"refused: {str(e).splitlines()[0]}"
                        continue
                    text = sass_text(b.compiled.cubin)
                    # entries: one digest a kernel entry (the attention kernel apart from its tile summary's)
                    parts = {f"{name}:{p.split()[0]}": "Function : " + p for p in text.split("Function : ")[1:]} \
                        if entries else {name: text}
                    for n, t in parts.items():
                        out[n] = digest(t)
                        print(n, out[n], flush=True)
    return out


def compare(a: dict, b: dict) -> int:
    both = [n for n in sorted(a) if n in b]
    same = [n for n in both if a[n] == b[n]]
    opcodes = [n for n in both if a[n] != b[n] and a[n].split("/")[-1] == b[n].split("/")[-1]]
    differ = [n for n in both if n not in same and n not in opcodes]
    only = sorted(set(a) ^ set(b))
    print(f"{len(same)} programs the same, {len(opcodes)} with the same opcode sequence (registers or "
          f"operands differ), {len(differ)} differ, {len(only)} in one side only")
    for n in opcodes:
        print(f"  same opcodes: {n}")
    for n in differ:
        print(f"  differs: {n}")
    for n in only:
        print(f"  one side only: {n}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*")
    ap.add_argument("--json", help="write the digests here")
    ap.add_argument("--head-dims", default="64,128")
    ap.add_argument("--also", action="append", default=[], metavar="KERNEL:D,D",
                    help="more head dims for one kernel (e.g. plain:32,96,192,256)")
    ap.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"))
    ap.add_argument("--backward", action="store_true", help="also each kernel's backward module")
    ap.add_argument("--backward-only", action="store_true", help="each kernel's backward modules alone")
    ap.add_argument("--entries", action="store_true", help="a digest a kernel entry (the attention kernel "
                    "apart from its tile summary's)")
    args = ap.parse_args()
    if args.compare:
        a, b = (json.loads(Path(p).read_text()) for p in args.compare)
        return compare(a, b)
    also = {}
    for spec in args.also:
        name, dims = spec.split(":")
        also.setdefault(name, []).extend(int(x) for x in dims.split(","))
    os.environ.setdefault("KDSL_CACHE_DIR", tempfile.mkdtemp(prefix="kdsl-sass-same-"))
    result = digests(args.files, [int(x) for x in args.head_dims.split(",")], also,
                     args.backward or args.backward_only, forward=not args.backward_only, entries=args.entries)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
