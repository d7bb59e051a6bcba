// Can a causal attention backward of dlbench's own beat cuDNN's at GPT-2's shapes? Measured on an H100,
// cuDNN's fused backward at gpt2-large's shape (batch 16, T = 1024, 20 heads of 64, bf16) with the causal
// mask takes 0.78x the time of the same pass without it, although the mask removes about half the work
// (a 128 x 128 tile grid at T = 1024 keeps 36 of its 64 tiles: 0.5625 is the floor). Its unmasked backward
// runs ~277-297 TFLOP/s, its causal one ~221 (counting half the FLOPs). A causal backward that skips the
// masked tiles and keeps the unmasked rate could be up to ~25% faster. This lab builds one the way
// FlashAttention-2/3 do, for head dim 64 on Hopper (sm_90a), in one kernel, key-block outer (each work
// item one (batch, head, block of 128 keys)) and warp-specialised:
//   - one producer thread issues TMA copies: K and V once an item, double-buffered across items; Q, O, dO
//     and LSE of each 64-row query block through a ring of stages;
//   - two producer warps compute D = rowsum(dO * O) of each stage's rows from the tiles in shared memory
//     (the consumer groups computing it under their first GEMMs instead was slower: 781 against 752 us at
//     batch 16 on an H100, 2026-12-07);
//   - two consumer warp groups own 64 keys each and, per query block, compute with wgmma
//       S^T  = K_w Q^T           (SS, both operands K-major)
//       dP^T = V_w dO^T          (SS, both operands K-major)
//       P^T  = exp2(S^T scale log2(e) - LSE log2(e)), 0 where key > query
//       dS^T = P^T (dP^T - D)
//       dV_w += P^T dO           (RS: A from the accumulator registers, B = dO N-major)
//       dK_w += dS^T Q           (RS, B = Q N-major)
//       dQ   += dS K             (SS: dS^T staged in shared memory is A M-major; K is B N-major; each
//                                 group 32 of the 64 head dims over all 128 keys)
//     and add each step's dQ into an f32 accumulator with one bulk reduction a group, issued under the
//     next step's S^T and dP^T; dK (times the scale) and dV go to dqkv in bf16 at the item's end;
//   - one producer warp finishes dQ: a counter a query block tells it when the item it is counting in was
//     the last to add into a block, and the block is then converted to bf16 into dqkv and cleared, with
//     bulk stores, while it is still in L2: by this warp, or (Work::spread) by whichever CTA's finisher
//     takes it from a queue.
// Only the query blocks a key block can see are visited, and the mask is applied only on the diagonal
// blocks. The grid is persistent, its units pairing key block p with n - 1 - p (see Work). Computing D and
// finishing dQ in the kernel replaces two passes over memory (D and the accumulator zeroed before, dQ
// converted after), which cost an H100 ~107 us at batch 16 against the main kernel's ~400 (2026-12-07).
// Layouts are dlbench's: qkv [B, T, 3C] (head h's q, k, v at columns h*64, C + h*64, 2C + h*64), out and
// dout [B, T, C], stats (LSE, natural log of the scaled masked scores) [B, H, T] f32 as cuDNN's forward
// (backend/cuda/sdpa_graph.h) writes it, dqkv [B, T, 3C].
//
// The program checks ours (and cuDNN's) against an fp64 reference computed on the host at a small shape,
// then ours against cuDNN's backward at gpt2-large's shape, before and after timing both: the median of
// --reps launches after 3 warm-ups, at batch 16 and 64 (or the --batch given). FLOPs counted as
// sdpa_engine_probe counts the causal backward: 2.5 * 2 B T^2 C. Each variant (variants(): the finisher's
// lag, the conversions spread) is timed, checked against cuDNN after, and run once in the timed build,
// which prints where each role's cycles went and, from wall-clock stamps, when the CTAs started and ended
// and how many dQ blocks each converted. Then diagnosis rows, each leaving out parts of the kernel
// (Work::skip; wrong output, time only), down to no helper warps at all. On an H100 (2026-12-08,
// bench/results/gpt2-attention-engines) the kernel took 507.7 us at batch 16 against cuDNN's 489.5, 432
// without the conversions, 400 without any helper.
//
//   attention_backward_lab [--batch B] [--reps N]
//
// The cuDNN peer (AttentionPlan) needs the engine's headers, which include fmt, and nvcc parses fmt only
// with fmt's constexpr use forced on (it turns it off for nvcc), so the file sets it before any include.
// Build: the attention_backward_lab target (sm_90a, C++20 for the engine's headers).
#ifndef FMT_USE_CONSTEXPR
#define FMT_USE_CONSTEXPR 1
#endif

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/sdpa_graph.h"
#include "event_timing.h"
#include "hopper_ptx.cuh"

namespace {

using dlbench::cuda::AttentionPass;
using dlbench::cuda::AttentionPlan;
using dlbench::cuda::AttentionShape;
using dlbench::cuda::DeviceBuffer;
using kernel_bench::check;
using namespace hopper_ptx;

constexpr int kHeadDim = 64;                // 64 bf16 = 128 bytes: one row of the 128-byte swizzle
constexpr int kKeyBlock = 128;              // keys per work item, 64 per consumer warp group
constexpr int kQueryBlock = 64;             // query rows per stage
constexpr int kThreads = 384;               // a producer warp group and two consumer warp groups
constexpr int kStages = 3;                  // the Q / dO ring
constexpr int kTileBytes = 64 * 128;        // a 64 x 64 bf16 tile
constexpr int kKvBytes = 128 * 128;         // a 128 x 64 bf16 tile
constexpr int kRowBytes = 64 * 4;           // LSE or D of one query block
constexpr int kDqBlockBytes = 64 * 64 * 4;  // a query block of the f32 dQ accumulator
constexpr int kConsumingWarps = 8;          // every consumer warp releases each stage and each K/V buffer
constexpr int kDeltaThreads = 64;           // D: a thread a query row of the stage
constexpr int kMaxFinishLag = 8;            // item slots of the consumers' adds-done and the finisher's done
constexpr float kScale = 0.125f;            // 1 / sqrt(64)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kScaleLog2 = kScale * kLog2e;

// Shared memory, from a 1,024-byte aligned base (the 128-byte swizzle's pattern repeats every 1,024 bytes
// and every tile starts on one): K and V twice (the next item's copies land while this one finishes), the
// Q, O and dO ring, two pairs of dS^T tiles (one a consumer group; a pair for even steps and one for odd
// ones, so that a group may write the next step's tile while the other still reads this step's), the
// finisher's two staging buffers of a dQ block, a step's dQ for the bulk reductions (both groups' slices),
// the finisher's bf16 tile of a dQ block, LSE and D of each stage, and the barriers.
constexpr int kOffK = 0;
constexpr int kOffV = kOffK + 2 * kKvBytes;
constexpr int kOffQ = kOffV + 2 * kKvBytes;
constexpr int kOffO = kOffQ + kStages * kTileBytes;
constexpr int kOffDo = kOffO + kStages * kTileBytes;
constexpr int kOffDs = kOffDo + kStages * kTileBytes;
constexpr int kOffStaging = kOffDs + 4 * kTileBytes;
constexpr int kOffDqStage = kOffStaging + 2 * kDqBlockBytes;  // a step's dQ for the bulk reductions
constexpr int kOffDqOut = kOffDqStage + kDqBlockBytes;        // the finisher's bf16 tile of a dQ block
constexpr int kOffLse = kOffDqOut + kTileBytes;
constexpr int kOffDelta = kOffLse + kStages * kRowBytes;
constexpr int kOffBarriers = kOffDelta + kStages * kRowBytes;
// Full, empty and D-ready a stage; full and empty a K/V buffer; adds-done and finisher-free an item slot;
// the finisher's two staging buffers.
constexpr int kBarriers = 3 * kStages + 2 * 2 + 2 * kMaxFinishLag + 2;
constexpr int kSharedBytes = kOffBarriers + kBarriers * 8 + 1024;
static_assert(kOffBarriers % 8 == 0 && kOffLse % 16 == 0, "alignment");

// The wgmma shared-memory descriptor of every operand here (swizzled_descriptor, hopper_ptx.cuh): a tile
// written as TMA writes it with the 128-byte swizzle (rows of 128 bytes, the 16-byte piece p of row r at p ^
// (r % 8)), the tile 1,024-byte aligned. What the fields mean (PTX ISA, "Shared Memory Matrix Layout", its
// canonical layouts in units of 16 bytes, T = 8 bf16):
//   K-major, 128B swizzle:  ((8, m), (T, 2k)) : ((8T, SBO), (1, T))
//     8 rows of 128 bytes, SBO from one 8-row group to the next (1,024 here); LBO unused ("assumed 1").
//     A k16 slice further along the rows starts 32 bytes on (hopper_gemm_lab does the same).
//   MN-major, 128B swizzle: ((T, 8, m), (8, k)) : ((1, T, LBO), (8T, SBO))
//     along M/N 64 contiguous elements (one 128-byte row), then LBO to the next 64 (the ISA: "offset from
//     the first (swizzle-byte-size/16) rows to the next" in 128-bit units); along K 8 rows of 128 bytes,
//     then SBO to the next 8 ("offset from the first 8 columns to the next 8 columns").
//   CUTLASS's make_gmma_desc<Major::MN> reads the same: SBO = the stride of the 8-row K groups, LBO =
//   the stride of the 64-wide M/N atoms.
// So a tile of rows with 64 elements each, row-major with the swizzle, is a valid operand either way with
// SBO = 1,024: K-major when the rows run along M/N (Q, K, V, dO as S^T and dP^T read them), MN-major when
// the rows run along K (dO and Q as dV's and dK's B, K as dQ's B, dS^T as dQ's A). Every M/N extent here
// is at most 64, one atom, so LBO is never used (set to 1, as for K-major). An MN-major k16 slice is 16
// rows further on: + 2,048 bytes, still on a 1,024-byte boundary, so the base-offset field stays 0. dQ's B
// for the second consumer group starts 64 bytes into the rows (head dims 32..63): the swizzle applies to
// the address bits, as the K-major slices' 32-byte steps rely on, so the offset start reads the right
// pieces. That 64-byte start is the one choice here no other kernel of dlbench exercises: the check prints
// dQ's head dims 0-31 and 32-63 apart, so a dQ wrong only in dims 32-63 points at it (a variant that
// started every B at a row's start, each group all 64 dims over its own keys, was right: 2026-12-07).
// (NVIDIA's TensorRT-LLM XQA kernel builds its MN-major V operand the same way: SBO = 8 rows of 128 bytes,
// LBO unused, 16 rows further a k-slice.)

#define ACC16(d)                                                                                  \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define ACC32(d)                                                                                       \
  ACC16(d), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), \
      "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),       \
      "+f"(d[30]), "+f"(d[31])
