// kdsl/fp8_gemm_sched.cuh — which output tiles a CTA of the persistent FP8 GEMM computes, in
// which order; run by the producer warp alone (the math warpgroups follow the units it
// publishes in the ring, see fp8_gemm_wgmma.cuh).
//
// A unit is one pass of the whole K range over one BM x BN output tile: (m0, n0) of the tile,
// g the group whose B it multiplies (KIND 1 and 2; for KIND 2 also the group of A and out),
// and whether every row of the tile that exists may be written (then the epilogue stores it
// with TMA; else row by row).
//
// Tiles are numbered linearly and CTA i takes tiles i, i + gridDim.x, ... . The linear order
// is rasterised for L2 reuse: groups of `raster` tiles along one axis, the other axis
// walked inside a group, so that the CTAs running together share A and B tiles. With a
// 2-CTA cluster, CTAs 2c and 2c + 1 take consecutive indices, which the raster makes share
// the multicast operand: the same M tile (MCAST_A: groups along N) or the same N tile
// (MCAST_B: groups along M). The tiling pass only picks a cluster when the paired axis has
// an even tile count, so every pair shares it and both CTAs see the same units, in step.
//
// Stream-K (C::STREAM_K: KIND 0, no cluster; sk_tiles > 0): the last sk_tiles tiles of the linear order are
// not given out whole. Their (tile, K block) iterations, sk_tiles * nk of them, are cut into
// gridDim.x equal ranges, CTA c taking range c after its whole tiles (the host makes the
// whole tiles a multiple of the grid, so every CTA gets there together). A range covers the
// end of one tile, whole tiles, the start of another: units with a K block range [kb0, kb1).
// The unit holding a tile's K block 0 finalises it (it comes last in its CTA's range, so
// last in time): it adds the fp32 partial totals the other pieces' CTAs left (each CTA holds
// at most one such piece, its first, so one workspace slot a CTA) and stores the tile.
//
// Kinds: 0 dense: the num_m x num_n tiles. 1 grouped contiguous: the same tiles; each makes
// one pass per group id present among its rows (ids outside [0, G) are padding), in
// increasing order. A tile holding a group boundary costs its CTA a second pass, so with
// C::TILE_COUNTER (and a counter from the host, p.work) a CTA near the end of a tile's passes
// takes the next tile from a shared counter instead of its fixed stride: the boundaries'
// passes no longer pile up on the CTAs that the stride gave them to. 2 grouped masked: the
// tiles of group 0 (ceil(rows_0 / BM) x num_n, rows_g = min(count[g], M)), then group 1's, ...
#pragma once
#include "kdsl/hopper.cuh"
#include "kdsl/work_counter.cuh"

namespace kdsl {

struct Fp8GemmArgs {
  const float* sa;     // A scales, [G,] K/128, M (M-major; each K block's M floats sa_pitch apart)
  const float* sb;     // B scales, [G,] ceil(N/128), K/128 contiguous
  void* out;           // for row-by-row stores (TMA stores use the tensor map)
  const int* group;    // KIND 1: group per row of a, else nullptr
  const int* count;    // KIND 2: valid rows per group, else nullptr
  int M, N, K, G;      // KIND 2: M is rows per group (Mmax); G = 1 for dense
  int raster;          // tiles per rasterisation group (even when clustered)
  int sk_tiles;        // tiles shared out by stream-K (KIND 0), 0: none
  float* sk_partials;  // stream-K: per CTA a slot of BM x BN fp32 partial totals
  int* sk_flags;       // stream-K: per CTA and math warpgroup, 1 while its slot holds a partial
  int* work;           // C::TILE_COUNTER: {next tile - gridDim.x, CTAs done}, zero at launch; or nullptr
  int sa_pitch;        // floats from one K block's A scales to the next's: M, or more where rows are padded
};

// What a piece of a tile's K range does at its end.
enum { kWhole = 0, kFinalise = 1, kPartial = 2 };

struct Fp8Unit {
  int m0, n0, g, full;  // m0 < 0: no more work
  int kb0, kb1;         // K blocks [kb0, kb1) of the tile (all of them but under stream-K)
  int part;             // kWhole, kFinalise (kb0 == 0: add the partials of CTAs c+1 .. c+peers,
  int peers;            // then store), kPartial (leave the totals in this CTA's slot)
};

enum { kMcastNone = 0, kMcastA = 1, kMcastB = 2 };

namespace fp8_detail {

constexpr int kIntMax = 0x7fffffff;

KDSL_DEVICE int imin(int a, int b) { return a < b ? a : b; }

// Rows of group g of a masked GEMM that exist: count[g] clamped to [0, M].
KDSL_DEVICE int masked_rows(const Fp8GemmArgs& p, int g) {
  const int c = __ldg(p.count + g);
  return c < 0 ? 0 : imin(c, p.M);
}

}  // namespace fp8_detail

// Every lane of the producer warp runs next() in step (KIND 1 reduces over the warp).
template <class C>
struct Fp8Scheduler {
  static constexpr int BM = C::BM, BN = C::BN;
  static constexpr int kIdsPerLane = BM / 32;

