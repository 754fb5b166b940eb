// Runs kdsl/fp8_gemm_sched.cuh on the host (see kdsl/hopper.cuh beside this file). Reads
// cases from stdin, one per line:
//   KIND BM BN MCAST M N G RASTER GRID SK_TILES NK COUNTER  then M group ids (KIND 1) or G counts (KIND 2)
// and prints, per case, one line per CTA: the units it is given, as
// "m0,n0,g,full,kb0,kb1,part,peers" items (K = 128 * NK). COUNTER (KIND 1 without multicast):
// 0 the fixed stride, 1 tiles from a counter, 2 from a counter with the next tile opened during
// each tile's last pass (the producer's fetch_ahead); the counters must be zero again after.
#include <cstdio>
#include <thread>
#include <vector>

#include "kdsl/fp8_gemm_sched.cuh"

template <int BM_, int BN_, int KIND_, int MCAST_>
struct Cfg {
  static constexpr int BM = BM_, BN = BN_, KIND = KIND_, MCAST = MCAST_, CLUSTER = MCAST_ ? 2 : 1;
  static constexpr bool STREAM_K = KIND_ == 0 && MCAST_ == 0;
  static constexpr bool TILE_COUNTER = KIND_ == 1 && MCAST_ == 0;  // used where the case passes a counter
};

inline int ahead = 0;  // the case's COUNTER == 2

template <class C>
void run(kdsl::Fp8GemmArgs& p, int grid) {
  gridDim.x = grid;
  for (int cta = 0; cta < grid; ++cta) {
    blockIdx.x = cta;
    std::barrier<> sync(32);
    host_warp::sync = &sync;
    std::vector<kdsl::Fp8Unit> units;
    std::vector<std::thread> lanes;
    for (int lane = 0; lane < 32; ++lane)
      lanes.emplace_back([&, lane] {
        threadIdx.x = lane;
        kdsl::Fp8Scheduler<C> sched(p);
        kdsl::Fp8Unit u;
        while (sched.next(u)) {
          if (lane == 0) units.push_back(u);
          if (C::TILE_COUNTER && ahead && sched.last_pass) sched.fetch_ahead();
        }
      });
    for (auto& t : lanes) t.join();
    for (const auto& u : units)
      std::printf("%d,%d,%d,%d,%d,%d,%d,%d ", u.m0, u.n0, u.g, u.full, u.kb0, u.kb1, u.part, u.peers);
    std::printf("\n");
  }
}

template <int BM, int BN, int KIND>
bool dispatch_mcast(int mcast, kdsl::Fp8GemmArgs& p, int grid) {
  if (mcast == 0) run<Cfg<BM, BN, KIND, 0>>(p, grid);
  else if (mcast == 1) run<Cfg<BM, BN, KIND, 1>>(p, grid);
  else run<Cfg<BM, BN, KIND, 2>>(p, grid);
  return true;
}

template <int BM, int BN>
bool dispatch_kind(int kind, int mcast, kdsl::Fp8GemmArgs& p, int grid) {
  if (kind == 0) return dispatch_mcast<BM, BN, 0>(mcast, p, grid);
  if (kind == 1) return dispatch_mcast<BM, BN, 1>(mcast, p, grid);
  return dispatch_mcast<BM, BN, 2>(mcast, p, grid);
}

template <int BM>
bool dispatch_bn(int bn, int kind, int mcast, kdsl::Fp8GemmArgs& p, int grid) {
  switch (bn) {
    case 48: return dispatch_kind<BM, 48>(kind, mcast, p, grid);
    case 160: return dispatch_kind<BM, 160>(kind, mcast, p, grid);
  }
  return false;
}

int main() {
  int kind, bm, bn, mcast, M, N, G, raster, grid, sk, nk, counter;
  static float partials;  // stream-K runs only with a workspace; the scheduler never touches it
  static int counters[2];
  while (std::scanf("%d %d %d %d %d %d %d %d %d %d %d %d", &kind, &bm, &bn, &mcast, &M, &N, &G, &raster, &grid, &sk,
                    &nk, &counter) == 12) {
    std::vector<int> ids(kind == 1 ? M : (kind == 2 ? G : 0));
    for (int& x : ids)
      if (std::scanf("%d", &x) != 1) return 2;
    kdsl::Fp8GemmArgs p{nullptr, nullptr, nullptr, kind == 1 ? ids.data() : nullptr, kind == 2 ? ids.data() : nullptr,
                        M, N, 128 * nk, G, raster, sk, sk ? &partials : nullptr, nullptr,
                        counter ? counters : nullptr};
    ahead = counter == 2;
    bool ok = bm == 64 ? dispatch_bn<64>(bn, kind, mcast, p, grid)
            : bm == 128 ? dispatch_bn<128>(bn, kind, mcast, p, grid)
            : bm == 192 ? dispatch_bn<192>(bn, kind, mcast, p, grid)
                        : dispatch_bn<256>(bn, kind, mcast, p, grid);
    if (!ok) return 3;
    if (counters[0] || counters[1]) return 4;  // the last CTA leaves them zero for the next launch
    std::fflush(stdout);
  }
  return 0;
}