#define REGS16 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define REGS32 REGS16 ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"

// D[64, 64] (+)= A[64, 16] B[16, 64], A and B K-major in shared memory (S^T = K_w Q^T, dP^T = V_w dO^T).
__device__ __forceinline__ void mma_ss(float (&d)[32], uint64_t a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" REGS32 "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : ACC32(d)
      : "l"(a), "l"(b), "r"(accumulate));
}
// D[64, 64] += A[64, 16] B[16, 64], A from registers (four bf16 pairs a thread), B N-major in shared
// memory (dV_w += P^T dO, dK_w += dS^T Q).
__device__ __forceinline__ void mma_rs(float (&d)[32], const uint32_t* a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" REGS32
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : ACC32(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}
// D[64, 32] (+)= A[64, 16] B[16, 32], A M-major and B N-major in shared memory (dQ = dS K, a group's
// half of the head dims).
__device__ __forceinline__ void mma_ss_mn32(float (&d)[16], uint64_t a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {" REGS16 "}, %16, %17, p, 1, 1, 1, 1;\n}\n"
      : ACC16(d)
      : "l"(a), "l"(b), "r"(accumulate));
}
__device__ __forceinline__ float exp2_fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
// Adds `bytes` of f32 from shared memory into global memory; stores `bytes` of shared memory to global
// memory; stores the box of `map` at (inner, outer) from a tile in shared memory (laid out as the map's
// swizzle says). All asynchronous; the caller commits them as a group (bulk_commit).
__device__ __forceinline__ void reduce_add_bulk(float* destination, uint32_t source, uint32_t bytes) {
  asm volatile(
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(destination),
      "r"(source), "r"(bytes)
      : "memory");
}
__device__ __forceinline__ void store_bytes(void* destination, uint32_t source, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(destination), "r"(source),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void store_tile(const CUtensorMap* map, uint32_t source, int inner, int outer) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(source), "r"(inner), "r"(outer)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Waits until this thread's bulk groups have read their shared memory (the stores may still be in flight),
// or until they are done.
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}
__device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// The 128 threads of consumer group w (barrier ids 2 and 3: constants, as ptxas wants them).
__device__ __forceinline__ void group_sync(int w) {
  if (w == 0)
    asm volatile("bar.sync 2, 128;" ::: "memory");
  else
    asm volatile("bar.sync 3, 128;" ::: "memory");
}

// The accumulator fragment of wgmma.m64nNk16 (PTX ISA, "Register Fragments"): in warp g of the group,
// lane L holds rows 16g + L/4 and 16g + L/4 + 8, columns 8j + 2(L % 4) and the next: d[4j], d[4j + 1] on
// the first row, d[4j + 2], d[4j + 3] on the second. The A fragment of an RS wgmma.m64nNk16 is the same
// rows at columns 2(L % 4) + {0, 1} and + 8 within the k16 slice: so, with the pairs of an m64n64
// accumulator packed to bf16 as frag[p] = (d[2p], d[2p + 1]), the A fragment of k-slice s is frag[4s] ..
// frag[4s + 3], in order. Those pairs are also a warp's four 8 x 8 matrices of stmatrix: matrix m of group
// g (columns 16g .. 16g + 15) is frag[4g + m], rows 8 (m % 2) on, columns 8 (m / 2) on; lane L gives the
// address of row L % 8 of matrix L / 8.
__device__ __forceinline__ void store_fragment_tile(uint32_t warp_rows, const uint32_t (&frag)[16],
                                                    int lane) {
  const int m = lane / 8, row = 8 * (m % 2) + lane % 8;
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    const int piece = 2 * g + m / 2;
    const uint32_t address = warp_rows + row * 128 + ((piece ^ (row % 8)) * 16);
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(address),
                 "r"(frag[4 * g]), "r"(frag[4 * g + 1]), "r"(frag[4 * g + 2]), "r"(frag[4 * g + 3])
                 : "memory");
  }
}

// The work: key block j of 128 rows sees query blocks 2j .. T/64 - 1, so block 0 has T/64 of them and the
// last 2. A persistent grid (one CTA an SM) walks units that pair key block p with key block n - 1 - p of
// the same (batch, head): every unit is then 2n + 2 query blocks long (18 at T = 1024), the CTAs finish
// together to within one unit, and a CTA's producer loads the next item's K and V under the current
// item's last blocks and epilogue (the prologue amortised, which a grid of one CTA an item cannot do).
// Units go in (batch, head)-major order, so the CTAs in flight work on ~33 heads at a time and the Q, O
// and dO they stream, and the dQ they add into, stay in L2. The alternative, a grid of one CTA an item
// launched longest first, balances as well but pays each item's pipeline fill and drain in the open.
struct Work {
  int batch, heads, time;
  // Diagnosis only (the output is then wrong): 1 no dQ conversion, 2 no dQ counts, 4 no D math, 8 no O
  // copies, 16 no D warps (they leave at once, nobody waits for D), 32 the consumers do not wait for D,
  // 64 no finisher warp (it leaves at once, the producer does not wait for it).
  int skip = 0;
  // How many items the finisher may lag the consumers by (2 .. kMaxFinishLag): the producer loads an
  // item's K and V only once the finisher is done with the item that many before. 4 against 2: 664 against
  // 683 us at batch 16 on an H100 (rotated, 2026-12-07).
  int finish_lag = 4;
  // 0: a finisher converts the blocks its CTA added last into. n > 0: it pushes them to a queue (JobQueue)
  // and takes blocks from it while it waits for an item's adds, up to n after each item, and what is left
  // at its end.
  int spread = 0;
  std::string name() const {
    return "finisher lag " + std::to_string(finish_lag) +
           (spread ? ", spread (" + std::to_string(spread) + " an item)" : std::string());
  }
  __host__ __device__ int key_blocks() const { return time / kKeyBlock; }
  __host__ __device__ int query_blocks() const { return time / kQueryBlock; }
  __host__ __device__ int pairs() const { return (key_blocks() + 1) / 2; }
  __host__ __device__ int units() const { return batch * heads * pairs(); }
};

// Where a CTA's time goes, in the timed build (kTimed) only: clock() cycles, each slot summed by one thread
// of the role it names over the CTA's items, written to clocks[CTA * kClockSlots + slot] at its end.
enum ClockSlot : int {
  kConsumerTotal,     // a consumer thread's whole run
  kConsumerKv,        // ... waiting for an item's K and V
  kConsumerFull,      // ... for a stage's tiles
  kConsumerDelta,     // ... for its D
  kConsumerSync,      // ... for the other group's dS^T tile
  kConsumerAdds,      // ... from dQ's wgmma issued to its adds issued
  kWallStart,         // (globaltimer's low 32 bits, ns) the consumer thread's start
  kWallConsumerEnd,   // ... its end
  kProducerKv,        // the copying thread waiting for a K/V buffer
  kProducerFinisher,  // ... for the finisher to be done with the item finish_lag before
  kProducerEmpty,     // ... for a free stage
  kFinisherAdds,      // the finisher waiting for an item's adds
  kFinisherCount,     // ... counting them in (fences and atomics)
  kFinisherConvert,   // ... converting the blocks it was last for
  kFinisherBlocks,    // (a count) the blocks it converted
  kWallFinisherEnd,   // (globaltimer's low 32 bits, ns) the finisher's end
  kDeltaFull,         // a D thread waiting for a stage
  kDeltaMath,         // ... computing D
  kClockSlots
};
static_assert(kClockSlots <= 24, "the shared memory kept for the sums");

// The timed build's sums, in shared memory (in registers they cost the consumers spills): one reporting
// thread a role (lane 0 of warps 0, 1, 3 and 4) adds its cycles there and copies its slots out at its
// end. The array's address is a constant and a thread finds again at each use whether it reports, so
// neither takes a register. In the other build, and for the other threads, every call is nothing but f.
__shared__ unsigned clock_sums_shared[24];
template <bool kTimed>
struct Clocks {
  __device__ __forceinline__ static bool reporting() {
    return threadIdx.x == 0 || threadIdx.x == 32 || threadIdx.x == 96 || threadIdx.x == 128;
  }
  __device__ __forceinline__ uint32_t now() const { return kTimed ? static_cast<uint32_t>(clock()) : 0u; }
  __device__ __forceinline__ void add(ClockSlot slot, uint32_t value) const {
    if constexpr (kTimed)
      if (reporting()) clock_sums_shared[slot] += value;
  }
  __device__ __forceinline__ void add_since(ClockSlot slot, uint32_t start) const {
    add(slot, now() - start);
  }
  // The wall clock (ns, low 32 bits) into a slot: cycles alone cannot tell a lower clock from more work.
  __device__ __forceinline__ void stamp(ClockSlot slot) const {
    if constexpr (kTimed) {
      uint32_t ns;
      asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(ns));
      if (reporting()) clock_sums_shared[slot] = ns;
    }
  }
  template <class F>
  __device__ __forceinline__ void time(ClockSlot slot, F&& f) const {
    const uint32_t start = now();
    f();
    add_since(slot, start);
  }
  // Copies slots first .. last - 1 to this CTA's row of out.
  __device__ __forceinline__ void report(unsigned* out, int first, int last) const {
    if constexpr (kTimed)
      if (reporting())
        for (int k = first; k < last; ++k) out[blockIdx.x * kClockSlots + k] = clock_sums_shared[k];
  }
};