  const Fp8GemmArgs& p;
  int num_m, num_n;  // tiles (KIND 2: num_m is per group, at rows_g)
  int t;             // this CTA's next linear tile
  // KIND 1: the tile whose group passes are under way (pass_m0 < 0: none), the tile fetch_ahead
  // opened (next_m0 < 0: none left), and the ids of the rows of the later of the two
  int pass_m0, pass_n0, pass_g, next_m0 = 0, next_n0 = 0;
  int ids[kIdsPerLane > 0 ? kIdsPerLane : 1];
  bool last_pass = false;  // KIND 1 with C::TILE_COUNTER: the unit handed out last is its tile's last pass
  bool ahead = false;      // KIND 1: the next tile was opened during the last pass (fetch_ahead)
  // KIND 2: the group holding linear tile t, its first linear tile and its rows
  int grp, grp_first, grp_rows;
  i64 sk_it = -1, sk_end = 0;  // stream-K: this CTA's next iteration and its range's end
  bool taken = false;          // KIND 1: tile t was handed out (the first, blockIdx.x, is every CTA's own)

  KDSL_DEVICE explicit Fp8Scheduler(const Fp8GemmArgs& args) : p(args) {
    num_m = (p.M + BM - 1) / BM;
    num_n = (p.N + BN - 1) / BN;
    t = blockIdx.x;
    pass_m0 = -1;
    pass_n0 = pass_g = 0;
    grp = grp_first = 0;
    grp_rows = C::KIND == 2 ? fp8_detail::masked_rows(p, 0) : 0;
  }

  // (mt, nt) of linear index i among nm x num_n tiles: bands of `raster` tiles along one axis,
  // walked across the other. Multicasting A bands N tiles (a pair: adjacent N tiles, one M
  // tile), otherwise M tiles (a pair: adjacent M tiles, one N tile).
  KDSL_DEVICE void raster(int i, int nm, int& mt, int& nt) const {
    const bool band_n = C::MCAST == kMcastA;
    const int banded = band_n ? num_n : nm, across = band_n ? nm : num_n;
    const int width = p.raster * across;
    const int first = i / width * p.raster;
    const int in = i - i / width * width;
    const int size = fp8_detail::imin(p.raster, banded - first);
    const int a = in / size, b = first + (in - a * size);  // across, banded
    mt = band_n ? a : b;
    nt = band_n ? b : a;
  }

  KDSL_DEVICE bool next(Fp8Unit& u) {
    if (C::KIND == 1) return next_contiguous(u);
    if (C::KIND == 2) return next_masked(u);
    const int whole = num_m * num_n - sk_tiles();
    if (t < whole) {
      int mt, nt;
      raster(t, num_m, mt, nt);
      t += gridDim.x;
      u = Fp8Unit{mt * BM, nt * BN, 0, 1, 0, p.K / 128, kWhole, 0};  // TMA stores clip rows >= M, columns >= N
      return true;
    }
    return sk_tiles() > 0 && next_stream_k(u, whole);
  }

  // Tiles shared out by stream-K: none without a workspace (the host passes none while a CUDA
  // graph is captured) or in a cluster.
  KDSL_DEVICE int sk_tiles() const { return C::STREAM_K && p.sk_partials != nullptr ? p.sk_tiles : 0; }

  // Stream-K iterations: [sk_first(c), sk_first(c + 1)) is CTA c's range. None is empty: the
  // host gives stream-K at least as many iterations as CTAs (a finaliser waits for every CTA
  // between it and the owner of its tile's last K block).
  KDSL_DEVICE i64 sk_first(int c) const { return (i64)sk_tiles() * (p.K / 128) * c / gridDim.x; }
  // The CTA whose range holds iteration x (ranges may be empty when there are fewer
  // iterations than CTAs: the last CTA c with sk_first(c) <= x).
  KDSL_DEVICE int sk_owner(i64 x) const {
    const i64 total = (i64)sk_tiles() * (p.K / 128);
    int c = (int)(((x + 1) * gridDim.x - 1) / total);  // sk_first(c) <= x < sk_first(c + 1)
    while (c + 1 < (int)gridDim.x && sk_first(c + 1) <= x) ++c;
    while (c > 0 && sk_first(c) > x) --c;
    return c;
  }

  KDSL_DEVICE bool next_stream_k(Fp8Unit& u, int whole) {
    const int nk = p.K / 128;
    if (sk_it < 0) {
      sk_it = sk_first(blockIdx.x);
      sk_end = sk_first(blockIdx.x + 1);
    }
    if (sk_it >= sk_end) return false;
    const int j = (int)(sk_it / nk), kb0 = (int)(sk_it - (i64)j * nk);
    const int kb1 = (int)(sk_end - (i64)j * nk < nk ? sk_end - (i64)j * nk : nk);
    int mt, nt;
    raster(whole + j, num_m, mt, nt);
    u = Fp8Unit{mt * BM, nt * BN, 0, 1, kb0, kb1, kWhole, 0};
    if (kb0 > 0) {
      u.part = kPartial;
    } else if (kb1 < nk) {
      u.part = kFinalise;
      u.peers = sk_owner((i64)j * nk + nk - 1) - (int)blockIdx.x;
    }
    sk_it += kb1 - kb0;
    return true;
  }

