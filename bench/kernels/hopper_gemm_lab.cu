// Can a GEMM of dlbench's own run GPT-2's MLP GEMMs with GELU in the epilogue at the plain GEMM's rate?
// At the power cap cuBLASLt runs gpt2-large's plain GEMMs at 600-690 TFLOP/s, but mlp.c_fc's forward with
// GELU_AUX_BIAS (GELU's output and its input both written) at 510-550 and mlp.c_proj's data gradient with
// DGELU at 530-590, for which its heuristic offers only an older kernel: together ~0.25 ms of a block's
// 6.4 ms of GEMMs at 32,768 tokens (bench/results/gpt2-gemm-choice). This lab builds Hopper's GEMM the way
// that design goes (FlashAttention-3, CUTLASS's warp-specialised kernels):
//   - TMA copies tiles of A (rows x 64) and B (256 x 64) into a ring of shared-memory stages, in the
//     128-byte swizzle that wgmma reads without bank conflicts;
//   - one producer thread issues the copies; two consumer warp groups multiply with wgmma.m64n256k16,
//     their accumulators in registers;
//   - mbarriers hand each stage from producer to consumers (full: the copy's bytes landed) and back
//     (empty: every consumer warp's wgmma that read it has finished);
//   - the grid is persistent, one CTA an SM walking the output tiles, so the producer loads the next
//     tile's stages while the consumers run the epilogue of the last;
//   - the epilogue adds the bias and applies GELU (keeping its input) or GELU's gradient (reading it) on
//     the accumulators, and stores through a small staging tile per warp (stmatrix, then whole 128-byte
//     rows).
// The schedule is cooperative: both consumer groups work on one 128 x 256 tile, 64 rows each, so the
// tensor cores idle during the epilogue. Ping-pong (each consumer group its own 64 x 256 tile, its
// epilogue under the other's main loop) and a 2-CTA pair with B multicast were built and measured
// (bench/results/gpt2-own-gemm) and removed: their main loops reached only 434-486 and 353 TFLOP/s against
// the cooperative 128 x 256 tile's 759-789, because a 64-row tile brings 40 KB of operands per 2.1 MFLOP
// against 48 KB per 4.2 MFLOP, and operand supply into the SMs bounds the rate.
// Both operands are K-major (row-major [rows, K]): D[m, n] = A[m, k] B[n, k]^T, row-major; for the data
// gradient B is the transposed weight (dlbench stores W [out, in]; its transpose is one pass a step).
// Each kernel is checked against fp64 dot products at sampled outputs and against cuBLASLt's output, then
// timed against cuBLASLt's heuristic choice with the same epilogue and plain, in bursts and sustained,
// with the main loop alone (no stores) beside: what the epilogue costs. The block's other forward GEMMs
// (attn.c_attn, attn.c_proj, mlp.c_proj) follow plain, ours against cuBLASLt's: whether a GEMM of our own
// would run the step's plain GEMMs faster at the power cap.
//
//   hopper_gemm_lab [--model gpt2-large] [--tokens N] [--reps R] [--sustain-ms T]
#include <cublasLt.h>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/gelu_math.cuh"
#include "gpt_gemm_probe.h"
#include "hopper_ptx.cuh"

