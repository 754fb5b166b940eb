"""The runtime tile summary of a mask that reads data (kdsl/attention_summary.cuh).

Mask analysis bounds e.g. `doc_q[b, q]` over a tile by its min and max there, (qmin e) and
(qmax e); a small kernel computes them for every tile, on the caller's stream, right before
the attention kernel (so a call stays capturable in a CUDA graph), and the attention kernel
skips the tiles they prove empty. `TileSummary` is the precomputed form a user may pass to
several calls that share the same captured ids: `kern.tile_summary(q, k, v, ...)`.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from ..errors import LaunchError
from ..passes import mask_analysis
from . import arrays
from .driver import ArgPack, WarpKernel


SUMMARY_WARPS = 8  # attention_summary.cuh kSummaryWarps: warps a block, and per whole-block entry read by element


@dataclass(frozen=True)
class Layout:
    """Sizes the buffer exactly as attention_summary.cuh lays it out: per slot, one int2
    (min, max) per (b if the slot reads b, h if it reads h, tile: a q tile, a kv tile, or a
    (q tile, kv tile) block)."""

    entries: tuple[int, ...]  # per slot
    tile_m: int
    tile_n: int
    warps: int = 0  # the summary kernel's: attention_summary.cuh summary_warps, over the slots

    @staticmethod
    def of(lowered: ir.Kernel, B: int, H: int, M: int, N: int, tiles: tuple[int, int] | None = None) -> "Layout | None":
        """The layout on the kernel's tiles (tile_m x tile_n), or on `tiles` (the backward's)."""
        slots = mask_analysis.summary_slots(lowered)
        if not slots:
            return None
        bm, bn = tiles or (lowered.attr("tile_m"), lowered.attr("tile_n"))
        entries, warps = [], 0
        for s in slots:
            e, axis = s.args[0], ir.TILE_REDUCTIONS[s.op][0]
            tiles = {"q": -(-M // bm), "kv": -(-N // bn), "tile": -(-M // bm) * -(-N // bn)}[axis]
            entries.append((B if ir.uses(e, "b") else 1) * (H if ir.uses(e, "h") else 1) * tiles)
            # a warp an entry, a block of SUMMARY_WARPS for a whole-block slot read element by
            # element (not a 1-byte one: attention_summary.cuh entry_warps); padded to blocks
            per_entry = SUMMARY_WARPS if axis == "tile" and not mask_analysis.byte_slot(lowered, e)[0] else 1
            warps += -(-entries[-1] * per_entry // SUMMARY_WARPS) * SUMMARY_WARPS
        return Layout(tuple(entries), bm, bn, warps)

    @property
    def ints(self) -> int:
        return 2 * sum(self.entries)


def pack(B: int, H: int, Hkv: int, M: int, N: int, scale_log2: float, scale: float, ncap: int, dims) -> ArgPack:
    """The summary kernel's parameters (attention_variant.cu.j2, NAME_summary): B H Hkv M N,
    scale_log2 scale, the capture pointers, the capture-only dims, the buffer; the pointers are
    written per call (SummaryLaunch.run)."""
    dims = list(dims)
    kinds = ["i32"] * 5 + ["f32"] * 2 + ["ptr"] * ncap + ["i32"] * len(dims) + ["ptr"]
    return ArgPack(kinds, [B, H, Hkv, M, N, scale_log2, scale] + [None] * ncap + dims + [None],
                   list(range(7, 7 + ncap)) + [len(kinds) - 1])


class SummaryLaunch:
    """The summary kernel of one plan (Layout.warps warps) and a buffer allocator."""

    def __init__(self, loaded, entry: str, layout: Layout, pack: ArgPack, framework: str, device: int):
        self.kernel = WarpKernel(loaded.module, entry, layout.warps, pack)
        self.layout = layout
        self.new_buffer = arrays.allocator(framework, (layout.ints,), "i32", device)

    def run(self, stream: int, capture_ptrs, buffer_ptr: int) -> None:
        self.kernel.run(stream, [*capture_ptrs, buffer_ptr])


@dataclass(frozen=True)
class TileSummary:
    """A tile summary computed ahead of the calls that use it (`kern.tile_summary(...)`).
    Valid for calls with the same shapes and the same captured values it was made from."""

    kernel: str
    layout: Layout
    buffer: object  # int32 array on the GPU, in the caller's framework

    @staticmethod
    def expect(kernel_name: str, given) -> "TileSummary":
        """`given` as a tile_summary= argument, or the error a call reports for it."""
        if not isinstance(given, TileSummary):
            raise LaunchError(f"{kernel_name}: tile_summary must be what {kernel_name}.tile_summary(q, k, v, ...) "
                              f"returns, got {type(given).__name__}")
        return given

    def check(self, kernel_name: str, layout: Layout | None) -> None:
        if layout is None:
            raise LaunchError(f"{kernel_name}: tile_summary= given, but this kernel's mask needs no tile summary")
        if self.kernel != kernel_name or self.layout != layout:
            raise LaunchError(f"{kernel_name}: tile_summary was made for kernel '{self.kernel}' with other shapes "
                              f"({self.layout.entries} entries per slot, tiles {self.layout.tile_m}x"
                              f"{self.layout.tile_n}); this call needs {layout.entries} on "
                              f"{layout.tile_m}x{layout.tile_n}: make it with the same q, k, v shapes")