  KDSL_DEVICE bool next_masked(Fp8Unit& u) {
    for (;;) {
      if (grp >= p.G) return false;
      const int nm = (grp_rows + BM - 1) / BM;
      if (t < grp_first + nm * num_n) {
        int mt, nt;
        raster(t - grp_first, nm, mt, nt);
        t += gridDim.x;
        // rows in [count, M) must stay untouched: a tile reaching past count is written row by row
        u = Fp8Unit{mt * BM, nt * BN, grp, mt * BM + BM <= grp_rows, 0, p.K / 128, kWhole, 0};
        return true;
      }
      grp_first += nm * num_n;
      if (++grp < p.G) grp_rows = fp8_detail::masked_rows(p, grp);
    }
  }

  KDSL_DEVICE bool next_contiguous(Fp8Unit& u) {
    using fp8_detail::kIntMax;
    const int lane = threadIdx.x & 31;
    for (;;) {
      if (pass_m0 < 0 || (C::TILE_COUNTER && last_pass)) {  // the next tile, unless fetch_ahead() opened it
        if (C::TILE_COUNTER && ahead) {
          pass_m0 = next_m0;
          pass_n0 = next_n0;
          ahead = false;
        } else if (!open_tile(pass_m0, pass_n0)) {
          return false;
        }
        last_pass = false;
        if (pass_m0 < 0) return false;  // (fetch_ahead found no tile left)
        pass_g = -1;
      }
      // The smallest group id above the last pass's; ids outside [0, G) are padding.
      const int g = warp_min(smallest_id_above(pass_g));
      if (g == kIntMax) {  // no group left in this tile
        pass_m0 = -1;
        continue;
      }
      bool mine = true;  // every existing row of the tile belongs to g
#pragma unroll
      for (int i = 0; i < kIdsPerLane; ++i) mine = mine && (ids[i] == g || pass_m0 + lane + 32 * i >= p.M);
      pass_g = g;
      if (C::TILE_COUNTER) last_pass = warp_min(smallest_id_above(g)) == kIntMax;
      u = Fp8Unit{pass_m0, pass_n0, g, __all_sync(0xffffffffu, mine) ? 1 : 0, 0, p.K / 128, kWhole, 0};
      return true;
    }
  }

  // KIND 1, called by the producer's lanes during a tile's last pass (last_pass), a few K blocks
  // before its end: open the next tile now (claim it, and read its rows' ids into ids[], which
  // the last pass no longer needs), so that neither round trip lies between the tile's last
  // loads and the next tile's first.
  KDSL_DEVICE void fetch_ahead() {
    if (!ahead) open_tile(next_m0, next_n0);  // (none left: next_m0 = -1)
    ahead = true;
  }

 private:
  KDSL_DEVICE int smallest_id_above(int g) const {
    int cand = fp8_detail::kIntMax;
#pragma unroll
    for (int i = 0; i < kIdsPerLane; ++i)
      if (ids[i] > g && ids[i] < p.G && ids[i] < cand) cand = ids[i];  // g >= -1
    return cand;
  }

  // Tile t (the counter's next, or t by the stride) as (m0, n0), its rows' group ids in ids[];
  // false (m0 = -1) when no tile is left.
  KDSL_DEVICE bool open_tile(int& m0, int& n0) {
    const bool counted = C::TILE_COUNTER && p.work != nullptr;
    if (counted && taken) t = take_tile();
    taken = true;
    if (t >= num_m * num_n) {
      if (counted) tiles_done();
      m0 = -1;
      return false;
    }
    int mt, nt;
    raster(t, num_m, mt, nt);
    if (!counted) t += gridDim.x;
    m0 = mt * BM;
    n0 = nt * BN;
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < kIdsPerLane; ++i) {
      const int m = m0 + lane + 32 * i;
      ids[i] = m < p.M ? __ldg(p.group + m) : -1;  // past M: like padding
    }
    return true;
  }

  // The next unclaimed tile of the counter (lane 0 takes it, the warp follows). A CTA asks during
  // its tile's last pass, KDSL_FP8_TILE_AHEAD K blocks before the pass's last loads: late enough
  // that the tiles still go to whichever CTA is free first, early enough that the claim's and
  // the ids' round trips hide behind the loads still to issue and the stages in the ring.
  // (Claiming the next tile as the current one started ran 0.4-13 % slower on 192-row tiles:
  // H200, 2026-11-28.)
  KDSL_DEVICE int take_tile() {
    int got = 0;
    if ((threadIdx.x & 31) == 0) got = work_counter_take(p.work);
    return __shfl_sync(0xffffffffu, got, 0);
  }

  // This CTA takes no more tiles (kdsl/work_counter.cuh). Every CTA gets here once (its
  // producer's next() then returns false and is not called again).
  KDSL_DEVICE void tiles_done() {
    if ((threadIdx.x & 31) == 0) work_counter_done(p.work);
    __syncwarp();
  }
};

}  // namespace kdsl