// A fence at GPU scope: acquire-release is what publishing the adds with a count and reading the others'
// after it needs (__threadfence, sequentially consistent, measured the same: 751.5 against 751.4 us).
__device__ __forceinline__ void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

// Calls visit(bh, j, item) for each item (batch x head bh, key block j) of this CTA, in the one order
// every role of the kernel walks them; item counts the CTA's items from 0.
template <class Visit>
__device__ __forceinline__ void for_each_item(const Work& work, Visit&& visit) {
  const int pairs = work.pairs(), key_blocks = work.key_blocks(), units = work.units();
  int item = 0;
  for (int unit = blockIdx.x; unit < units; unit += gridDim.x) {
    // The pair a unit takes turns over its (batch, head)'s units. Taken as unit % pairs, CTA x always
    // took pair x % 4 (132 CTAs, 4 pairs), and the CTAs with pair 0 converted 149 dQ blocks each at batch 16
    // against 1-3 for the others (a CTA that falls behind adds last to more blocks): 752 us unrotated, 683
    // rotated (H100, 2026-12-07). The long key block first: the short one first lost in every schedule.
    const int bh = unit / pairs, first = (unit + bh) % pairs;
    // One call site: with two (one a half) the consumers' body was inlined twice, a kernel twice the size
    // (811 against 788 us at batch 16 on an H100, within the 775-814 of repeated runs).
#pragma unroll 1
    for (int half = 0; half < 2; ++half) {
      const int j = half == 0 ? first : key_blocks - 1 - first;
      if (half == 1 && j == first) break;  // an odd count's middle block stands alone
      visit(bh, j, item++);
    }
  }
}

// The dot product of pieces first .. first + n - 1 (mod 8) of two 128-byte rows of 8 pieces of 8 bf16, in
// f32. A row's sum does not care which of its pieces the swizzle put where; starting each row at its own
// piece spreads a warp's reads over all the banks (threads a row apart would otherwise read the same
// 16 bytes of the bank pattern).
__device__ __forceinline__ float dot_pieces(const uint4* a, const uint4* b, int first, int n) {
  float sum = 0.f;
#pragma unroll 2
  for (int k = 0; k < n; ++k) {
    const int piece = (first + k) % 8;
    const uint4 x4 = a[piece], y4 = b[piece];
    const uint32_t xw[4] = {x4.x, x4.y, x4.z, x4.w}, yw[4] = {y4.x, y4.y, y4.z, y4.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&xw[e]));
      const float2 y = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&yw[e]));
      sum = fmaf(x.x, y.x, fmaf(x.y, y.y, sum));
    }
  }
  return sum;
}

// The f32 accumulator rows of query block i of (batch x head) bh.
__device__ __forceinline__ float4* dq_block(float* dq_acc, const Work& work, int bh, int i) {
  return reinterpret_cast<float4*>(dq_acc + (size_t(bh) * work.time + i * kQueryBlock) * kHeadDim);
}

// One bulk copy brings a dQ block into shared memory (its 16 KB in one L2 round trip; a warp's own loads,
// one in flight in 40 registers, took ~40 us a block and made the whole kernel 2.6x slower). The warp's
// fences before this made the other CTAs' adds visible to it; fence.proxy.async.global extends that to the
// copy, which reads through the async proxy. By lane 0.
__device__ __forceinline__ void copy_dq_block(const float4* block, uint8_t* staging, uint64_t* staged) {
  asm volatile("fence.proxy.async.global;" ::: "memory");
  barrier_expect_bytes(staged, kDqBlockBytes);
  copy_bytes(shared_address(staging), block, kDqBlockBytes, staged);
}

// Where float4 n of a staged dQ block lies: the block is in the consumers' fragment order (the bulk
// reductions add each group's 8 KB slice as its fragments lie). Float4 number ((w * 4 + g) * 4 + k) * 32 + L
// holds, of group w's warp g's lane L, its fragment values 4k .. 4k + 3: rows 16g + L / 4 and that + 8,
// columns 32w + 8k + 2 (L % 4) and the next (see the fragment's layout above). Written that way, a warp's
// stores to shared memory are 512 contiguous bytes (no bank conflicts) and each group's slice is one piece.
struct DqPiece {
  int r0, r1, c;
};
__device__ __forceinline__ DqPiece dq_piece(int n) {
  const int lane = n % 32, k = (n / 32) % 4, g = (n / 128) % 4, w = n / 512;
  const int r = 16 * g + lane / 4;
  return {r, r + 8, 32 * w + 8 * k + 2 * (lane % 4)};
}

// The finisher's conversion, by one warp: the staged block to bf16 (times the scale) into a tile laid out as
// TMA's 128-byte swizzle lays it out (the 16-byte piece p of row r at p ^ (r % 8), which also keeps the
// warp's stores free of bank conflicts), and the staged block to 0 in place. Two bulk stores then write
// the tile into dqkv and the zeros into the accumulator, so the warp issues no global store at all (its
// own 1,024 stores a block lost: 654.9 against 602.6 us at batch 16 with bulk dQ, H100, 2026-12-08).
__device__ __forceinline__ void convert_dq_block_to_tile(uint8_t* staging, uint8_t* tile, int lane) {
  float4* block = reinterpret_cast<float4*>(staging);
  const auto at = [&](int r, int c) { return tile + r * 128 + (((c / 8) ^ (r % 8)) * 16) + 2 * (c % 8); };
#pragma unroll 2
  for (int n = lane; n < kDqBlockBytes / 16; n += 32) {
    const float4 x = block[n];
    block[n] = make_float4(0.f, 0.f, 0.f, 0.f);
    const DqPiece q = dq_piece(n);
    *reinterpret_cast<uint32_t*>(at(q.r0, q.c)) = pack_bf16(kScale * x.x, kScale * x.y);
    *reinterpret_cast<uint32_t*>(at(q.r1, q.c)) = pack_bf16(kScale * x.z, kScale * x.w);
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the writes visible to the bulk stores
  __syncwarp();
}

// Finishes dQ blocks, by one warp: each job next_job() gives (bh x query blocks + i, from lane 0 only; -1
// when there are no more) is staged, converted and stored; returns how many. The next job's copy goes into
// the second staging buffer while this one converts (8.0 against 7.2 k cycles a block, 664 against 631 us
// at batch 16 on an H100, 2026-12-07). `phases` holds each staging barrier's phase bit. Lane 0 stores the
// tile into dQ's columns of dqkv (map_dq) and the zeros into the accumulator with bulk copies; a staging
// buffer and the tile are written again only once those stores have read them.
template <class NextJob>
__device__ __forceinline__ int finish_dq_jobs(NextJob&& next_job, float* dq_acc, const CUtensorMap* map_dq,
                                              const Work& work, int lane, uint8_t* staging, uint8_t* tile,
                                              uint64_t* staged, uint32_t& phases) {
  const int query_blocks = work.query_blocks();
  const auto block_of = [&](int job) {
    return dq_block(dq_acc, work, job / query_blocks, job % query_blocks);
  };
  int job = -1;
  if (lane == 0) {
    job = next_job();
    if (job >= 0) {
      bulk_wait_read();
      copy_dq_block(block_of(job), staging, staged);
    }
  }
  job = __shfl_sync(0xffffffffu, job, 0);
  int buffer = 0, done = 0;
  while (job >= 0) {
    const int next = buffer ^ 1;
    int following = -1;
    if (lane == 0) {
      bulk_wait_read();  // the last block's stores (from the other buffer and the tile)
      following = next_job();
      if (following >= 0) copy_dq_block(block_of(following), staging + next * kDqBlockBytes, &staged[next]);
    }
    following = __shfl_sync(0xffffffffu, following, 0);
    barrier_wait_idle(&staged[buffer], (phases >> buffer) & 1);
    phases ^= 1u << buffer;
    __syncwarp();  // lane 0's wait before anyone writes the tile
    convert_dq_block_to_tile(staging + buffer * kDqBlockBytes, tile, lane);
    if (lane == 0) {
      const int bh = job / query_blocks, i = job % query_blocks;
      const int b = bh / work.heads, h = bh % work.heads;
      store_bytes(block_of(job), shared_address(staging + buffer * kDqBlockBytes), kDqBlockBytes);
      store_tile(map_dq, shared_address(tile), h * kHeadDim, b * work.time + i * kQueryBlock);
      bulk_commit();
    }
    buffer = next, job = following, ++done;
  }
  return done;
}

// Work::spread's queue of dQ blocks to finish, in global memory: head, tail, the CTAs done, then a slot a
// block (job + 1; 0 while empty). A finisher pushes the blocks it added last into and any finisher pops
// them, so the conversions no longer fall to whichever CTA happens to add last (query blocks 0-7 always
// take their last add from key block 0). A ticket below the tail belongs to a push that has claimed its
// slot and will fill it at once, so waiting for it cannot hang; a pop takes a ticket only below the tail.
struct JobQueue {
  int* q;
  __device__ int* slot(int ticket) const { return q + 3 + ticket; }
  // By the warp: the job of each lane whose bit is set in `mask` (`mine`), after the fence that made the
  // adds they count visible. A release store: a pop's acquire load sees the adds too.
  __device__ void push(unsigned mask, bool mine, int job, int lane) const {
    int base = 0;
    if (lane == 0) base = atomicAdd(&q[1], __popc(mask));
    base = __shfl_sync(0xffffffffu, base, 0);
    if (mine) {
      const int ticket = base + __popc(mask & ((1u << lane) - 1));
      asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(slot(ticket)), "r"(job + 1) : "memory");
    }
  }
  // By one lane: a job, or -1 if the queue is empty.
  __device__ int pop() const {
    int head = *reinterpret_cast<volatile int*>(&q[0]);
    for (;;) {
      if (head >= *reinterpret_cast<volatile int*>(&q[1])) return -1;
      const int seen = atomicCAS(&q[0], head, head + 1);
      if (seen == head) break;
      head = seen;
    }
    int value = 0;
    for (int tries = 1;; ++tries) {
      asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(value) : "l"(slot(head)) : "memory");
      if (value != 0) break;
      if (tries == 1 << 22) __trap();  // seconds on a claimed slot: a bug, which should fail, not hang
    }
    *slot(head) = 0;  // read again only by the next call
    return value - 1;
  }
};

