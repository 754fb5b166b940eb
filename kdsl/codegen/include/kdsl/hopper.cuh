// kdsl/hopper.cuh — sm_90a building blocks: mbarriers, TMA tensor loads and stores (with
// cluster multicast), wgmma fences and shared-memory descriptors, register reallocation
// between warpgroup roles, thread-block clusters.
//
// Every op is inline PTX (NVRTC compiles kdsl kernels with no CUDA headers). The comments
// say what each op guarantees that the kernels rely on.
#pragma once
#include "kdsl/async_copy.cuh"

namespace kdsl {

// A CUtensorMap, opaque: 128 bytes, 64-byte aligned, built on the host by
// cuTensorMapEncodeTiled and passed by value as a __grid_constant__ kernel parameter.
struct __align__(64) TmaDesc { u64 opaque[16]; };

// ---- mbarriers (shared-memory u64 words addressed by their 32-bit shared address) --------

KDSL_DEVICE void mbar_init(u32 bar, u32 arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(arrivals) : "memory");
}
// Makes the initialisations visible to the async proxy (TMA) before any use.
KDSL_DEVICE void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

// One arrival that also announces `bytes` of TMA transactions for the current phase.
KDSL_DEVICE void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(bar), "r"(bytes) : "memory");
}
KDSL_DEVICE void mbar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(bar) : "memory");
}
// `count` arrivals at once (sm_90: no .noComplete needed).
KDSL_DEVICE void mbar_arrive(u32 bar, u32 count) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;\n" :: "r"(bar), "r"(count) : "memory");
}
// True once the phase with the given parity has completed. A fresh barrier is in phase 0,
// so waiting on parity 1 returns at once: that is how "buffer initially empty" is spelled.
KDSL_DEVICE bool mbar_try_wait(u32 bar, u32 parity) {
  u32 done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  return done != 0;
}
KDSL_DEVICE void mbar_wait(u32 bar, u32 parity) {
  while (!mbar_try_wait(bar, parity)) {}
}

// ---- TMA ---------------------------------------------------------------------------------

// Asks L2 for `bytes` (a multiple of 16) of global memory at a 16-byte aligned address; no
// register or shared memory holds them, and a later load of them waits on L2 instead of DRAM.
KDSL_DEVICE void bulk_prefetch_l2(const void* src, u32 bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" :: "l"(src), "r"(bytes) : "memory");
}
KDSL_DEVICE void tma_prefetch_desc(const TmaDesc* desc) {
  asm volatile("prefetch.tensormap [%0];\n" :: "l"(reinterpret_cast<u64>(desc)) : "memory");
}
// Box at coordinates (c0 innermost, c1, c2) of a 3-D tensor map into shared memory at dst;
// completion is counted on `bar` in bytes (the whole box, out-of-bounds parts zero-filled).
KDSL_DEVICE void tma_load_3d(u32 dst, const TmaDesc* desc, u32 bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n"
      :: "r"(dst), "l"(reinterpret_cast<u64>(desc)), "r"(bar), "r"(c0), "r"(c1), "r"(c2) : "memory");
}
// The same for 2-, 4- and 5-D tensor maps (a captured tensor streamed with the K tiles).
KDSL_DEVICE void tma_load_2d(u32 dst, const TmaDesc* desc, u32 bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n"
      :: "r"(dst), "l"(reinterpret_cast<u64>(desc)), "r"(bar), "r"(c0), "r"(c1) : "memory");
}
KDSL_DEVICE void tma_load_4d(u32 dst, const TmaDesc* desc, u32 bar, int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];\n"
      :: "r"(dst), "l"(reinterpret_cast<u64>(desc)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3) : "memory");
}
KDSL_DEVICE void tma_load_5d(u32 dst, const TmaDesc* desc, u32 bar, int c0, int c1, int c2, int c3, int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6, %7}], "
      "[%2];\n"
      :: "r"(dst), "l"(reinterpret_cast<u64>(desc)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}
