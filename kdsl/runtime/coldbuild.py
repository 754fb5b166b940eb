"""A cold build of one kernel, timed per step, as a user meets it on a first run.

    python -m kdsl.runtime.coldbuild FILE.kd KERNEL [HEAD_DIM] [ARCH]    (prints JSON)

measure() builds in a fresh process with an empty kdsl cache and the CUDA driver's
compute cache disabled (CUDA_CACHE_DISABLE=1, and an empty CUDA_CACHE_PATH besides):
NVRTC >= 12.9 looks NVVM's and ptxas' output up in that driver cache, so a second compile
of an identical source in one process, or on one machine, costs only the C++ front end.
The timed build is the one a first call makes (compiler.build, untraced: NVRTC's time
trace costs 0.015-0.03 s that no user pays). The child then proves it compiled from
scratch: kdsl's cache missed, and the same source compiled again with the same options and
the time trace (untimed) shows NVVM and ptxas running, which the timed build took at least
COLD_SHARE of (a build served from a cache costs about the front end, a tenth of that). The
traced compile's cubin is not always byte-identical: the trace option can reorder NVVM's
instructions (a bool mask under causal: the same PTX instructions in another order), so it is
held to the same kernel entries, not the same bytes.
Steps (seconds): import_s (kdsl), parse_s (parse + type check), nvrtc_load_s, codegen_s
(passes + CUDA C++), nvrtc_s (all of NVRTC, the timed build), and from the traced compile
cxx_front_end_s + nvvm_s (-> PTX) + ptxas_s (PTX -> cubin); cold_build_s = parse through
cubin (what a first call waits for), cold_build_cpu_s its CPU time (steadier on a busy
machine), cache_hit_s = the same build from kdsl's disk cache.

Not kernel caches, and so not emptied here: the grammar's parse tables and the compiled
templates, which kdsl keeps beside them as Python keeps bytecode (kdsl/cachefiles.py). The
first run on an installation builds them, once; tables_once_s is what that costs (measured
here after the build), and parse_s and codegen_s include it when this run was the first.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..errors import KdslError

STEPS = ("import_s", "parse_s", "nvrtc_load_s", "codegen_s", "nvrtc_s", "cxx_front_end_s", "nvvm_s", "ptxas_s",
         "cold_build_s", "cold_build_cpu_s", "cache_hit_s", "tables_once_s")
COLD_SHARE = 0.3  # of the traced NVVM + ptxas time that the timed build must have taken


def measure(file: str, kernel: str, head_dim: int = 0, arch: str = "sm_90a", timeout: float = 600) -> dict:
    """Seconds per step of a cold build (see STEPS), measured in a fresh subprocess."""
    with tempfile.TemporaryDirectory(prefix="kdsl-cold-") as d:
        root = str(Path(__file__).resolve().parents[2])  # the child imports this very kdsl
        env = {**os.environ, "KDSL_CACHE_DIR": os.path.join(d, "kdsl"), "CUDA_CACHE_DISABLE": "1",
               "CUDA_CACHE_PATH": os.path.join(d, "cuda"),
               "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        args = [sys.executable, "-m", "kdsl.runtime.coldbuild", "--child", str(file), kernel, str(head_dim), arch]
        res = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        raise KdslError(f"cold build of {kernel} failed: {res.stderr.strip()[-500:]}")
    return json.loads(res.stdout)


def main(argv: list[str]) -> dict:
    t0 = time.perf_counter()
    os.environ["KDSL_PREBUILD"] = "0"  # no background build competing with the one timed here
    from . import cache, nvrtc
    from .compiler import build
    from .module import load
    t1, c1 = time.perf_counter(), time.process_time()
    file, name = argv[0], argv[1]
    head_dim = int(argv[2]) if len(argv) > 2 else 0
    arch = argv[3] if len(argv) > 3 else "sm_90a"
    mod = load(file)
    if name not in mod.ir:
        raise KdslError(f"no kernel '{name}' in {file}")
    t2 = time.perf_counter()
    nvrtc.version()  # loads libnvrtc
    t3 = time.perf_counter()
    built = build(mod.ir[name], arch, head_dim)
    t4, c4 = time.perf_counter(), time.process_time()
    proof = None if built.cache_hit else \
        nvrtc.compile_cuda(built.generated.source, built.generated.entry, list(built.options), trace=True)
    phases = proof.phases if proof else {}
    check_cold(built.cache_hit, phases, built.seconds["nvrtc_s"])
    if entries(proof.ptx) != entries(built.compiled.ptx):
        raise KdslError(f"the traced compile made other kernels ({entries(proof.ptx)}) than the timed build "
                        f"({entries(built.compiled.ptx)}): not the same program")
    cache.clear_memory()
    t5 = time.perf_counter()
    assert build(mod.ir[name], arch, head_dim).cache_hit
    t6 = time.perf_counter()
    return {"import_s": t1 - t0, "parse_s": t2 - t1, "nvrtc_load_s": t3 - t2, **built.seconds, **phases,
            "cold_build_s": t4 - t1, "cold_build_cpu_s": c4 - c1, "cache_hit_s": t6 - t5,
            "tables_once_s": tables_once()}


def entries(ptx: str) -> list[str]:
    """The kernel entry points a module's PTX defines, in order."""
    return re.findall(r"^(?:\.visible\s+)?\.entry\s+(\w+)", ptx, re.M)


def tables_once() -> float:
    """Seconds to build the parse tables and compile the templates from scratch."""
    from ..codegen import emit
    from ..grammar import parser
    t = time.perf_counter()
    parser.build_tables()
    env = emit.environment()
    for name in env.list_templates(extensions=["j2"]):
        env.get_template(name)
    return time.perf_counter() - t


def check_cold(cache_hit: bool, phases: dict, nvrtc_s: float) -> None:
    """Refuse a build that a cache served: kdsl's, or the driver's (then NVRTC's trace lacks
    NVVM or ptxas, or the timed build took a fraction of what they take)."""
    ran = {"nvvm_s", "ptxas_s"} <= phases.keys()
    if cache_hit or not ran or nvrtc_s < COLD_SHARE * (phases["nvvm_s"] + phases["ptxas_s"]):
        raise KdslError(f"not a cold build: kdsl cache hit {cache_hit}, NVRTC phases run {sorted(phases)}, "
                        f"NVRTC took {nvrtc_s:.3f} s"
                        + (f" for {phases['nvvm_s'] + phases['ptxas_s']:.3f} s of NVVM and ptxas" if ran else ""))


if __name__ == "__main__":
    try:
        if sys.argv[1:2] == ["--child"]:
            result = main(sys.argv[2:])
        elif len(sys.argv) in (3, 4, 5):
            result = measure(*sys.argv[1:3], *([int(sys.argv[3])] if len(sys.argv) > 3 else []), *sys.argv[4:])
        else:
            raise KdslError("usage: python -m kdsl.runtime.coldbuild FILE.kd KERNEL [HEAD_DIM] [ARCH]")
        print(json.dumps({k: round(v, 4) for k, v in result.items()}))
    except KdslError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
