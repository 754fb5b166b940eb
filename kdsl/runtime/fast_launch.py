"""The compiled launch path of the FP8 GEMM (runtime/native/fast_gemm.cpp): an eager call on
torch tensors whose signature a plan was made for is launched from C++, in ~5-8 us of host
time instead of the Python path's ~12-16 (docs/runtime.md).

The extension is built with torch.utils.cpp_extension (a C++ compiler and ninja) and kept in
kdsl's cache directory, keyed by the source's hash and torch's and Python's versions, so an
edit or an upgrade rebuilds it. The build never holds up a call: it runs in a background thread, from
kdsl.load (runtime/prebuild.py) or a first GEMM call, while the Python path serves; plans made
before it finished are adopted on their next call. A build that fails warns once, and the
Python path serves every call. KDSL_FAST_LAUNCH=0 turns the path off.

How a plan is adopted (`adopt`): its signature, the addresses of its parameter block, launch
configuration and tensor-map slots, its pack lock and stream getter go to the kernel's
FastGemm; the plan's map binding becomes the FastGemm's (both paths then share one record of
what each map slot holds); tma.py tells it of every encoding it drops. Stream-K plans and
those whose tiles come from a counter are not adopted (their workspace and counters are per
stream, and off while a CUDA graph is captured: Python's decision), nor the plan that copies a
misaligned a_scale (it shares its signature with the call's own).
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import sys
import tempfile
import threading
import warnings
from pathlib import Path

from ..cachefiles import cache_dir

SOURCE = Path(__file__).resolve().parent / "native" / "fast_gemm.cpp"
MAX_ENTRIES = 32  # signatures per kernel served from C++ (each a call compares in turn)

_lock = threading.Lock()
_thread: threading.Thread | None = None
_module = None      # the built extension
_failed = False     # the build failed, or the path is off


def enabled() -> bool:
    return os.environ.get("KDSL_FAST_LAUNCH", "1") != "0"


def start() -> None:
    """Build (or load the built) extension in the background, once per process."""
    global _thread, _failed
    with _lock:
        if _thread is not None or _module is not None or _failed:
            return
        if not enabled():
            _failed = True
            return
        _thread = threading.Thread(target=_build_in_background, name="kdsl-fast-launch", daemon=True)
        _thread.start()


def wait() -> bool:
    """Wait for a build started by `start`; whether the compiled path is ready."""
    thread = _thread
    if thread is not None:
        thread.join()
    return _module is not None


def module():
    """The built extension, or None (not built yet, failed, or off)."""
    return _module


def _build():
    """Import the built extension, building it first where it is not in the cache (tens of
    seconds, then never again for this source, torch and Python). Once per process (`start`):
    a module is imported once.

    A build runs in a directory of its own and its library is renamed into the cache when
    complete, so that processes building at once never wait on each other's lock (torch's
    build directory lock is never cleared when its holder dies, and a process that exits
    mid-build, this thread being a daemon, would leave every later one waiting for it) and
    none ever imports half a library."""
    import torch
    from torch.utils.cpp_extension import load
    key = hashlib.sha256(SOURCE.read_bytes() + f"{torch.__version__} {sys.version}".encode()).hexdigest()[:16]
    name = f"kdsl_fast_gemm_{key}"
    built = cache_dir() / "native" / f"{name}.so"
    if built.exists():
        try:
            return _import(name, built)
        except ImportError:  # damaged: build it again
            built.unlink(missing_ok=True)
    built.parent.mkdir(parents=True, exist_ok=True)
    where = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=built.parent))
    try:
        module = load(name, sources=[str(SOURCE)], extra_cflags=["-O2"], build_directory=str(where), verbose=False)
        os.replace(where / f"{name}.so", built)  # the imported library stays mapped
        return module
    finally:
        shutil.rmtree(where, ignore_errors=True)


def _import(name: str, path: Path):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build_in_background() -> None:
    global _module, _failed
    try:
        built = _build()
    except Exception as e:  # noqa: BLE001 - any build problem: the Python path serves, say why once
        _failed = True
        reason = str(e).strip().splitlines()
        warnings.warn(f"kdsl: the FP8 GEMM's compiled launch path could not be built ({reason[-1] if reason else e!r}); "
                      f"calls take the Python launch path (about twice the host time). KDSL_FAST_LAUNCH=0 skips "
                      f"the build.", RuntimeWarning, stacklevel=2)
        return
    _module = built


def adopt(kernel, plan, tensors, out_given: bool) -> None:
    """Hand `plan`, made for the call `tensors` = (a, a_scale, b, b_scale, extra, out) (extra
    None for dense kernels; out the given or the allocated one), to the kernel's FastGemm, or
    decide it never will be (plan.fast False). Leaves plan.fast None while the extension is
    still building."""
    if (_failed or kernel.launch_path != "compiled" or plan.framework != "torch" or plan.loaded is None
            or plan.sk_tiles or plan.dynamic):
        plan.fast = False
        return
    ext = _module
    if ext is None:
        start()
        return
    with plan.pack.lock:
        if plan.fast is not None:  # another thread adopted it meanwhile
            return
        with _lock:  # one FastGemm a kernel, though threads adopt its plans side by side
            if kernel.fast_gemm is None:
                from .driver import _check, _libcuda
                launch = ctypes.cast(_libcuda().cuLaunchKernelEx, ctypes.c_void_p).value
                kernel.fast_gemm = ext.FastGemm(launch, _check)
            fast = kernel.fast_gemm
        if len(fast) >= MAX_ENTRIES:
            plan.fast = False
            return
        register(fast, ext, plan, kernel.extra, tensors, out_given)
        plan.fast = True


def register(fast, ext, plan, extra_name: str | None, tensors, out_given: bool) -> int:
    """Add `plan` to `fast` for the call `tensors` it was made for (as `adopt`'s; out_given
    False: calls without out, which allocate one like it); run under the pack lock. The
    plan's maps are bound through `fast` from then on."""
    from .driver import _LaunchConfig
    from .gemm_launch import CALL_POINTERS
    a, a_scale, b, b_scale, extra, out = tensors
    laid_out = [a, a_scale, b, b_scale] + ([extra] if extra is not None else []) + [out]
    layouts = [(list(t.shape), list(t.stride()), ext.scalar_type(t)) for t in laid_out]
    maps = [(source, ctypes.addressof(plan.pack.params) + 8 * m.index, m.encoding)
            for m, source in zip(plan.maps, plan.map_sources)]
    entry = fast.add(layouts, maps, plan.device, extra is not None, CALL_POINTERS.index(extra_name or "group"),
                     out_given, plan.sa_align, plan.sb_align, plan.out_align, ctypes.addressof(plan.pack.pointers),
                     plan._launch._address, _LaunchConfig.stream.offset, plan.loaded.fn_ptr, plan.pack.params_address,
                     plan.pack.lock, plan.current_stream, plan)
    for i, m in enumerate(plan.maps):
        m.on_drop.append(functools.partial(fast.forget, entry, i))
    plan._bind_maps = functools.partial(fast.bind, entry)
    return entry