// The kernel's four roles, by warp: warp 0 (one thread) issues every TMA copy; warps 1-2 compute D =
// rowsum(dO * O) of each stage's 64 query rows from the tiles in shared memory (a row's sum is the same
// whatever order the swizzle put its pieces in), so D needs no pass of its own; warp 3 finishes dQ: after
// each item it counts the item in for each query block the item added into, and converts the blocks it
// was the last to add into (query block i takes adds from key blocks 0 .. i/2); warps 4-11, two consumer
// groups, do the math. A counter and an accumulator block are left at 0 once converted, so every call
// finds them as the first one did after the host zeroed them (the workspace's one-time setup).
// The consumers put each step's dQ into shared memory, in their fragments' order, and one thread a group
// adds the group's 8 KB slice into the accumulator with one bulk reduction (cp.reduce.async.bulk) instead
// of 4,096 red.global.add a step (602.6 against 619.8 us at batch 16, H100, 2026-12-08); the finisher
// converts that order back. A step's dQ is added under the next step's S^T and dP^T (550.6 against 619.8
// us, the largest of the three gains).
template <bool kTimed>
__global__ void __launch_bounds__(kThreads, 1)
    attention_backward(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_kv,
                       const __grid_constant__ CUtensorMap map_o, const __grid_constant__ CUtensorMap map_do,
                       const __grid_constant__ CUtensorMap map_dq, const float* __restrict__ lse,
                       float* __restrict__ dq_acc, int* __restrict__ counters, int* jobs,
                       __nv_bfloat16* __restrict__ dqkv, Work work, unsigned* clocks) {
  extern __shared__ uint8_t shared_raw[];
  uint8_t* shared =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(shared_raw) + 1023) & ~uintptr_t{1023});
  const uint32_t base = shared_address(shared);
  uint64_t* full = reinterpret_cast<uint64_t*>(shared + kOffBarriers);
  uint64_t* empty = full + kStages;
  uint64_t* delta_full = empty + kStages;
  uint64_t* kv_full = delta_full + kStages;
  uint64_t* kv_empty = kv_full + 2;
  uint64_t* adds_done = kv_empty + 2;
  uint64_t* finisher_free = adds_done + kMaxFinishLag;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      barrier_init(&full[s], 1);
      barrier_init(&empty[s], kConsumingWarps);
      barrier_init(&delta_full[s], kDeltaThreads);
    }
    for (int b = 0; b < 2; ++b) {
      barrier_init(&kv_full[b], 1);
      barrier_init(&kv_empty[b], kConsumingWarps);
    }
    for (int b = 0; b < kMaxFinishLag; ++b) {
      barrier_init(&adds_done[b], 2);  // a thread a consumer group
      barrier_init(&finisher_free[b], 1);
    }
    barrier_init(finisher_free + kMaxFinishLag, 1);  // the two staging buffers
    barrier_init(finisher_free + kMaxFinishLag + 1, 1);
    if (kTimed)
      for (int k = 0; k < kClockSlots; ++k) clock_sums_shared[k] = 0;
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  const int time = work.time, heads = work.heads, channels = heads * kHeadDim;
  const int query_blocks = work.query_blocks();
  const int warp_group = threadIdx.x / 128, lane = threadIdx.x % 32;
  float* delta_stage = reinterpret_cast<float*>(shared + kOffDelta);
  const Clocks<kTimed> clock_sums;

  // Registers: 168 a thread at launch (65,536 / 384); the producer group gives back to 56 and the consumer
  // groups take 224 (56 x 128 + 224 x 256 <= 168 x 384; ptxas fits the consumers in 168). In 40 ptxas
  // spilled the D and finisher warps' loops.
  if (warp_group == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 56;");
    const int warp = threadIdx.x / 32;
    if (warp == 0 && lane == 0) {  // the copies, in the consumers' order
      int step = 0;
      for_each_item(work, [&](int bh, int j, int item) {
        const int b = bh / heads, h = bh % heads, kb = item % 2;
        // A fresh barrier's "previous" phase counts as done.
        clock_sums.time(kProducerKv, [&] { barrier_wait(&kv_empty[kb], ((item / 2) & 1) ^ 1); });
        // The consumers count the item's adds into dQ at its end in the slot of the item finish_lag before,
        // which the finisher must be done with; they cannot start the item before its K and V land.
        const int lag = work.finish_lag;
        if (!(work.skip & 64))
          clock_sums.time(kProducerFinisher,
                          [&] { barrier_wait(&finisher_free[item % lag], ((item / lag) & 1) ^ 1); });
        barrier_expect_bytes(&kv_full[kb], 2 * kKvBytes);
        const int key_row = b * time + j * kKeyBlock;
        copy_tile(base + kOffK + kb * kKvBytes, &map_kv, &kv_full[kb], channels + h * kHeadDim, key_row);
        copy_tile(base + kOffV + kb * kKvBytes, &map_kv, &kv_full[kb], 2 * channels + h * kHeadDim, key_row);
        for (int i = 2 * j; i < query_blocks; ++i, ++step) {
          const int s = step % kStages;
          clock_sums.time(kProducerEmpty, [&] { barrier_wait(&empty[s], ((step / kStages) & 1) ^ 1); });
          barrier_expect_bytes(&full[s], (work.skip & 8 ? 2 : 3) * kTileBytes + kRowBytes);
          const int query_row = b * time + i * kQueryBlock;
          copy_tile(base + kOffQ + s * kTileBytes, &map_q, &full[s], h * kHeadDim, query_row);
          if (!(work.skip & 8))
            copy_tile(base + kOffO + s * kTileBytes, &map_o, &full[s], h * kHeadDim, query_row);
          copy_tile(base + kOffDo + s * kTileBytes, &map_do, &full[s], h * kHeadDim, query_row);
          copy_bytes(base + kOffLse + s * kRowBytes, lse + size_t(bh) * time + i * kQueryBlock, kRowBytes,
                     &full[s]);
        }
      });
      clock_sums.report(clocks, kProducerKv, kProducerEmpty + 1);
    } else if (warp == 1 || warp == 2) {  // D of the stage's row r
      if (work.skip & 16) return;
      const int r = threadIdx.x - 32;
      int step = 0;
      for_each_item(work, [&](int, int j, int) {
        for (int i = 2 * j; i < query_blocks; ++i, ++step) {
          const int s = step % kStages;
          clock_sums.time(kDeltaFull, [&] { barrier_wait_idle(&full[s], (step / kStages) & 1); });
          const uint32_t math_start = clock_sums.now();
          const uint4* o = reinterpret_cast<const uint4*>(shared + kOffO + s * kTileBytes + r * 128);
          const uint4* d = reinterpret_cast<const uint4*>(shared + kOffDo + s * kTileBytes + r * 128);
          const float sum = dot_pieces(o, d, r, work.skip & 4 ? 0 : 8);
          // The slot's last reader, the consumers of step - kStages, arrived on empty[s] after reading it,
          // and the copies that full[s] waited for were issued after that.
          delta_stage[s * kQueryBlock + r] = sum;
          barrier_arrive(&delta_full[s]);
          clock_sums.add_since(kDeltaMath, math_start);
        }
      });
      clock_sums.report(clocks, kDeltaFull, kDeltaMath + 1);
    } else if (warp == 3) {  // finishes dQ
      if (work.skip & 64) return;
      uint8_t* staging = shared + kOffStaging;
      uint64_t* staged = finisher_free + kMaxFinishLag;
      uint8_t* tile = shared + kOffDqOut;
      uint32_t staged_phases = 0;
      const JobQueue queue{jobs};
      // The blocks `next_job` gives, finished through this warp's staging buffers and tile.
      const auto finish = [&](auto&& next_job) {
        return finish_dq_jobs(next_job, dq_acc, &map_dq, work, lane, staging, tile, staged, staged_phases);
      };
      for_each_item(work, [&](int bh, int j, int item) {
        const int slot = item % work.finish_lag;
        const uint32_t adds_parity = (item / work.finish_lag) & 1;
        clock_sums.time(kFinisherAdds, [&] {
          // Work::spread: until the item's adds are done, blocks from the queue (a finisher otherwise idles
          // here half its run or more); the blocks so finished count with the others, their time here.
          while (work.spread) {
            int done = 0;
            if (lane == 0) done = barrier_try(&adds_done[slot], adds_parity);
            if (__shfl_sync(0xffffffffu, done, 0)) break;
            const int blocks =
                finish([&] { return barrier_try(&adds_done[slot], adds_parity) ? -1 : queue.pop(); });
            clock_sums.add(kFinisherBlocks, blocks);
            if (blocks == 0) __nanosleep(256);
          }
          barrier_wait_idle(&adds_done[slot], adds_parity);
        });
        const uint32_t count_start = clock_sums.now();
        // One lane a query block (T <= 2,048: at most 32): the consumers' adds are ordered before their
        // arrivals (release, CTA scope), which this lane's wait acquired; its fence makes them visible at
        // GPU scope before its count is. The warp's fence after the counts orders what it reads next after
        // the other CTAs' adds: the pattern of a grid-wide barrier.
        const int i = 2 * j + lane;
        bool last = false;
        if (i < query_blocks && !(work.skip & 2)) {
          int* counter = counters + bh * query_blocks + i;
          fence_acq_rel_gpu();
          last = atomicAdd(counter, 1) == i / 2;  // query block i takes adds from key blocks 0 .. i/2
          if (last) *counter = 0;                 // read again only by the next call
        }
        const bool convert = last && !(work.skip & 1);
        unsigned mine = __ballot_sync(0xffffffffu, convert);
        if (mine != 0) fence_acq_rel_gpu();
        if (work.spread && mine != 0) queue.push(mine, convert, bh * query_blocks + i, lane);
        clock_sums.add_since(kFinisherCount, count_start);
        clock_sums.time(kFinisherConvert, [&] {
          int blocks = 0;
          if (work.spread) {  // up to `spread` blocks from the queue
            int popped = 0;
            blocks = finish([&] { return popped++ < work.spread ? queue.pop() : -1; });
          } else {  // the blocks this item added last into
            blocks = finish([&] {
              if (mine == 0) return -1;
              const int k = __ffs(mine) - 1;
              mine &= mine - 1;
              return bh * query_blocks + 2 * j + k;
            });
          }
          clock_sums.add(kFinisherBlocks, blocks);
        });
        __syncwarp();
        if (lane == 0) barrier_arrive(&finisher_free[slot]);
      });
      if (work.spread) {
        // What is left in the queue, then the last CTA out takes what came after and resets the queue.
        const auto pop = [&] { return queue.pop(); };
        int blocks = finish(pop);
        int last_out = 0;
        if (lane == 0) {
          fence_acq_rel_gpu();
          last_out = atomicAdd(&queue.q[2], 1) == int(gridDim.x) - 1;
          if (last_out) fence_acq_rel_gpu();
        }
        if (__shfl_sync(0xffffffffu, last_out, 0)) {
          blocks += finish(pop);
          if (lane == 0) queue.q[0] = 0, queue.q[1] = 0, queue.q[2] = 0;  // read again only by the next call
        }
        clock_sums.add(kFinisherBlocks, blocks);
      }
      if (lane == 0) bulk_wait();  // the last stores done before the CTA leaves
      clock_sums.stamp(kWallFinisherEnd);
      clock_sums.report(clocks, kFinisherAdds, kWallFinisherEnd + 1);
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 224;");
  const int w = warp_group - 1;  // which 64 keys of the item, and which 32 head dims of dQ
  const int warp = threadIdx.x / 32 % 4;
  const int row0 = 16 * warp + lane / 4;  // the thread's first accumulator row (and row0 + 8)
  const int col0 = 2 * (lane % 4);        // its first column in each group of 8
  const float* lse_stage = reinterpret_cast<const float*>(shared + kOffLse);
  // P^T and dS^T as bf16 A fragments; they live until the wgmma that reads them has finished.
  uint32_t p_frag[16] = {}, ds_frag[16] = {};
  int step = 0;
  clock_sums.stamp(kWallStart);
  clock_sums.add(kConsumerTotal, -clock_sums.now());  // the run's start, taken off its end below
  for_each_item(work, [&](int bh, int j, int item) {
    const int b = bh / heads, h = bh % heads, kb = item % 2;
    clock_sums.time(kConsumerKv, [&] { barrier_wait(&kv_full[kb], (item / 2) & 1); });
    const uint32_t k_tile = base + kOffK + kb * kKvBytes;
    const uint32_t k_rows = k_tile + w * kTileBytes, v_rows = base + kOffV + kb * kKvBytes + w * kTileBytes;
    float dv[32], dk[32];
#pragma unroll
    for (int x = 0; x < 32; ++x) dv[x] = 0.f, dk[x] = 0.f;

    // dQ of query block qi (in dq, its wgmma done) into the accumulator.
    float dq[16];
    const auto add_dq = [&](int qi) {
      // The group's slice: [warp][k][lane] float4s, 8 KB, at 8 KB x w into the stage and the block.
      float4* slice = reinterpret_cast<float4*>(shared + kOffDqStage) + w * 512;
      const bool elected = threadIdx.x % 128 == 0;
      if (elected) bulk_wait_read();  // the last one read it
      group_sync(w);
#pragma unroll
      for (int k = 0; k < 4; ++k)
        slice[(warp * 4 + k) * 32 + lane] =
            make_float4(dq[4 * k], dq[4 * k + 1], dq[4 * k + 2], dq[4 * k + 3]);
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // visible to the bulk reduction
      group_sync(w);
      if (elected) {
        float* block = dq_acc + (size_t(bh) * time + qi * kQueryBlock) * kHeadDim + w * (kDqBlockBytes / 8);
        reduce_add_bulk(block, shared_address(slice), kDqBlockBytes / 2);
        bulk_commit();
      }
    };
    int pending = -1;  // the query block whose dQ wgmma is still in flight

    for (int i = 2 * j; i < query_blocks; ++i, ++step) {
      const int s = step % kStages;
      clock_sums.time(kConsumerFull, [&] { barrier_wait(&full[s], (step / kStages) & 1); });
      // D was computed when the stage landed, under an earlier step's math: waited for here, where few
      // registers are live (in the middle of the step the wait's loop costs ptxas spills).
      if (!(work.skip & (16 | 32)))
        clock_sums.time(kConsumerDelta, [&] { barrier_wait(&delta_full[s], (step / kStages) & 1); });
      const uint32_t q_tile = base + kOffQ + s * kTileBytes, do_tile = base + kOffDo + s * kTileBytes;
      const uint32_t ds_pair = base + kOffDs + (step % 2) * 2 * kTileBytes;
      // The group's keys start at 128j + 64w, the block's queries at 64i: none visible before i = 2j + w,
      // the diagonal at it, all after.
      if (i >= 2 * j + w) {
        float sc[32], dp[32];
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
          mma_ss(sc, swizzled_descriptor(k_rows + 32 * kk), swizzled_descriptor(q_tile + 32 * kk), kk);
        wgmma_commit();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
          mma_ss(dp, swizzled_descriptor(v_rows + 32 * kk), swizzled_descriptor(do_tile + 32 * kk), kk);
        wgmma_commit();
        // The last step's dQ, under this step's S^T and dP^T. Waited for and touched whether or not a
        // dQ is pending: ptxas serialises every wgmma of a kernel that reads an accumulator only on some
        // paths.
        wgmma_wait<2>();
        fence_registers(dq);
        if (pending >= 0) add_dq(pending);

        // P^T: rows are keys, columns queries, so LSE and D are per column. The stats are cuDNN's: the
        // natural log, taken to base 2 here.
        wgmma_wait<1>();
        fence_registers(sc);
        const float* lse_rows = lse_stage + s * kQueryBlock;
        const bool diagonal = i == 2 * j + w;
#pragma unroll
        for (int jj = 0; jj < 8; ++jj) {
          const float2 l = *reinterpret_cast<const float2*>(lse_rows + 8 * jj + col0);
          const float l0 = l.x * kLog2e, l1 = l.y * kLog2e;
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int x = 4 * jj + e;
            float p = exp2_fast(fmaf(sc[x], kScaleLog2, -(e % 2 ? l1 : l0)));
            if (diagonal && row0 + 8 * (e / 2) > 8 * jj + col0 + e % 2) p = 0.f;
            sc[x] = p;
          }
        }
        wgmma_wait<0>();
        fence_registers(dp);
        const float* d_rows = delta_stage + s * kQueryBlock;
#pragma unroll
        for (int jj = 0; jj < 8; ++jj) {
          const float2 d = *reinterpret_cast<const float2*>(d_rows + 8 * jj + col0);
#pragma unroll
          for (int e = 0; e < 4; ++e)
            dp[4 * jj + e] = sc[4 * jj + e] * (dp[4 * jj + e] - (e % 2 ? d.y : d.x));
        }
#pragma unroll
        for (int x = 0; x < 16; ++x) {
          p_frag[x] = pack_bf16(sc[2 * x], sc[2 * x + 1]);
          ds_frag[x] = pack_bf16(dp[2 * x], dp[2 * x + 1]);
        }
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) mma_rs(dv, &p_frag[4 * kk], swizzled_descriptor(do_tile + 2048 * kk));
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) mma_rs(dk, &ds_frag[4 * kk], swizzled_descriptor(q_tile + 2048 * kk));
        wgmma_commit();
        // dS^T into this step's tile of the group, for dQ: rows keys, columns queries.
        store_fragment_tile(ds_pair + w * kTileBytes + warp * 16 * 128, ds_frag, lane);
      } else {  // no key of the group sees these queries: its dS^T is 0 (the other group's dQ slices stay
                // one branch-free run of wgmma: with two run lengths ptxas inserts fences between them)
        // (Only the first step of an item comes here, so no dQ is pending.)
        const uint32_t zeros[16] = {};
        store_fragment_tile(ds_pair + w * kTileBytes + warp * 16 * 128, zeros, lane);
      }
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the tile visible to wgmma's reads
      clock_sums.time(kConsumerSync, [&] {
        asm volatile("bar.sync 1, 256;" ::: "memory");
      });  // both dS^T tiles written

      // dQ[64 queries, this group's 32 head dims] = dS[64, 128 keys] K[128 keys, dims]: A is dS^T's tiles
      // read M-major, k16 slice kk at 16 key rows (2,048 bytes) on; B is K read N-major from head dim 32w
      // (64 bytes into the rows).
      const uint32_t k_cols = k_tile + 64 * w;
      const uint32_t adds_start = clock_sums.now();
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 8; ++kk)
        mma_ss_mn32(dq, swizzled_descriptor(ds_pair + (kk / 4) * kTileBytes + (kk % 4) * 2048),
                    swizzled_descriptor(k_cols + 2048 * kk), kk);
      wgmma_commit();
      wgmma_wait<1>();  // dV and dK done: the stage's Q and dO are read
      fence_registers(dv);
      fence_registers(dk);
      fence_registers(p_frag);
      fence_registers(ds_frag);
      if (lane == 0) barrier_arrive(&empty[s]);
      pending = i;
      clock_sums.add_since(kConsumerAdds, adds_start);
    }
    // The item's last dQ (an item has at least two steps).
    wgmma_wait<0>();
    fence_registers(dq);
    add_dq(pending);
    // Every wgmma that read K or V has finished, and the item's adds into dQ are done and ordered before
    // the generic proxy's release that the arrival is.
    __syncwarp();
    if (lane == 0) barrier_arrive(&kv_empty[kb]);
    if (threadIdx.x % 128 == 0) {
      bulk_wait();
      asm volatile("fence.proxy.async.global;" ::: "memory");
      barrier_arrive(&adds_done[item % work.finish_lag]);
    }

    // dK (scaled) and dV of the group's 64 keys, straight from the fragments.
    const size_t key_row = size_t(b) * time + j * kKeyBlock + w * 64 + row0;
    __nv_bfloat16* k_out = dqkv + key_row * 3 * channels + channels + h * kHeadDim;
    __nv_bfloat16* v_out = k_out + channels;
    const size_t down8 = size_t(8) * 3 * channels;