namespace {

using gpt_gemm_probe::check;
using namespace hopper_ptx;
using gpt_gemm_probe::fill_random;
using gpt_gemm_probe::set;
using Gelu = dlbench::cuda::detail::GeluMath<float>;

constexpr int kTileN = 256, kBlockK = 64;  // 64 bf16 = 128 bytes: one swizzle row
constexpr int kTileM = 128;                // both consumer groups on one tile, 64 rows each
constexpr int kThreads = 384;              // a producer warp group and two consumer warp groups
constexpr int kStages = 4;
constexpr int kStageBytesA = kTileM * kBlockK * 2, kStageBytesB = kTileN * kBlockK * 2;
// Each consumer warp stages 16 rows x 64 columns of its output (2 KB) between its fragments and global
// memory, so that its stores (and dgelu's loads) are whole 128-byte rows.
constexpr int kStagingBytes = 8 * 16 * 64 * 2;
// Every consumer warp reads each stage, so all 8 must release it before the producer refills it.
constexpr int kConsumingWarps = 8;
// The ring, the staging tiles, a full and an empty barrier a stage, and room to align to 1,024 bytes.
constexpr int kSharedBytes = kStages * (kStageBytesA + kStageBytesB) + kStagingBytes + 2 * kStages * 8 + 1024;

// mainloop_only: the plain GEMM that stores nothing (unless a value is NaN): what the epilogue costs.
enum class Epilogue { none, bias_gelu_aux, dgelu, mainloop_only };
const char* name(Epilogue e) {
  return e == Epilogue::none            ? "plain"
         : e == Epilogue::bias_gelu_aux ? "gelu_aux_bias"
         : e == Epilogue::dgelu         ? "dgelu"
                                        : "mainloop only";
}

// wgmma reads the K-major tiles TMA wrote with the 128-byte swizzle through swizzled_descriptor
// (hopper_ptx.cuh); a k-slice of 16 elements further along the row starts 32 bytes on.

// D[64, 256] (+)= A[64, 16] B[256, 16]^T, both operands K-major in shared memory (128-byte swizzle);
// scale_d 0 starts the accumulators afresh.
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b,
                                                 int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
        "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
        "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),
        "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),
        "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]),
        "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]),
        "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]),
        "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]),
        "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]),
        "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]),
        "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]),
        "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]),
        "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// GELU and its gradient with the tanh approximation instruction (2^-11 relative): the results are
// rounded to bf16 (2^-9) on their way out.
__device__ __forceinline__ float tanh_fast(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float gelu_fast(float x) {
  return 0.5f * x * (1.f + tanh_fast(Gelu::kSqrt2OverPi * (x + Gelu::kCubic * x * x * x)));
}
__device__ __forceinline__ float gelu_derivative_fast(float x) {
  const float t = tanh_fast(Gelu::kSqrt2OverPi * (x + Gelu::kCubic * x * x * x));
  return 0.5f * (1.f + t) +
         0.5f * x * (1.f - t * t) * Gelu::kSqrt2OverPi * (1.f + 3.f * Gelu::kCubic * x * x);
}

// A warp's staging tile: 16 rows of 128 bytes (64 bf16), the 16-byte piece p of row r at p ^ (r % 8), so
// that neither the fragments' 8-row stores nor the rows' reads meet a bank twice.
__device__ __forceinline__ uint32_t staged(uint32_t staging, int row, int piece) {
  return staging + row * 128 + ((piece ^ (row % 8)) * 16);
}

// The accumulator fragment of wgmma.m64nNk16: the thread holds rows lane / 4 and lane / 4 + 8 of its
// warp's 16, at columns 8j + 2(lane % 4) and the one after: acc[4j], acc[4j + 1] and acc[4j + 2],
// acc[4j + 3], each pair one thread's share of an 8x8 matrix fragment of stmatrix / ldmatrix. Columns
// [64c, 64c + 64) are j = 8c .. 8c + 7, in four groups g of two j's and both halves: matrix m of group g
// is j = 8c + 2g + m / 2, rows 8 (m % 2) on, and lane L gives the address of row L % 8 of matrix L / 8.
__device__ __forceinline__ uint32_t fragment_row(uint32_t staging, int group, int lane) {
  const int m = lane / 8;
  return staged(staging, 8 * (m % 2) + lane % 8, 2 * group + m / 2);
}
__device__ __forceinline__ int fragment_index(int chunk, int group, int r) {
  return 4 * (8 * chunk + 2 * group + r / 2) + 2 * (r % 2);
}

template <bool kGelu>
__device__ __forceinline__ void store_fragments(uint32_t staging, const float (&acc)[128], int chunk,
                                                int lane) {
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    uint32_t p[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int i = fragment_index(chunk, g, r);
      const __nv_bfloat162 v = kGelu ? __floats2bfloat162_rn(gelu_fast(acc[i]), gelu_fast(acc[i + 1]))
                                     : __floats2bfloat162_rn(acc[i], acc[i + 1]);
      p[r] = *reinterpret_cast<const uint32_t*>(&v);
    }
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(
                     fragment_row(staging, g, lane)),
                 "r"(p[0]), "r"(p[1]), "r"(p[2]), "r"(p[3])
                 : "memory");
  }
}
// The accumulators of a chunk times GELU's gradient at its input, which the staging tile holds.
__device__ __forceinline__ void apply_gelu_gradient(uint32_t staging, float (&acc)[128], int chunk,
                                                    int lane) {
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    uint32_t p[4];
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(p[0]), "=r"(p[1]), "=r"(p[2]), "=r"(p[3])
                 : "r"(fragment_row(staging, g, lane))
                 : "memory");
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int i = fragment_index(chunk, g, r);
      const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&p[r]));
      acc[i] *= gelu_derivative_fast(x.x), acc[i + 1] *= gelu_derivative_fast(x.y);
    }
  }
}
// The staging tile to rows [row0, row0 + 16) x [col, col + 64) of a row-major matrix of n columns: each lane
// four 16-byte pieces, eight lanes a row.
__device__ __forceinline__ void store_rows(uint32_t staging, __nv_bfloat16* out, int row0, int col, int n,
                                           int lane) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = (32 * i + lane) / 8, piece = lane % 8;
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(staged(staging, row, piece)));
    *reinterpret_cast<uint4*>(out + size_t(row0 + row) * n + col + 8 * piece) = v;
  }
}
// The reverse, in two halves so that the loads can be in flight under other work: rows of a row-major
// matrix into registers, four 16-byte pieces a lane (its pieces of store_rows), then into the staging tile.
__device__ __forceinline__ void fetch_rows(uint4 (&v)[4], const __nv_bfloat16* in, int row0, int col, int n,
                                           int lane) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = (32 * i + lane) / 8, piece = lane % 8;
    v[i] = *reinterpret_cast<const uint4*>(in + size_t(row0 + row) * n + col + 8 * piece);
  }
}
__device__ __forceinline__ void stage_rows(uint32_t staging, const uint4 (&v)[4], int lane) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = (32 * i + lane) / 8, piece = lane % 8;
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(staged(staging, row, piece)), "r"(v[i].x),
                 "r"(v[i].y), "r"(v[i].z), "r"(v[i].w)
                 : "memory");
  }
}

