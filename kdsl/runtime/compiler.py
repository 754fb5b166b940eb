"""IR kernel -> cubin, through codegen, the cache and NVRTC; with the dump switch
(KDSL_DUMP=DIR writes each kernel's ir, cuda and ptx).

prebuild() starts a build in a compiler process and returns at once; a later build() of
the same kernel takes its result (or compiles it itself if no process has started it)."""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__, ir
from ..cachefiles import make_key
from ..errors import KdslError
from ..codegen import emit
from ..passes import affine_score, pipeline
from ..passes.target import get_target
from . import cache, nvrtc, workers

SPLIT_KV_OPTION = "-DKDSL_SPLIT_KV=1"  # templates/attention_wgmma.cu.j2
NO_STREAM_OPTION = "-DKDSL_STREAM_CAPTURES=0"  # templates/attention_variant.cu.j2
NO_AFFINE_OPTION = "-DKDSL_AFFINE_SCORE=0"  # templates/attention_variant.cu.j2
WARN_ON_SPILLS_OPTION = "--ptxas-options=--warn-on-spills"
SPILLED = "Registers are spilled to local memory"  # ptxas' warning under WARN_ON_SPILLS_OPTION
_IN_FLIGHT: dict = {}  # cache key -> workers.Job of a prebuild not yet taken by build()
_IN_FLIGHT_LOCK = threading.Lock()


@dataclass(frozen=True)
class Built:
    kernel: ir.Kernel           # lowered IR (with tile attrs)
    generated: emit.Generated
    compiled: nvrtc.Compiled
    cache_key: str
    cache_hit: bool
    seconds: dict = field(default_factory=dict, compare=False)  # codegen_s, nvrtc_s (0 on a hit)
    options: tuple = ()         # the NVRTC options the source is (or would be) compiled with


def build(k: ir.Kernel, arch: str = "sm_90a", head_dim: int = 0, want_cubin: bool = True,
          trace: bool = False, value_dim: int = 0, split_kv: bool = False, stream: bool = True,
          affine: bool = True) -> Built:
    """head_dim, value_dim: q/k's and v's head dims (attention; value_dim 0: the kernel's
    default, pipeline.default_value_dim). trace=True: NVRTC's per-phase times land in
    compiled.phases (on a cache miss). split_kv=True: the Hopper attention kernel's program
    for split-KV launches (its entry and `<entry>_combine`, see splitkv.py); the default
    program, which every other call runs, has neither the split epilogue nor the combine
    kernel, and builds faster for it. stream=False: a kernel with a streamed capture
    (passes/streaming.py) in the program that loads it per element instead, for calls whose
    tensor TMA cannot read. affine=False: a score affine in the key position
    (passes/affine_score.py) in the program that computes it as written, for calls whose scale
    makes the affine form's factor F <= 0 (its row max on qk + slope * col needs F > 0)."""
    built = _build(k, arch, head_dim, want_cubin, trace, value_dim, split_kv, stream, affine)
    fallback = built.kernel.attr("spill_fallback")
    if fallback and want_cubin and SPILLED in built.compiled.log:
        # a trial tile (tiling.SPILL_TRIAL_REGS) that ptxas spilled: the next tile, fixed as
        # attrs, and the streamed capture as decided for the trial tile (launch.py decided its
        # arguments on it)
        tile_n, consumers, _ = fallback
        k = k.with_attrs(tile_n=tile_n, consumers=consumers, stream_capture=built.kernel.attr("stream_capture"))
        trial, built = built, _build(k, arch, head_dim, want_cubin, trace, value_dim, split_kv, stream, affine)
        # launch.py counts work items by the tile_m it lowered before the build: a fallback
        # may narrow the kv tile only (launch.py recounts its split-KV key ranges in the tiles
        # of the kernel built here)
        if built.kernel.attr("tile_m") != trial.kernel.attr("tile_m"):
            raise KdslError(f"{k.name}: internal error: the spill fallback changed tile_m "
                            f"({trial.kernel.attr('tile_m')} -> {built.kernel.attr('tile_m')})")
    if built.kernel.attr("row_sum_trial") and not split_kv and want_cubin and SPILLED in built.compiled.log:
        # the row sums by P V (tiling.TENSOR_ROW_SUM) hold four more accumulator registers; where
        # ptxas spilled them, the same tile with the softmax's FADDs (the split-KV program has
        # them anyway)
        b = built.kernel
        k = k.with_attrs(tile_n=b.attr("tile_n"), consumers=b.attr("consumers"), stages=b.attr("stages"),
                         stream_capture=b.attr("stream_capture"), tensor_row_sum=0)
        built = _build(k, arch, head_dim, want_cubin, trace, value_dim, split_kv, stream, affine)
    if built.kernel.attr("slope_trial") and want_cubin and SPILLED in built.compiled.log:
        # the slope step (tiling.SLOPE_STEP) spilled: the same tile, row sums as built, with the
        # FFMA per element
        b = built.kernel
        k = k.with_attrs(tile_n=b.attr("tile_n"), consumers=b.attr("consumers"), stages=b.attr("stages"),
                         stream_capture=b.attr("stream_capture"), tensor_row_sum=b.attr("tensor_row_sum"),
                         slope_step=0)
        built = _build(k, arch, head_dim, want_cubin, trace, value_dim, split_kv, stream, affine)
    return built