#pragma unroll
    for (int jj = 0; jj < 8; ++jj) {
      const int c = 8 * jj + col0;
      *reinterpret_cast<__nv_bfloat162*>(k_out + c) =
          __floats2bfloat162_rn(kScale * dk[4 * jj], kScale * dk[4 * jj + 1]);
      *reinterpret_cast<__nv_bfloat162*>(k_out + down8 + c) =
          __floats2bfloat162_rn(kScale * dk[4 * jj + 2], kScale * dk[4 * jj + 3]);
      *reinterpret_cast<__nv_bfloat162*>(v_out + c) = __floats2bfloat162_rn(dv[4 * jj], dv[4 * jj + 1]);
      *reinterpret_cast<__nv_bfloat162*>(v_out + down8 + c) =
          __floats2bfloat162_rn(dv[4 * jj + 2], dv[4 * jj + 3]);
    }
  });
  clock_sums.add(kConsumerTotal, clock_sums.now());
  clock_sums.stamp(kWallConsumerEnd);
  clock_sums.report(clocks, kConsumerTotal, kWallConsumerEnd + 1);
}

// The kernel, [kTimed].
using Kernel = decltype(&attention_backward<false>);
constexpr Kernel kernels[2] = {attention_backward<false>, attention_backward<true>};

// Uniform values in [-range, range) from a hash of the index and seed.
__global__ void fill_uniform(__nv_bfloat16* x, int64_t n, uint32_t seed, float range) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t v =
        static_cast<uint32_t>(i) ^ (static_cast<uint32_t>(i >> 32) * 0x27d4eb2fu) ^ (seed * 0x9e3779b9u);
    v ^= v >> 16, v *= 0x85ebca6bu, v ^= v >> 13, v *= 0xc2b2ae35u, v ^= v >> 16;
    x[i] = __float2bfloat16(range * (static_cast<float>(v >> 8) * (2.f / 16777216.f) - 1.f));
  }
}

