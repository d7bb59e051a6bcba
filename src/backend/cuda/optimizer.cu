// The fused SGD update of Backend::sgd_update: every segment of the flat f32 buffers in one launch.
//
// The segment table lives in device memory, so the host knows neither the total element count nor the
// split; the kernel walks the table itself (multi-tensor-apply without a host-side chunk list). A
// persistent grid (as many blocks as fit on the device at once) treats the segments as one concatenated
// run of "units": each segment contributes its unaligned head elements, its 16-byte vectors of 4 floats
// and its tail elements. Unit u of the concatenation goes to thread u % (grid threads), so small segments
// (BN scales, biases) spread over different threads instead of all landing on the first ones, and every
// thread gets the same share of the big ones. Each thread reads the small table once per segment (an L1
// broadcast).
//
// The arithmetic mirrors the reference backend's sgd_update operation by operation in f64, with
// __dmul_rn/__dadd_rn so nvcc cannot contract into FMAs: the f32 results are bit-identical to the
// reference's. f64 costs nothing here (the kernel moves 20 bytes an element; the f64 units idle).
#include <atomic>

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

__global__ void __launch_bounds__(kSgdThreads)
    sgd_kernel(float* __restrict__ params, const float* __restrict__ grads, float* __restrict__ momentum,
               const ParamSegment* __restrict__ segments, int count, SgdScalars s, bool vector_ok) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t base = 0;  // units of the segments before this one, modulo stride
  for (int i = 0; i < count; ++i) {
    const ParamSegment seg = segments[i];
    if (seg.count <= 0) continue;
    const int64_t start = seg.offset, end = seg.offset + seg.count;
    // Units: head elements [start, head_end), vectors [head_end, vector_end), tail elements [vector_end, end).
    int64_t head_end = end, vector_end = end;
    if (vector_ok) {
      head_end = min(end, (start + 3) & ~int64_t(3));
      vector_end = head_end + ((end - head_end) & ~int64_t(3));
    }
    const int64_t heads = head_end - start, vectors = (vector_end - head_end) / 4;
    const int64_t units = heads + vectors + (end - vector_end);
    const double weight_decay = seg.weight_decay ? s.weight_decay : 0.0;
    int64_t u = tid - base;  // the first unit u with (base + u) % stride == tid
    if (u < 0) u += stride;
    for (; u < units; u += stride) {
      if (u >= heads && u < heads + vectors) {
        const int64_t e = head_end + 4 * (u - heads);
        Vec<float, 4> p = load_vec<4>(params + e), v = load_vec<4>(momentum + e);
        const Vec<float, 4> g = load_vec<4>(grads + e);
#pragma unroll
        for (int j = 0; j < 4; ++j) sgd_element(p.v[j], g.v[j], v.v[j], weight_decay, s);
        store_vec<4>(params + e, p);
        store_vec<4>(momentum + e, v);
      } else {
        const int64_t e = u < heads ? start + u : vector_end + (u - heads - vectors);
        float p = params[e], v = momentum[e];
        sgd_element(p, grads[e], v, weight_decay, s);
        params[e] = p;
        momentum[e] = v;
      }
    }
    base = (base + units) % stride;
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
                const SgdStep& step, cudaStream_t stream) {
  DLB_KERNEL_REQUIRE(count >= 0, "sgd_update", "the segment count is negative");
  if (count == 0) return;
  const SgdScalars s{step.lr, step.momentum, step.weight_decay, step.grad_scale, step.nesterov};
  const bool vector_ok = aligned(params, 16) && aligned(grads, 16) && aligned(momentum, 16);
  const unsigned blocks = static_cast<unsigned>(multiprocessor_count() * sgd_blocks_per_sm());
  sgd_kernel<<<blocks, kSgdThreads, 0, stream>>>(params, grads, momentum, segments, count, s, vector_ok);
  DLB_KERNEL_LAUNCH_CHECK();
}

}  // namespace dlbench::cuda
