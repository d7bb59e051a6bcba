// The fused SGD update of Backend::sgd_update: every segment of the flat f32 buffers in one launch.
//
// The segment table lives in device memory, so the host knows neither the total element count nor the
// split; the kernel reads the table itself (multi-tensor-apply without a host-side chunk list). Each
// segment is cut into "units": its unaligned head elements, its 16-byte vectors of 4 floats and its tail
// elements. A persistent grid (as many blocks as fit on the device at once) sees the units of all
// segments as one concatenated run and gives unit v to thread v % (grid threads): every thread gets the
// same share, and small segments (BN scales, biases) land on different threads.
//
// Each block loads up to 256 segments at a time into shared memory and takes an exclusive prefix sum of
// their unit counts (cub::BlockScan); a thread finds the segment of its unit by binary search over that
// prefix, skipped while consecutive units stay in the same segment. No thread walks the whole table.
//
// The arithmetic mirrors the reference backend's sgd_update operation by operation in f64, with
// __dmul_rn/__dadd_rn so nvcc cannot contract into FMAs: the f32 results are bit-identical to the
// reference's. f64 costs nothing here (the kernel moves 20 bytes an element; the f64 units idle).
#include <atomic>
#include <cub/block/block_scan.cuh>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"

namespace dlbench::cuda {
namespace {

using namespace detail;

constexpr int kSgdThreads = 256;

struct SgdScalars {
  double lr, momentum, weight_decay, grad_scale;
  bool nesterov;
};

// g = grad * grad_scale + weight_decay * p; v = momentum * v + g; p -= lr * (nesterov ? g + momentum * v : v)
__device__ __forceinline__ void sgd_element(float& p, float grad, float& v, double weight_decay,
                                            const SgdScalars& s) {
  const double pd = p;
  const double g = __dadd_rn(__dmul_rn(double(grad), s.grad_scale), __dmul_rn(weight_decay, pd));
  const double velocity = __dadd_rn(__dmul_rn(s.momentum, double(v)), g);
  const double update = s.nesterov ? __dadd_rn(g, __dmul_rn(s.momentum, velocity)) : velocity;
  v = __double2float_rn(velocity);
  p = __double2float_rn(__dsub_rn(pd, __dmul_rn(s.lr, update)));
}

// A segment cut into units: heads [start, head_end), vectors [head_end, vector_end) (4 floats each),
// tail [vector_end, end).
struct SegmentUnits {
  int64_t start, head_end, vector_end, heads, vectors, units;
  bool decay;
};

__device__ __forceinline__ SegmentUnits cut(const ParamSegment& seg, bool vector_ok) {
  SegmentUnits u;
  const int64_t count = seg.count > 0 ? seg.count : 0;
  const int64_t end = seg.offset + count;
  u.start = seg.offset;
  u.head_end = u.vector_end = end;
  if (vector_ok) {
    u.head_end = min(end, (seg.offset + 3) & ~int64_t(3));
    u.vector_end = u.head_end + ((end - u.head_end) & ~int64_t(3));
  }
  u.heads = u.head_end - u.start;
  u.vectors = (u.vector_end - u.head_end) / 4;
  u.units = u.heads + u.vectors + (end - u.vector_end);
  u.decay = seg.weight_decay;
  return u;
}

__global__ void __launch_bounds__(kSgdThreads)
    sgd_kernel(float* __restrict__ params, const float* __restrict__ grads, float* __restrict__ momentum,
               const ParamSegment* __restrict__ segments, int count, SgdScalars s,
               const StepScalars* __restrict__ scalars, bool vector_ok) {
  if (scalars) {  // read in the step that runs: a recorded step follows the rate and the loss scale
    if (scalars->overflow) return;  // an overflowed step is skipped
    s.lr = scalars->lr;
    s.grad_scale = s.grad_scale / double(scalars->loss_scale);
  }
  using BlockScan = cub::BlockScan<int64_t, kSgdThreads>;
  __shared__ typename BlockScan::TempStorage scan_storage;
  __shared__ SegmentUnits table[kSgdThreads];
  __shared__ int64_t first_unit[kSgdThreads + 1];  // exclusive prefix of the units; [n] = the chunk's total

  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t chunk_base = 0;  // units of the chunks before this one
  for (int chunk = 0; chunk < count; chunk += kSgdThreads) {
    const int n = min(kSgdThreads, count - chunk);
    int64_t units = 0;
    if (int(threadIdx.x) < n) {
      table[threadIdx.x] = cut(segments[chunk + threadIdx.x], vector_ok);
      units = table[threadIdx.x].units;
    }
    int64_t exclusive = 0, total = 0;
    BlockScan(scan_storage).ExclusiveSum(units, exclusive, total);
    first_unit[threadIdx.x] = exclusive;
    if (threadIdx.x == 0) first_unit[kSgdThreads] = total;
    __syncthreads();

    // This thread's units v of the chunk: (chunk_base + v) % stride == tid.
    int64_t v = tid - chunk_base % stride;
    if (v < 0) v += stride;
    int seg = 0;  // first_unit[seg] <= v < first_unit[seg + 1] once found; v only grows
    for (; v < total; v += stride) {
      if (v >= first_unit[seg + 1]) {  // binary search: the last segment starting at or before v
        int lo = seg + 1, hi = n - 1;
        while (lo < hi) {
          const int mid = (lo + hi + 1) / 2;
          if (first_unit[mid] <= v) {
            lo = mid;
          } else {
            hi = mid - 1;
          }
        }
        seg = lo;
      }
      const SegmentUnits& g = table[seg];
      const double weight_decay = g.decay ? s.weight_decay : 0.0;
      const int64_t u = v - first_unit[seg];
      if (u >= g.heads && u < g.heads + g.vectors) {
        const int64_t e = g.head_end + 4 * (u - g.heads);
        Vec<float, 4> p = load_vec<4>(params + e), m = load_vec<4>(momentum + e);
        const Vec<float, 4> grad = load_vec<4>(grads + e);
#pragma unroll
        for (int j = 0; j < 4; ++j) sgd_element(p.v[j], grad.v[j], m.v[j], weight_decay, s);
        store_vec<4>(params + e, p);
        store_vec<4>(momentum + e, m);
      } else {
        const int64_t e = u < g.heads ? g.start + u : g.vector_end + (u - g.heads - g.vectors);
        float p = params[e], m = momentum[e];
        sgd_element(p, grads[e], m, weight_decay, s);
        params[e] = p;
        momentum[e] = m;
      }
    }
    chunk_base += total;
    __syncthreads();  // the next chunk overwrites the table
  }
}

// Resident blocks per multiprocessor of sgd_kernel (a property of the kernel and the architecture).
int sgd_blocks_per_sm() {
  static std::atomic<int> cached{0};
  if (const int b = cached.load(std::memory_order_relaxed)) return b;
  int blocks = 0;
  DLB_KERNEL_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, sgd_kernel, kSgdThreads, 0));
  blocks = std::max(blocks, 1);
  cached.store(blocks, std::memory_order_relaxed);
  return blocks;
}

}  // namespace

void sgd_update(float* params, const float* grads, float* momentum, const ParamSegment* segments, int count,
                const SgdStep& step, const StepScalars* scalars, cudaStream_t stream) {
  DLB_KERNEL_REQUIRE(count >= 0, "sgd_update", "the segment count is negative");
  if (count == 0) return;
  const SgdScalars s{step.lr, step.momentum, step.weight_decay, step.grad_scale, step.nesterov};
  const bool vector_ok = aligned(params, 16) && aligned(grads, 16) && aligned(momentum, 16);
  const unsigned blocks = static_cast<unsigned>(multiprocessor_count() * sgd_blocks_per_sm());
  sgd_kernel<<<blocks, kSgdThreads, 0, stream>>>(params, grads, momentum, segments, count, s, scalars,
                                                 vector_ok);
  DLB_KERNEL_LAUNCH_CHECK();
}

namespace {
__global__ void update_loss_scale_kernel(StepScalars* scalars) { advance_loss_scale(*scalars); }
}  // namespace

void update_loss_scale(StepScalars* scalars, cudaStream_t stream) {
  update_loss_scale_kernel<<<1, 1, 0, stream>>>(scalars);
  DLB_KERNEL_LAUNCH_CHECK();
}

}  // namespace dlbench::cuda
