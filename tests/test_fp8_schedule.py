"""The FP8 GEMM's persistent tile scheduler (kdsl/codegen/include/kdsl/fp8_gemm_sched.cuh),
compiled for the host with g++ (tests/fp8_sched/ emulates the few CUDA builtins it uses and
runs its producer warp as 32 threads in step): over random problems, every CTA's units
together cover each output tile (grouped contiguous: each (tile, group present) pair;
masked: each tile of each group's count) exactly once, flag exactly the tiles whose rows may
all be written, and the two CTAs of a cluster get units sharing their multicast tile, in
step. Grouped contiguous runs both by the fixed stride and with tiles from a counter (with and
without the next tile opened during a tile's last pass), after which the counters must be zero."""
import random
import shutil
import subprocess
from collections import Counter

import pytest

from conftest import ROOT

HERE = ROOT / "tests" / "fp8_sched"
MCAST = {"none": 0, "a": 1, "b": 2}


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("needs g++ (C++20) to build the scheduler for the host")
    exe = tmp_path_factory.mktemp("sched") / "sched"
    subprocess.run(["g++", "-std=c++20", "-O0", "-pthread", f"-I{HERE}", f"-I{ROOT / 'kdsl/codegen/include'}",
                    str(HERE / "host.cpp"), "-o", str(exe)], check=True, capture_output=True)

    def run(cases):
        """cases: (kind, bm, bn, mcast, M, N, G, raster, grid, ids[, sk_tiles, nk[, counter]]) ->
        per case, per CTA, units (m0, n0, g, full, kb0, kb1, part, peers). counter (contiguous
        without multicast): 0 the fixed stride, 1 a tile counter, 2 a counter with each tile's
        successor opened during its last pass."""
        lines = [" ".join(map(str, (*c[:9], *(c[10:12] if len(c) > 10 else (0, 1)), c[12] if len(c) > 12 else 0,
                                    *c[9]))) for c in cases]
        out = subprocess.run([str(exe)], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True)
        rows = out.stdout.split("\n")
        result, i = [], 0
        for c in cases:
            grid = c[8]
            result.append([[tuple(map(int, u.split(","))) for u in rows[i + j].split()] for j in range(grid)])
            i += grid
        return result
    return run


def _expected(kind, bm, bn, M, N, G, ids):
    """{(m0, n0, g): full} the units must cover."""
    want = {}
    ntiles = range(0, N, bn)
    if kind == 0:
        return {(m0, n0, 0): 1 for m0 in range(0, M, bm) for n0 in ntiles}
    if kind == 2:
        for g, c in enumerate(ids):
            rows = max(0, min(c, M))
            want.update({(m0, n0, g): int(m0 + bm <= rows) for m0 in range(0, rows, bm) for n0 in ntiles})
        return want
    for m0 in range(0, M, bm):
        tile = ids[m0:m0 + bm]
        for g in sorted({x for x in tile if 0 <= x < G}):
            want.update({(m0, n0, g): int(all(x == g for x in tile)) for n0 in ntiles})
    return want