// D[m, n] = epilogue(A[m, k] B[n, k]^T), row-major, m and n multiples of 128, k of 64.
//   none:          D = AB^T
//   bias_gelu_aux: aux = AB^T + bias[n], D = gelu(aux)        (mlp.c_fc's forward)
//   dgelu:         D = AB^T * gelu'(aux)                       (mlp.c_proj's data gradient)
// kInFlight: the wgmma groups (k-blocks) a consumer group keeps in flight (2 for timing the choice).
template <Epilogue kEpilogue, int kInFlight = 1>
__global__ void __launch_bounds__(kThreads, 1)
    gemm(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b, int m, int n,
         int k, __nv_bfloat16* __restrict__ d, __nv_bfloat16* __restrict__ aux,
         const __nv_bfloat16* __restrict__ bias) {
  extern __shared__ uint8_t shared_raw[];
  uint8_t* shared =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(shared_raw) + 1023) & ~uintptr_t{1023});
  uint8_t* stage_a = shared;
  uint8_t* stage_b = shared + kStages * kStageBytesA;
  uint8_t* staging = stage_b + kStages * kStageBytesB;
  uint64_t* full = reinterpret_cast<uint64_t*>(staging + kStagingBytes);
  uint64_t* empty = full + kStages;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      barrier_init(&full[s], 1);
      barrier_init(&empty[s], kConsumingWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  const int tiles_n = n / kTileN, k_blocks = k / kBlockK;
  const int tiles = (m / kTileM) * tiles_n;
  const int warp_group = threadIdx.x / 128;
  if (warp_group == 0) {  // the producer: one thread issues every copy, the CTA's tiles in order
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x == 0) {
      int step = 0;  // stages filled so far, over all tiles: its stage and the barriers' phase
      for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int row0 = tile / tiles_n * kTileM, col0 = tile % tiles_n * kTileN;
        for (int kb = 0; kb < k_blocks; ++kb, ++step) {
          const int s = step % kStages;
          barrier_wait(&empty[s], ((step / kStages) & 1) ^ 1);  // a fresh barrier's "previous" phase is done
          barrier_expect_bytes(&full[s], kStageBytesA + kStageBytesB);
          copy_tile(shared_address(stage_a + s * kStageBytesA), &map_a, &full[s], kb * kBlockK, row0);
          copy_tile(shared_address(stage_b + s * kStageBytesB), &map_b, &full[s], kb * kBlockK, col0);
        }
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  const int consumer = warp_group - 1;  // which 64 rows of the tile
  const int warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const uint32_t staging_address = shared_address(staging + (threadIdx.x / 32 - 4) * 2048);
  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.f;
  int step = 0;  // stages consumed so far, counted as the producer counts them
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int row0 = tile / tiles_n * kTileM, col0 = tile % tiles_n * kTileN;
    for (int kb = 0; kb < k_blocks; ++kb, ++step) {
      const int s = step % kStages;
      barrier_wait(&full[s], (step / kStages) & 1);
      const uint32_t a = shared_address(stage_a + s * kStageBytesA + consumer * 64 * 128);
      const uint32_t b = shared_address(stage_b + s * kStageBytesB);
      fence_registers(acc);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBlockK / 16; ++kk)
        wgmma_m64n256k16(acc, swizzled_descriptor(a + 32 * kk), swizzled_descriptor(b + 32 * kk),
                         kb > 0 || kk > 0);
      wgmma_commit();
      fence_registers(acc);
      // kInFlight groups stay in flight; the one before them has finished reading its stage, which goes
      // back.
      wgmma_wait<kInFlight>();
      fence_registers(acc);
      if (kb >= kInFlight && lane == 0) barrier_arrive(&empty[(step - kInFlight) % kStages]);
    }
    // dgelu: GELU's input for the first 64 columns, its loads in flight under the last wgmma group.
    const int warp_row0 = row0 + 64 * consumer + 16 * warp;
    uint4 gelu_input[4];
    if (kEpilogue == Epilogue::dgelu) fetch_rows(gelu_input, aux, warp_row0, col0, n, lane);
    wgmma_wait<0>();
    fence_registers(acc);
    if (lane == 0)
      for (int i = kInFlight; i >= 1; --i) barrier_arrive(&empty[(step - i) % kStages]);

    if (kEpilogue == Epilogue::mainloop_only) {
      bool any_nan = false;
#pragma unroll
      for (int i = 0; i < 128; ++i) any_nan |= acc[i] != acc[i];
      if (any_nan) d[0] = __float2bfloat16(acc[0]);
      continue;
    }
    if (kEpilogue == Epilogue::bias_gelu_aux) {
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const float2 b = __bfloat1622float2(
            *reinterpret_cast<const __nv_bfloat162*>(bias + col0 + 8 * j + 2 * (lane % 4)));
        acc[4 * j] += b.x, acc[4 * j + 1] += b.y, acc[4 * j + 2] += b.x, acc[4 * j + 3] += b.y;
      }
    }
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int col = col0 + 64 * c;
      if (kEpilogue == Epilogue::dgelu) {  // this chunk's input staged, the next one's loads issued
        stage_rows(staging_address, gelu_input, lane);
        if (c < 3) fetch_rows(gelu_input, aux, warp_row0, col + 64, n, lane);
        __syncwarp();
        apply_gelu_gradient(staging_address, acc, c, lane);
        __syncwarp();
      }
      if (kEpilogue == Epilogue::bias_gelu_aux) {  // the saved input first
        store_fragments<false>(staging_address, acc, c, lane);
        __syncwarp();
        store_rows(staging_address, aux, warp_row0, col, n, lane);
        __syncwarp();
      }
      store_fragments<kEpilogue == Epilogue::bias_gelu_aux>(staging_address, acc, c, lane);
      __syncwarp();
      store_rows(staging_address, d, warp_row0, col, n, lane);
      __syncwarp();
    }
  }
}