// Per third of two dqkv tensors (dQ, dK, dV): max |a - b| into result[0..2] and max |b| into result[3..5],
// as the bits of non-negative floats (which order as unsigned integers; a NaN orders above all).
__global__ void compare_thirds(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b,
                               int64_t n, int channels, unsigned* result) {
  float diff[3] = {0.f, 0.f, 0.f}, mag[3] = {0.f, 0.f, 0.f};
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int third = static_cast<int>(i % (3 * channels)) / channels;
    const float x = __bfloat162float(a[i]), y = __bfloat162float(b[i]);
    const float dxy = fabsf(x - y);
#pragma unroll
    for (int t = 0; t < 3; ++t)
      if (t == third)
        diff[t] = (dxy != dxy || dxy > diff[t]) ? dxy : diff[t], mag[t] = fmaxf(mag[t], fabsf(y));
  }
  for (int t = 0; t < 3; ++t) {
    const unsigned d = __reduce_max_sync(0xffffffffu, __float_as_uint(diff[t]));
    const unsigned m = __reduce_max_sync(0xffffffffu, __float_as_uint(mag[t]));
    if (threadIdx.x % 32 == 0) atomicMax(&result[t], d), atomicMax(&result[3 + t], m);
  }
}

// ---- host ----

// Everything a shape needs on the device: the inputs, cuDNN's plans and outputs, ours and our workspace
// (the f32 dQ accumulator and a counter a query block, zeroed once here; every call leaves them at 0).
static_assert(kHeadDim == 64, "swizzled_tile_map's boxes are 64 elements wide");
struct Problem {
  AttentionShape shape;
  DeviceBuffer qkv, out, dout, stats, dqkv_cudnn, dqkv_ours, dq_acc, counters, jobs;
  std::unique_ptr<AttentionPlan> forward, backward;
  CUtensorMap map_q, map_kv, map_o, map_do, map_dq;
  Work work;
  int grid = 0;

  Problem(cudnnHandle_t handle, int64_t batch, int64_t time, int64_t heads, int sms)
      : shape{batch, time, heads * kHeadDim, heads, dlbench::DType::bf16},
        qkv(size_t(batch * time * 3 * heads * kHeadDim) * 2),
        out(size_t(batch * time * heads * kHeadDim) * 2),
        dout(size_t(batch * time * heads * kHeadDim) * 2),
        stats(size_t(batch * heads * time) * 4),
        dqkv_cudnn(qkv.bytes()),
        dqkv_ours(qkv.bytes()),
        dq_acc(size_t(batch * heads * time * kHeadDim) * 4),
        counters(size_t(batch * heads * (time / kQueryBlock)) * 4),
        jobs((3 + size_t(batch * heads * (time / kQueryBlock))) * 4) {
    std::string why_not;
    forward = AttentionPlan::build(handle, shape, AttentionPass::forward, why_not);
    if (forward) backward = AttentionPlan::build(handle, shape, AttentionPass::backward, why_not);
    if (!forward || !backward) {
      std::fprintf(stderr, "attention_backward_lab: cuDNN builds no plan: %s\n", why_not.c_str());
      std::exit(1);
    }
    if (time % kKeyBlock != 0 || time > 32 * kQueryBlock) {  // whole key blocks; a finisher lane a block
      std::fprintf(stderr, "attention_backward_lab: T must be a multiple of 128 up to 2,048\n");
      std::exit(1);
    }
    const int64_t tokens = batch * time, channels = heads * kHeadDim;
    map_q = swizzled_tile_map(qkv.get(), tokens, 3 * channels, kQueryBlock, "attention_backward_lab");
    map_kv = swizzled_tile_map(qkv.get(), tokens, 3 * channels, kKeyBlock, "attention_backward_lab");
    map_o = swizzled_tile_map(out.get(), tokens, channels, kQueryBlock, "attention_backward_lab");
    map_do = swizzled_tile_map(dout.get(), tokens, channels, kQueryBlock, "attention_backward_lab");
    map_dq = swizzled_tile_map(dqkv_ours.get(), tokens, 3 * channels, kQueryBlock, "attention_backward_lab");
    work = Work{int(batch), int(heads), int(time)};
    grid = std::min(sms, work.units());
    check(cudaMemset(dq_acc.get(), 0, dq_acc.bytes()), "memset");
    check(cudaMemset(counters.get(), 0, counters.bytes()), "memset");
    check(cudaMemset(jobs.get(), 0, jobs.bytes()), "memset");
  }