def _build(k: ir.Kernel, arch: str, head_dim: int, want_cubin: bool, trace: bool, value_dim: int, split_kv: bool,
           stream: bool, affine: bool = True) -> Built:
    t0 = time.perf_counter()
    lowered, gen, options, key = _generate(k, arch, head_dim, value_dim, split_kv, stream, affine)
    t1 = time.perf_counter()
    hit, job = cache.get(key), None
    if hit is None and want_cubin and not trace:
        with _IN_FLIGHT_LOCK:  # one build per kernel: join a prebuild, or register this one
            hit = cache.get(key)
            job = _IN_FLIGHT.get(key) if hit is None else None
            if hit is None and job is None:
                job = _IN_FLIGHT[key] = workers.Job((gen.source, gen.entry, options))
    if hit is not None:
        compiled = hit
    elif job is not None:
        try:
            compiled = workers.pool().result(job)  # compiled right here if nobody has started it
        finally:
            _finished(key, job)
    else:
        compiled = nvrtc.compile_cuda(gen.source, gen.entry, options, want_cubin, trace)
        if want_cubin:
            cache.put(key, compiled)
    t2 = time.perf_counter()
    _dump(lowered, gen, compiled)
    return Built(lowered, gen, compiled, key, hit is not None,
                 {"codegen_s": t1 - t0, "nvrtc_s": 0.0 if hit else t2 - t1}, tuple(options))


def prebuild(k: ir.Kernel, arch: str = "sm_90a", head_dim: int = 0, value_dim: int = 0) -> None:
    """Start building in the background (a no-op if cached or already started)."""
    _, gen, options, key = _generate(k, arch, head_dim, value_dim)
    with _IN_FLIGHT_LOCK:
        if key in _IN_FLIGHT or cache.get(key) is not None:
            return
        job = workers.pool().submit(gen.source, gen.entry, options)
        _IN_FLIGHT[key] = job
    job.future.add_done_callback(lambda f: _finished(key, job))


def finish_prebuilds() -> None:
    """Wait until every prebuild has finished (failures are left for build() to report)."""
    with _IN_FLIGHT_LOCK:
        jobs = list(_IN_FLIGHT.items())
    for key, job in jobs:
        try:
            workers.pool().result(job)
        except Exception:  # noqa: BLE001 - the kernel's build() raises it where it belongs
            pass
        _finished(key, job)  # its done-callback may not have run yet


def _finished(key: str, job) -> None:
    """A build is done: cache it (under the lock, so a build() that finds no job finds the
    cache entry) and forget it. Idempotent; a failed build leaves nothing behind."""
    with _IN_FLIGHT_LOCK:
        if _IN_FLIGHT.get(key) is not job:
            return
        if job.future.exception() is None:
            cache.put(key, job.future.result())
        del _IN_FLIGHT[key]


def _generate(k: ir.Kernel, arch: str, head_dim: int, value_dim: int = 0, split_kv: bool = False,
              stream: bool = True, affine: bool = True):
    lowered = pipeline.lower(k, get_target(arch), head_dim, value_dim)
    gen = emit.generate(lowered)
    options = nvrtc.default_options(arch, emit.INCLUDE_DIR)
    if split_kv:  # the same source, the other program (the options are part of the key)
        if lowered.kind != "attention" or lowered.attr("kernel") != "wgmma":
            raise KdslError(f"{k.name}: split-KV is a Hopper attention kernel's (sm_90a), not this {arch} build's")
        options.append(SPLIT_KV_OPTION)
    if not stream and lowered.attr("stream_capture"):
        options.append(NO_STREAM_OPTION)
    if not affine and affine_score.needs_positive_scale(lowered):
        options.append(NO_AFFINE_OPTION)
    if any(lowered.attr(a) for a in ("spill_fallback", "row_sum_trial", "slope_trial")):  # build() reads spills from the log
        options.append(WARN_ON_SPILLS_OPTION)
    key = make_key(gen.source, " ".join(options), nvrtc.version(), emit.headers_hash(), __version__)
    return lowered, gen, options, key


def _dump(k: ir.Kernel, gen: emit.Generated, compiled: nvrtc.Compiled) -> None:
    where = os.environ.get("KDSL_DUMP")
    if not where:
        return
    d = Path(where)
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{gen.entry}.ir").write_text(ir.print_ir(k))
    (d / f"{gen.entry}.cu").write_text(gen.source)
    (d / f"{gen.entry}.ptx").write_text(compiled.ptx)
