"""Lowered IR kernel -> CUDA C++ source: expressions become C++ text here, templates only
place them. Also describes the launch (entry name, parameter order) for the runtime. The
attention backward's source (the same Variant beside its Grad struct) is emit_backward.py's."""
from __future__ import annotations

import functools
import hashlib
import io
from dataclasses import dataclass
from pathlib import Path

import jinja2

from .. import __version__, ir
from ..cachefiles import atomic_write, kept_dirs
from ..passes import (exp2_fold, gemm_tiles, int_signs, item_divisions, key_mask, key_table, key_values, mask_analysis,
                      offset_score, streaming, tiling)
from .cexpr import CEmitter, Capture, WideEmitter, capture_ident, dim_ident, split_position

HERE = Path(__file__).parent
INCLUDE_DIR = HERE / "include"
_ELEM = {"bf16": "kdsl::bf16_t", "f16": "kdsl::f16_t"}
_ELEM_CTYPE = {"f32": "float", "bf16": "kdsl::bf16_t", "f16": "kdsl::f16_t",  # a streamed tensor's elements
               "i32": "int", "bool": "kdsl::u8", "u8": "kdsl::u8", "i8": "signed char"}
_CAPTURE_CTYPE = {"f32": "const float*", "bf16": "const kdsl::bf16_t*", "f16": "const kdsl::f16_t*", "i32": "const int*",
                  "i8": "const signed char*", "u8": "const unsigned char*", "bool": "const bool*"}
GEMM_KINDS = {"dense": 0, "contiguous": 1, "masked": 2}
# Attention dims the kernel knows as AttnArgs fields: (tensor, axis) -> C++ expression.
_ATTN_DIM_FIELDS = {("q", 0): "a.B", ("q", 1): "a.H", ("q", 2): "a.M", ("k", 1): "a.Hkv", ("k", 2): "a.N"}


@dataclass(frozen=True)
class Generated:
    name: str
    entry: str          # extern "C" symbol
    source: str         # CUDA C++
    capture_dims: tuple[str, ...]   # free dims passed after the capture pointers, in order


@functools.cache
def _env() -> jinja2.Environment:
    return environment(KeptTemplates(kept_dirs(HERE)))


def environment(bytecode_cache: jinja2.BytecodeCache | None = None) -> jinja2.Environment:
    """The templates' environment (without bytecode_cache: every template compiled afresh,
    what a first run pays once)."""
    return jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, bytecode_cache=bytecode_cache)


class KeptTemplates(jinja2.BytecodeCache):
    """Compiled templates kept as files (~0.012 s of every cold build otherwise), beside the
    templates or in the cache directory; Jinja checks each against its template's source
    and Python's version. A missing, damaged or unwritable copy costs the compile only."""

    def __init__(self, dirs: list[Path]):
        self.dirs = dirs

    def _name(self, bucket) -> str:
        return f"kdsl-template-{bucket.key}.bin"

    def load_bytecode(self, bucket) -> None:
        for d in self.dirs:
            try:
                with open(d / self._name(bucket), "rb") as f:
                    bucket.load_bytecode(f)
            except Exception:  # noqa: BLE001 - missing, torn or foreign: compile the template instead
                bucket.reset()
            if bucket.code is not None:
                return

    def dump_bytecode(self, bucket) -> None:
        code = io.BytesIO()
        bucket.write_bytecode(code)
        for d in self.dirs:
            try:
                d.mkdir(parents=True, exist_ok=True)
                atomic_write(d / self._name(bucket), code.getvalue())
                return
            except OSError:
                continue


@functools.cache
def headers_hash() -> str:
    """Hash of every template and header: part of each cache key, so editing one invalidates it."""
    h = hashlib.sha256()
    for p in sorted(list((HERE / "templates").glob("*.j2")) + list(INCLUDE_DIR.rglob("*.cuh"))):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def entry_name(k: ir.Kernel) -> str:
    return ir.entry_symbol(k.kind, k.name, k.attr("head_dim"), k.attr("value_dim"))


def generate(k: ir.Kernel) -> Generated:
    return _attention(k) if k.kind == "attention" else _gemm(k)


def attention_capture_dims(k: ir.Kernel) -> tuple[str, ...]:
    """Dims bound only by captured tensors: they travel as extra int parameters."""
    return tuple(n for n, (t, _) in k.dims.items() if k.tensor(t).role == "capture")