// The same box written to shared address dst of every CTA of the cluster named in cta_mask
// (bit r: CTA rank r), each completing `bytes` on its own mbarrier at offset `bar`: one L2
// read feeds several CTAs.
KDSL_DEVICE void tma_load_3d_multicast(u32 dst, const TmaDesc* desc, u32 bar, int c0, int c1, int c2,
                                       u16 cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
      "[%0], [%1, {%3, %4, %5}], [%2], %6;\n"
      :: "r"(dst), "l"(reinterpret_cast<u64>(desc)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "h"(cta_mask)
      : "memory");
}
// Box at element c0 of a 1-D tensor map (any c0: the box need not start 16-byte aligned).
KDSL_DEVICE void tma_load_1d(u32 dst, const TmaDesc* desc, u32 bar, int c0) {
  asm volatile(
      "cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3}], [%2];\n"
      :: "r"(dst), "l"(reinterpret_cast<u64>(desc)), "r"(bar), "r"(c0) : "memory");
}
// Shared -> global box stores (elements outside the tensor are not written). The source must
// be ordered before by fence_proxy_async() in every thread that wrote it. Each call joins the
// thread's current bulk group; bulk_commit() closes it.
KDSL_DEVICE void tma_store_3d(const TmaDesc* desc, u32 src, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n"
               :: "l"(reinterpret_cast<u64>(desc)), "r"(src), "r"(c0), "r"(c1), "r"(c2) : "memory");
}
// global += shared, element-wise (the map's element type, e.g. f32), for D = C + A B^T.
KDSL_DEVICE void tma_reduce_add_3d(const TmaDesc* desc, u32 src, int c0, int c1, int c2) {
  asm volatile("cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n"
               :: "l"(reinterpret_cast<u64>(desc)), "r"(src), "r"(c0), "r"(c1), "r"(c2) : "memory");
}
// Four 8x8 b16 matrices to shared memory: lane i gives the address of row i % 8 of matrix
// i / 8; register j of lane t holds row t / 4, columns 2 (t % 4) and + 1 of matrix j (the
// layout of an mma / wgmma accumulator fragment packed to bf16 pairs).
KDSL_DEVICE void stmatrix_x4(u32 addr, u32 r0, u32 r1, u32 r2, u32 r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
               :: "r"(addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}
// global[0, bytes) += shared[0, bytes), element-wise in f32, each element's add atomic (CTAs
// may add into the same global tile); bytes a multiple of 16, both addresses 16-byte aligned.
// Joins the thread's current bulk group, like the stores above.
KDSL_DEVICE void bulk_reduce_add_f32(float* dst, u32 src, u32 bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
               :: "l"(dst), "r"(src), "r"(bytes) : "memory");
}
KDSL_DEVICE void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Until at most N of this thread's bulk groups still read their shared-memory source.
template <int N>
KDSL_DEVICE void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read %0;\n" :: "n"(N) : "memory"); }
// Until at most N of this thread's bulk groups are incomplete (their global writes done).
template <int N>
KDSL_DEVICE void bulk_wait() { asm volatile("cp.async.bulk.wait_group %0;\n" :: "n"(N) : "memory"); }

// ---- cp.async tracked by an mbarrier ------------------------------------------------------

// 4-byte global -> shared copy (through L1; .cg takes 16 bytes only).
KDSL_DEVICE void cp_async4(u32 dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" :: "r"(dst), "l"(src) : "memory");
}
// The same, writing zeros instead when !valid (nothing is read from src then).
KDSL_DEVICE void cp_async4_or_zero(u32 dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" :: "r"(dst), "l"(src), "r"(valid ? 4 : 0) : "memory");
}
// The mbarrier's current phase also waits for every cp.async this thread issued so far (the
// arrival is added now and made when they land, so the expected count is unchanged).
KDSL_DEVICE void cp_async_mbar_arrive(u32 bar) {
  asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];\n" :: "r"(bar) : "memory");
}
// One of the phase's expected arrivals, made when every cp.async this thread issued so far
// has landed: the phase cannot complete before them, by its count alone, and the waiters
// see their writes (PTX ISA, mbarrier.try_wait: cp.asyncs before cp.async.mbarrier.arrive
// of the completed phase are performed and visible to the waiting thread).
KDSL_DEVICE void cp_async_mbar_arrive_noinc(u32 bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" :: "r"(bar) : "memory");
}
// Until every cp.async this thread issued has landed (and is visible to it).
KDSL_DEVICE void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// ---- wgmma -------------------------------------------------------------------------------

// Orders this thread's generic-proxy shared-memory accesses (ordinary or cp.async stores,
// loads) before later async-proxy ones (wgmma reads, TMA writes).
KDSL_DEVICE void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

KDSL_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
KDSL_DEVICE void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
KDSL_DEVICE void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory"); }

// wgmma writes its accumulators asynchronously: after the wait, tie each register to the
// wait so the compiler cannot move a read of it above.
template <int R>
KDSL_DEVICE void wgmma_pin(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}

