// The PTX of Hopper's warp-specialised kernels that the sm_90a labs share (hopper_gemm_lab,
// attention_backward_lab): mbarriers, TMA copies, wgmma's shared-memory descriptor and its
// fence / commit / wait; and, on the host, the tensor map of the tiles they copy. Each helper is one
// instruction or a loop around one; what a kernel does with them its own file says.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace hopper_ptx {

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void barrier_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(bar)), "r"(count) : "memory");
}
// The producer's arrival, announcing the bytes its copies will complete on the barrier.
__device__ __forceinline__ void barrier_expect_bytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)), "r"(bytes)
               : "memory");
}
// An arrival with release semantics at CTA scope (the instruction's default): what the thread wrote
// before it is visible to whoever waits for the phase.
__device__ __forceinline__ void barrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_address(bar)) : "memory");
}
// Whether the barrier's phase of this parity has completed (a bounded wait in hardware).
__device__ __forceinline__ bool barrier_try(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(shared_address(bar)), "r"(parity)
      : "memory");
  return done != 0;
}
// Waits for the barrier's phase of this parity to complete. A lab kernel: a wait of seconds is a bug, and
// trapping says so instead of hanging the call. No printf or any other call: a call anywhere in a kernel
// with wgmma makes ptxas serialize every wgmma (C7510). A 32-bit count: in the consumers' register budget
// a 64-bit one cost attention_backward_lab spills.
__device__ __forceinline__ void barrier_wait(uint64_t* bar, uint32_t parity) {
  for (uint32_t tries = 0; !barrier_try(bar, parity); ++tries)
    if (tries > (1u << 24)) __trap();
}
// The same for a helper warp that shares the SM's schedulers with the warps doing the math: it sleeps
// between tries instead of spinning, which would take issue slots from them.
__device__ __forceinline__ void barrier_wait_idle(uint64_t* bar, uint32_t parity) {
  for (uint32_t tries = 0; !barrier_try(bar, parity); ++tries) {
    __nanosleep(128);
    if (tries > (1u << 24)) __trap();
  }
}

// TMA: the box of `map` at (inner, outer) into shared memory at `destination`, completing its bytes on
// `bar`.
__device__ __forceinline__ void copy_tile(uint32_t destination, const CUtensorMap* map, uint64_t* bar,
                                          int inner, int outer) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, "
      "%4}], [%2];" ::"r"(destination),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(shared_address(bar)), "r"(inner), "r"(outer)
      : "memory");
}
// A plain bulk copy of `bytes` contiguous bytes (a multiple of 16, both ends 16-byte aligned).
__device__ __forceinline__ void copy_bytes(uint32_t destination, const void* source, uint32_t bytes,
                                           uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          destination),
      "l"(source), "r"(bytes), "r"(shared_address(bar))
      : "memory");
}

// wgmma's shared-memory descriptor of a tile written as TMA writes it with the 128-byte swizzle (rows of
// 128 bytes, the 16-byte piece p of row r at p ^ (r % 8)), 1,024-byte aligned: the start address, LBO 1
// (unused by these layouts), SBO 1,024 (from one 8-row group to the next), the 128-byte swizzle mode.
// attention_backward_lab explains why the same fields serve K-major and MN-major operands.
__device__ __forceinline__ uint64_t swizzled_descriptor(uint32_t address) {
  return uint64_t{(address & 0x3FFFF) >> 4} | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) |
         (uint64_t{1} << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int pending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(pending) : "memory");
}
// Keeps the compiler from moving reads or writes of registers that an asynchronous wgmma still uses across
// the wait that ends its use.
template <int n>
__device__ __forceinline__ void fence_registers(float (&d)[n]) {
#pragma unroll
  for (int i = 0; i < n; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int n>
__device__ __forceinline__ void fence_registers(uint32_t (&d)[n]) {
#pragma unroll
  for (int i = 0; i < n; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

// The host side: a row-major [rows, cols] bf16 matrix as TMA sees it, boxes of box_rows x 64 (one
// 128-byte swizzle row wide), 128-byte swizzled. Exits with one line naming `program` if the driver
// refuses the map.
inline CUtensorMap swizzled_tile_map(const void* base, int64_t rows, int64_t cols, int box_rows,
                                     const char* program) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(cols) * 2};
  const cuuint32_t box[2] = {64, cuuint32_t(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = cuTensorMapEncodeTiled(
      &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "%s: cuTensorMapEncodeTiled: error %d\n", program, static_cast<int>(r));
    std::exit(1);
  }
  return map;
}

}  // namespace hopper_ptx