def _on(x) -> str:
    """A C++ bool literal."""
    return "true" if x else "false"


def mask_divides(mask: ir.Expr | None) -> bool:
    """Whether the mask divides (// or %) by a value whose divisor divides by a value itself
    (`(i - j) % (h // (H // Hkv) + 1)`): Variant::kMaskDivides."""
    divides = item_divisions.divides_by_value
    return mask is not None and any(divides(n) and any(divides(m) for m in ir.walk(n.args[1]))
                                    for n in ir.walk(mask))


def _loads_rows(e: ir.Expr | None) -> bool:
    """Whether e loads data at the query alone (a row's value: doc[b, q]) and nothing at a
    query and key pair (keep[b, q, kv]): the backward's mask bits gather such rows' loads."""
    def at(n, v):
        return any(ir.uses(i, v) for i in n.indices)
    loads = [n for n in ir.walk(e) if isinstance(n, ir.Load)] if e is not None else []
    return any(at(n, "q") for n in loads) and not any(at(n, "q") and at(n, "kv") for n in loads)


def mask_bits_apply(mask: ir.Expr | None, score: ir.Expr | None) -> bool:
    """Whether the backward gathers the mask into bits before the gradients (attention_bwd_wgmma.cuh
    kBits, where its other conditions hold): a mask that loads rows' values at the query beside a
    score that loads nothing."""
    return _loads_rows(mask) and not (score is not None and any(isinstance(n, ir.Load) for n in ir.walk(score)))


def _attention_names(k: ir.Kernel):
    """What the Variant's expressions call each IR variable and captured tensor, and the
    Captures struct's fields (the captured tensors, then the dims only they bind)."""
    d, dv = k.attr("head_dim"), k.attr("value_dim") or k.attr("head_dim")
    variables = {"qk": "qk", "scale_log2": "a.scale_log2", "scale": "c.scale", "b": "b", "h": "h", "q": "q",
                 "kv": "kv", "qf": "qf", "kvf": split_position("kvf"), "dqkf": split_position("dqkf"),
                 "kvt": "((int)kvf0)",  # the thread's first key of the tile (passes/tile_blocks.py)
                 "q0": "q0", "q1": "q1", "k0": "k0", "k1": "k1"}
    for name, (t, axis) in k.dims.items():
        fixed = {("q", 3): str(d), ("v", 3): str(dv)}  # head dims: compile-time constants
        variables[name] = fixed.get((t, axis)) or _ATTN_DIM_FIELDS.get((t, axis), f"c.{dim_ident(name)}")
    pre = CEmitter(variables, {})
    captures, fields = {}, []
    for t in k.tensors:
        if t.role == "capture":
            captures[t.name] = Capture(f"c.{capture_ident(t.name)}", t.dtype, tuple(pre(s) for s in t.shape))
            fields.append({"ctype": _CAPTURE_CTYPE[t.dtype], "name": capture_ident(t.name)})
    fields += [{"ctype": "int", "name": dim_ident(n)} for n in attention_capture_dims(k)]
    return variables, captures, fields


