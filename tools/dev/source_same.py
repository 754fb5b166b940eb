"""Which programs a change left source for source the same: a digest of the generated CUDA C++ and
its NVRTC options of every attention program a launch can build (sass_same.py's forward programs,
and the backward's), per kernel and head dim, with no NVRTC and no GPU: seconds for every sample
and held-out set, where sass_same.py takes an NVRTC build each.

    python tools/dev/source_same.py --json A.json FILE.kd ... [--head-dims 128] [--arch sm_90a]
    python tools/dev/source_same.py --compare A.json B.json

kdsl is imported from PYTHONPATH: run the first form against a clone of the older commit and
against this tree, then compare. A refactor of the passes or the runtime whose every digest
agrees changed no kernel (an edit of an included header is not seen here: the headers are
hashed into the JIT cache key, not into the source).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from sass_same import PROGRAMS, compare


def digests(files: list[str], head_dims: list[int], arch: str) -> dict:
    from kdsl.errors import KdslError
    from kdsl.grammar import parse
    from kdsl.passes import pipeline, score_grad
    from kdsl.codegen import emit
    from kdsl.runtime.compiler import _generate
    from kdsl.runtime.programs import Program
    out = {}
    for file in files:
        for k in pipeline.check(parse(Path(file).read_text(), file)):
            if k.kind != "attention":
                continue
            dims = list(pipeline.head_dims(k)) if len(pipeline.head_dims(k)) == 1 else head_dims
            programs = [(name, k.with_attrs(consumers=1) if one_wg else k, Program(split_kv=split))
                        for name, (one_wg, split) in PROGRAMS.items()]
            programs.append(("backward", k, Program(backward=True)))
            if score_grad.capture_grads(k):
                programs.append(("backward-grads", k, Program(backward=True, capture_grads=True)))
            for d in dims:
                for name, kk, program in programs:
                    key = f"{Path(file).stem}:{k.name}:D={d}:{name}"
                    try:
                        _, gen, options, _ = _generate(kk, arch, d, program=program)
                    except KdslError as e:
                        out[key] = f"refused: {str(e).splitlines()[0]}"
                        continue
                    # the include directory's path names the checkout, not the kernel
                    text = gen.source + "\n" + " ".join(options).replace(str(emit.INCLUDE_DIR), "<include>")
                    out[key] = hashlib.sha256(text.encode()).hexdigest()[:16]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*")
    ap.add_argument("--json", help="write the digests here")
    ap.add_argument("--head-dims", default="128")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"))
    args = ap.parse_args()
    if args.compare:
        a, b = (json.loads(Path(p).read_text()) for p in args.compare)
        return compare(a, b)
    result = digests(args.files, [int(x) for x in args.head_dims.split(",")], args.arch)
    print(f"{len(result)} programs, {sum(v.startswith('refused') for v in result.values())} refused")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
