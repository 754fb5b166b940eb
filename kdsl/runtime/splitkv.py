"""Split-KV for decode-like shapes (flash-decoding) on the Hopper attention kernel.

When the (b, h, q tile) work items alone would leave most SMs idle (M = 1 decode with a
small batch), the keys of each item are cut into ranges, one work item each: the kernel
writes each range's normalised O (fp32) and lse into a scratch buffer, and they are merged
by their lse. Without a mask the items merge themselves in the kernel (the warpgroup that
finishes an item's last split: AttnArgs::split_done, launch.py's Plan.self_merge); under a
mask, and while the stream is captured into a CUDA graph, a second kernel
(`attention_combine_splits` in attention_splits.cuh) merges them, launched as the first one's
programmatic dependent so that its launch overlaps the first kernel's run. Everything runs
on the caller's stream, so a call stays capturable in a CUDA graph.
"""
from __future__ import annotations

from . import arrays
from .driver import ArgPack, WarpKernel


def kv_splits(items: int, kv_tiles: int, sms: int) -> int:
    """How many key ranges per work item: 1 unless the items fill under half the SMs; then
    about one CTA per SM, each range at least one kv tile, none empty."""
    if items * 2 > sms or kv_tiles < 2:
        return 1
    want = max(2, min(kv_tiles, sms // items))
    chunk = -(-kv_tiles // want)
    return -(-kv_tiles // chunk)


class CombineLaunch:
    """The combine kernel of one plan (one warp per output row), and the allocator of the
    split results it reads: every split's O, then every split's lse, in one fp32 buffer (one
    allocation a call, not two: ~3 us of host time a decode step)."""

    def __init__(self, loaded, entry: str, splits: int, rows: int, head_dim: int, framework: str, device: int):
        pack = ArgPack(["ptr"] * 4 + ["i32"] * 2, [None] * 4 + [rows, splits], [0, 1, 2, 3])
        self.kernel = WarpKernel(loaded.module, entry, rows, pack, dependent=True)
        self.new_parts = arrays.allocator(framework, (splits * rows * (head_dim + 1),), "f32", device)
        self.lse_offset = splits * rows * head_dim * 4  # bytes: where the lse follow the O rows

    def part_pointers(self, parts_ptr: int) -> tuple[int, int]:
        """(O, lse) pointers into a buffer from new_parts()."""
        return parts_ptr, parts_ptr + self.lse_offset

    def run(self, stream: int, part_o: int, part_lse: int, out: int, lse: int) -> None:
        self.kernel.run(stream, [part_o, part_lse, out, lse])