// Shared-memory matrix descriptors for tiles in the 128-byte-swizzled layout TMA writes
// (rows of 128 bytes, 8-row atoms of 1024 bytes; the tile base 1024-byte aligned).
// K-major (rows are M or N, 128 bytes of K per row): 8-row groups 1024 B apart.
KDSL_DEVICE constexpr u64 desc_kmajor_sw128(u32 saddr) {
  return (u64)((saddr & 0x3FFFF) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}
// MN-major (rows are K, 64 16-bit MN elements per row): 8 K-rows per 1024-byte atom, the
// next 64 MN elements `mn_block_bytes` further on.
KDSL_DEVICE constexpr u64 desc_mnmajor_sw128(u32 saddr, u32 mn_block_bytes) {
  return (u64)((saddr & 0x3FFFF) >> 4) | ((u64)((mn_block_bytes >> 4) & 0x3FFF) << 16) |
         ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}
// The descriptor of the same layout `bytes` (a multiple of 16) further on: one 32-bit add to
// the address field (bits 0-13, the address / 16). Shared addresses stay below 2^18, so the
// sum never carries out of it: the result equals the descriptor built from the new address,
// in one instruction instead of four (what a wgmma sequence's k-steps need).
KDSL_DEVICE constexpr u64 desc_advance(u64 desc, u32 bytes) {
  return (desc & 0xFFFFFFFF00000000ull) | (u32)((u32)desc + (bytes >> 4));
}

// The descriptors of the k-steps (16 elements each) of two K-major 128-byte-swizzled tiles
// (A and B of one product) of a_rows and b_rows rows: 32 bytes along the swizzled row a step,
// the next 64-column block rows * 128 bytes on.
template <int STEPS>
KDSL_DEVICE void kmajor_steps(u64 (&da)[STEPS], u32 sa, int a_rows, u64 (&db)[STEPS], u32 sb, int b_rows) {
  const u64 a0 = desc_kmajor_sw128(sa), b0 = desc_kmajor_sw128(sb);
#pragma unroll
  for (int ks = 0; ks < STEPS; ++ks) {
    const u32 off = (ks % 4) * 32;
    da[ks] = desc_advance(a0, (ks / 4) * a_rows * 128 + off);
    db[ks] = desc_advance(b0, (ks / 4) * b_rows * 128 + off);
  }
}

// ---- warpgroup roles ---------------------------------------------------------------------

template <int REGS> KDSL_DEVICE void regs_release() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(REGS));
}
template <int REGS> KDSL_DEVICE void regs_claim() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(REGS));
}
// Barrier among `threads` threads (a multiple of 32) on hardware barrier `id` (1..15; 0 is
// __syncthreads).
KDSL_DEVICE void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(threads) : "memory");
}
// Arrive at a named barrier without waiting (the other side bar.syncs on it).
KDSL_DEVICE void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" :: "r"(id), "r"(threads) : "memory");
}

// bar.sync on a named barrier that also tells every thread whether any of them passed true.
KDSL_DEVICE bool named_barrier_or(int id, int threads, bool p) {
  u32 r;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n bar.red.or.pred q, %2, %3, p;\n selp.u32 %0, 1, 0, q;\n}\n"
      : "=r"(r) : "r"((u32)p), "r"(id), "r"(threads) : "memory");
  return r != 0;
}
// Minimum of v over the 32 lanes of the warp (all lanes must call it).
KDSL_DEVICE int warp_min(int v) {
  int r;
  asm volatile("redux.sync.min.s32 %0, %1, 0xffffffff;\n" : "=r"(r) : "r"(v));
  return r;
}

// ---- programmatic dependent launch ------------------------------------------------------

// Lets the next kernel in the stream, when launched with programmatic stream serialization,
// start its prologue now; it still waits (grid_dependency_wait) for this grid's results.
// A no-op without such a dependent.
KDSL_DEVICE void grid_dependents_launch() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
// Until the grids this one depends on have completed and their writes are visible; returns
// at once for a kernel launched the ordinary way.
KDSL_DEVICE void grid_dependency_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

// ---- flags between CTAs (global memory, gpu scope) ---------------------------------------

KDSL_DEVICE int ld_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
KDSL_DEVICE void st_release_gpu(int* p, int v) {
  asm volatile("st.release.gpu.global.s32 [%0], %1;\n" :: "l"(p), "r"(v) : "memory");
}
KDSL_DEVICE void st_relaxed_gpu(int* p, int v) {
  asm volatile("st.relaxed.gpu.global.s32 [%0], %1;\n" :: "l"(p), "r"(v) : "memory");
}

// ---- thread-block clusters ---------------------------------------------------------------

KDSL_DEVICE u32 cluster_ctarank() {
  u32 r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// Every thread of every CTA of the cluster; orders shared-memory accesses, remote ones (such
// as mbarrier arrivals on a peer CTA) included, across it. Barrier initialisation before the
// first remote use, and no CTA leaves while a peer may still touch its shared memory.
KDSL_DEVICE void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// Arrive on the mbarrier at shared offset `bar` of CTA `rank` in the cluster, with the
// default .release.cta semantics. For a stage whose reads were wgmma's (complete once the
// wgmma wait returned) this is all the peer's refill needs; .release.cluster costs a
// MEMBAR.ALL.GPU per arrival (FP8 GEMM with 2-CTA clusters: 2x slower, 2026-11-24).
KDSL_DEVICE void mbar_arrive_cluster(u32 bar, u32 rank) {
  asm volatile("{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
               "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n"
               :: "r"(bar), "r"(rank) : "memory");
}

}  // namespace kdsl
