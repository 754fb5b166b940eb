"""The FP8 GEMM's callable: argument checks once per call signature, a tile configuration
per (M, N, K, G) and SM count, then a lean launch on the caller's stream (launch.py holds
what it shares with attention: KernelBase, Loaded, Plan)."""
from __future__ import annotations

import math
import numbers
import threading

from .. import ir
from ..errors import KdslError, LaunchError
from ..passes import gemm_tiles
from . import arrays, fast_launch, geometry, torch_ops
from .driver import ArgPack, max_active_clusters
from .launch import KernelBase, Loaded, Plan, _align, _ptr, _signature, _sm_count


# The pointers a call hands its plan, in this order: a and b feed tensor maps only; the rest are
# the kernel's pointer parameters in order (then stream-K's workspace, where it has one), out
# and a_scale also feeding maps where they go through TMA.
CALL_POINTERS = ("a", "b", "a_scale", "b_scale", "out", "group", "count")
_NOT_A_TENSOR = object()  # an extra argument by a name the kernel does not take: C++ declines it


class GemmKernel(KernelBase):
    """mod.NAME(a, a_scale, b, b_scale[, group | count], out=None[, expected_rows=R]) -> out.

    Scales are in the layouts kdsl.fp8.quantize_1x128 / quantize_128x128 return: a_scale is
    logically [M, K/128] stored M-major (strides (1, M)); b_scale is contiguous
    [ceil(N/128), K/128]; grouped forms add a leading G. A kernel whose out is declared
    `accumulate` adds into the given out (required).

    Tiles are chosen per call signature, for its (M, N, K, G) and the device's SM count
    (passes/gemm_tiles.py); each configuration is compiled once. The kernel reads a, b,
    a_scale and writes out through TMA tensor maps, re-encoded only when a pointer changes.
    Once a plan exists, calls on torch tensors that match it are launched by the compiled
    launch path (runtime/fast_launch.py) where it is built; `launch_path = "python"` keeps
    this kernel's calls on the Python path.

    A masked grouping's counts are data on the device, so its tiles are chosen for groups of M
    rows (the most a group may hold) unless the call says how many to expect: expected_rows=R
    (or with_attrs(expected_rows=R)), as DeepGEMM's expected_m. The result is the same either
    way; only the tiles change.
    """

    def __init__(self, kernel, arch=None):
        super().__init__(kernel, arch)
        self.grouping = kernel.attr("grouping")
        self.extra = {"contiguous": "group", "masked": "count"}.get(self.grouping)
        self.accumulate = bool(kernel.attr("accumulate"))
        self.fast_gemm = None  # the compiled launch path's FastGemm (runtime/fast_launch.py), once it serves
        self.launch_path = "compiled"  # or "python": every call takes the Python path (for comparisons)
        self._by_expected_rows: dict = {}  # masked: expected_rows -> this kernel with that hint (_hinted)

    def with_attrs(self, **attrs) -> "GemmKernel":
        """The same kernel with schedule attrs fixed (tiling.SCHEDULE_ATTRS["gemm"]: tile_m, tile_n,
        stages, cluster, multicast, raster, store, stream_k, scale_load, b_scale_load; see
        passes/gemm_tiles.py): the tiling pass then
        chooses only among configurations that agree with them, and refuses a call where none does.
        A masked grouping also takes expected_rows (gemm_tiles.HINT_ATTRS): the tiles are then
        chosen for groups of about that many rows instead of M, the most a group may hold."""
        from ..passes import tiling
        legal = tiling.SCHEDULE_ATTRS["gemm"] + gemm_tiles.HINT_ATTRS
        unknown = set(attrs) - set(legal)
        if unknown:
            raise KdslError(f"{self.name}: unknown FP8 GEMM attr(s) {sorted(unknown)}; choose from {', '.join(legal)}")
        if "expected_rows" in attrs:
            gemm_tiles.check_expected_rows(self.name, self.grouping, attrs["expected_rows"])
            attrs["expected_rows"] = int(attrs["expected_rows"])  # (a numpy integer, say)
        return self._derived(GemmKernel(self.ir.with_attrs(**attrs), self.arch))

    def _hinted(self, rows) -> "GemmKernel":
        """This kernel with expected_rows = rows, made once per value (a call's expected_rows=)."""
        usable = isinstance(rows, numbers.Integral) and not isinstance(rows, bool)
        kernel = self._by_expected_rows.get(rows) if usable else None
        if kernel is None:  # (with_attrs refuses what is not a positive integer)
            kernel = self._by_expected_rows[int(rows)] = self.with_attrs(expected_rows=rows)
        return kernel

    def __call__(self, a, a_scale, b, b_scale, *rest, out=None, **named):
        if named and "expected_rows" in named:  # a masked grouping's hint: its kernel for that many rows
            return self._hinted(named.pop("expected_rows"))(a, a_scale, b, b_scale, *rest, out=out, **named)
        if torch_ops.compiling():
            return torch_ops.gemm(self, a, a_scale, b, b_scale, rest, named, out)
        fast = self.fast_gemm
        if fast is not None and len(rest) + len(named) <= 1:  # C++ launches a call it has a plan for
            done = fast(a, a_scale, b, b_scale, rest[0] if rest else named.get(self.extra, _NOT_A_TENSOR)
                        if named else None, out)
            if done is not None:
                return done
        extra = self._extra(rest, named) if (rest or named or self.extra) else None
        key = _call_key(a, a_scale, b, b_scale, extra, out)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._plan(a, a_scale, b, b_scale, extra, out)
        out_given = out is not None
        if out is None:
            out = plan.new_out()
        if plan.loaded is None:
            return out
        if plan.fast is None:  # first call of this plan, or the compiled path is still building
            fast_launch.adopt(self, plan, (a, a_scale, b, b_scale, extra, out), out_given)
        if plan.framework == "torch":  # the hot path: no attribute probing
            pa, psa, pb, psb, pout = a.data_ptr(), a_scale.data_ptr(), b.data_ptr(), b_scale.data_ptr(), out.data_ptr()
        else:
            pa, psa, pb, psb, pout = _ptr(a), _ptr(a_scale), _ptr(b), _ptr(b_scale), _ptr(out)
        if (pa | pb) & 15 or psa % plan.sa_align or psb % plan.sb_align or pout % plan.out_align:
            for ptr, n, al in ((pa, "a", 16), (psa, "a_scale", 4), (pb, "b", 16), (psb, "b_scale", 4),
                               (pout, "out", plan.out_align)):
                if ptr % al:
                    _align(ptr, n, self.name, al)
            plan = plan.scales_copied or self._copied_scales_plan(key, plan, a, a_scale, b, b_scale, extra, out)
        ex = _ptr(extra) if extra is not None else 0
        grouped = (ex, 0) if self.grouping == "contiguous" else (0, ex)
        if plan.sk_tiles:  # in CALL_POINTERS order
            plan.launch([pa, pb, psa, psb, pout, *grouped, *_sk_workspace(plan)])
        elif plan.dynamic:
            plan.launch([pa, pb, psa, psb, pout, *grouped, self._work_counter(plan)])
        else:
            plan.launch([pa, pb, psa, psb, pout, *grouped])
        return out

    def _copied_scales_plan(self, key, plan, a, a_scale, b, b_scale, extra, out):
        """The plan for an a_scale or b_scale that is 4- but not 16-byte aligned where the call's
        plan loads it by TMA: the same tiles with those scales copied by the producer (compiled
        once, and kept on the call's plan for its next such call)."""
        for name, attr, t in (("a_scale", "scale_load", a_scale), ("b_scale", "b_scale_load", b_scale)):
            if self.ir.attr(attr) == "tma":
                _align(_ptr(t), name, self.name + f" (attr {attr} = \"tma\")", 16)
        copied = {"scale_load": "copy"} | ({"b_scale_load": "copy"} if plan.sb_align == 16 else {})
        plan.scales_copied = self._plan(a, a_scale, b, b_scale, extra, out, copied)
        return plan.scales_copied

    def _extra(self, rest, named):
        if self.extra is None:
            if rest or named:
                raise LaunchError(f"{self.name}: takes (a, a_scale, b, b_scale, out=None), got extra arguments")
            return None
        if len(rest) > 1 or set(named) - {self.extra}:
            raise LaunchError(f"{self.name}: takes (a, a_scale, b, b_scale, {self.extra}, out=None)")
        x = rest[0] if rest else named.get(self.extra)
        if x is None:
            raise LaunchError(f"{self.name}: missing argument '{self.extra}' (int32 "
                              f"{'group index per row of a' if self.extra == 'group' else 'valid rows per group'})")
        return x

    def validate(self, a, a_scale, b, b_scale, extra, out):
        """Every check that does not depend on the device: (array infos, (G, M, N, K), out shape)."""
        masked = self.grouping == "masked"
        ia = self._info(a, "a", "e4m3", 3 if masked else 2)
        ib = self._info(b, "b", "e4m3", 2 if self.grouping == "dense" else 3)
        for info, name, rows in ((ia, "a", "M"), (ib, "b", "N")):
            if not arrays.is_contiguous(info) and info.strides[-1] != 1 and info.shape[-1] > 1:
                # (the GEMM reads K-major tiles; a copy per call would cost what the call does)
                raise LaunchError(f"{self.name}: argument '{name}' must be [..., {rows}, K] with K innermost (row-major; "
                                  f"nn.Linear's weight as it is, DeepGEMM's layout), got strides {list(info.strides)} "
                                  f"for shape {list(info.shape)}: a transposed view; make the K-major copy once, ahead "
                                  f"of the calls ({name}.contiguous(), or store it so)")
            self._contiguous(info, name)
        K = ia.shape[-1]
        if K % 128 or K == 0:
            raise LaunchError(f"{self.name}: K (last dim of a) must be a positive multiple of 128, got {K}")
        if ib.shape[-1] != K:
            raise LaunchError(f"{self.name}: b's K is {ib.shape[-1]} but a's K is {K}")
        G = ib.shape[0] if self.grouping != "dense" else 1
        M, N = ia.shape[-2], ib.shape[-2]
        if masked and ia.shape[0] != G:
            raise LaunchError(f"{self.name}: a has {ia.shape[0]} groups but b has {G}")
        kb, nb = K // 128, -(-N // 128)
        isa = self._info(a_scale, "a_scale", "f32", 3 if masked else 2)
        want_sa = ((G, M, kb), (kb * M, 1, M)) if masked else ((M, kb), (1, M))
        if sa_pitch(isa, G, M, kb, masked) is None:
            padded = f"[{kb}P, 1, P]" if masked else "[1, P]"
            raise LaunchError(f"{self.name}: a_scale must have shape {list(want_sa[0])} with strides {list(want_sa[1])} "
                              f"(one fp32 scale per 1x128 block, M-major as kdsl.fp8.quantize_1x128 returns), or "
                              f"{padded} with a pitch P >= M (rows padded, as DeepGEMM's TMA-aligned layout), got "
                              f"shape {list(isa.shape)} strides {list(isa.strides)}")
        isb = self._info(b_scale, "b_scale", "f32", len(ib.shape))
        want_sb = (G, nb, kb) if self.grouping != "dense" else (nb, kb)
        if isb.shape != want_sb:
            raise LaunchError(f"{self.name}: b_scale must have shape {list(want_sb)} (one fp32 scale per 128x128 "
                              f"block of b), got {list(isb.shape)}")
        self._contiguous(isb, "b_scale")
        infos = [ia, ib, isa, isb]
        if extra is not None:
            ie = self._info(extra, self.extra, "i32", 1)
            want = M if self.grouping == "contiguous" else G
            if ie.shape != (want,):
                raise LaunchError(f"{self.name}: '{self.extra}' must have shape [{want}], got {list(ie.shape)}")
            self._contiguous(ie, self.extra)
            infos.append(ie)
        out_dtype = self.ir.tensor("out").dtype
        out_shape = (G, M, N) if masked else (M, N)
        if out is None and self.accumulate:
            raise LaunchError(f"{self.name}: out is declared 'accumulate' (out += a . b^T): pass the {out_dtype} "
                              f"array to add into as out=")
        if out is not None:
            io = self._info(out, "out", out_dtype, len(out_shape))
            if io.shape != out_shape:
                raise LaunchError(f"{self.name}: out must have shape {list(out_shape)}, got {list(io.shape)}")
            self._contiguous(io, "out")
            infos.append(io)
        return infos, (G, M, N, K), out_shape

    def _plan(self, a, a_scale, b, b_scale, extra, out, fixed=None):
        infos, (G, M, N, K), out_shape = self.validate(a, a_scale, b, b_scale, extra, out)
        masked, out_dtype, ia = self.grouping == "masked", self.ir.tensor("out").dtype, infos[0]
        pitch = sa_pitch(infos[2], G, M, K // 128, masked)
        if pitch % 4 and M % 4 == 0:  # padded rows a TMA map cannot step over: A's scales by copies
            if self.ir.attr("scale_load") == "tma":
                raise LaunchError(f"{self.name} (attr scale_load = \"tma\"): a_scale's rows are {pitch} floats apart; "
                                  f"a TMA map needs a multiple of 4")
            fixed = {**(fixed or {}), "scale_load": "copy"}
        device = self._device(infos)
        if math.prod(out_shape) == 0:  # empty in, empty out (as torch): nothing to launch
            return Plan(None, (), (), None, ia.framework, device, out_shape, out_dtype, "empty")
        sms = _sm_count(device)
        kernel = self.ir.with_attrs(shape=[M, N, K, G], sms=sms)
        built, loaded = self._load_shape(kernel.with_attrs(**fixed) if fixed else kernel, device)
        lk = built.kernel
        bm, bn, cluster = lk.attr("tile_m"), lk.attr("tile_n"), lk.attr("cluster")
        geometry.gemm_index_limits(M, N, K, G, bm, bn, masked, self.name, pitch)
        tiles = -(-M // bm) * -(-N // bn) * (G if masked else 1)
        grid = geometry.gemm_grid(tiles, sms, cluster)
        # stream-K's flags are sized for 1024 CTAs (_SK_FLAG_BYTES)
        sk = gemm_tiles.sk_tiles(tiles, grid[0]) if lk.attr("stream_k") and grid[0] <= 1024 else 0
        counter = gemm_tiles.tile_counter(self.grouping, bm, cluster)
        pack = _arg_pack(M, N, K, G, lk.attr("raster"), sk, counter, pitch)
        from .tma import TensorMap
        specs = geometry.gemm_tensor_maps(M, N, K, G, self.grouping, arrays.itemsize(out_dtype),
                                          {a: lk.attr(a) for a in ("tile_m", "tile_n", "multicast", "store",
                                                                   "scale_load", "b_scale_load")}, pitch)
        maps = [TensorMap(pack, map_slot(name), *spec) for name, spec in specs.items()]
        block = (lk.attr("threads"), 1, 1)
        if cluster > 1:  # never more CTAs than can be resident: the rest would be a second wave
            resident = cluster * max_active_clusters(loaded.fn_ptr, grid, block, loaded.smem)
            grid = geometry.gemm_grid(tiles, min(sms, resident), cluster)
        return Plan(loaded, grid, block, pack, ia.framework,
                    device, out_shape, out_dtype, maps=tuple(maps),
                    map_sources=map_sources(specs), map_only=2,
                    sa_align=16 if "a_scale" in specs else 4, sb_align=16 if "b_scale" in specs else 4,
                    out_align=16 if "out" in specs else (8 if out_dtype == "f32" else 4),
                    sk_tiles=sk, sk_bytes=grid[0] * bm * bn * 4, dynamic=counter)

    def _load_shape(self, kernel: ir.Kernel, device: int):
        """The build for this kernel's tile configuration, loaded once per configuration."""
        from ..passes import gemm_tiles, pipeline
        from ..passes.target import get_target
        lowered = pipeline.lower(kernel, get_target(self._arch()))
        key = (tuple(lowered.attr(a) for a in gemm_tiles.CONFIG_ATTRS), device)
        if key not in self._loaded:
            from .compiler import build
            built = build(kernel, self._arch(), 0)
            self._loaded[key] = (built, Loaded(built.compiled.cubin, built.generated.entry,
                                               built.kernel.attr("smem_bytes")))
        return self._loaded[key]


# Stream-K workspaces, one per (device, stream), so that launches on concurrent streams never
# share one: per CTA a slot of fp32 partial totals and two flags. The flags start at zero and
# the kernel lowers every one it raised, so a launch needs no memset. A workspace outgrown by
# a larger tile is replaced and the old one kept (a launch still queued may use it).
_SK_SPACES: dict = {}
_SK_KEPT: list = []
_SK_LOCK = threading.Lock()
_SK_FLAG_BYTES = 4 * 3 * 1024  # a flag per math warpgroup (up to three: tile_m 192) for each of up to 1024 CTAs


def _sk_workspace(plan) -> tuple[int, int]:
    """(partials, flags) pointers of the call's stream; (0, 0) while the stream is captured
    into a CUDA graph (Plan.own_stream): the kernel then gives every tile out whole."""
    stream = plan.own_stream()
    if stream is None:
        return 0, 0
    key = (plan.device, stream)
    space = _SK_SPACES.get(key)
    if space is None or space[2] < plan.sk_bytes:
        with _SK_LOCK:
            space = _SK_SPACES.get(key)
            if space is None or space[2] < plan.sk_bytes:
                space = _SK_SPACES[key] = _allocate_sk(plan.device, plan.sk_bytes)
                _SK_KEPT.append(space)
    return space[0], space[1]


def _allocate_sk(device: int, nbytes: int):
    import cupy
    with cupy.cuda.Device(device):
        mem = cupy.cuda.alloc(nbytes + _SK_FLAG_BYTES)
        flags = mem.ptr + nbytes
        cupy.cuda.runtime.memset(flags, 0, _SK_FLAG_BYTES)
        cupy.cuda.runtime.deviceSynchronize()
    return mem.ptr, flags, nbytes, mem


def _arg_pack(M: int, N: int, K: int, G: int, raster: int, sk: int, counter: bool = False,
              sa_pitch: int = 0) -> ArgPack:
    """The kernel's parameters: ta tb td tsa tsb (tensor maps; td, tsa and tsb left blank when
    unused), sa sb out group count (pointers, per call), M N K G raster sk_tiles, sk_partials
    sk_flags (pointers, per call where stream-K runs: the stream's workspace, or null while a
    CUDA graph is captured), work (a pointer, per call where the tiles come from a counter: the
    stream's, or null likewise), sa_pitch (a_scale's row pitch in floats: M unless padded). The
    per-call pointers are CALL_POINTERS from a_scale on."""
    maps = len(geometry.GEMM_MAP_OPERANDS)
    return ArgPack(["tmap"] * maps + ["ptr"] * 5 + ["i32"] * 6 + ["ptr"] * 3 + ["i32"],
                   [None] * (maps + 5) + [M, N, K, G, raster, sk, None, None, None, max(M, sa_pitch)],
                   list(range(maps, maps + 5)) + ([maps + 11, maps + 12] if sk else [])
                   + ([maps + 13] if counter else []))


def map_slot(operand: str) -> int:
    """The parameter slot of an operand's tensor map (ta tb td tsa tsb)."""
    return geometry.GEMM_MAP_OPERANDS.index(operand)


def map_sources(operands) -> tuple:
    """For the tensor maps of these operands, the index of each one's pointer among the call's."""
    return tuple(CALL_POINTERS.index(name) for name in operands)


def _call_key(a, sa, b, sb, extra, out):
    """What the plan depends on (launch._signature's contents), built flat for torch tensors:
    the hot path of an eager call, ~2 us cheaper than the generic signature there. Anything
    else (CuPy arrays, a mistake) takes the generic one, whose keys never equal these."""
    try:
        return (a.dtype, a.shape, a.stride(), a.get_device(), sa.dtype, sa.shape, sa.stride(), sa.get_device(),
                b.dtype, b.shape, b.stride(), b.get_device(), sb.dtype, sb.shape, sb.stride(), sb.get_device(),
                None if extra is None else (extra.dtype, extra.shape, extra.stride(), extra.get_device()),
                None if out is None else (out.dtype, out.shape, out.stride(), out.get_device()))
    except (AttributeError, TypeError):
        return _signature((a, sa, b, sb, extra), (out,))


def sa_pitch(isa, G: int, M: int, kb: int, masked: bool) -> int | None:
    """Floats from one K block's A scales to the next's: M in kdsl's layout ([G,] M, K/128 with
    strides [kb M,] 1, M), P where the rows are padded to P >= M (DeepGEMM rounds them up to 4);
    None for any other layout. Strides of axes of size 1 do not count, nor any of an empty array."""
    if isa.shape != ((G, M, kb) if masked else (M, kb)):
        return None
    if 0 in isa.shape:
        return M
    strides = isa.strides
    if kb > 1:
        pitch = strides[-1]
    elif masked and G > 1:
        pitch = strides[0]  # (one K block: the groups' stride tells the pitch)
    else:
        pitch = M
    if pitch < M or (M > 1 and strides[-2] != 1) or (masked and G > 1 and strides[0] != kb * pitch):
        return None
    return pitch
