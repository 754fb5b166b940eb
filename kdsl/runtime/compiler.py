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
from ..codegen import emit, emit_backward
from ..passes import pipeline, tiling
from ..passes.target import get_target
from . import cache, cubin_info, nvrtc, workers
from .programs import DEFAULT, Program

_IN_FLIGHT: dict = {}  # cache key -> workers.Job of a prebuild not yet taken by build()
_IN_FLIGHT_LOCK = threading.Lock()
_FOLLOW_UPS = [0]  # prebuilds' follow-ups running (a spilled trial's fallback being started)


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
          trace: bool = False, value_dim: int = 0, program: Program = DEFAULT) -> Built:
    """head_dim, value_dim: q/k's and v's head dims (attention; value_dim 0: the kernel's
    default, pipeline.default_value_dim). trace=True: NVRTC's per-phase times land in
    compiled.phases (on a cache miss). program: which program of the Hopper attention kernel's
    source (runtime/programs.py); the default one is what every ordinary call runs.
    A schedule chosen as a trial (a tile, the row sums by P V, the slope step) that ptxas
    spills is dropped, one after the other, and the kernel built again without it."""
    built = _build(k, arch, head_dim, want_cubin, trace, value_dim, program)
    if program.backward:  # its trials: 128-query steps (emit_backward.backward_step_rows), 64 where they spill;
        if want_cubin and emit_backward.backward_step_rows(built.kernel, get_target(arch)) == 128 and spilled(built):
            k = k.with_attrs(bwd_step_rows=64)
            built = _build(k, arch, head_dim, want_cubin, trace, value_dim, program)
        if want_cubin and mask_bits_trial(built.kernel) and spilled(built):  # then the mask bits
            plain = _build(k.with_attrs(bwd_mask_bits=0), arch, head_dim, want_cubin, trace, value_dim, program)
            if local_bytes(plain) < local_bytes(built):
                built = plain
        return built
    while want_cubin:
        retry = _without_spilled_trial(k, built.kernel, program)
        if retry is None or not spilled(built):
            break
        trial, built = built, _build(retry, arch, head_dim, want_cubin, trace, value_dim, program)
        # attention_launch.py counts work items by the tile_m it lowered before the build: a
        # fallback may narrow the kv tile only (it recounts its split-KV key ranges in the tiles
        # of the kernel built here)
        if built.kernel.attr("tile_m") != trial.kernel.attr("tile_m"):
            raise KdslError(f"{k.name}: internal error: a spill fallback changed tile_m "
                            f"({trial.kernel.attr('tile_m')} -> {built.kernel.attr('tile_m')})")
    return built


def mask_bits_trial(lowered: ir.Kernel) -> bool:
    """Whether a backward build that spilled is built again without its mask bits (attr
    bwd_mask_bits = 0; attention_bwd_wgmma.cuh KDSL_BWD_MASK_BITS), the build with less local
    memory kept. The bits gather a mask's loads at the query into one word a step before the
    gradients: some masks spill far more with them (sm_90a D=128: held-out 40's lsh_buckets_gqa
    184 B against 40 without, row_threshold 168 against 0, held-out 35's lsh_local 120 against 0),
    others less (span_per_query 40 against 88). Measured on an H200, the build with less local
    memory was the faster one each time it was timed: lsh_local x1.11 without (seventy-ninth
    session), bool_logic x1.11 without (seventy-third), document_mask x1.06 with (seventy-ninth).
    KDSL_BWD_BITS_TRIAL=0 keeps the bits (A/B timing)."""
    if os.environ.get("KDSL_BWD_BITS_TRIAL", "1") == "0" or lowered.attr("bwd_mask_bits") == 0:
        return False
    score = lowered.func("score")
    return emit.mask_bits_apply(lowered.func("mask"), score)


def local_bytes(built: Built) -> int:
    return cubin_info.frame_bytes(built.compiled.cubin, built.generated.entry)


def spilled(built: Built) -> bool:
    """Whether ptxas gave the entry function local memory (read from the cubin: NVRTC's log
    lacks ptxas' warnings when the driver's compute cache served the build, runtime/cubin_info.py)."""
    return local_bytes(built) > 0


def _trials(lowered: ir.Kernel, program: Program) -> list[str]:
    """The trials of a lowered kernel that a spill can drop, in the order build() drops them:
    "tile" (a trial kv tile with attr spill_fallback behind it), "row_sum" (the row sums by
    P V, tiling.TENSOR_ROW_SUM; the split-KV program has none to drop), "slope" (the slope
    step, tiling.SLOPE_STEP). The row sums and the slope step measured within 1 % where they
    spilled, so they go before a wide kv tile (tiling.WGMMA_WIDE_TILES: +3-15 % on the kernels
    that take it); any other trial tile goes first (tiling decides the row sums and the slope
    step again for the tile behind it)."""
    others = [kind for kind, on in (("row_sum", lowered.attr("row_sum_trial") and not program.split_kv),
                                    ("slope", lowered.attr("slope_trial"))) if on]
    if not lowered.attr("spill_fallback"):
        return others
    wide = (lowered.attr("tile_n"), lowered.attr("consumers"), lowered.attr("stages")) in tiling.WGMMA_WIDE_TILES.values()
    return others + ["tile"] if wide else ["tile"] + others