def _random_case(rng, kind, cluster):
    bm = rng.choice([64, 128, 192] + ([256] if kind == 0 else []))
    bn = rng.choice([48, 160])
    mcast = "none" if cluster == 1 else rng.choice(["a", "b"] if kind == 0 else ["a"])
    G = 1 if kind == 0 else rng.randint(1, 5)
    M = rng.choice([1, bm - 1, bm, bm + 1, rng.randint(1, 6 * bm), rng.randint(6 * bm, 20 * bm)])
    N = rng.choice([1, bn, bn + 1, rng.randint(1, 8 * bn), rng.randint(8 * bn, 24 * bn)])
    if cluster == 2:  # the tiling pass pairs CTAs only along an axis with an even tile count
        if mcast == "a" and -(-N // bn) % 2:
            N += bn
        if mcast == "b" and -(-M // bm) % 2:
            M += bm
    if kind == 1:
        seg = rng.choice(["sorted", "random", "aligned"])
        if seg == "random":
            ids = [rng.randint(-1, G + 1) for _ in range(M)]
        else:
            ids = sorted(rng.randint(0, G - 1) for _ in range(M))
            if seg == "aligned":
                ids = [ids[(m // bm) * bm] for m in range(M)]
            for m in rng.sample(range(M), min(M, rng.randint(0, 20))):
                ids[m] = -1
    elif kind == 2:
        ids = [rng.choice([0, 1, M, M + 7, -3, rng.randint(0, M)]) for _ in range(G)]
    else:
        ids = []
    raster = rng.choice([2, 8, 16]) if cluster == 2 else rng.choice([1, 3, 8, 16])
    grid = rng.choice([1, 2, 4, 7, 16]) * cluster
    counter = rng.choice([0, 1, 2]) if kind == 1 and cluster == 1 else 0
    return (kind, bm, bn, MCAST[mcast], M, N, G, raster, grid, ids, 0, 1, counter)


@pytest.mark.parametrize("kind", [0, 1, 2], ids=["dense", "contiguous", "masked"])
def test_units_cover_every_tile_once_and_cluster_pairs_share_their_tile(scheduler, kind):
    rng = random.Random(20261122 + kind)
    cases = [_random_case(rng, kind, cluster) for cluster in (1, 2) for _ in range(60)]
    assert kind != 1 or {c[12] for c in cases} == {0, 1, 2}
    for case, ctas in zip(cases, scheduler(cases)):
        kind_, bm, bn, mcast, M, N, G, raster, grid, ids = case[:10]
        units = [u for cta in ctas for u in cta]
        got = Counter(u[:3] for u in units)
        want = _expected(kind, bm, bn, M, N, G, ids)
        assert set(got) == set(want) and all(n == 1 for n in got.values()), case
        assert all(want[u[:3]] == u[3] and u[4:] == (0, 1, 0, 0) for u in units), case
        if kind == 1:  # a tile's group passes come one after another, in increasing group order
            for cta in ctas:
                for u, v in zip(cta, cta[1:]):
                    assert (u[0], u[1]) != (v[0], v[1]) or u[2] < v[2], case
        if mcast:
            for c in range(0, grid, 2):
                first, second = ctas[c], ctas[c + 1]
                assert len(first) == len(second), case
                for u, v in zip(first, second):
                    shared = (0, 2) if mcast == MCAST["a"] else (1, 2)   # (m0, g) or (n0, g)
                    assert [u[i] for i in shared] == [v[i] for i in shared] and u != v, case


WHOLE, FINALISE, PARTIAL = 0, 1, 2


def test_stream_k_splits_the_last_waves_in_equal_k_ranges(scheduler):
    """Dense stream-K (gemm_tiles.sk_tiles tiles shared out): every tile's K blocks are covered
    exactly once; a split tile has one finaliser (its K block 0, its CTA's last unit) whose
    peers are the next CTAs, each holding one partial piece of it as its first shared unit;
    every CTA gets the same number of whole tiles and K blocks within one of each other."""
    from kdsl.passes import gemm_tiles
    rng = random.Random(20261125)
    cases = []
    while len(cases) < 80:
        bm, bn = rng.choice([64, 128, 256]), rng.choice([48, 160])
        M, N, grid, nk = rng.randint(1, 30 * bm), rng.randint(1, 20 * bn), rng.choice([1, 2, 3, 7, 16, 132]), \
            rng.choice([1, 2, 3, 5, 56])
        tiles = -(-M // bm) * -(-N // bn)
        sk = gemm_tiles.sk_tiles(tiles, grid)
        if sk:
            cases.append((0, bm, bn, 0, M, N, 1, rng.choice([1, 3, 8]), grid, [], sk, nk))
    for case, ctas in zip(cases, scheduler(cases)):
        _, bm, bn, _, M, N, _, _, grid, _, sk, nk = case
        tiles = -(-M // bm) * -(-N // bn)
        assert (tiles - sk) % grid == 0 and sk * nk >= grid, case
        pieces = {}
        for c, units in enumerate(ctas):
            for i, (m0, n0, g, full, kb0, kb1, part, peers) in enumerate(units):
                assert 0 <= kb0 < kb1 <= nk and full == 1 and g == 0, case
                pieces.setdefault((m0, n0), []).append((kb0, kb1, part, peers, c, i))
        assert len(pieces) == tiles, case
        for tile, ps in pieces.items():
            ps.sort()
            assert [p[:2] for p in ps] == list(zip([0] + [p[1] for p in ps[:-1]], [p[1] for p in ps])), case
            assert ps[-1][1] == nk, case
            if len(ps) == 1:
                assert ps[0][2] == WHOLE, case
                continue
            (_, _, part, peers, c, i), rest = ps[0], ps[1:]
            assert part == FINALISE and peers == len(rest) and i == len(ctas[c]) - 1, case
            assert [p[4] for p in rest] == list(range(c + 1, c + 1 + peers)), case
            assert all(p[2] == PARTIAL for p in rest), case
        spans = [sum(u[5] - u[4] for u in units) for units in ctas]
        assert max(spans) - min(spans) <= 1, case
        for units in ctas:  # a CTA's partial piece is its first shared unit
            firsts = [i for i, u in enumerate(units) if u[6] == PARTIAL]
            assert len(firsts) <= 1, case
            if firsts:
                assert all(u[4:6] == (0, nk) and u[6] == WHOLE for u in units[:firsts[0]]), case