def _attention(k: ir.Kernel) -> Generated:
    d, dv = k.attr("head_dim"), k.attr("value_dim") or k.attr("head_dim")
    extra = attention_capture_dims(k)
    variables, captures, fields = _attention_names(k)
    template = "attention_wgmma.cu.j2" if k.attr("kernel") == "wgmma" else "attention.cu.j2"
    # The wgmma sequences of head dims other than the measured ones, and the one-instruction
    # wrappers of tiles other than the default ones: headers of their own, so that the
    # common kernels do not parse them (tools/gen_wgmma.py).
    if d != dv or d not in tiling.WGMMA_ATTENTION_TILES:
        wgmma_header = "kdsl/wgmma_ops_more.cuh"
    elif k.attr("tile_n") not in tiling.packed_kv_tiles(d):
        wgmma_header = "kdsl/wgmma_ops_steps.cuh"
    else:
        wgmma_header = ""
    # the slope step's one instruction (passes/tiling.py SLOPE_STEP) has a small header of its own
    slope_header = "kdsl/wgmma_ops_slope.cuh" if k.attr("slope_step") else ""
    # kernel attr math = "exact": libm's functions and IEEE division instead of the hardware
    # approximations (kdsl.load(..., exact_math=True)); see kdsl/common.cuh.
    prelude = "#define KDSL_EXACT_MATH 1\n" if k.attr("math") == "exact" else ""
    src = _env().get_template(template).render(
        prelude=prelude, version=__version__, source=k.source or "<string>", name=k.name, ns=f"kdsl_{k.name}", d=d,
        dv=dv, wgmma_header=wgmma_header, slope_header=slope_header,
        rowsum_header="kdsl/wgmma_ops_rowsum.cuh" if k.attr("tensor_row_sum") else "",
        tensor_row_sum=_on(k.attr("tensor_row_sum")), elem=_ELEM[k.tensor("q").dtype], bm=k.attr("tile_m"),
        bn=k.attr("tile_n"), warps=k.attr("warps"), consumers=k.attr("consumers"), stages=k.attr("stages"),
        producer_regs=k.attr("producer_regs"), consumer_regs=k.attr("consumer_regs"), work_slots=tiling.WORK_SLOTS,
        split_slot=tiling.SPLIT_SLOT, poly_exp2=k.attr("poly_exp2") or 0, lazy_rescale=k.attr("lazy_rescale") or 0,
        threads=k.attr("threads"), smem=k.attr("smem_bytes"), entry=entry_name(k), fields=fields,
        # the Hopper kernel prepares the item's divisors where it takes an item (item_warm)
        v=_variant(k, variables, captures, item_divisions.divisors(k) if k.attr("kernel") == "wgmma" else ()))
    return Generated(k.name, entry_name(k), src, extra)


def _stream(k: ir.Kernel, name: str | None, c: CEmitter) -> dict:
    """A ring's streamed tensor (passes/streaming.py) as the Variant declares it: its element's C
    type and bytes (0: no ring), its rank and leading indices (the TMA box's coordinates), the
    type its element arrives as, and a pointer to its row q's first element."""
    t = k.tensor(name) if name else None
    # row q's element at kv = 0, as bytes (the wgmma backward copies the tiles by cp.async)
    row = ir.Load(t.dtype, name, streaming.lead_indices(k, name) + (ir.Var("i32", "q"), ir.Const("i32", 0))) \
        if t else None
    return dict(ctype=_ELEM_CTYPE[t.dtype] if t else "float", bytes=streaming.ELEM_BYTES[t.dtype] if t else 0,
                rank=len(t.shape) if t else 0,
                lead=[c(i) for i in reversed(streaming.lead_indices(k, name))] if t else [],
                value="float" if not t or t.dtype in streaming.FLOAT_ELEMS else "int",
                row=f"reinterpret_cast<const kdsl::u8*>({c.captures[name].field} + {c.linear_index(row)})" if t
                else "nullptr")


