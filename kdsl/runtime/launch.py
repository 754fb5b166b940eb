"""Callables for compiled kernels: validate arguments once per signature, then launch
lean on the caller's current stream (no host synchronisation, so CUDA graphs can
capture a call)."""
from __future__ import annotations

import functools
import math
import operator
import threading
from dataclasses import dataclass

from .. import ir
from ..errors import KdslError, LaunchError, NoGpuError
from ..passes import affine_score, exp2_fold, index_floats, pipeline, tiling
from ..passes.exp2_fold import LOG2E
from ..semantics import eval_scalar, scalar_op
from . import arrays, geometry, programs, splitkv, summary, torch_ops
from .programs import Program
from .bounds import check_capture_indices
from .driver import ArgPack, Launcher
from .splitkv import CombineLaunch
from .summary import SummaryLaunch, TileSummary


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
        """The persistent Hopper attention kernel's work counters for a launch on `stream`: a
        slot of the module's kdsl_work_counters (tiling.WORK_SLOTS of them, two words each), one
        per stream, so that launches on concurrent streams never share one. They start at zero
        and the kernel's last CTA zeroes them again (attention_wgmma.cuh), so a launch needs no
        memset of its own: one stream operation less a call. 0 (CTAs then walk items by a fixed
        stride) once every slot belongs to another stream."""
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
    stream_arg: int | None = None  # the streamed capture (passes/streaming.py): its pointer must be
                                   # 16-byte aligned for its tensor map
    summary: SummaryLaunch | None = None  # the tile summary kernel, when the mask needs one
    sk_tiles: int = 0  # FP8 GEMM: tiles shared out by stream-K, and its workspace's partials' bytes
    sk_bytes: int = 0
    combine: CombineLaunch | None = None  # split-KV's second kernel (runtime/splitkv.py)
    keep_alive: tuple = ()  # CuPy arrays only: this call's scratch buffers, freed when the next
                            # call replaces them, after the kernels that read them in stream order
    out_align: int = 4  # bytes; the FP8 GEMM's TMA store needs 16
    q_sign: int = 1     # -1 / 0: the kernel reads -q / 0 * q (a scaled-dot score with scale <= 0)
    dynamic: bool = False  # a persistent Hopper attention launch: CTAs take items from a work counter
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

    def __init__(self, kernel: ir.Kernel, arch: str | None):
        self.ir = kernel
        self.name = kernel.name
        self.arch = arch
        self._plans: dict = {}
        self._loaded: dict = {}
        self._lowered_ir: dict = {}

    def _arch(self) -> str:
        if self.arch:
            return self.arch
        cupy, _, _ = _driver()
        sm = int(cupy.cuda.Device().compute_capability)  # e.g. "90"
        return {90: "sm_90a"}.get(sm, f"sm_{sm}" if sm in (80, 89) else "sm_90a")

    def _kernel_ir(self, one_warpgroup: bool) -> ir.Kernel:
        return self.ir.with_attrs(consumers=1) if one_warpgroup else self.ir

    def _lowered(self, head_dim: int, value_dim: int = 0, one_warpgroup: bool = False) -> ir.Kernel:
        """The lowered kernel a call would build (tiles, kernel family), without compiling:
        a plan decides from it which program to build."""
        key = (head_dim, value_dim, one_warpgroup)
        if key not in self._lowered_ir:
            from ..passes.target import get_target
            self._lowered_ir[key] = pipeline.lower(self._kernel_ir(one_warpgroup), get_target(self._arch()),
                                                   head_dim, value_dim)
        return self._lowered_ir[key]

    def _load(self, head_dim: int, device: int, value_dim: int = 0, one_warpgroup: bool = False,
              program: Program = programs.DEFAULT) -> Loaded:
        key = (head_dim, value_dim, device, one_warpgroup, program)
        if key not in self._loaded:
            from .compiler import build
            built = build(self._kernel_ir(one_warpgroup), self._arch(), head_dim, value_dim=value_dim,
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
            raise LaunchError(f"{self.name}: argument '{name}' must be {arrays.expected_dtype_text(dtype, a.framework)}, "
                              f"got {a.dtype}")
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


class AttentionKernel(KernelBase):
    """mod.NAME(q, k, v, *captures, out=None, scale=None, **captures) -> out (or (out, lse))."""

    def __init__(self, kernel, arch=None):
        super().__init__(kernel, arch)
        self.captures = [t for t in kernel.tensors if t.role == "capture"]
        self.has_lse = kernel.tensor("lse") is not None
        # float(q - kv) computed as qf - kvf is exact only up to a length (passes/index_floats)
        self.index_floats = index_floats.uses_index_floats(index_floats.run(exp2_fold.run(kernel)))

    def with_attrs(self, **attrs) -> "AttentionKernel":
        """The same kernel under a fixed schedule: on Hopper tile_n, consumers, stages,
        schedule; on sm_80/sm_89 tile_m, tile_n, warps; math ("fast" / "exact") on both
        (passes/tiling.py). The tiling pass refuses an illegal value when the kernel is built."""
        from ..passes import tiling
        legal = {n for fam in ("wgmma", "mma") for n in tiling.SCHEDULE_ATTRS[fam]} | {"math"}
        unknown = set(attrs) - legal
        if unknown:
            raise KdslError(f"{self.name}: unknown attention attr(s) {sorted(unknown)}; choose from "
                            f"{', '.join(sorted(legal))}")
        return AttentionKernel(self.ir.with_attrs(**attrs), self.arch)

    def __call__(self, q, k, v, *captures, out=None, lse=None, scale=None, tile_summary=None, **named):
        if torch_ops.compiling():  # torch.compile traces the call: it records the torch op
            return torch_ops.attention(self, q, k, v, captures, named, out, lse, scale, tile_summary)
        caps = self._collect_captures(captures, named) if (captures or named or self.captures) else ()
        plan = self._plan_for(q, k, v, caps, out, lse, scale)
        if plan.stream_arg is not None and _ptr(caps[plan.stream_arg]) & 15:
            plan = self._plan_for(q, k, v, caps, out, lse, scale, stream=False)  # TMA needs 16-byte alignment
        torch_like = plan.framework == "torch"
        if out is None:
            out = plan.new_out()
        if self.has_lse and lse is None:
            lse = plan.new_lse()
        if plan.loaded is None:
            return self._without_launch(plan, out, lse)
        if plan.q_sign != 1:
            q = -q if plan.q_sign < 0 else q * 0
        ptrs = [x.data_ptr() for x in (q, k, v, out)] if torch_like else [x.data.ptr for x in (q, k, v, out)]
        if (ptrs[0] | ptrs[1] | ptrs[2] | ptrs[3]) & 15:
            for p, n in zip(ptrs, ("q", "k", "v", "out")):
                _align(p, n, self.name)
        ptrs.append(_ptr(lse) if lse is not None else 0)
        if caps:
            ptrs += [_ptr(c) for c in caps]
        plan.keep_alive = (q,) if plan.q_sign != 1 else ()
        ptrs.append(self._summary_pointer(plan, ptrs[5:], tile_summary))
        part_ptrs, done = (0, 0), 0  # the Hopper kernel's split-KV pointers are null unless it splits
        if plan.combine is not None:  # split-KV: the splits' results, merged into out
            parts = plan.combine.new_parts()
            plan.keep_alive += (parts,)
            part_ptrs = plan.combine.part_pointers(_ptr(parts))
            done = self._split_counters(plan)  # 0: by the combine kernel, else by the items
        if plan.maps:  # then its work counter and split counts
            ptrs += (*part_ptrs, self._work_counter(plan), done)
        plan.launch(ptrs)
        if plan.combine is not None and not done:
            plan.combine.run(plan.current_stream(), *part_ptrs, ptrs[3], ptrs[4])
        if torch_like:
            # torch's caching allocator hands a freed block out again only for work ordered after
            # it on the stream it came from, the stream these kernels run on: nothing need stay
            # alive. (And torch.compile's CUDA-graph trees refuse live allocations of a captured
            # call that are not its outputs: split-KV's partials kept here failed there.)
            plan.keep_alive = ()
        return (out, lse) if self.has_lse else out

    def tile_summary(self, q, k, v, *captures, scale=None, **named) -> TileSummary:
        """The runtime tile summary of a mask that reads data (e.g. document ids), computed
        now for calls with these shapes and these captured values, to pass as
        `tile_summary=` to each of them instead of recomputing it per call."""
        if torch_ops.compiling():  # no torch op makes one (yet): a compiled call computes its own
            raise LaunchError(f"{self.name}: tile_summary() cannot run inside torch.compile; call it before the "
                              f"compiled code and pass its result in, or leave tile_summary= out (each call then "
                              f"computes its summary)")
        caps = self._collect_captures(captures, named) if (captures or named or self.captures) else ()
        plan = self._plan_for(q, k, v, caps, None, None, scale)
        if plan.loaded is not None and plan.summary is None:
            raise LaunchError(f"{self.name}: its mask reads no captured data per query or key, so it has no tile "
                              f"summary (attr mask_tiles in `kdsl compile --emit ir` says which masks do)")
        if plan.summary is None:  # nothing will be launched for these shapes
            return TileSummary(self.name, None, None)
        buf = plan.summary.new_buffer()
        plan.summary.run(plan.current_stream(), [_ptr(c) for c in caps], _ptr(buf))
        return TileSummary(self.name, plan.summary.layout, buf)

    def _plan_for(self, q, k, v, caps, out, lse, scale, stream: bool = True) -> Plan:
        key = _attention_key(q, k, v, caps, out, lse, scale)
        if not stream:
            key += ("no stream",)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._plan(q, k, v, caps, out, lse, scale, stream)
        return plan

    @staticmethod
    def _work_counter(plan: Plan) -> int:
        """The persistent Hopper kernel's work counters for this launch, or 0: CTAs then walk
        their items by a fixed stride (correct, less evenly balanced). 0 as well while the
        stream is being captured into a CUDA graph (Plan.own_stream): shared counters would hand
        items out twice to graphs replayed at once."""
        stream = plan.own_stream() if plan.dynamic else None
        return 0 if stream is None else plan.loaded.work_counter(stream)

    @staticmethod
    def _split_counters(plan: Plan) -> int:
        """The split counts that let a split-KV launch's items merge themselves, or 0 (the combine
        kernel merges): 0 too while the stream is captured into a CUDA graph, for the work
        counters' reason (_work_counter)."""
        stream = plan.own_stream() if plan.self_merge else None
        return 0 if stream is None else plan.loaded.split_counters(stream)

    def _summary_pointer(self, plan: Plan, cap_ptrs, given) -> int:
        """The tile summary the kernel reads: computed now on the caller's stream, or the
        precomputed one passed as tile_summary=; 0 when the mask needs none."""
        if given is not None:
            layout = plan.summary.layout if plan.summary is not None else None
            TileSummary.expect(self.name, given).check(self.name, layout)
            return _ptr(given.buffer)
        if plan.summary is None:
            return 0
        buf = plan.summary.new_buffer()
        plan.summary.run(plan.current_stream(), cap_ptrs, _ptr(buf))
        plan.keep_alive += (buf,)
        return _ptr(buf)

    def _without_launch(self, plan, out, lse):
        """Empty output, or no keys at all: what the kernel would write, without a launch."""
        if plan.work == "no_keys":
            arrays.fill(out, 0.0)
            if lse is not None:
                arrays.fill(lse, -math.inf)
        return (out, lse) if self.has_lse else out

    def _collect_captures(self, positional, named):
        names = [t.name for t in self.captures]
        if len(positional) > len(names):
            raise LaunchError(f"{self.name}: takes q, k, v and {len(names)} captured tensor(s) {names}, "
                              f"got {3 + len(positional)} positional arguments")
        given = dict(zip(names, positional))
        for n, x in named.items():
            if n not in names:
                raise LaunchError(f"{self.name}: unexpected argument '{n}'; captured tensors are {names}")
            if n in given:
                raise LaunchError(f"{self.name}: captured tensor '{n}' given twice")
            given[n] = x
        missing = [n for n in names if n not in given]
        if missing:
            raise LaunchError(f"{self.name}: missing captured tensor(s) {missing} (declared in the kernel)")
        return [given[n] for n in names]

    def validate(self, q, k, v, caps, out, lse, scale):
        """Every check that does not depend on the device: (array infos, dims, scale)."""
        kern = self.ir
        elem = kern.tensor("q").dtype
        infos = [self._info(x, n, elem, 4) for x, n in ((q, "q"), (k, "k"), (v, "v"))]
        for t, x in zip(self.captures, caps):
            infos.append(self._info(x, t.name, t.dtype, len(t.shape)))
        for a, n in zip(infos, ["q", "k", "v"] + [t.name for t in self.captures]):
            self._contiguous(a, n)
        dims: dict = {}
        for t, a in zip([kern.tensor(n) for n in ("q", "k", "v")] + self.captures, infos):
            self._bind(t, a.shape, dims)
        B, H, M, D = infos[0].shape
        Hkv, N = infos[1].shape[1], infos[1].shape[2]
        if (H % Hkv if Hkv else H):
            raise LaunchError(f"{self.name}: q has {H} heads, not a multiple of k/v's {Hkv} heads")
        if self.index_floats and max(M, N) > index_floats.MAX_LENGTH:
            raise LaunchError(f"{self.name}: sequence length {max(M, N)} exceeds {index_floats.MAX_LENGTH}, the longest "
                              f"for which this kernel's score converts positions to float exactly")
        Dv = infos[2].shape[3]
        for name, x in (("q and k", D), ("v", Dv)):
            if tiling.head_dim_problem(x):
                raise LaunchError(f"{self.name}: head dimension {x} of {name} is not supported: it "
                                  f"{tiling.head_dim_problem(x)}")
        if out is not None:
            o = self._info(out, "out", elem, 4)
            if o.shape != (B, H, M, Dv):
                raise LaunchError(f"{self.name}: out must have shape {[B, H, M, Dv]} (q's batch, heads and length, "
                                  f"v's head dim), got {list(o.shape)}")
            self._contiguous(o, "out")
            infos.append(o)
        if lse is not None:
            if not self.has_lse:
                raise LaunchError(f"{self.name}: lse= given but the kernel declares no 'lse' output")
            ls = self._info(lse, "lse", "f32", 3)
            if ls.shape != (B, H, M):
                raise LaunchError(f"{self.name}: lse must have shape {[B, H, M]}, got {list(ls.shape)}")
            self._contiguous(ls, "lse")
            infos.append(ls)
        work = geometry.attention_work(B, H, M, N)
        # The scale is checked even when nothing is launched: a bad one is refused all the same.
        s = geometry.softmax_scale(scale, lambda: eval_scalar(kern.func("scale"), dims), self.name)
        if work == "launch":
            check_capture_indices(kern, dims, self.name)
        return infos, dims, s

    def _few_rows(self, H: int, Hkv: int, M: int, D: int, Dv: int) -> bool:
        """Whether a call's work items hold at most 64 query rows (decode: M, times the query
        heads of a k/v head when they fold into rows), so that the Hopper kernel runs with one
        consumer warpgroup: a second would only multiply rows that do not exist (B=1 H=16
        M=1 N=4096 D=128 on an H100: 27.3 -> 25.5 us, bench/NOTES.md). Not when the user
        fixed the warpgroups, and not on the sm_80 kernel."""
        if M > 64 or self.ir.attr("consumers") is not None:
            return False
        lowered = self._lowered(D, Dv)
        if lowered.attr("kernel") != "wgmma" or lowered.attr("consumers") == 1:
            return False
        return M * (H // Hkv if H > Hkv and pipeline.heads_fold_into_rows(lowered) else 1) <= 64

    def _plan(self, q, k, v, caps, out, lse, scale, stream: bool = True):
        infos, dims, s = self.validate(q, k, v, caps, out, lse, scale)
        elem = self.ir.tensor("q").dtype
        B, H, M, D = infos[0].shape
        Hkv, N, Dv = infos[1].shape[1], infos[1].shape[2], infos[2].shape[3]
        out_shape = (B, H, M, Dv)
        device = self._device(infos)
        work = geometry.attention_work(B, H, M, N)
        if work != "launch":
            return Plan(None, (), (), None, infos[0].framework, device, out_shape, elem, work)
        one_warpgroup = self._few_rows(H, Hkv, M, D, Dv)
        lk = self._lowered(D, Dv, one_warpgroup)  # which program the call needs: decided before building
        tma = lk.attr("kernel") == "wgmma"
        if tma and H > Hkv and pipeline.heads_fold_into_rows(lk):
            # GQA whose score and mask never look at the query row or head: the H / Hkv query
            # heads of a k/v head are rows of one problem (q[b, hkv * G + g, m] is row g * M + m
            # of head hkv in the same memory, and so are out and lse), so each K/V tile is loaded
            # once for all of them, and decode (M = 1) fills a q tile with G rows instead of one.
            H, M = Hkv, M * (H // Hkv)
        split_kv = False
        if tma:
            geometry.attention_row_limit(B, H, M, self.name)
            # One CTA per (b, h, q tile[, key range]) item on grid.x (no grid.z batch limit), or
            # one per SM walking several when the schedule is persistent.
            items = (M + lk.attr("tile_m") - 1) // lk.attr("tile_m") * H * B
            # Whether the keys are split is decided on the lowered tile (it picks the program);
            # how many ranges, below on the built one.
            split_kv = splitkv.kv_splits(items, -(-N // lk.attr("tile_n")), _sm_count(device)) > 1
        # The streamed capture (passes/streaming.py) goes by TMA when its rows are whole 16-byte
        # units (and, checked per call, its pointer is 16-byte aligned); else the program that
        # loads it per element runs.
        stream_name = lk.attr("stream_capture") if tma else None
        stream_arg = None
        if stream_name:
            t = next(i for i, c in enumerate(self.captures) if c.name == stream_name)
            row_bytes = infos[3 + t].shape[-1] * arrays.itemsize(self.captures[t].dtype)
            stream_arg = t if stream and row_bytes % 16 == 0 else None
        # A score affine in the key position takes its row max on qk + slope * col, which needs
        # a positive factor scale_log2 * F (passes/affine_score.py): another scale runs the
        # program that computes the score as written.
        affine = not (tma and affine_score.needs_positive_scale(lk) and s <= 0)
        program = Program(split_kv=split_kv, stream=stream_arg is not None or not stream_name, affine=affine)
        built, loaded = self._load(D, device, Dv, one_warpgroup, program)
        lk = built.kernel
        splits = 1
        if split_kv:
            # Counted in the kv tiles the built kernel walks: a trial tile that spilled falls back
            # to a narrower one (more tiles, so still split), and ranges counted in the trial
            # tile's could leave the kernel's last range empty, never merged by the items that
            # merge themselves (wrong outputs, seen at head dim 256). kv_splits leaves none empty.
            splits = splitkv.kv_splits(items, -(-N // lk.attr("tile_n")), _sm_count(device))
            items *= splits
        persistent = tma and lk.attr("schedule") == "persistent"
        if tma:
            grid = (min(items, _sm_count(device)) if persistent else items, 1, 1)
            chunks = [(0, B)]
        else:
            uses_b = any(ir.uses(e, "b") for _, e in self.ir.funcs)
            chunks = geometry.attention_batch_chunks(B, H, uses_b, self.name)
            grid = ((M + lk.attr("tile_m") - 1) // lk.attr("tile_m"), H, chunks[0][1])
        ncap, extra_dims = len(self.captures), built.generated.capture_dims
        # Parameter order of the generated entry: q k v [the streamed capture's map] out lse,
        # B H Hkv M N, scale_log2 scale, capture pointers, capture-only dims, the tile summary.
        # Pointers are written per call. The wgmma kernel takes q, k and v (and the streamed
        # capture) as TMA tensor maps, re-encoded when their pointers change. The summary
        # kernel takes the parameters from B on.
        head = ["tmap"] * (4 if stream_name else 3) if tma else ["ptr"] * 3
        first = len(head) + 2  # B's slot
        kinds = head + ["ptr"] * 2 + ["i32"] * 5 + ["f32"] * 2 + ["ptr"] * ncap + ["i32"] * len(extra_dims) + ["ptr"]
        # A kernel whose score is the scaled dot product itself takes its max on raw q.k, which
        # needs scale > 0 (attention_wgmma.cuh, kScaledDot): a negative scale runs on -q with
        # |scale|, a zero one on 0 * q with scale 1 (every score 0 either way).
        q_sign = 1
        if tma and exp2_fold.score_is_scaled_dot(lk) and s <= 0:
            q_sign, s_kernel = (-1, -s) if s < 0 else (0, 1.0)
        else:
            s_kernel = s
        values = [None] * first + [B, H, Hkv, M, N, s_kernel * LOG2E, s] + [None] * ncap + \
            [dims[n] for n in extra_dims] + [None]
        # slots the per-call pointers go to
        order = list(range(len(head) if tma else 0, first)) + list(range(first + 7, first + 7 + ncap)) + \
            [len(kinds) - 1]
        layout = summary.Layout.of(lk, B, H, M, N)
        tiles = None
        if layout is not None:
            tiles = summary.SummaryLaunch(loaded, built.generated.entry + "_summary", layout,
                                          ArgPack(kinds[first:], values[first:], [o - first for o in order[-1 - ncap:]]),
                                          infos[0].framework, device)
        combine = None
        if tma:  # then splits, the split results' two pointers, the work counter (per call), the head
            # group, the split counts (per call)
            order += [len(kinds) + 1, len(kinds) + 2, len(kinds) + 3, len(kinds) + 5]
            # Head groups balance items of unequal length (a mask's); without a mask every item
            # is as long as the next, and head by head kept plain at 2k 2.7 % faster (H100).
            group = 1 if lk.func("mask") is None else geometry.attention_head_group(
                B * H, -(-M // lk.attr("tile_m")), _sm_count(device),
                N * (D + Dv) * arrays.itemsize(elem), _l2_bytes(device))
            kinds += ["i32", "ptr", "ptr", "ptr", "i32", "ptr"]
            values += [splits, None, None, None, group, None]
            if splits > 1:
                combine = splitkv.CombineLaunch(loaded, built.generated.entry + "_combine", splits, B * H * M, Dv,
                                                infos[0].framework, device)
        pack = ArgPack(kinds, values, order)
        maps, sources, map_only = (), None, None
        if tma:
            from .tma import RowTiles, StreamTiles
            bm, bn = lk.attr("tile_m"), lk.attr("tile_n")
            maps = (RowTiles(pack, 0, elem, B * H, M, D, bm), RowTiles(pack, 1, elem, B * Hkv, N, D, bn),
                    RowTiles(pack, 2, elem, B * Hkv, N, Dv, bn))
            if stream_arg is not None:
                t = self.captures[stream_arg]
                maps += (StreamTiles(pack, 3, t.dtype, infos[3 + stream_arg].shape, bm),)
                # q, k, v feed maps only; the capture's pointer is a parameter too
                sources, map_only = (0, 1, 2, 5 + stream_arg), 3
        return Plan(loaded, grid, (lk.attr("threads"), 1, 1), pack, infos[0].framework, device, out_shape, elem,
                    chunks=_batch_offsets(chunks, elem, H, Hkv, M, N, D, Dv, ncap) if len(chunks) > 1 else (),
                    maps=maps, map_sources=sources, map_only=map_only, stream_arg=stream_arg,
                    summary=tiles, combine=combine, q_sign=q_sign,
                    dynamic=persistent,
                    # items merge themselves where no item can be all masked (no mask) and the
                    # counts fit a stream's slot (attention_wgmma.cuh, merge_if_last)
                    self_merge=combine is not None and lk.func("mask") is None
                    and items // splits * lk.attr("consumers") <= tiling.SPLIT_SLOT)


def _batch_offsets(chunks, elem, H, Hkv, M, N, D, Dv, ncap):
    """(grid z, byte offsets of q k v out lse and the captures) for each batch chunk."""
    e = arrays.itemsize(elem)
    return tuple((n, (b0 * H * M * D * e, b0 * Hkv * N * D * e, b0 * Hkv * N * Dv * e, b0 * H * M * Dv * e,
                      b0 * H * M * 4) + (0,) * (ncap + 1)) for b0, n in chunks)


@functools.cache
def _sm_count(device: int) -> int:
    cupy, _, _ = _driver()
    return int(cupy.cuda.Device(device).attributes["MultiProcessorCount"])


def _l2_bytes(device: int) -> int:
    cupy, _, _ = _driver()
    return int(cupy.cuda.Device(device).attributes["L2CacheSize"])


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


def _strides(x):
    return tuple(x.stride()) if hasattr(x, "stride") and callable(x.stride) else tuple(x.strides)


def _dev(x):
    d = getattr(x, "device", None)
    return getattr(d, "index", None) if hasattr(d, "index") else getattr(d, "id", d)


def _ptr(x) -> int:
    return x.data_ptr() if hasattr(x, "data_ptr") else x.data.ptr


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
