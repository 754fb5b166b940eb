"""Callables for compiled kernels: validate arguments once per signature, then launch
lean on the caller's current stream (no host synchronisation, so CUDA graphs can
capture a call)."""
from __future__ import annotations

import functools
import operator
import threading
from dataclasses import dataclass

from .. import ir
from ..errors import LaunchError, NoGpuError
from ..passes import pipeline, tiling
from ..semantics import scalar_op
from . import arrays, programs
from .programs import Program
from .driver import ArgPack, Launcher
from .splitkv import CombineLaunch
from .summary import SummaryLaunch


@functools.cache
def _driver():
    """CuPy's CUDA driver bindings, or a clear error when there is no GPU."""
    try:
        import cupy
        from cupy.cuda import driver, function
        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no CUDA device")
    except Exception as e:  # ImportError, CUDARuntimeError, ...
        raise NoGpuError(f"kdsl kernels need an NVIDIA GPU and CuPy (pip install kdsl[cuda13]); {e}") from None
    return cupy, driver, function


class Loaded:
    """A cubin loaded on one device, and its entry point with the shared memory raised."""

    def __init__(self, cubin: bytes, entry: str, smem: int):
        cupy, driver, function = _driver()
        self.module = function.Module()  # keeps the module (and so the function) alive
        self.module.load(cubin)
        self.entry = entry
        self.fn = self.module.get_function(entry)
        self.fn_ptr = int(self.fn.ptr)
        if smem > 48 * 1024:
            driver.funcSetAttribute(self.fn.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
        self.smem = smem
        self._work_slots: dict[int, int] = {}  # stream -> its slot of kdsl_work_counters
        self._work_base = 0
        self._split_base = 0
        self._work_lock = threading.Lock()

    def work_counter(self, stream: int) -> int:
        """The work counters of a persistent launch on `stream` (the Hopper attention kernel's, or
        an FP8 GEMM's whose tiles come from a counter): a slot of the module's kdsl_work_counters
        (tiling.WORK_SLOTS of them, two words each), one per stream, so that launches on
        concurrent streams never share one. They start at zero and the kernel's last CTA zeroes
        them again (attention_wgmma.cuh, fp8_gemm_sched.cuh), so a launch needs no memset of its
        own: one stream operation less a call. 0 (CTAs then walk their work by a fixed stride)
        once every slot belongs to another stream."""
        slot = self._slot(stream)
        return 0 if slot is None else self._work_base + 8 * slot

    def split_counters(self, stream: int) -> int:
        """The split-KV counts (AttnArgs::split_done) of a launch on `stream`: the stream's slot of
        the split program's kdsl_split_counters (tiling.SPLIT_SLOT counts each), which start at
        zero and which the kernel zeroes again as it merges; 0 when no slot is left."""
        slot = self._slot(stream)
        if slot is None:
            return 0
        if not self._split_base:
            self._split_base = int(self.module.get_global_var("kdsl_split_counters"))
        return self._split_base + 4 * tiling.SPLIT_SLOT * slot

    def _slot(self, stream: int) -> int | None:
        slot = self._work_slots.get(stream)
        if slot is None:
            with self._work_lock:
                slot = self._work_slots.get(stream)
                if slot is None:
                    if len(self._work_slots) >= tiling.WORK_SLOTS:
                        return None
                    if not self._work_slots:
                        self._work_base = int(self.module.get_global_var("kdsl_work_counters"))
                    slot = self._work_slots[stream] = len(self._work_slots)
        return slot


@dataclass
class Plan:
    """Everything a call needs once its signature was validated."""

    loaded: Loaded | None   # None: nothing to launch (`work` says why)
    grid: tuple
    block: tuple
    pack: ArgPack | None
    framework: str
    device: int
    out_shape: tuple
    out_dtype: str
    work: str = "launch"    # launch | empty (no output elements) | no_keys (out = 0, lse = -inf)
    # A launch split over batches: (grid z, byte offset per pointer slot) per launch.
    chunks: tuple = ()
    # TMA tensor maps (runtime/tma.py), each fed by the call's pointer at its map_sources index
    # (default: the first len(maps)). The first map_only pointers feed maps and are no parameter
    # slot (default: len(maps)); a later source (attention's streamed capture, the FP8 GEMM's
    # out and a_scale) is both.
    maps: tuple = ()
    map_sources: tuple | None = None
    map_only: int | None = None
    sa_align: int = 4   # bytes; the FP8 GEMM's a_scale by TMA needs 16
    sb_align: int = 4   # bytes; its b_scale by TMA needs 16
    scales_copied: "Plan | None" = None  # FP8 GEMM: this call's plan for scales short of sa_align / sb_align
    stream_args: tuple = ()  # the streamed captures (passes/streaming.py): their pointers must be
                             # 16-byte aligned for their tensor maps
    summary: SummaryLaunch | None = None  # the tile summary kernel, when the mask needs one
    sk_tiles: int = 0  # FP8 GEMM: tiles shared out by stream-K, and its workspace's partials' bytes
    sk_bytes: int = 0
    combine: CombineLaunch | None = None  # split-KV's second kernel (runtime/splitkv.py)
    keep_alive: tuple = ()  # CuPy arrays only: this call's scratch buffers, freed when the next
                            # call replaces them, after the kernels that read them in stream order
    out_align: int = 4  # bytes; the FP8 GEMM's TMA store needs 16
    copy_keys: bool = False  # attention: k or v came in a layout only 4-D key maps take, and this plan has none
    q_sign: int = 1     # -1 / 0: the kernel reads -q / 0 * q (a scaled-dot score with scale <= 0)
    dynamic: bool = False  # a persistent Hopper attention launch, or an FP8 GEMM's (gemm_tiles.tile_counter):
                           # CTAs take their work from a counter of the stream (Loaded.work_counter)
    self_merge: bool = False  # split-KV whose items merge themselves where the launch gets counters
    fast: bool | None = None  # FP8 GEMM: served by the compiled launch path (fast_launch.adopt); None: not decided

    def __post_init__(self):
        self.new_out = arrays.allocator(self.framework, self.out_shape, self.out_dtype, self.device)
        self.new_lse = arrays.allocator(self.framework, self.out_shape[:3], "f32", self.device)
        self.current_stream = _stream_getter(self.framework, self.device)
        self.capturing = _capture_check(self.framework)
        if self.map_sources is None:
            self.map_sources = tuple(range(len(self.maps)))
        if self.map_only is None:
            self.map_only = len(self.maps)
        sources = self.map_sources  # (itemgetter of one index would return a bare pointer)
        self._map_pointers = (operator.itemgetter(*sources) if len(sources) > 1
                              else lambda p: tuple(p[i] for i in sources))
        self._bound = None  # the pointers the maps were last encoded for
        if self.loaded is None:
            return
        # Everything but the pointers and the stream is fixed for the plan.
        self._launch = Launcher(self.loaded.fn_ptr, self.grid, self.block, self.loaded.smem)
        self._split = [(Launcher(self.loaded.fn_ptr, (*self.grid[:2], z), self.block, self.loaded.smem), offsets)
                       for z, offsets in self.chunks]

    def own_stream(self) -> int | None:
        """The call's stream, for per-stream state (work counters, split counts, stream-K
        workspaces); None while the stream is captured into a CUDA graph, or when the framework
        cannot say: a graph keeps the state of the stream it was captured on, and two graphs
        captured on one stream (torch.cuda.graph's default) may replay at once on different
        streams, so a captured launch takes the path that needs none."""
        try:
            if self.capturing():
                return None
        except RuntimeError:
            return None
        return self.current_stream()

    def launch(self, pointers):
        if self.maps:
            self._launch(self.current_stream(), self.pack, pointers[self.map_only:], self._bind_maps, pointers)
            return
        if not self._split:
            self._launch(self.current_stream(), self.pack, pointers)
            return
        stream = self.current_stream()
        for launch, offsets in self._split:  # a null pointer (no lse) stays null
            launch(stream, self.pack, [p + o if p else 0 for p, o in zip(pointers, offsets)])

    def _bind_maps(self, pointers):
        """Re-encode the tensor maps whose pointers changed (one tuple comparison when none did:
        the hot path; run under the pack's lock, as the maps are parameter slots)."""
        ptrs = self._map_pointers(pointers)
        if ptrs != self._bound:
            self._bound = None  # until every map is encoded
            for m, p in zip(self.maps, ptrs):
                m.bind(p)
            self._bound = ptrs


class KernelBase:
    # The CPU interpreter (kdsl.interpreted) validates with the same methods, on host arrays.
    on_host = False
    torch_ops = None  # (op, out= op) once registered with torch (runtime/torch_ops.py)

    @staticmethod
    def _work_counter(plan: Plan) -> int:
        """A persistent launch's work counters (Plan.dynamic: the Hopper attention kernel's items,
        an FP8 GEMM's tiles), or 0: CTAs then walk their work by a fixed stride (correct, less
        evenly balanced). 0 as well while the stream is being captured into a CUDA graph
        (Plan.own_stream): shared counters would hand work out twice to graphs replayed at once."""
        stream = plan.own_stream() if plan.dynamic else None
        return 0 if stream is None else plan.loaded.work_counter(stream)

    def __init__(self, kernel: ir.Kernel, arch: str | None):
        self.ir = kernel
        self.name = kernel.name
        self.arch = arch
        self._plans: dict = {}
        self._loaded: dict = {}
        self._lowered_ir: dict = {}

    def _derived(self, kernel):
        """A kernel made from this one (with_attrs): a torch op as well where this one is, so that
        it too can be called under torch.compile."""
        if self.torch_ops is not None:
            from . import torch_ops
            torch_ops.register(kernel, "cuda", self.arch)
        return kernel

    def _arch(self) -> str:
        if self.arch:
            return self.arch
        cupy, _, _ = _driver()
        sm = int(cupy.cuda.Device().compute_capability)  # e.g. "90"
        return {90: "sm_90a"}.get(sm, f"sm_{sm}" if sm in (80, 89) else "sm_90a")

    def _kernel_ir(self, consumers: int | None = None) -> ir.Kernel:
        """The kernel's IR, with the Hopper kernel's consumer warpgroups fixed where a call's
        rows ask for fewer than the tiling's (AttentionKernel._query_warpgroups); None: its own."""
        return self.ir if consumers is None else self.ir.with_attrs(consumers=consumers)

    def _lowered(self, head_dim: int, value_dim: int = 0, consumers: int | None = None) -> ir.Kernel:
        """The lowered kernel a call would build (tiles, kernel family), without compiling:
        a plan decides from it which program to build."""
        key = (head_dim, value_dim, consumers)
        if key not in self._lowered_ir:
            from ..passes.target import get_target
            self._lowered_ir[key] = pipeline.lower(self._kernel_ir(consumers), get_target(self._arch()),
                                                   head_dim, value_dim)
        return self._lowered_ir[key]

    def _load(self, head_dim: int, device: int, value_dim: int = 0, consumers: int | None = None,
              program: Program = programs.DEFAULT) -> Loaded:
        key = (head_dim, value_dim, device, consumers, program)
        if key not in self._loaded:
            from .compiler import build
            built = build(self._kernel_ir(consumers), self._arch(), head_dim, value_dim=value_dim,
                          program=program)
            self._loaded[key] = (built, Loaded(built.compiled.cubin, built.generated.entry,
                                               built.kernel.attr("smem_bytes")))
        return self._loaded[key]

    # --- validation helpers --------------------------------------------------------------
    def _info(self, x, name, dtype, rank):
        if x is None:
            raise LaunchError(f"{self.name}: missing argument '{name}'")
        a = arrays.info(x, name)
        if a.device < 0 and not self.on_host:
            raise LaunchError(f"{self.name}: argument '{name}' is on the CPU; kdsl kernels run on a CUDA device")
        if a.device >= 0 and self.on_host:
            raise LaunchError(f"{self.name}: argument '{name}' is on a GPU; the interpreter runs on the CPU "
                              f"(pass numpy arrays or CPU tensors)")
        if not arrays.holds(a, dtype):
            convert = arrays.conversion_text(name, dtype, a.framework)
            raise LaunchError(f"{self.name}: argument '{name}' must be {arrays.expected_dtype_text(dtype, a.framework)}, "
                              f"got {arrays.dtype_text(a)}" + (f"; convert with {convert}" if convert else ""))
        if len(a.shape) != rank:
            raise LaunchError(f"{self.name}: argument '{name}' must have {rank} dimensions, got shape {list(a.shape)}")
        return a

    def _contiguous(self, a, name):
        if not arrays.is_contiguous(a):
            raise LaunchError(f"{self.name}: argument '{name}' must be contiguous (row-major), got strides "
                              f"{list(a.strides)} for shape {list(a.shape)}; call .contiguous() first")

    def _bind(self, t: ir.Tensor, shape, dims: dict):
        """Bind/compare each axis of a declared tensor against the actual shape."""
        for axis, (e, got) in enumerate(zip(t.shape, shape)):
            if isinstance(e, ir.Var) and e.name not in dims:
                dims[e.name] = got
                continue
            want = _eval_int(e, dims)
            if want != got:
                raise LaunchError(f"{self.name}: argument '{t.name}' dimension {axis} ({ir.format_expr(e)}) must be "
                                  f"{want}, got {got} (shape {list(shape)}){self._dims_origin(e, dims)}")

    def _dims_origin(self, e: ir.Expr, dims: dict) -> str:
        """Where the sizes a shape expression uses came from: '; N = 7 is k's dimension 2'."""
        bound = self.ir.dims
        used = dict.fromkeys(n.name for n in ir.walk(e) if isinstance(n, ir.Var) and n.name in bound)
        return "".join(f"; {n} = {dims[n]} is {bound[n][0]}'s dimension {bound[n][1]}" for n in used)

    def _device(self, infos):
        devs = {a.device for a in infos}
        if len(devs) > 1:
            raise LaunchError(f"{self.name}: arguments are on different devices {sorted(devs)}")
        dev = devs.pop()
        if dev != arrays.current_device(infos[0].framework):
            raise LaunchError(f"{self.name}: arguments are on device {dev} but the current device is "
                              f"{arrays.current_device(infos[0].framework)}")
        if len({a.framework for a in infos}) > 1:
            raise LaunchError(f"{self.name}: mix of torch tensors and CuPy arrays; pass one kind")
        return dev


def _eval_int(e: ir.Expr, dims: dict) -> int:
    if isinstance(e, ir.Const):
        return int(e.value)
    if isinstance(e, ir.Var):
        return dims[e.name]
    return int(scalar_op(e.op, [_eval_int(a, dims) for a in e.args]))


def _align(ptr: int, name: str, kname: str, n: int = 16):
    if ptr % n:
        raise LaunchError(f"{kname}: argument '{name}' must be {n}-byte aligned (data pointer 0x{ptr:x})")


@functools.cache
def _sm_count(device: int) -> int:
    cupy, _, _ = _driver()
    return int(cupy.cuda.Device(device).attributes["MultiProcessorCount"])


def _l2_bytes(device: int) -> int:
    cupy, _, _ = _driver()
    return int(cupy.cuda.Device(device).attributes["L2CacheSize"])


def _attention_key(q, k, v, caps, out, lse, scale):
    """_signature's contents for an attention call, built flat for torch tensors (the hot path:
    ~3 us of the ~7 the generic one took on the H100 host); anything else takes the generic
    one, whose keys never equal these."""
    try:
        key = (q.dtype, q.shape, q.stride(), q.get_device(), k.dtype, k.shape, k.stride(), k.get_device(),
               v.dtype, v.shape, v.stride(), v.get_device(),
               None if out is None else (out.dtype, out.shape, out.stride(), out.get_device()),
               None if lse is None else (lse.dtype, lse.shape, lse.stride(), lse.get_device()),
               scale if scale is None or type(scale) in (int, float) else _key(scale))
        return key + tuple([(c.dtype, c.shape, c.stride(), c.get_device()) for c in caps]) if caps else key
    except (AttributeError, TypeError):
        return _signature((q, k, v, *caps), (out, lse, scale))


def _signature(tensors, extras):
    """What validation depends on, per call: dtype, shape, strides and device of each array
    (pointers are not part of it: alignment is checked on every call). Arguments that are
    not arrays get a signature of their own, so the plan step reports them."""
    try:  # torch tensors (or None): _key's answer without a call per argument, the hot path
        # (get_device(): an int, cheaper to make and to hash than a torch.device; -1 off the GPU,
        # where validation refuses the call, so no plan is ever kept under it)
        head = tuple([None if x is None else (x.dtype, x.shape, x.stride(), x.get_device()) for x in tensors])
    except (AttributeError, TypeError):
        head = tuple(map(_key, tensors))
    return head + tuple(map(_key, extras))


def _key(x):
    if x is None or isinstance(x, (int, float)):
        return x
    try:
        return (x.dtype, x.shape, x.stride(), x.get_device())  # torch, the hot path
    except (AttributeError, TypeError):
        try:
            return (x.__class__, x.dtype, x.shape, x.strides, x.device.id)  # CuPy
        except AttributeError:
            return ("not an array", id(x))


def _ptr(x) -> int:
    return x.data_ptr() if hasattr(x, "data_ptr") else x.data.ptr


def _extent(x) -> tuple[int, int]:
    """[first, last + 1) bytes of an array with positive strides (a row-major one, or k and v
    as their tensor maps take them): torch, CuPy or numpy."""
    if hasattr(x, "data_ptr"):
        start, size, strides = x.data_ptr(), x.element_size(), [s * x.element_size() for s in x.stride()]
    else:
        start = x.data.ptr if hasattr(x.data, "ptr") else x.__array_interface__["data"][0]
        size, strides = x.itemsize, x.strides
    if 0 in x.shape:
        return start, start
    return start, start + size + sum((n - 1) * s for n, s in zip(x.shape, strides))


def refuse_overlap(kernel: str, out_name: str, o, others) -> None:
    """Refuse a given output (out=, lse=) that shares memory with another argument ((name, array)
    pairs): the kernel's CTAs read k and v, and q's rows, while others write their outputs, so
    the result would be wrong on the GPU (the interpreter refuses it alike)."""
    lo, hi = _extent(o)
    for name, x in others:
        start, end = _extent(x)
        if start < hi and lo < end:
            raise LaunchError(f"{kernel}: {out_name}= shares memory with {name}, which the kernel reads or writes "
                              f"while it writes {out_name}: pass another tensor as {out_name}=")


def _capture_check(framework: str):
    """A zero-argument function telling whether the caller's current stream is being
    captured into a CUDA graph, asked of the framework that owns the stream."""
    if framework == "torch":
        import torch
        return getattr(torch._C, "_cuda_isCurrentStreamCapturing", None) or torch.cuda.is_current_stream_capturing
    import cupy
    return lambda: cupy.cuda.runtime.streamIsCapturing(cupy.cuda.get_current_stream().ptr)


def _stream_getter(framework: str, device: int):
    """A zero-argument function returning the caller's current stream handle, cheaply."""
    if framework == "torch":
        import torch
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # no Stream object per call
        return functools.partial(raw, device) if raw else (lambda: torch.cuda.current_stream(device).cuda_stream)
    import cupy
    return lambda: cupy.cuda.get_current_stream().ptr