def _variant(k: ir.Kernel, variables: dict, captures: dict, divisors: tuple[ir.Expr, ...] = ()) -> dict:
    """The Variant struct's inputs (attention_variant.cu.j2), one group per feature of the score
    or mask, each as the pass that found it left it; divisors: those prepared in item_warm
    (passes/item_divisions.py divisors(); only a kernel that calls item_warm where it takes an
    item may have them)."""
    emitter = functools.partial(CEmitter, divisors=divisors, sizes=frozenset(k.dims))
    slots = mask_analysis.summary_slots(k)
    summary_slots = {(ir.TILE_REDUCTIONS[s.op][0], s.args[0]): i for i, s in enumerate(slots)}
    c = emitter(variables, captures, summary_slots)
    stream, stream2 = k.attr("stream_capture"), k.attr("mask_stream_capture")
    mask_reads = streaming.mask_reads(k)
    rest_full = k.func("stream_rest_full")  # passes/stream_mask.py
    cs = emitter(variables, captures, summary_slots, {stream: "sv"} if stream else {})  # the score's: ring 1 is sv
    # mask_at's: the rings' elements it reads are sv and sv2
    cm = emitter(variables, captures, summary_slots, {n: v for n, v in zip((stream, stream2), ("sv", "sv2"))
                                                         if n in mask_reads})
    # each ring's tensor map parameter and the Variant's function issuing its boxes
    rings = [dict(_stream(k, name, c), tensor=name, tile_fn=fn, map=m)
             for name, fn, m in zip(streaming.streamed(k), ("stream_tile", "stream2_tile"), ("ts", "ts2"))]
    wide = WideEmitter(variables, captures)  # passes/kv_bounds.py's key bounds, in 64 bits
    # passes/affine_score.py's base: positions at the thread's first column of the tile
    at_col0 = emitter({**variables, "kvf": "kvf0", "dqkf": "dq0"}, captures)
    # passes/offset_score.py's offset part: a function of b, h and d = q - kv
    at_offset = emitter({**variables, "dqk": "d"}, captures)
    bits = lambda pred: sum(1 << i for i, s in enumerate(slots) if pred(s))
    mask = k.func("mask")
    factored = exp2_fold.positive_factor(k)
    score_base, score_slope, score_offset = k.func("score_base"), k.func("score_slope"), k.func("score_offset")
    key_part, score_keyed, key_gain, key_base = (k.func(n) for n in key_table.FUNCS)
    # passes/key_table.py's score reads its key part from the table, as the argument kt
    keyed = emitter({**variables, "kt": "kt"}, captures, summary_slots)
    at_key = emitter({**variables, "kvf": "((float)kv)"}, captures)  # its part: a function of b, h and kv
    kv_lo, tile_keys = k.func("kv_lo"), k.func("tile_keys")
    # passes/key_mask.py: the mask's part gathered per key, and the mask reading it as the bit kb
    kpart = key_mask.part(mask) if mask is not None and k.attr("key_mask") else None
    krests = key_mask.rests(mask, kpart) if kpart is not None else ()
    arm = lambda e: int(e.value) if isinstance(e, ir.Const) else -1  # noqa: E731  (1 / 0: always kept / never)
    # each arm as one key interval per row where it is one (a constant arm needs none, but the
    # arm with the bit clear that always keeps: its keys below N)
    kints = [None if isinstance(r, ir.Const) and (i == 0 or not r.value) else key_mask.arm_interval(r, k.attr("tile_n"))
             for i, r in enumerate(krests)] or [None, None]
    # passes/key_values.py: the mask's value gathered per key, and the mask reading it as kx
    vpart = key_values.part(mask) if key_values.applies(k, k.attr("tile_n") or 0) else None
    valued = emitter({**variables, "kx": "kx", "qx": "qx", "qx2": "qx2"}, captures, summary_slots)
    qparts = key_values.query_parts(k)  # the backward's mirror: the values gathered at the query
    vtype = lambda e: "int" if e.ty == "i32" else "float"  # noqa: E731
    # tile()'s item divisors, prepared once at its top: its predicates divide by one on several
    # branches, and NVVM prepared it in each
    in_tiles = {n for f in ("tile_empty", "tile_full") if mask is not None and k.func(f) is not None
                for n in ir.walk_distinct(k.func(f))}
    tile_divisors = {d: f"tile_div{n}" for n, d in enumerate(d for d in divisors
                                                             if int_signs.item_level(d) and d in in_tiles)}
    ct = emitter(variables, captures, summary_slots, prepared=tile_divisors)
    return dict(
        has_mask=_on(mask is not None), scaled_dot=_on(exp2_fold.score_is_scaled_dot(k)),
        warm=[emit(e) for e in item_divisions.divisions(k) for emit in (c, wide)]
        + [f"kdsl::make_divisor({c(d)})" for d in divisors if int_signs.item_level(d)],  # a row's has no row here
        score=dict(expr=cs(k.func("score_log2")),
                   loads_at_kv=_on(ir.loads_at(k.func("score_log2"), "kv")),
                   loads_at_kv_streamed=_on(ir.loads_at(k.func("score_log2"), "kv", skip=stream))),
        factored=dict(on=_on(factored), unit=cs(factored[0]) if factored else "0.f",
                      factor=c(ir.Const("f32", factored[1])) if factored else "1.f"),
        ref=dict(fixed=_on(k.attr("score_ref") is not None), value=c(ir.Const("f32", k.attr("score_ref") or 0.0))),
        stream=_stream(k, stream, c), stream2=_stream(k, k.attr("mask_stream_capture"), c),
        rings=rings, ring_maps=", ".join([f"&{r['map']}" for r in rings] + ["nullptr"] * (2 - len(rings))),
        score_stream=_on(streaming.read_by(k, "score_log2")),  # ring 1 (ring 2 is the mask's alone)
        # the rings mask_at() reads
        mask_stream=dict(ring1=_on(stream is not None and stream in mask_reads),
                         ring2=_on(stream2 is not None and stream2 in mask_reads)),
        stream_nonzero=dict(ring=(1 if mask_reads[0] == stream else 2) if rest_full is not None else 0,
                            rest_full=c(rest_full) if rest_full is not None else "false"),
        affine=dict(on=_on(score_slope is not None), factor=c(ir.Const("f32", k.attr("score_factor") or 1.0)),
                    step=tiling.slope_form(k.attr("consumers")) if k.attr("slope_step") else 0,
                    slope=c(score_slope) if score_slope is not None else "0.f",
                    base=at_col0(score_base) if score_base is not None else "0.f"),
        offset=dict(on=_on(score_offset is not None), factor=c(ir.Const("f32", k.attr("offset_factor") or 1.0)),
                    part=at_offset(score_offset) if score_offset is not None else "0.f"),
        key=dict(on=_on(key_part is not None), part=at_key(key_part) if key_part is not None else "0.f",
                 score=keyed(score_keyed) if score_keyed is not None else "0.f",
                 raw=_on(key_gain is not None), factor=c(ir.Const("f32", k.attr("key_factor") or 1.0)),
                 gain=c(key_gain) if key_gain is not None else "1.f",
                 base=c(key_base) if key_base is not None else "0.f"),
        table_loads=_on(any(ir.loads_at(part, (offset_score.D.name, "kv")) for part in (score_offset, key_part)
                            if part is not None)),
        mask=dict(expr=c(mask) if mask is not None else "true",
                  streamed=cm(mask) if mask_reads else "false",
                  loads=_on(mask is not None and any(isinstance(n, ir.Load) for n in ir.walk(mask))),
                  # (false where the backward's build dropped its mask bits: compiler.mask_bits_trial)
                  loads_rows=_on(_loads_rows(mask) and k.attr("bwd_mask_bits") != 0),
                  divides=_on(mask_divides(mask))),
        kmask=dict(on=_on(kpart is not None), part=c(kpart) if kpart is not None else "false",
                   rests=[c(r) for r in krests] or ["false", "false"], arms=[arm(r) for r in krests] or [0, 0],
                   loads=_on(any(isinstance(n, ir.Load) for r in krests for n in ir.walk(r))),
                   by_keys=[_on(b is not None) for b in kints],
                   lo=[wide(b[0]) if b else "k0" for b in kints], hi=[wide(b[1]) if b else "k0 - 1" for b in kints]),
        kvalues=dict(on=_on(vpart is not None), type="int" if vpart is not None and vpart.ty == "i32" else "float",
                     part=c(vpart) if vpart is not None else "0",
                     mask=valued(key_values.valued(mask, vpart)) if vpart is not None else "false",
                     key_free=_on(vpart is not None and not ir.loads_at(key_values.valued(mask, vpart), ("kv", "kvf")))),
        qvalues=dict(on=_on(bool(qparts)), second=_on(len(qparts) > 1),
                     type=[vtype(p) for p in qparts] + ["int"] * (2 - len(qparts)),
                     part=[c(p) for p in qparts] + ["0"] * (2 - len(qparts)),
                     mask=valued(key_values.valued(mask, qparts, "q")) if qparts else "false"),
        bounds=dict(on=_on(kv_lo is not None), lo=wide(kv_lo) if kv_lo is not None else "k0",
                    hi=wide(k.func("kv_hi")) if kv_lo is not None else "k0 - 1",
                    keys_only=_on(kv_lo is not None and tile_keys is None),
                    tile_keys=(_on(True) if tile_keys is None else c(tile_keys)) if kv_lo is not None else "false"),
        tiles=dict(empty=ct(k.func("tile_empty")) if mask is not None else "false",
                   full=ct(k.func("tile_full")) if mask is not None else "true",
                   divisors=[(name, c(d)) for d, name in tile_divisors.items()]),
        summary=dict(exprs=[c(s.args[0]) for s in slots], on_kv=bits(lambda s: ir.TILE_REDUCTIONS[s.op][0] == "kv"),
                     on_tile=bits(lambda s: ir.TILE_REDUCTIONS[s.op][0] == "tile"),
                     per_b=bits(lambda s: ir.uses(s.args[0], "b")), per_h=bits(lambda s: ir.uses(s.args[0], "h")),
                     ranges=[_value_range(k, s) for s in slots],
                     rows=[_byte_row(s.args[0], k, c) for s in slots],
                     skip=c(_empty_by_position(k)) if mask is not None else "false"))


