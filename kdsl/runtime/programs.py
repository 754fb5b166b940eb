"""Which program of an attention kernel's one generated source a call runs.

The Hopper attention template compiles to a few programs that differ only in NVRTC defines:
the one almost every call runs, and variants that some calls need (the split-KV epilogue and
its combine kernel, per-element loads of a capture TMA cannot stream, the score as written
where the affine form's factor would not be positive). A Program names one; its options are
part of the build's cache key, so each is built and cached on its own.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from ..errors import KdslError
from ..passes import affine_score

SPLIT_KV_OPTION = "-DKDSL_SPLIT_KV=1"  # templates/attention_wgmma.cu.j2
NO_STREAM_OPTION = "-DKDSL_STREAM_CAPTURES=0"  # templates/attention_variant.cu.j2
NO_AFFINE_OPTION = "-DKDSL_AFFINE_SCORE=0"  # templates/attention_variant.cu.j2
SINGLE_BUFFER_OPTION = "-DKDSL_BWD_BUFFERS=1"  # attention_bwd.cuh, where two buffers do not fit
CAPTURE_GRADS_OPTION = "-DKDSL_CAPTURE_GRADS=1"  # templates/attention_backward.cu.j2
QUERY_SPLIT_OPTION = "-DKDSL_BWD_QUERY_SPLIT=1"  # attention_common.cuh
KEY_MAPS_OPTION = "-DKDSL_KEY_MAPS_4D=1"  # attention_wgmma.cuh


@dataclass(frozen=True)
class Program:
    split_kv: bool = False  # each item writes one key range's partial result; `<entry>_combine` (runtime/splitkv.py)
    stream: bool = True     # a streamed capture (passes/streaming.py) by TMA (the backward's: by cp.async);
                            # False: loaded per element
    affine: bool = True     # a score affine in the key position in that form (passes/affine_score.py);
                            # False: as written, for a scale that makes the form's factor F <= 0
    backward: bool = False  # the backward kernel (emit_backward.backward_plan), a source of its own
    capture_grads: bool = False  # the backward also adds the captured tensors' gradients
    query_split: bool = False  # the backward's CTAs may split their query tiles (AttnArgs::query_splits)
    key_maps: bool = False  # the Hopper forward reads k and v by 4-D tensor maps of their own strides
                            # (tma.KeyTiles: any layout); False: 3-D maps of row-major arrays

    def options(self, lowered: ir.Kernel, arch: str) -> list[str]:
        """The NVRTC defines of this program of `lowered` (none where a flag does not apply)."""
        options = []
        if self.backward:
            if lowered.kind != "attention":
                raise KdslError(f"{lowered.name}: only attention kernels have a backward kernel")
            from ..codegen.emit_backward import backward_plan
            from ..passes.target import get_target
            d = lowered.attr("head_dim")
            if backward_plan(d, lowered.attr("value_dim") or d, get_target(arch)).buffers == 1:
                options.append(SINGLE_BUFFER_OPTION)
            if self.capture_grads:
                options.append(CAPTURE_GRADS_OPTION)
            if self.query_split:
                options.append(QUERY_SPLIT_OPTION)
            if not self.stream and lowered.attr("stream_capture"):  # the mask's tiles copied by cp.async
                options.append(NO_STREAM_OPTION)
            return options
        if self.split_kv:
            if lowered.kind != "attention" or lowered.attr("kernel") != "wgmma":
                raise KdslError(f"{lowered.name}: split-KV is a Hopper attention kernel's (sm_90a), "
                                f"not this {arch} build's")
            options.append(SPLIT_KV_OPTION)
        if not self.stream and lowered.attr("stream_capture"):
            options.append(NO_STREAM_OPTION)
        if self.key_maps and lowered.attr("kernel") == "wgmma":
            options.append(KEY_MAPS_OPTION)
        if not self.affine and affine_score.needs_positive_scale(lowered):
            options.append(NO_AFFINE_OPTION)
        return options


DEFAULT = Program()
