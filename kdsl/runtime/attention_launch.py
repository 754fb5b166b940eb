"""Attention kernels as callables (mod.NAME(q, k, v, ...)): each call's arguments checked once
per signature, then the plan (grid, persistent items, split-KV combine, tile summary) launched
on the caller's current stream. launch.py holds what this shares with the FP8 GEMM."""
from __future__ import annotations

import math
import os
import sys
import warnings

from .. import ir
from ..errors import KdslError, LaunchError, LayoutWarning
from ..passes import affine_score, exp2_fold, index_floats, pipeline, streaming, tiling
from ..passes.exp2_fold import LOG2E
from ..semantics import eval_scalar
from . import arrays, attention_backward, geometry, head_pad, prebuild, splitkv, summary, torch_ops
from .bounds import check_capture_indices
from .programs import Program
from .driver import ArgPack
from .summary import TileSummary
from .tma import key_strides_fit
from .launch import KernelBase, Plan, _align, _attention_key, _l2_bytes, _ptr, _sm_count, refuse_overlap


# More query heads than this, each with fewer rows than there are heads, reads as a [batch, length,
# heads, head dim] tensor (FlashAttention's layout) passed where kdsl takes [batch, heads, length,
# head dim]: the call would run and attend over the heads. No model has nearly so many heads.
MANY_HEADS = 256
# k and v in any layout 4-D tensor maps take go to the Hopper kernel as they are (Program.key_maps,
# tma.KeyTiles): a KV cache's view costs no copy. KDSL_KEY_STRIDES=0 copies them row-major first and
# reads them by 3-D maps (the program before; as fast on row-major keys, H100 2026-12-05)
KEY_STRIDES = os.environ.get("KDSL_KEY_STRIDES", "1") != "0"