def _value_range(k: ir.Kernel, slot: ir.Op) -> tuple[str, str]:
    """A summary slot's (floor, ceiling) as C (mask_analysis.summary_saturation): the summary
    kernel stops reading a block once it has met both; the i32 range where none is known."""
    floor, ceiling = mask_analysis.summary_saturation(k, slot)
    return ("kdsl::kIntMin" if floor is None else str(floor)), ("kdsl::kIntMax" if ceiling is None else str(ceiling))


def _byte_row(e: ir.Expr, k: ir.Kernel, c) -> tuple[int, str]:
    """(kind, C pointer to the element at kv = 0 of row q) of a summary slot that is a 1-byte
    tensor's element at [..., q, kv] (mask_analysis.byte_slot): the summary kernel reads such
    blocks 16 bytes a lane (summarize_warp_bytes). (0, "nullptr") else."""
    kind, load = mask_analysis.byte_slot(k, e)
    if not kind:
        return 0, "nullptr"
    row = ir.Load(load.ty, load.tensor, load.indices[:-1] + (ir.Const("i32", 0),))
    return kind, f"reinterpret_cast<const unsigned char*>({c.captures[load.tensor].field}) + {c.linear_index(row)}"


def _empty_by_position(k: ir.Kernel) -> ir.Expr:
    """The disjuncts of tile_empty that read positions and dims only (causal's `k0 > q1`): on a
    block they prove empty, the kernels never read the whole-block summary, so the summary
    kernel need not read the data there."""
    def disjuncts(e):
        return disjuncts(e.args[0]) + disjuncts(e.args[1]) if isinstance(e, ir.Op) and e.op == "or" else [e]
    static = [d for d in disjuncts(k.func("tile_empty"))
              if not any(isinstance(n, ir.Load) or (isinstance(n, ir.Op) and n.op in ir.TILE_REDUCTIONS)
                         or (isinstance(n, ir.Var) and n.name in ("b", "h")) for n in ir.walk(d))]
    return functools.reduce(lambda x, y: ir.Op("bool", "or", (x, y)), static) if static else ir.Const("bool", False)