  void fill(uint32_t seed, float qkv_range, cudaStream_t stream) {
    fill_uniform<<<1024, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(qkv.get()), int64_t(qkv.bytes() / 2),
                                           seed, qkv_range);
    fill_uniform<<<1024, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(dout.get()), int64_t(dout.bytes() / 2),
                                           seed + 1, 1.f);
    check(cudaGetLastError(), "fill");
    if (!forward->forward(qkv.get(), out.get(), static_cast<float*>(stats.get())))
      check(cudaErrorUnknown, "cuDNN's forward");
  }
  void run_cudnn() const {
    if (!backward->backward(qkv.get(), out.get(), static_cast<const float*>(stats.get()), dout.get(),
                            dqkv_cudnn.get()))
      check(cudaErrorUnknown, "cuDNN's backward");
  }
  // Ours with the work w (this shape's, its diagnosis flags or schedule changed); with clocks, the timed
  // build, which writes kClockSlots a CTA there.
  void run_ours(cudaStream_t stream, const Work& w, unsigned* clocks = nullptr) const {
    const auto kernel = kernels[clocks != nullptr];
    kernel<<<grid, kThreads, kSharedBytes, stream>>>(
        map_q, map_kv, map_o, map_do, map_dq, static_cast<const float*>(stats.get()),
        static_cast<float*>(dq_acc.get()), static_cast<int*>(counters.get()), static_cast<int*>(jobs.get()),
        static_cast<__nv_bfloat16*>(dqkv_ours.get()), w, clocks);
    check(cudaGetLastError(), "launch of our kernel");
  }
  void run_ours(cudaStream_t stream) const { run_ours(stream, work); }
  Work with_skip(int skip) const {
    Work w = work;
    w.skip = skip;
    return w;
  }
  // Max |ours - cuDNN's| per third of dqkv, then max |cuDNN's|: on the device, as the bits of floats.
  std::vector<float> gap_to_cudnn(cudaStream_t stream) const {
    DeviceBuffer result(6 * sizeof(unsigned));
    check(cudaMemsetAsync(result.get(), 0, result.bytes(), stream), "memset");
    compare_thirds<<<1024, 256, 0, stream>>>(static_cast<const __nv_bfloat16*>(dqkv_ours.get()),
                                             static_cast<const __nv_bfloat16*>(dqkv_cudnn.get()),
                                             int64_t(qkv.bytes() / 2), int(shape.channels),
                                             static_cast<unsigned*>(result.get()));
    std::vector<float> gap(6);
    check(cudaMemcpy(gap.data(), result.get(), result.bytes(), cudaMemcpyDeviceToHost), "copy back");
    return gap;
  }
};

std::vector<double> download_bf16(const DeviceBuffer& b) {
  std::vector<__nv_bfloat16> raw(b.bytes() / 2);
  check(cudaMemcpy(raw.data(), b.get(), b.bytes(), cudaMemcpyDeviceToHost), "copy back");
  std::vector<double> v(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) v[i] = __bfloat162float(raw[i]);
  return v;
}
std::vector<double> download_f32(const DeviceBuffer& b) {
  std::vector<float> raw(b.bytes() / 4);
  check(cudaMemcpy(raw.data(), b.get(), b.bytes(), cudaMemcpyDeviceToHost), "copy back");
  return std::vector<double>(raw.begin(), raw.end());
}

// The causal attention's forward and backward in fp64 from the same bf16 inputs: out, LSE and dqkv.
struct Reference {
  std::vector<double> out, lse, dqkv;
};
Reference reference(const std::vector<double>& qkv, const std::vector<double>& dout, int batch, int time,
                    int heads) {
  const int c = heads * kHeadDim, c3 = 3 * c;
  Reference r{std::vector<double>(size_t(batch) * time * c),
              std::vector<double>(size_t(batch) * heads * time), std::vector<double>(qkv.size(), 0.0)};
  std::vector<double> p(size_t(time) * time), ds(size_t(time) * time);
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h) {
      auto at = [&](int t, int part, int d) {
        return size_t(b * time + t) * c3 + part * c + h * kHeadDim + d;
      };
      auto row = [&](int t, int d) { return size_t(b * time + t) * c + h * kHeadDim + d; };
      for (int t = 0; t < time; ++t) {
        double largest = -1e300;
        for (int u = 0; u <= t; ++u) {
          double s = 0;
          for (int d = 0; d < kHeadDim; ++d) s += qkv[at(t, 0, d)] * qkv[at(u, 1, d)];
          p[size_t(t) * time + u] = s * kScale;
          largest = std::max(largest, s * kScale);
        }
        double sum = 0;
        for (int u = 0; u <= t; ++u) sum += std::exp(p[size_t(t) * time + u] - largest);
        const double lse = largest + std::log(sum);
        r.lse[size_t(b * heads + h) * time + t] = lse;
        for (int u = 0; u <= t; ++u) p[size_t(t) * time + u] = std::exp(p[size_t(t) * time + u] - lse);
        for (int d = 0; d < kHeadDim; ++d) {
          double o = 0;
          for (int u = 0; u <= t; ++u) o += p[size_t(t) * time + u] * qkv[at(u, 2, d)];
          r.out[row(t, d)] = o;
        }
        double dsum = 0;  // D = rowsum(dO * O)
        for (int d = 0; d < kHeadDim; ++d) dsum += dout[row(t, d)] * r.out[row(t, d)];
        for (int u = 0; u <= t; ++u) {
          double dp = 0;
          for (int d = 0; d < kHeadDim; ++d) dp += dout[row(t, d)] * qkv[at(u, 2, d)];
          ds[size_t(t) * time + u] = p[size_t(t) * time + u] * (dp - dsum);
        }
      }
      for (int t = 0; t < time; ++t)
        for (int u = 0; u <= t; ++u) {
          const double pt = p[size_t(t) * time + u], dst = ds[size_t(t) * time + u];
          for (int d = 0; d < kHeadDim; ++d) {
            r.dqkv[at(t, 0, d)] += kScale * dst * qkv[at(u, 1, d)];
            r.dqkv[at(u, 1, d)] += kScale * dst * qkv[at(t, 0, d)];
            r.dqkv[at(u, 2, d)] += pt * dout[row(t, d)];
          }
        }
    }
  return r;
}

// The worst |x - ref| / (1 + |ref|) per third of dqkv (dQ, dK, dV), then dQ's head dims 0-31 and 32-63 apart
// (the two consumer groups' halves of dQ).
std::vector<double> worst_relative(const std::vector<double>& x, const std::vector<double>& ref,
                                   int channels) {
  std::vector<double> worst(5, 0.0);
  for (size_t i = 0; i < x.size(); ++i) {
    const int col = static_cast<int>(i % (3 * size_t(channels))), third = col / channels;
    const double e = std::abs(x[i] - ref[i]) / (1.0 + std::abs(ref[i]));
    const double v = e != e ? 1e30 : e;  // a NaN is as wrong as it gets
    worst[third] = std::max(worst[third], v);
    if (third == 0) worst[3 + (col % kHeadDim) / 32] = std::max(worst[3 + (col % kHeadDim) / 32], v);
  }
  return worst;
}

// The timed build's clocks of one launch, by CTA % groups (with 132 CTAs and 4 pairs a head, the pair a
// CTA took before the pairs rotated): each slot as a share of the same CTA's consumer run, the mean over
// the group's CTAs; the finisher's blocks and cycles a block; the run in thousands of cycles.
void print_clocks(const std::vector<unsigned>& clocks, int grid, int groups) {
  std::printf(
      "    CTA %% %d | run kcyc (max) | consumers: K/V stage D dS^T dQ+adds | producer: K/V finisher stage | "
      "finisher: adds count convert, blocks, kcyc a block | D warps: stage math (%% of the run)\n",
      groups);
  for (int g = 0; g < groups; ++g) {
    std::vector<double> share(kClockSlots, 0.0);
    double run = 0, longest = 0, blocks = 0, convert = 0;
    int n = 0;
    for (int c = g; c < grid; c += groups, ++n) {
      const unsigned* x = clocks.data() + size_t(c) * kClockSlots;
      const double total = std::max(1u, x[kConsumerTotal]);
      for (int k = 0; k < kClockSlots; ++k) share[k] += 100.0 * x[k] / total;
      run += total, longest = std::max(longest, total);
      blocks += x[kFinisherBlocks], convert += x[kFinisherConvert];
    }
    if (n == 0) continue;
    for (double& v : share) v /= n;
    std::printf(
        "    %7d | %6.0f (%6.0f) | %5.1f %5.1f %4.1f %4.1f %5.1f | %4.1f %5.1f %4.1f | %4.1f %4.1f %5.1f, "
        "%4.1f, "
        "%5.2f | %4.1f %4.1f\n",
        g, run / n / 1e3, longest / 1e3, share[kConsumerKv], share[kConsumerFull], share[kConsumerDelta],
        share[kConsumerSync], share[kConsumerAdds], share[kProducerKv], share[kProducerFinisher],
        share[kProducerEmpty], share[kFinisherAdds], share[kFinisherCount], share[kFinisherConvert],
        blocks / n, blocks > 0 ? convert / blocks / 1e3 : 0.0, share[kDeltaFull], share[kDeltaMath]);
  }
  // The wall clock, from CTA 0's start (differences of 32-bit stamps, which wrap every 4.3 s).
  const auto at = [&](int c, int slot) {
    return 1e-3 * static_cast<int32_t>(clocks[size_t(c) * kClockSlots + slot] - clocks[kWallStart]);
  };
  double first = 1e30, last_start = -1e30, end = -1e30, runs = 0, longest = 0, tail = 0, worst_tail = -1e30,
         cycles = 0, ns = 0;
  unsigned fewest = ~0u, most = 0;  // dQ blocks a CTA's finisher converted
  for (int c = 0; c < grid; ++c) {
    const double start = at(c, kWallStart), consumers = at(c, kWallConsumerEnd),
                 finisher = at(c, kWallFinisherEnd);
    first = std::min(first, start), last_start = std::max(last_start, start);
    end = std::max({end, consumers, finisher});
    runs += consumers - start, longest = std::max(longest, consumers - start);
    tail += finisher - consumers, worst_tail = std::max(worst_tail, finisher - consumers);
    cycles += clocks[size_t(c) * kClockSlots + kConsumerTotal], ns += 1e3 * (consumers - start);
    const unsigned blocks = clocks[size_t(c) * kClockSlots + kFinisherBlocks];
    fewest = std::min(fewest, blocks), most = std::max(most, blocks);
  }
  std::printf(
      "    wall: the CTAs start within %.1f us, the last ends %.1f us after the first start; consumer runs "
      "%.1f us (mean), %.1f (max); the finisher ends %.1f us (mean), %.1f (max) after its consumers; "
      "%.0f MHz (consumer cycles / ns); %u-%u dQ blocks a CTA\n",
      last_start - first, end - first, runs / grid, longest, tail / grid, worst_tail, 1e3 * cycles / ns,
      fewest, most);
}

