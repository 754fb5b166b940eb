"""A score's key block the same over a whole kv tile, read once a tile instead of per element.

`bias[h, i // 128, j // 128]` (a bias per block of queries and keys) reads, per element, the
table entry of its key block `j // 128`. The kernels' kv tiles start at multiples of tile_n, so
where the divisor c is a multiple of tile_n no tile straddles a block: every key of a tile has
the same `kv // c`, that of any one of them. The score then divides a key of the tile that is
the same for all of a thread's elements (var kvt: the thread's first column, k0 + 2t, or k0;
attention_wgmma.cuh / attention_mma.cuh pass it as kvf0) instead of each element's kv, and the
load's address no longer depends on the column: NVVM loads once a row a tile where it loaded
once an element (block_bias_2d at head dim 128: 134 global loads in the kernel before).

Only in score_log2 as the kernel computes it per element (not where the affine, offset or key
table passes took the score apart: they read kv themselves), only `kv // c` for a constant c
that tile_n divides (c >= 8 > 2t keeps kvt's block the tile's). The backward and the tile
predicates read the score and mask as written. An IR file carrying such a score lowers as it
was written out (affine_score.py leaves a score reading kvt alone; a tile_n that no longer
divides c is refused).
"""
from __future__ import annotations

from .. import ir
from ..errors import KdslError

KVT = ir.Var("i32", "kvt")  # a key of the tile, the same for all of a thread's elements
SPLIT_PARTS = ("score_slope", "score_offset", "key_part")  # another pass took the score apart


def run(k: ir.Kernel) -> ir.Kernel:
    score, bn = k.func("score_log2"), k.attr("tile_n")
    if k.kind != "attention" or score is None or not bn:
        return k
    if not _kvt_by_tile(score, bn):  # an IR file's score_log2, written for another tile
        raise KdslError(f"kernel '{k.name}': score_log2 reads kvt (a key of the kv tile) outside `kvt // c` with c "
                        f"a multiple of tile_n = {bn}, at least 8: a tile would straddle c's blocks (write kv there)")
    if any(k.func(f) is not None for f in SPLIT_PARTS):
        return k
    blocked = _by_tile(score, bn)
    return k if blocked == score else k.with_func("score_log2", blocked)


def _kvt_by_tile(e: ir.Expr, bn: int) -> bool:
    """Whether every kvt in e is the dividend of a `// c` that tile width bn keeps whole."""
    nodes = list(ir.walk(e))
    blocked = [n for n in nodes if isinstance(n, ir.Op) and n.op == "floordiv" and n.args[0] == KVT
               and _tile_multiple(n.args[1], bn)]
    return sum(n == KVT for n in nodes) == len(blocked)


def _by_tile(e: ir.Expr, bn: int) -> ir.Expr:
    if isinstance(e, ir.Op):
        if e.op == "floordiv" and _is_kv(e.args[0]) and _tile_multiple(e.args[1], bn):
            return ir.Op("i32", "floordiv", (KVT, e.args[1]))
        return ir.Op(e.ty, e.op, tuple(_by_tile(a, bn) for a in e.args))
    if isinstance(e, ir.Load):
        return ir.Load(e.ty, e.tensor, tuple(_by_tile(i, bn) for i in e.indices))
    return e


def _is_kv(e: ir.Expr) -> bool:
    return isinstance(e, ir.Var) and e.name == "kv"


def _tile_multiple(e: ir.Expr, bn: int) -> bool:
    return isinstance(e, ir.Const) and isinstance(e.value, int) and e.value >= 8 and e.value % bn == 0