_MULTICAST = {"none": "kdsl::kMcastNone", "a": "kdsl::kMcastA", "b": "kdsl::kMcastB"}


def _gemm(k: ir.Kernel) -> Generated:
    cluster = k.attr("cluster")
    src = _env().get_template("fp8_gemm.cu.j2").render(
        version=__version__, source=k.source or "<string>", name=k.name, grouping=k.attr("grouping"),
        bm=k.attr("tile_m"), bn=k.attr("tile_n"), stages=k.attr("stages"), cluster=cluster,
        mcast=_MULTICAST[k.attr("multicast")], out_f32="true" if k.tensor("out").dtype == "f32" else "false",
        kind=GEMM_KINDS[k.attr("grouping")], accumulate="true" if k.attr("accumulate") else "false",
        tma_store="true" if k.attr("store") == "tma" else "false", stream_k="true" if k.attr("stream_k") else "false",
        sa_tma="true" if k.attr("scale_load") == "tma" else "false",
        sb_load=gemm_tiles.B_SCALE_LOADS.index(k.attr("b_scale_load")),
        tile_counter="true" if gemm_tiles.tile_counter(k.attr("grouping"), k.attr("tile_m"), cluster) else "false",
        work_slots=tiling.WORK_SLOTS,
        smem=k.attr("smem_bytes"),
        threads=k.attr("threads"), producer_regs=k.attr("producer_regs"), consumer_regs=k.attr("consumer_regs"),
        cluster_dims=f"__cluster_dims__({cluster}, 1, 1)" if cluster > 1 else "", entry=entry_name(k))
    return Generated(k.name, entry_name(k), src, ())