def _without_spilled_trial(k: ir.Kernel, lowered: ir.Kernel, program: Program) -> ir.Kernel | None:
    """k with the first of _trials(lowered) (a build that spilled) fixed to its fallback (attrs,
    so that tiling takes them as given, and the trial's mark cleared: an IR file may carry it),
    or None when it had none left. Each kind is dropped at most once, so build()'s loop ends."""
    trials = _trials(lowered, program)
    if not trials:
        return None
    if trials[0] == "tile":
        # the next tile, and the streamed capture as decided for the trial tile
        # (attention_launch.py decided its arguments on it)
        tile_n, consumers, _ = lowered.attr("spill_fallback")
        return k.with_attrs(tile_n=tile_n, consumers=consumers, stream_capture=lowered.attr("stream_capture"),
                            mask_stream_capture=lowered.attr("mask_stream_capture"), spill_fallback=None)
    # the same tile (and the wide tile's fallback, still to come), without the trial
    same_tile = dict(tile_n=lowered.attr("tile_n"), consumers=lowered.attr("consumers"),
                     stages=lowered.attr("stages"), stream_capture=lowered.attr("stream_capture"),
                     mask_stream_capture=lowered.attr("mask_stream_capture"),
                     spill_fallback=lowered.attr("spill_fallback"))
    if trials[0] == "row_sum":
        # four more accumulator registers: the softmax's FADDs instead
        return k.with_attrs(**same_tile, tensor_row_sum=0, row_sum_trial=None)
    # the slope step (relpos' split-KV program at D=128 spilled in its kv loop): the FFMA per element
    return k.with_attrs(**same_tile, tensor_row_sum=lowered.attr("tensor_row_sum"), row_sum_trial=None,
                        slope_step=0, slope_trial=None)


def _build(k: ir.Kernel, arch: str, head_dim: int, want_cubin: bool, trace: bool, value_dim: int,
           program: Program) -> Built:
    t0 = time.perf_counter()
    lowered, gen, options, key = _generate(k, arch, head_dim, value_dim, program)
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


def prebuild(k: ir.Kernel, arch: str = "sm_90a", head_dim: int = 0, value_dim: int = 0,
             program: Program = DEFAULT) -> None:
    """Start building in the background (a no-op if cached or already started). A backward's
    trial (build(): 128-query steps) that spills is followed by the build build() falls back to."""
    lowered, gen, options, key = _generate(k, arch, head_dim, value_dim, program)

    def follow_up(compiled: nvrtc.Compiled) -> None:
        if not program.backward or cubin_info.frame_bytes(compiled.cubin, gen.entry) == 0:
            return
        if emit_backward.backward_step_rows(lowered, get_target(arch)) == 128:
            prebuild(k.with_attrs(bwd_step_rows=64), arch, head_dim, value_dim, program)
        elif mask_bits_trial(lowered):
            prebuild(k.with_attrs(bwd_mask_bits=0), arch, head_dim, value_dim, program)

    with _IN_FLIGHT_LOCK:
        cached = cache.get(key)
        if cached is None and key not in _IN_FLIGHT:
            job = _IN_FLIGHT[key] = workers.pool().submit(gen.source, gen.entry, options)
            job.follow_up = follow_up
            job.future.add_done_callback(lambda f: _finished(key, job))
    if cached is not None:
        follow_up(cached)


def finish_prebuilds() -> None:
    """Wait until every prebuild has finished, follow-ups included (failures are left for
    build() to report)."""
    while True:
        with _IN_FLIGHT_LOCK:
            jobs = list(_IN_FLIGHT.items())
            if not jobs and not _FOLLOW_UPS[0]:
                return
        for key, job in jobs:
            try:
                workers.pool().result(job)
            except Exception:  # noqa: BLE001 - the kernel's build() raises it where it belongs
                pass
            _finished(key, job)  # its done-callback may not have run yet
        if not jobs:
            time.sleep(0.01)  # another thread's follow-up is starting a build


def _finished(key: str, job) -> None:
    """A build is done: cache it (under the lock, so a build() that finds no job finds the
    cache entry), forget it and run its follow-up. Idempotent; a failed build leaves nothing
    behind."""
    with _IN_FLIGHT_LOCK:
        if _IN_FLIGHT.get(key) is not job:
            return
        ok = job.future.exception() is None
        if ok:
            cache.put(key, job.future.result())
        del _IN_FLIGHT[key]
        follow_up = getattr(job, "follow_up", None) if ok else None
        _FOLLOW_UPS[0] += follow_up is not None
    if follow_up is not None:
        try:
            follow_up(job.future.result())
        except Exception:  # noqa: BLE001 - build() reports it where it belongs
            pass
        finally:
            with _IN_FLIGHT_LOCK:
                _FOLLOW_UPS[0] -= 1


def _generate(k: ir.Kernel, arch: str, head_dim: int, value_dim: int = 0, program: Program = DEFAULT):
    # the backward's program is lowered as such: a pass may plan it apart (mask_analysis.whole_tiles)
    lowered = pipeline.lower(k.with_attrs(lowered_for="backward") if program.backward else k, get_target(arch),
                             head_dim, value_dim)
    if program.backward:  # the kernel the backward's launch reads too (its tile summary's slots)
        lowered = emit_backward.backward_kernel(lowered, get_target(arch))
    gen = emit_backward.generate_backward(lowered, get_target(arch)) if program.backward else emit.generate(lowered)
    # the same source for every forward program: their defines are part of the key
    options = nvrtc.default_options(arch, emit.INCLUDE_DIR) + program.options(lowered, arch)
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