struct OwnGemm {
  CUtensorMap map_a, map_b;  // A's boxes of 128 rows, B's of 256
  int m, n, k, sms;
};

static_assert(kBlockK == 64, "swizzled_tile_map's boxes are 64 elements wide");
OwnGemm own_gemm(const __nv_bfloat16* a, const __nv_bfloat16* b, int m, int n, int k, int sms) {
  return {swizzled_tile_map(a, m, k, kTileM, "hopper_gemm_lab"),
          swizzled_tile_map(b, n, k, kTileN, "hopper_gemm_lab"),
          m,
          n,
          k,
          sms};
}

template <Epilogue kEpilogue, int kInFlight = 1>
void launch(const OwnGemm& g, __nv_bfloat16* d, __nv_bfloat16* aux, const __nv_bfloat16* bias,
            cudaStream_t stream) {
  auto kernel = gemm<kEpilogue, kInFlight>;
  cudaLaunchConfig_t config = {};
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = kSharedBytes;
  config.stream = stream;
  static int grid = 0;  // one CTA an SM
  if (grid == 0) {
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes),
          "shared memory");
    grid = std::min(g.sms, (g.m / kTileM) * (g.n / kTileN));
    std::printf("  (cooperative: %d CTAs)\n", grid);
  }
  config.gridDim = dim3(grid);
  check(cudaLaunchKernelEx(&config, kernel, g.map_a, g.map_b, g.m, g.n, g.k, d, aux, bias), "launch");
}