def _caller_level() -> int:
    """warnings.warn's stacklevel of the first frame outside kdsl: the user's call (the GPU
    and the interpreter paths reach validate through different depths)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package + os.sep):
        frame, level = frame.f_back, level + 1
    return level


class AttentionKernel(KernelBase):
    """mod.NAME(q, k, v, *captures, out=None, scale=None, **captures) -> out (or (out, lse))."""

    def __init__(self, kernel, arch=None):
        super().__init__(kernel, arch)
        self._backward_prebuilds: set = set()  # (head dims, capture grads, query split, copies) started
        self._backward_signatures: set = set()  # (q's shape, k's shape, Dv, capture grads) seen
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
        return self._derived(AttentionKernel(self.ir.with_attrs(**attrs), self.arch))

    def __call__(self, q, k, v, *captures, out=None, lse=None, scale=None, tile_summary=None, **named):
        if torch_ops.compiling():  # torch.compile traces the call: it records the torch op
            return torch_ops.attention(self, q, k, v, captures, named, out, lse, scale, tile_summary)
        q, k, v, caps = self.inputs(q, k, v, captures, named)
        if attention_backward.wants_grad(q, k, v, caps):
            self._prebuild_backward(q, k, v, caps)
            return attention_backward.attention_with_grad(self, q, k, v, caps, out, lse, scale, tile_summary)
        return self._run(q, k, v, caps, out, lse, scale, tile_summary)

    def inputs(self, q, k, v, captures, named) -> tuple:
        """(q, k, v, the captured tensors in declaration order), each row-major: an input in
        another layout (a transposed view) is copied (arrays.dense)."""
        caps = self._collect_captures(captures, named) if (captures or named or self.captures) else []
        return arrays.dense(q), self._key_input(k), self._key_input(v), [arrays.dense(c) for c in caps]

    def _key_input(self, x):
        """k or v as the call passes it on: as given where it is row-major or the kernel reads it
        in place (_reads_keys_in_place, the one rule), else a row-major copy (arrays.dense)."""
        if arrays.row_major(x):  # (the common case, and anything not an array: validation names it)
            return x
        return x if self._reads_keys_in_place(arrays.info(x, "k")) else arrays.dense(x)

    def _reads_keys_in_place(self, a) -> bool:
        """The one rule for k or v (its array info) in another layout: the Hopper kernel's
        tensor maps take its strides (tma.KeyTiles: a KV cache kept [B, N, H, D] and passed
        transposed, a slice of a longer cache, no copy of either). Both the call (_key_input)
        and validate follow it. A plan for the sm_80 kernel copies such k, v after all
        (Plan.copy_keys). Not under KDSL_KEY_STRIDES=0 (KEY_STRIDES)."""
        return (KEY_STRIDES and not self.on_host and a.device >= 0 and len(a.shape) == 4 and
                a.dtype == self.ir.tensor("q").dtype and key_strides_fit(a.shape, a.strides, a.dtype))

    def refuse_overlap(self, q, k, v, caps, out, lse) -> None:
        """A given out= or lse= must not share memory with q, k, v or a captured tensor."""
        inputs = [("q", q), ("k", k), ("v", v)] + [(t.name, c) for t, c in zip(self.captures, caps)]
        if out is not None:
            refuse_overlap(self.name, "out", out, inputs)
        if lse is not None:
            refuse_overlap(self.name, "lse", lse, inputs + ([("out", out)] if out is not None else []))

    def _prebuild_backward(self, q, k, v, caps) -> None:
        """The first call recorded for autograd with a backward program (head dims, captured
        tensors' gradients, query tiles split or not: the shapes decide; the mask's tiles copied
        or read per element: attention_backward.copies_fit) starts building it in a compiler
        process (prebuild.start_backward), which loss.backward() would otherwise compile then,
        after the forward."""
        grads = any(getattr(c, "requires_grad", False) for c in caps)
        signature = (q.shape, k.shape, v.shape[-1], grads)
        if signature in self._backward_signatures:
            return
        self._backward_signatures.add(signature)
        (B, H, M, D), (Hkv, N), Dv = q.shape, k.shape[1:3], v.shape[-1]
        D, Dv = head_pad.padded_dim(D), head_pad.padded_dim(Dv)  # (the head dims a call runs at)
        try:  # (a call the backward refuses is reported there, not here)
            query_split = attention_backward.splits(self, B, H, Hkv, M, N, D, Dv, q.device.index or 0)[1] > 1
        except Exception:  # noqa: BLE001
            query_split = False
        key = (D, Dv, grads, query_split, attention_backward.copies_fit(caps, N))
        if key not in self._backward_prebuilds:
            self._backward_prebuilds.add(key)
            prebuild.start_backward(self, *key)

    def _run(self, q, k, v, caps, out, lse, scale, tile_summary, keep_lse: bool = False):
        """The eager forward; keep_lse: return (out, lse) whether or not the kernel declares lse
        (autograd keeps it for the backward)."""
        if head_pad.needed(q, v):  # a head dim off the 16-column steps: through zero-padded copies
            return head_pad.run(self._run, self, q, k, v, caps, out, lse, scale, tile_summary, keep_lse)
        plan = self._plan_for(q, k, v, caps, out, lse, scale)
        if out is not None or lse is not None:
            self.refuse_overlap(q, k, v, caps, out, lse)
        if any(_ptr(caps[t]) & 15 for t in plan.stream_args):
            plan = self._plan_for(q, k, v, caps, out, lse, scale, stream=False)  # TMA needs 16-byte alignment
        torch_like = plan.framework == "torch"
        if plan.copy_keys:  # k or v in a layout only the Hopper kernel's tensor maps take
            k, v = arrays.dense(k), arrays.dense(v)
        if out is None:
            out = plan.new_out()
        if (self.has_lse or keep_lse) and lse is None:
            lse = plan.new_lse()
        if plan.loaded is None:
            return self._without_launch(plan, out, lse, keep_lse)
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
        return (out, lse) if self.has_lse or keep_lse else out

    def _backward(self, q, k, v, out, dout, lse, dlse, caps, scale, want_caps=()):
        """(dq, dk, dv, capture grads) from the forward's out and lse, and the gradients reaching
        them (dlse: None where the loss does not reach the lse; runtime/attention_backward.py);
        a capture's gradient where want_caps asks for it."""
        if head_pad.needed(q, v):
            return head_pad.backward(self._backward, self, q, k, v, out, dout, lse, dlse, caps, scale, want_caps)
        return attention_backward.backward(self, q, k, v, out, dout, lse, dlse, caps, scale, want_caps)

    # the backward kernel adds captured tensors' gradients when asked (KDSL_CAPTURE_GRADS)
    computes_capture_grads = True

    def tile_summary(self, q, k, v, *captures, scale=None, **named) -> TileSummary:
        """The runtime tile summary of a mask that reads data (e.g. document ids), computed
        now for calls with these shapes and these captured values, to pass as
        `tile_summary=` to each of them instead of recomputing it per call."""
        if torch_ops.compiling():  # no torch op makes one (yet): a compiled call computes its own
            raise LaunchError(f"{self.name}: tile_summary() cannot run inside torch.compile; call it before the "
                              f"compiled code and pass its result in, or leave tile_summary= out (each call then "
                              f"computes its summary)")
        q, k, v, caps = self.inputs(q, k, v, captures, named)
        if head_pad.needed(q, v):  # the calls run at the padded head dims (the summary reads no q, k, v)
            q, k, v = head_pad.blank(q), head_pad.blank(k), head_pad.blank(v)
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

    def _without_launch(self, plan, out, lse, keep_lse: bool = False):
        """Empty output, or no keys at all: what the kernel would write, without a launch."""
        if plan.work == "no_keys":
            arrays.fill(out, 0.0)
            if lse is not None:
                arrays.fill(lse, -math.inf)
        return (out, lse) if self.has_lse or keep_lse else out

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

    def bound_dims(self, q, k, v, caps) -> tuple[list, dict]:
        """(array infos of q, k, v and the captured tensors, the dims their shapes bind): an
        array of the wrong kind, dtype or rank, or a shape that disagrees with the
        declaration, is refused here."""
        kern = self.ir
        elem = kern.tensor("q").dtype
        infos = [self._info(x, n, elem, 4) for x, n in ((q, "q"), (k, "k"), (v, "v"))]
        infos += [self._info(x, t.name, t.dtype, len(t.shape)) for t, x in zip(self.captures, caps)]
        dims: dict = {}
        for t, a in zip([kern.tensor(n) for n in ("q", "k", "v")] + self.captures, infos):
            self._bind(t, a.shape, dims)
        return infos, dims

    def validate(self, q, k, v, caps, out, lse, scale):
        """Every check that does not depend on the device: (array infos, dims, scale)."""
        kern = self.ir
        elem = kern.tensor("q").dtype
        infos, dims = self.bound_dims(q, k, v, caps)
        for a, n in zip(infos, ["q", "k", "v"] + [t.name for t in self.captures]):
            if n not in ("k", "v") or not self._reads_keys_in_place(a):
                self._contiguous(a, n)
        B, H, M, D = infos[0].shape
        Hkv, N = infos[1].shape[1], infos[1].shape[2]
        if H > MANY_HEADS and M < H:
            warnings.warn(f"{self.name}: q has {H} heads of {M} rows each; kdsl takes q, k and v as [batch, heads, "
                          f"length, head dim]: a [batch, length, heads, head dim] tensor (FlashAttention's layout) "
                          f"goes in as x.transpose(1, 2)", LayoutWarning, stacklevel=_caller_level())
        if (H % Hkv if Hkv else H):
            raise LaunchError(f"{self.name}: q has {H} heads, not a multiple of k/v's {Hkv} heads")
        if self.index_floats and max(M, N) > index_floats.MAX_LENGTH:
            raise LaunchError(f"{self.name}: sequence length {max(M, N)} exceeds {index_floats.MAX_LENGTH}, the longest "
                              f"for which this kernel's score converts positions to float exactly")
        Dv = infos[2].shape[3]
        head_pad.refuse_out_of_range(self.name, D, Dv)  # (a dim off the 16-column steps came padded)
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

    def _query_warpgroups(self, B: int, H: int, Hkv: int, M: int, N: int, D: int, Dv: int,
                          sms: int) -> int | None:
        """How many consumer warpgroups the Hopper kernel takes for a call's rows (M, times
        the query heads of a k/v head when they fold into rows), where fewer than the tiling's
        serve them better; None: the tiling's own. One for at most 64 rows (decode: a second
        only multiplies rows that do not exist; B=1 H=16 M=1 N=4096 D=128 on an H100: 27.3 ->
        25.5 us, bench/NOTES.md), two where 192-row tiles pad short rows or are too few to
        fill the GPU without splitting the keys (geometry.forward_query_warpgroups). Not when
        the user fixed the warpgroups, and not on the sm_80 kernel."""
        if self.ir.attr("consumers") is not None:
            return None
        lowered = self._lowered(D, Dv)
        widest = lowered.attr("consumers")
        if lowered.attr("kernel") != "wgmma" or widest == 1:
            return None
        folds = H > Hkv and pipeline.heads_fold_into_rows(lowered)
        rows = M * (H // Hkv if folds else 1)
        if rows <= 64:
            return 1
        mask = lowered.func("mask")
        row_mask = mask is not None and any(ir.uses(mask, x) for x in ("q", "qf"))
        items = -(-rows // lowered.attr("tile_m")) * B * (Hkv if folds else H)
        keys_split = splitkv.kv_splits(items, -(-N // lowered.attr("tile_n")), sms) > 1
        fewer = geometry.forward_query_warpgroups(rows, widest, row_mask, keys_split)
        return fewer if fewer < widest else None

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
        consumers = self._query_warpgroups(B, H, Hkv, M, N, D, Dv, _sm_count(device))
        lk = self._lowered(D, Dv, consumers)  # which program the call needs: decided before building
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
        # The streamed captures (passes/streaming.py) go by TMA when their rows are whole 16-byte
        # units (and, checked per call, their pointers are 16-byte aligned); else the program that
        # loads them per element runs.
        stream_names = streaming.streamed(lk) if tma else ()
        stream_args = tuple(next(i for i, c in enumerate(self.captures) if c.name == n) for n in stream_names)
        if not stream or any(infos[3 + t].shape[-1] * arrays.itemsize(self.captures[t].dtype) % 16
                             for t in stream_args):
            stream_args = ()
        # A score affine in the key position takes its row max on qk + slope * col, which needs
        # a positive factor scale_log2 * F (passes/affine_score.py): another scale runs the
        # program that computes the score as written.
        affine = not (tma and affine_score.needs_positive_scale(lk) and s <= 0)
        program = Program(split_kv=split_kv, stream=bool(stream_args) or not stream_names, affine=affine,
                          key_maps=tma and KEY_STRIDES)
        built, loaded = self._load(D, device, Dv, consumers, program)
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
        # Parameter order of the generated entry: q k v [the streamed captures' maps] out lse,
        # B H Hkv M N, scale_log2 scale, capture pointers, capture-only dims, the tile summary.
        # Pointers are written per call. The wgmma kernel takes q, k and v (and the streamed
        # captures) as TMA tensor maps, re-encoded when their pointers change. The summary
        # kernel takes the parameters from B on.
        head = ["tmap"] * (3 + len(stream_names)) if tma else ["ptr"] * 3
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
                                          summary.pack(B, H, Hkv, M, N, s_kernel * LOG2E, s, ncap,
                                                       [dims[n] for n in extra_dims]),
                                          infos[0].framework, device)
        combine = None
        if tma:  # then splits, the split results' two pointers, the work counter (per call), the head
            # group, the split counts (per call)
            order += [len(kinds) + 1, len(kinds) + 2, len(kinds) + 3, len(kinds) + 5]
            # Head groups balance items of unequal length (a mask's); without a mask every item
            # is as long as the next, and head by head kept plain at 2k 2.7 % faster (H100).
            group = 1 if lk.func("mask") is None else geometry.attention_head_group(
                B * H, -(-M // lk.attr("tile_m")), _sm_count(device),
                N * (D + Dv) * arrays.itemsize(elem), _l2_bytes(device), reads_data=layout is not None)
            kinds += ["i32", "ptr", "ptr", "ptr", "i32", "ptr"]
            values += [splits, None, None, None, group, None]
            if splits > 1:
                combine = splitkv.CombineLaunch(loaded, built.generated.entry + "_combine", splits, B * H * M, Dv,
                                                infos[0].framework, device)
        pack = ArgPack(kinds, values, order)
        maps, sources, map_only = (), None, None
        if tma:
            from .tma import KeyTiles, RowTiles, StreamTiles
            bm, bn = lk.attr("tile_m"), lk.attr("tile_n")
            if program.key_maps:
                kv_maps = tuple(KeyTiles(pack, n, elem, infos[n].shape, infos[n].strides, bn) for n in (1, 2))
            else:
                kv_maps = (RowTiles(pack, 1, elem, B * Hkv, N, D, bn), RowTiles(pack, 2, elem, B * Hkv, N, Dv, bn))
            maps = (RowTiles(pack, 0, elem, B * H, M, D, bm), *kv_maps)
            maps += tuple(StreamTiles(pack, 3 + n, self.captures[t].dtype, infos[3 + t].shape, bm)
                          for n, t in enumerate(stream_args))
            if stream_args:  # q, k, v feed maps only; a streamed capture's pointer is a parameter too
                sources, map_only = (0, 1, 2) + tuple(5 + t for t in stream_args), 3
        return Plan(loaded, grid, (lk.attr("threads"), 1, 1), pack, infos[0].framework, device, out_shape, elem,
                    chunks=_batch_offsets(chunks, elem, H, Hkv, M, N, D, Dv, ncap) if len(chunks) > 1 else (),
                    maps=maps, map_sources=sources, map_only=map_only, stream_args=stream_args,
                    summary=tiles, combine=combine, q_sign=q_sign,
                    copy_keys=not program.key_maps and not all(map(arrays.is_contiguous, infos[1:3])),
                    dynamic=persistent,
                    # items merge themselves where no item can be all masked (no mask) and the
                    # counts fit a stream's slot (attention_wgmma.cuh, merge_if_last);
                    # KDSL_SPLIT_COMBINE=1 runs the combine kernel instead, for A/B timing
                    self_merge=combine is not None and lk.func("mask") is None
                    and os.environ.get("KDSL_SPLIT_COMBINE") != "1"
                    and items // splits * lk.attr("consumers") <= tiling.SPLIT_SLOT)


def _batch_offsets(chunks, elem, H, Hkv, M, N, D, Dv, ncap):
    """(grid z, byte offsets of q k v out lse and the captures) for each batch chunk."""
    e = arrays.itemsize(elem)
    return tuple((n, (b0 * H * M * D * e, b0 * Hkv * N * D * e, b0 * Hkv * N * Dv * e, b0 * H * M * Dv * e,
                      b0 * H * M * 4) + (0,) * (ncap + 1)) for b0, n in chunks)