// The variants timed and checked: the default first, then lag 8, then the conversions spread over every
// CTA's finisher through the queue, taking 2 or 4 blocks an item.
std::vector<Work> variants(const Work& base) {
  std::vector<Work> all;
  for (const auto& [lag, spread] : {std::pair{4, 0}, std::pair{8, 0}, std::pair{4, 2}, std::pair{4, 4},
                                    std::pair{8, 2}, std::pair{8, 4}}) {
    Work w = base;
    w.finish_lag = lag, w.spread = spread;
    all.push_back(w);
  }
  return all;
}

double largest_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  kernel_bench::program = "attention_backward_lab";
  std::vector<int64_t> batches = {16, 64};
  int reps = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--batch" && i + 1 < argc && std::atoll(argv[i + 1]) > 0) {
      batches = {std::atoll(argv[++i])};
    } else if (a == "--reps" && i + 1 < argc && std::atoi(argv[i + 1]) > 0) {
      reps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--batch B] [--reps N]\n", argv[0]);
      return 2;
    }
  }
  try {
    int device = 0, sms = 0, major = 0;
    check(cudaGetDevice(&device), "device");
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "attribute");
    check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "attribute");
    if (major != 9) {
      std::fprintf(stderr, "attention_backward_lab: needs a Hopper GPU (sm_90a), this is sm_%d\n",
                   major * 10);
      return 1;
    }
    for (const auto kernel : kernels)
      check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes),
            "shared memory");
    cudaStream_t stream = nullptr;
    check(cudaStreamCreate(&stream), "stream");
    cudnnHandle_t handle = nullptr;
    if (cudnnCreate(&handle) != CUDNN_STATUS_SUCCESS ||
        cudnnSetStream(handle, stream) != CUDNN_STATUS_SUCCESS) {
      std::fprintf(stderr, "attention_backward_lab: no cuDNN handle\n");
      return 1;
    }
    std::printf(
        "attention_backward_lab: %d SMs, cuDNN %zu; our kernel %d threads, %d bytes of shared memory\n", sms,
        cudnnGetVersion(), kThreads, kSharedBytes);

    // 1. Correctness at a small shape against fp64 on the host (O and LSE computed there too, so that
    //    cuDNN's forward is checked on the way: our backward reads cuDNN's O and stats, as dlbench's would).
    // Each variant of ours runs three times (variants()). If dQ alone is wrong in its dims 32-63, the offset
    // start of the second consumer group's B descriptor is what to suspect.
    bool all_right = true;
    {
      const int batch = 2, time = 256, heads = 2, channels = heads * kHeadDim;
      Problem small(handle, batch, time, heads, sms);
      small.fill(11, 2.f, stream);
      small.run_cudnn();
      check(cudaStreamSynchronize(stream), "cuDNN at the small shape");
      const Reference ref =
          reference(download_bf16(small.qkv), download_bf16(small.dout), batch, time, heads);
      std::printf(
          "check: batch %d x %d, %d heads of 64 (q, k, v in [-2, 2], dout in [-1, 1]) against fp64 on the "
          "host\n  cuDNN's forward: out max |diff| %.2e, stats max |diff| %.2e\n",
          batch, time, heads, largest_difference(download_bf16(small.out), ref.out),
          largest_difference(download_f32(small.stats), ref.lse));
      constexpr double kBound = 2e-2;
      std::printf("  worst |x - ref| / (1 + |ref|)%22s dQ        dK        dV        (dQ dims 0-31, 32-63)\n",
                  "");
      const auto print = [&](const char* who, const std::vector<double>& worst) {
        const bool right = worst[0] < kBound && worst[1] < kBound && worst[2] < kBound;
        std::printf("  %-51s %.2e  %.2e  %.2e  (%.2e, %.2e)  %s\n", who, worst[0], worst[1], worst[2],
                    worst[3], worst[4], right ? "right" : "WRONG");
        return right;
      };
      print("cuDNN", worst_relative(download_bf16(small.dqkv_cudnn), ref.dqkv, channels));
      DeviceBuffer clocks(size_t(small.grid) * kClockSlots * sizeof(unsigned));
      // Each variant runs twice in a row (the workspace it leaves must serve the next call) and once in
      // the timed build; NaNs first, so that an element the kernel never writes shows as wrong.
      for (const Work& w : variants(small.work)) {
        for (int call = 1; call <= 3; ++call) {
          check(cudaMemsetAsync(small.dqkv_ours.get(), 0xff, small.dqkv_ours.bytes(), stream), "memset");
          small.run_ours(stream, w, call == 3 ? static_cast<unsigned*>(clocks.get()) : nullptr);
          check(cudaStreamSynchronize(stream), "ours at the small shape");
          const std::string who =
              "ours, " + w.name() + (call == 3 ? ", timed build" : ", call " + std::to_string(call));
          all_right &= print(who.c_str(), worst_relative(download_bf16(small.dqkv_ours), ref.dqkv, channels));
        }
      }
    }

    // 2. At gpt2-large's shape: ours against cuDNN's backward, then the timing.
    for (const int64_t batch : batches) {
      const int64_t time = 1024, heads = 20;
      Problem p(handle, batch, time, heads, sms);
      p.fill(23, 1.f, stream);
      p.run_cudnn();
      std::printf(
          "gpt2-large, batch %lld x %lld, %lld heads of 64, bf16: %d CTAs over %d units of %d query blocks\n",
          static_cast<long long>(batch), static_cast<long long>(time), static_cast<long long>(heads), p.grid,
          p.work.units(), p.work.key_blocks() + 1);
      // Against cuDNN before the timing and after it (every launch of the timing adds into, converts and
      // clears the same workspace: a race there shows as a dQ far from cuDNN's).
      const auto compare = [&](const char* when) {
        const std::vector<float> gap = p.gap_to_cudnn(stream);
        std::printf(
            "  ours against cuDNN's backward, %s: max |diff| dQ %.3g (values to %.3g), dK %.3g (%.3g), dV "
            "%.3g "
            "(%.3g)\n",
            when, gap[0], gap[3], gap[1], gap[4], gap[2], gap[5]);
        // A key block missing from dQ, or added twice, moves it by far more than 5% of its largest value;
        // bf16's rounding of two different summation orders by far less.
        return gap[0] < 0.05f * gap[3] && gap[1] < 0.05f * gap[4] && gap[2] < 0.05f * gap[5];
      };
      check(cudaMemsetAsync(p.dqkv_ours.get(), 0xff, p.dqkv_ours.bytes(), stream), "memset");
      p.run_ours(stream);
      all_right &= compare("first call");

      const double flops = 2.5 * 2.0 * double(batch) * double(time) * double(time) * double(heads * kHeadDim);
      const auto row = [&](const char* what, const std::function<void()>& body) {
        const double us = 1e3 * kernel_bench::median_ms(stream, reps, body, /*warm_ups=*/3);
        std::printf("  %-51s %9.1f us %7.1f TFLOP/s\n", what, us, flops / (us * 1e6));
      };
      std::printf("  median of %d after 3 warm-ups (TFLOP/s of the causal backward's 2.5 x 2 B T^2 C):\n",
                  reps);
      row("cuDNN backward", [&] { p.run_cudnn(); });
      row("ours", [&] { p.run_ours(stream); });
      check(cudaGetLastError(), "timing");
      all_right &= compare("after the timing");

      // Each variant timed, checked against cuDNN after, and one launch of it in the timed build.
      DeviceBuffer clocks(size_t(p.grid) * kClockSlots * sizeof(unsigned));
      std::vector<unsigned> host_clocks(size_t(p.grid) * kClockSlots);
      for (const Work& w : variants(p.work)) {
        row(("ours, " + w.name()).c_str(), [&] { p.run_ours(stream, w); });
        all_right &= compare("after its timing");
        p.run_ours(stream, w, static_cast<unsigned*>(clocks.get()));
        check(cudaMemcpy(host_clocks.data(), clocks.get(), clocks.bytes(), cudaMemcpyDeviceToHost), "clocks");
        print_clocks(host_clocks, p.grid, p.work.pairs());
      }
      all_right &= compare("the timed build, after it");
      row("diagnosis: ours without the dQ conversion", [&] { p.run_ours(stream, p.with_skip(1)); });
      // Its timed build beside the variants': do the conversions slow the consumers, or follow them?
      p.run_ours(stream, p.with_skip(1), static_cast<unsigned*>(clocks.get()));
      check(cudaMemcpy(host_clocks.data(), clocks.get(), clocks.bytes(), cudaMemcpyDeviceToHost), "clocks");
      print_clocks(host_clocks, p.grid, p.work.pairs());
      row("diagnosis: ours without dQ's counts either", [&] { p.run_ours(stream, p.with_skip(3)); });
      row("diagnosis: ... nor D's math", [&] { p.run_ours(stream, p.with_skip(7)); });
      row("diagnosis: ... nor O's copies", [&] { p.run_ours(stream, p.with_skip(15)); });
      row("diagnosis: ... nor the helper warps", [&] { p.run_ours(stream, p.with_skip(127)); });
      row("diagnosis: ours, no D warps", [&] { p.run_ours(stream, p.with_skip(16 | 32)); });
      row("diagnosis: ours, no finisher warp", [&] { p.run_ours(stream, p.with_skip(64)); });
    }
    if (!all_right) std::printf("attention_backward_lab: WRONG (the times above are of a wrong kernel)\n");
    cudnnDestroy(handle);
    cudaStreamDestroy(stream);
    return all_right ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attention_backward_lab: %s\n", e.what());
    return 1;
  }
}