void run_own(Epilogue e, const OwnGemm& g, __nv_bfloat16* d, __nv_bfloat16* aux, const __nv_bfloat16* bias,
             cudaStream_t stream) {
  if (e == Epilogue::none) launch<Epilogue::none>(g, d, aux, bias, stream);
  if (e == Epilogue::bias_gelu_aux) launch<Epilogue::bias_gelu_aux>(g, d, aux, bias, stream);
  if (e == Epilogue::dgelu) launch<Epilogue::dgelu>(g, d, aux, bias, stream);
  if (e == Epilogue::mainloop_only) launch<Epilogue::mainloop_only>(g, d, aux, bias, stream);
}

// W^T of a row-major [rows, cols] matrix: the data gradient's B operand, K-major.
__global__ void transpose(const __nv_bfloat16* __restrict__ in, __nv_bfloat16* __restrict__ out, int rows,
                          int cols) {
  __shared__ __nv_bfloat16 tile[32][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  for (int i = threadIdx.y; i < 32; i += blockDim.y)
    tile[i][threadIdx.x] = in[size_t(blockIdx.y * 32 + i) * cols + c];
  __syncthreads();
  const int r = blockIdx.y * 32 + threadIdx.x;
  for (int i = threadIdx.y; i < 32; i += blockDim.y)
    out[size_t(blockIdx.x * 32 + i) * rows + r] = tile[threadIdx.x][i];
}

// cuBLASLt's heuristic first choice for dlbench's call of the same GEMM (column-major D[m_lt, n_lt] with
// m_lt = our n, n_lt = our m), with `epilogue`.
struct LtGemm {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatmulAlgo_t algo;
  const void *a, *b;
};

LtGemm lt_gemm(cublasLtHandle_t lt, cublasOperation_t ta, const void* a, const void* b, int m_lt, int n_lt,
               int k, cublasLtEpilogue_t epilogue, const void* bias, const void* aux, void* workspace,
               size_t workspace_bytes) {
  LtGemm g{};
  check(cublasLtMatmulDescCreate(&g.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
  set(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, ta);
  set(g.desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  set(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
  if (epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) set(g.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  if (epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    set(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
    set(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{m_lt});
  }
  auto layout = [](int rows, int cols) {
    cublasLtMatrixLayout_t l;
    check(cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, rows, cols, rows), "layout");
    return l;
  };
  g.la = ta == CUBLAS_OP_N ? layout(m_lt, k) : layout(k, m_lt);
  g.lb = layout(k, n_lt);
  g.ld = layout(m_lt, n_lt);
  const auto offers = gpt_gemm_probe::heuristic_choices(lt, g.desc, g.la, g.lb, g.ld, workspace_bytes, 1);
  if (offers.empty()) {
    std::fprintf(stderr, "hopper_gemm_lab: cuBLASLt offers no algorithm\n");
    std::exit(1);
  }
  g.algo = offers[0].algo;
  g.a = a;
  g.b = b;
  return g;
}

void run_lt(cublasLtHandle_t lt, const LtGemm& g, void* d, void* workspace, size_t workspace_bytes,
            cudaStream_t stream) {
  const float one = 1.f, zero = 0.f;
  check(cublasLtMatmul(lt, g.desc, &one, g.a, g.la, g.b, g.lb, &zero, d, g.ld, d, g.ld, &g.algo, workspace,
                       workspace_bytes, stream),
        "cublasLtMatmul");
}

std::vector<float> to_host(const __nv_bfloat16* p, size_t count) {
  std::vector<__nv_bfloat16> raw(count);
  check(cudaMemcpy(raw.data(), p, count * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost), "copy back");
  std::vector<float> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = __bfloat162float(raw[i]);
  return out;
}

// The largest |ours - theirs| / (1 + |theirs|) over two outputs of one GEMM.
double relative_gap(const std::vector<float>& ours, const std::vector<float>& theirs) {
  double gap = 0;
  for (size_t i = 0; i < ours.size(); ++i)
    gap = std::max(gap, std::abs(double(ours[i]) - theirs[i]) / (1.0 + std::abs(double(theirs[i]))));
  return gap;
}

double gelu_reference(double x, bool derivative) {
  const double c = 0.7978845608028654, t = std::tanh(c * (x + 0.044715 * x * x * x));
  return derivative ? 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x)
                    : 0.5 * x * (1 + t);
}

}  // namespace

int main(int argc, char** argv) {
  gpt_gemm_probe::program = "hopper_gemm_lab";
  const gpt_gemm_probe::Options options = gpt_gemm_probe::parse_options(argc, argv, 128);
  const int tokens = static_cast<int>(options.tokens), c = static_cast<int>(options.width), f = 4 * c;
  if (c % kBlockK || f % kTileN) {
    std::fprintf(stderr, "hopper_gemm_lab: %s's width %d does not tile (64 and 256)\n", options.model.c_str(),
                 c);
    return 2;
  }
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "attribute");
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "stream");
  cublasLtHandle_t lt;
  check(cublasLtCreate(&lt), "cublasLtCreate");

  // mlp.c_fc forward: x [T, C], W_fc [4C, C] -> pre, h [T, 4C].  mlp.c_proj data: dy [T, C], W_proj [C, 4C]
  // (its transpose [4C, C] for ours) -> dh [T, 4C] through GELU's gradient at pre.
  const size_t act = size_t(tokens) * c, wide = size_t(tokens) * f, weight = size_t(f) * c;
  __nv_bfloat16 *x, *w_fc, *dy, *w_proj, *w_proj_t, *bias, *pre, *out_own, *out_lt, *aux_own;
  for (auto [p, count] : {std::pair{&x, act},
                          {&w_fc, weight},
                          {&dy, act},
                          {&w_proj, weight},
                          {&w_proj_t, weight},
                          {&bias, size_t(f)},
                          {&pre, wide},
                          {&out_own, wide},
                          {&out_lt, wide},
                          {&aux_own, wide}})
    check(cudaMalloc(p, count * sizeof(__nv_bfloat16)), "malloc");
  void* workspace;
  const size_t workspace_bytes = size_t{32} << 20;
  check(cudaMalloc(&workspace, workspace_bytes), "malloc");
  uint32_t seed = 7;
  for (auto [p, count] : {std::pair{x, act}, {w_fc, weight}, {dy, act}, {w_proj, weight}, {bias, size_t(f)}})
    fill_random<<<1024, 256, 0, stream>>>(p, int64_t(count), seed++);
  transpose<<<dim3(f / 32, c / 32), dim3(32, 8), 0, stream>>>(w_proj, w_proj_t, c, f);
  check(cudaStreamSynchronize(stream), "fill");

  struct Case {
    Epilogue epilogue;
    OwnGemm own;
    LtGemm lt, lt_plain;
    __nv_bfloat16* aux;  // ours: written (forward) or read (dgelu)
  };
  // cuBLASLt's GELU_AUX_BIAS writes its aux into `pre`, which both DGELUs then read.
  Case cases[] = {
      {Epilogue::bias_gelu_aux, own_gemm(x, w_fc, tokens, f, c, sms),
       lt_gemm(lt, CUBLAS_OP_T, w_fc, x, f, tokens, c, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, bias, pre, workspace,
               workspace_bytes),
       lt_gemm(lt, CUBLAS_OP_T, w_fc, x, f, tokens, c, CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, workspace,
               workspace_bytes),
       aux_own},
      {Epilogue::dgelu, own_gemm(dy, w_proj_t, tokens, f, c, sms),
       lt_gemm(lt, CUBLAS_OP_N, w_proj, dy, f, tokens, c, CUBLASLT_EPILOGUE_DGELU, nullptr, pre, workspace,
               workspace_bytes),
       lt_gemm(lt, CUBLAS_OP_N, w_proj, dy, f, tokens, c, CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr,
               workspace, workspace_bytes),
       pre},
  };

  std::printf("%s, %d tokens, BF16, %d SMs: D [%d, %d] = A [%d, %d] B [%d, %d]^T\n", options.model.c_str(),
              tokens, sms, tokens, f, tokens, c, f, c);
  const std::vector<float> host_a0 = to_host(x, act), host_fc = to_host(w_fc, weight),
                           host_dy = to_host(dy, act), host_proj_t = to_host(w_proj_t, weight),
                           host_bias = to_host(bias, size_t(f));
  bool all_right = true;
  for (const Case& cs : cases) {
    // Correctness: ours and the plain ours at sampled outputs against fp64, then all of ours against
    // cuBLASLt.
    run_lt(lt, cs.lt, out_lt, workspace, workspace_bytes, stream);  // (the forward's also fills pre)
    run_own(cs.epilogue, cs.own, out_own, cs.aux, bias, stream);
    check(cudaStreamSynchronize(stream), name(cs.epilogue));
    const std::vector<float> ours = to_host(out_own, wide), theirs = to_host(out_lt, wide);
    const std::vector<float> aux = to_host(cs.epilogue == Epilogue::dgelu ? pre : aux_own, wide);
    const std::vector<float>& ha = cs.epilogue == Epilogue::dgelu ? host_dy : host_a0;
    const std::vector<float>& hb = cs.epilogue == Epilogue::dgelu ? host_proj_t : host_fc;
    std::mt19937 random(11);
    double worst = 0;
    for (int sample = 0; sample < 4096; ++sample) {
      const int r = int(random() % unsigned(tokens)), col = int(random() % unsigned(f));
      double dot = 0;
      for (int i = 0; i < c; ++i) dot += double(ha[size_t(r) * c + i]) * double(hb[size_t(col) * c + i]);
      const size_t at = size_t(r) * f + col;
      double expected = dot;
      if (cs.epilogue == Epilogue::bias_gelu_aux) {
        const double p = dot + host_bias[size_t(col)];
        expected = gelu_reference(p, false);
        worst = std::max(worst, std::abs(aux[at] - p) / (1.0 + std::abs(p)));
      } else if (cs.epilogue == Epilogue::dgelu) {
        expected = dot * gelu_reference(aux[at], true);
      }
      worst = std::max(worst, std::abs(ours[at] - expected) / (1.0 + std::abs(expected)));
    }
    double largest_gap = 0, largest = 0;
    for (size_t i = 0; i < wide; ++i) {
      largest_gap = std::max(largest_gap, double(std::abs(ours[i] - theirs[i])));
      largest = std::max(largest, double(std::abs(theirs[i])));
    }
    // The plain GEMM (its stores as the epilogues', without them) against cuBLASLt's plain one.
    run_lt(lt, cs.lt_plain, out_lt, workspace, workspace_bytes, stream);
    run_own(Epilogue::none, cs.own, out_own, nullptr, nullptr, stream);
    check(cudaStreamSynchronize(stream), "plain");
    const double plain_gap = relative_gap(to_host(out_own, wide), to_host(out_lt, wide));
    const bool right = worst < 1.0 / 128 && plain_gap < 1.0 / 128;
    all_right = all_right && right;
    std::printf(
        "%-11s %-13s against fp64 at 4096 outputs: worst |diff| / (1 + |value|) %.2e (%s); against "
        "cuBLASLt: max |diff| %.4f of values up to %.2f; plain against cuBLASLt's plain: %.2e\n",
        "cooperative", name(cs.epilogue), worst, right ? "right" : "WRONG", largest_gap, largest, plain_gap);
  }
  if (!all_right) return 1;

  const double flops = 2.0 * tokens * double(f) * c;
  // Times each row in order, then again in reverse (what the clock and the cap do over a call falls on both
  // ends), and prints both times and the TFLOP/s of their mean.
  using Row = std::pair<const char*, std::function<void()>>;
  auto time_rows = [&](const std::vector<Row>& rows, double row_flops) {
    std::vector<double> ms[2];
    for (int pass = 0; pass < 2; ++pass) ms[pass].assign(rows.size(), 0);
    for (int pass = 0; pass < 2; ++pass)
      for (size_t i = 0; i < rows.size(); ++i) {
        const size_t which = pass == 0 ? i : rows.size() - 1 - i;
        ms[pass][which] = options.sustain_ms > 0
                              ? kernel_bench::sustained_ms(stream, options.sustain_ms, rows[which].second)
                              : kernel_bench::median_ms(stream, options.reps, rows[which].second, 2);
      }
    check(cudaGetLastError(), "timing");
    for (size_t i = 0; i < rows.size(); ++i)
      std::printf("  %-34s %.3f / %.3f ms  %.0f TFLOP/s\n", rows[i].first, ms[0][i], ms[1][i],
                  row_flops / (0.5e-3 * (ms[0][i] + ms[1][i])) / 1e12);
  };
  std::printf(
      "%s: ms (TFLOP/s), cuBLASLt's first choice with the epilogue and plain, then ours; the order "
      "reversed after\n",
      options.sustain_ms > 0 ? "sustained" : "bursts, median");
  for (const Case& cs : cases) {
    const Epilogue e = cs.epilogue;
    std::printf("%s\n", name(e));
    time_rows(
        {{"cuBLASLt", [&] { run_lt(lt, cs.lt, out_lt, workspace, workspace_bytes, stream); }},
         {"cuBLASLt plain", [&] { run_lt(lt, cs.lt_plain, out_lt, workspace, workspace_bytes, stream); }},
         {"cooperative", [&] { run_own(e, cs.own, out_own, cs.aux, bias, stream); }},
         {"cooperative plain", [&] { run_own(Epilogue::none, cs.own, out_own, nullptr, nullptr, stream); }},
         {"cooperative mainloop",
          [&] { run_own(Epilogue::mainloop_only, cs.own, out_own, nullptr, nullptr, stream); }},
         {"cooperative mainloop, 2 in flight",
          [&] { launch<Epilogue::mainloop_only, 2>(cs.own, out_own, nullptr, nullptr, stream); }},
         {"cooperative, 2 in flight",
          [&] {
            if (e == Epilogue::dgelu)
              launch<Epilogue::dgelu, 2>(cs.own, out_own, cs.aux, bias, stream);
            else
              launch<Epilogue::bias_gelu_aux, 2>(cs.own, out_own, cs.aux, bias, stream);
          }},
         {"cooperative plain, 2 in flight",
          [&] { launch<Epilogue::none, 2>(cs.own, out_own, nullptr, nullptr, stream); }}},
        flops);
  }

  // The block's other forward GEMMs, plain: would a GEMM of our own run the step's plain GEMMs faster than
  // cuBLASLt's at the cap? Each checked against cuBLASLt's output first.
  struct PlainShape {
    const char* gemm;
    const __nv_bfloat16 *a, *b;  // A [T, K] and B [N, K], both K-major
    int n, k;
  };
  const PlainShape shapes[] = {{"attn.c_attn forward", x, w_fc, 3 * c, c},
                               {"attn.c_proj forward", x, w_fc, c, c},
                               {"mlp.c_proj forward", pre, w_proj, c, f}};
  for (const PlainShape& shape : shapes) {
    const OwnGemm own = own_gemm(shape.a, shape.b, tokens, shape.n, shape.k, sms);
    const LtGemm plain = lt_gemm(lt, CUBLAS_OP_T, shape.b, shape.a, shape.n, tokens, shape.k,
                                 CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, workspace, workspace_bytes);
    const size_t count = size_t(tokens) * shape.n;
    run_lt(lt, plain, out_lt, workspace, workspace_bytes, stream);
    run_own(Epilogue::none, own, out_own, nullptr, nullptr, stream);
    check(cudaStreamSynchronize(stream), shape.gemm);
    const double gap = relative_gap(to_host(out_own, count), to_host(out_lt, count));
    const bool right = gap < 1.0 / 128;
    std::printf("%s, D [%d, %d] = A [%d, %d] B [%d, %d]^T, plain against cuBLASLt's plain: %.2e (%s)\n",
                shape.gemm, tokens, shape.n, tokens, shape.k, shape.n, shape.k, gap,
                right ? "right" : "WRONG");
    if (!right) return 1;
    time_rows({{"cuBLASLt plain", [&] { run_lt(lt, plain, out_lt, workspace, workspace_bytes, stream); }},
               {"cooperative plain", [&] { launch<Epilogue::none>(own, out_own, nullptr, nullptr, stream); }},
               {"cooperative plain, 2 in flight",
                [&] { launch<Epilogue::none, 2>(own, out_own, nullptr, nullptr, stream); }}},
              2.0 * tokens * double(shape.n) * shape.k);
  }
  return 0;
}
