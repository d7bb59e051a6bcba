// The fused optimizer updates over the flat f32 buffers, every segment in one launch: Backend::sgd_update
// and Backend::adamw_update (with sum_of_squares, the global gradient norm AdamW clips by).
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
//
// The segment walk is one kernel template (segments_kernel) over an update: SgdUpdate or AdamWUpdate. An
// update's begin() runs first in every thread and reads what lives in device memory (the step's scalars,
// AdamW's gradient norm and step count), so that a recorded step replays with the values of its own run;
// it returns false to skip the step (an overflow). AdamW's step count is advanced after the update by a
// one-thread kernel: the update's threads all read it first, so none may write it.
//
// Mixed precision is folded into the same pass (Backend's ComputeCopies): an update reads the gradients of
// the compute parameters in FP16/BF16 where they are kept only there, and writes each updated weight's
// FP16/BF16 copy, rounded from its FP32 value as the cast kernel rounds it. Without this a BF16 step ran
// three passes over the parameters (widen the gradients, update, narrow the weights); with it, one.
// Updates are templates over the copies' type (float: none).
#include <atomic>
#include <cub/block/block_scan.cuh>
#include <type_traits>

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

// Where an update reads element e's gradient and writes its compute copy: for e < count, the copies of
// type C where given, else the f32 gradients. C = float: no copies (count 0). A 4-vector never straddles
// `count` (a multiple of 64, MemoryPlan's padding), so the vector paths test its first element.
template <typename C>
struct Copies {
  C* parameters = nullptr;
  const C* gradients = nullptr;
  int64_t count = 0;

  __device__ float gradient(const float* grads, int64_t e) const {
    return gradients && e < count ? widen(gradients[e]) : grads[e];
  }
  __device__ Vec<float, 4> gradient4(const float* grads, int64_t e) const {
    if (!(gradients && e < count)) return load_vec<4>(grads + e);
    const Vec<C, 4> c = load_vec<4>(gradients + e);
    Vec<float, 4> g;
#pragma unroll
    for (int j = 0; j < 4; ++j) g.v[j] = widen(c.v[j]);
    return g;
  }
  __device__ void updated(int64_t e, float p) const {
    if (parameters && e < count) parameters[e] = narrow<C>(p);
  }
  __device__ void updated4(int64_t e, const Vec<float, 4>& p) const {
    if (!(parameters && e < count)) return;
    Vec<C, 4> c;
#pragma unroll
    for (int j = 0; j < 4; ++j) c.v[j] = narrow<C>(p.v[j]);
    store_vec<4>(parameters + e, c);
  }
};

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

template <typename C>
struct SgdUpdate {
  float* params;
  const float* grads;
  float* momentum;
  SgdScalars s;
  const StepScalars* scalars;
  Copies<C> copies;

  __device__ bool begin() {
    if (scalars) {  // read in the step that runs: a recorded step follows the rate and the loss scale
      if (scalars->overflow) return false;  // an overflowed step is skipped
      s.lr = scalars->lr;
      s.grad_scale = s.grad_scale / double(scalars->loss_scale);
    }
    return true;
  }
  __device__ void vector(int64_t e, bool decay) const {
    const double weight_decay = decay ? s.weight_decay : 0.0;
    Vec<float, 4> p = load_vec<4>(params + e), m = load_vec<4>(momentum + e);
    const Vec<float, 4> grad = copies.gradient4(grads, e);
#pragma unroll
    for (int j = 0; j < 4; ++j) sgd_element(p.v[j], grad.v[j], m.v[j], weight_decay, s);
    store_vec<4>(params + e, p);
    store_vec<4>(momentum + e, m);
    copies.updated4(e, p);
  }
  __device__ void scalar(int64_t e, bool decay) const {
    float p = params[e], m = momentum[e];
    sgd_element(p, copies.gradient(grads, e), m, decay ? s.weight_decay : 0.0, s);
    params[e] = p;
    momentum[e] = m;
    copies.updated(e, p);
  }
};

// AdamW per element, in f64, in the reference's order of operations (reference_adamw.cc).
template <typename C>
struct AdamWUpdate {
  float* params;
  const float* grads;
  float *first, *second;
  double lr, beta1, beta2, eps, weight_decay, grad_scale, max_grad_norm;
  int64_t step;
  const StepScalars* scalars;
  const float* grad_norm_squared;
  const int32_t* step_count;
  Copies<C> copies;
  // Set by begin():
  double unscale, clip, correction1, correction2;

  __device__ bool begin() {
    if (scalars && scalars->overflow) return false;  // an overflowed step is skipped, m and v included
    if (scalars) lr = scalars->lr;
    unscale = grad_scale / (scalars ? double(scalars->loss_scale) : 1.0);
    clip = 1;
    if (max_grad_norm > 0) {
      const double norm = sqrt(double(*grad_norm_squared)) * unscale;
      clip = min(1.0, max_grad_norm / (norm + 1e-6));
    }
    const double t = step_count ? double(*step_count) + 1 : double(step);
    correction1 = 1 - pow(beta1, t);
    correction2 = 1 - pow(beta2, t);
    return true;
  }
  __device__ void element(float& p, float grad, float& m, float& v, double decay) const {
    const double g = double(grad) * unscale * clip;
    const double m_i = beta1 * double(m) + (1 - beta1) * g;
    const double v_i = beta2 * double(v) + (1 - beta2) * g * g;
    const double mhat = m_i / correction1, vhat = v_i / correction2;
    const double update = mhat / (sqrt(vhat) + eps) + decay * double(p);
    m = static_cast<float>(m_i);
    v = static_cast<float>(v_i);
    p = static_cast<float>(double(p) - lr * update);
  }
  __device__ void vector(int64_t e, bool decay) const {
    const double wd = decay ? weight_decay : 0.0;
    Vec<float, 4> p = load_vec<4>(params + e), m = load_vec<4>(first + e), v = load_vec<4>(second + e);
    const Vec<float, 4> grad = copies.gradient4(grads, e);
#pragma unroll
    for (int j = 0; j < 4; ++j) element(p.v[j], grad.v[j], m.v[j], v.v[j], wd);
    store_vec<4>(params + e, p);
    store_vec<4>(first + e, m);
    store_vec<4>(second + e, v);
    copies.updated4(e, p);
  }
  __device__ void scalar(int64_t e, bool decay) const {
    float p = params[e], m = first[e], v = second[e];
    element(p, copies.gradient(grads, e), m, v, decay ? weight_decay : 0.0);
    params[e] = p;
    first[e] = m;
    second[e] = v;
    copies.updated(e, p);
  }
};

template <typename Update>
__global__ void __launch_bounds__(kSgdThreads)
    segments_kernel(const ParamSegment* __restrict__ segments, int count, Update update, bool vector_ok) {
  if (!update.begin()) return;
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
      const int64_t u = v - first_unit[seg];
      if (u >= g.heads && u < g.heads + g.vectors) {
        update.vector(g.head_end + 4 * (u - g.heads), g.decay);
      } else {
        update.scalar(u < g.heads ? g.start + u : g.vector_end + (u - g.heads - g.vectors), g.decay);
      }
    }
    chunk_base += total;
    __syncthreads();  // the next chunk overwrites the table
  }
}

// Resident blocks per multiprocessor of segments_kernel<Update> (a property of the kernel and the
// architecture).
template <typename Update>
int segment_blocks_per_sm() {
  static std::atomic<int> cached{0};
  if (const int b = cached.load(std::memory_order_relaxed)) return b;
  int blocks = 0;
  DLB_KERNEL_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, segments_kernel<Update>, kSgdThreads, 0));
  blocks = std::max(blocks, 1);
  cached.store(blocks, std::memory_order_relaxed);
  return blocks;
}

// Calls fn with the typed Copies of `copies` (an empty Copies<float> where there are none).
template <typename Fn>
void with_copies(const UpdateCopies& copies, Fn&& fn) {
  auto typed = [&](auto tag) {
    using C = decltype(tag);
    fn(Copies<C>{static_cast<C*>(copies.parameters), static_cast<const C*>(copies.gradients), copies.count});
  };
  if (!copies.parameters && !copies.gradients) {
    fn(Copies<float>{});
  } else if (copies.dtype == DType::f16) {
    typed(__half{});
  } else {
    DLB_KERNEL_REQUIRE(copies.dtype == DType::bf16, "optimizer update", "compute copies must be f16 or bf16");
    typed(__nv_bfloat16{});
  }
}

// The vector path reads and writes the copies four elements (8 bytes) at a time.
bool copies_aligned(const UpdateCopies& copies) {
  return aligned(copies.parameters, 8) && aligned(copies.gradients, 8);
}

template <typename Update>
void launch_segments(const ParamSegment* segments, int count, const Update& update, bool vector_ok,
                     cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>(multiprocessor_count() * segment_blocks_per_sm<Update>());
  segments_kernel<<<blocks, kSgdThreads, 0, stream>>>(segments, count, update, vector_ok);
  DLB_KERNEL_LAUNCH_CHECK();
}

}  // namespace

void sgd_update(float* params, const float* grads, float* momentum, const ParamSegment* segments, int count,
                const SgdStep& step, const StepScalars* scalars, const UpdateCopies& copies,
                cudaStream_t stream) {
  DLB_KERNEL_REQUIRE(count >= 0, "sgd_update", "the segment count is negative");
  if (count == 0) return;
  const SgdScalars s{step.lr, step.momentum, step.weight_decay, step.grad_scale, step.nesterov};
  const bool vector_ok =
      aligned(params, 16) && aligned(grads, 16) && aligned(momentum, 16) && copies_aligned(copies);
  with_copies(copies, [&](auto typed) {
    using C = std::remove_const_t<std::remove_pointer_t<decltype(typed.gradients)>>;
    launch_segments(segments, count, SgdUpdate<C>{params, grads, momentum, s, scalars, typed}, vector_ok,
                    stream);
  });
}

namespace {

// t advances after an update that ran (not one skipped for an overflow).
__global__ void advance_step_count_kernel(int32_t* step_count, const StepScalars* scalars) {
  if (!(scalars && scalars->overflow)) ++*step_count;
}

// The gradient norm reads every gradient once: a pass at the copy rate. x is cut into groups of 8
// consecutive elements, whatever the dtype; group g goes to thread g % (grid threads), which adds its
// groups' squares in order in f64 (exact squares of 16-bit values, and of f32 ones as doubles), the last
// n % 8 elements as the next group. The partition depends on n alone, so a buffer of FP16/BF16 values and
// its FP32 widening give the same bits. A group is one 16-byte load of 16-bit values (two of f32) where x is
// 16-byte aligned; element by element otherwise. (With one element a thread per turn, 2-byte loads and
// 256 blocks, the pass took 4.7 ms over gpt2-large's 774M BF16 gradients on an H100, 8% of the copy rate.)
constexpr int kSquareBlocks = 1024, kSquareThreads = 256, kSquareGroup = 8;

template <typename T, bool kVectors>
__device__ __forceinline__ double group_squares(const T* x, double sum) {
  T v[kSquareGroup];
  if constexpr (kVectors) {
    constexpr int kPerLoad = 16 / sizeof(T);
#pragma unroll
    for (int l = 0; l < kSquareGroup / kPerLoad; ++l) {
      const Vec<T, kPerLoad> loaded = load_vec<kPerLoad>(x + l * kPerLoad);
#pragma unroll
      for (int j = 0; j < kPerLoad; ++j) v[l * kPerLoad + j] = loaded.v[j];
    }
  } else {
#pragma unroll
    for (int j = 0; j < kSquareGroup; ++j) v[j] = x[j];
  }
#pragma unroll
  for (int j = 0; j < kSquareGroup; ++j) {
    const double w = widen(v[j]);
    sum = __fma_rn(w, w, sum);
  }
  return sum;
}

// Each block's sum of squares in f64 (block_reduce: the warps' sums in warp order).
template <typename T, bool kVectors>
__global__ void __launch_bounds__(kSquareThreads)
    square_partials_kernel(const T* __restrict__ x, int64_t n, double* __restrict__ partials) {
  double sum = 0;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x,
                thread = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t groups = n / kSquareGroup;
#pragma unroll 4
  for (int64_t g = thread; g < groups; g += stride)
    sum = group_squares<T, kVectors>(x + g * kSquareGroup, sum);
  if (thread == groups % stride)
    for (int64_t i = groups * kSquareGroup; i < n; ++i) {
      const double w = widen(x[i]);
      sum = __fma_rn(w, w, sum);
    }
  sum = block_reduce<kSquareThreads>(sum, Add{});
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// The blocks' partials, thread t adding partials t, t + 256, ... in order, then the threads in warp order.
__global__ void __launch_bounds__(kSquareThreads)
    square_total_kernel(const double* __restrict__ partials, float* __restrict__ out, bool accumulate) {
  double sum = 0;
  for (int b = threadIdx.x; b < kSquareBlocks; b += kSquareThreads) sum += partials[b];
  const double total = block_reduce<kSquareThreads>(sum, Add{});
  if (threadIdx.x == 0) out[0] = static_cast<float>(total + (accumulate ? double(out[0]) : 0.0));
}

}  // namespace

size_t sum_of_squares_scratch_bytes() { return kSquareBlocks * sizeof(double); }

void sum_of_squares(const void* x, DType dtype, int64_t n, float* out, bool accumulate, void* scratch,
                    cudaStream_t stream) {
  DLB_KERNEL_REQUIRE(n >= 0, "sum_of_squares", "the element count is negative");
  auto* partials = static_cast<double*>(scratch);
  // A fixed grid: the partition of x into partial sums, and so the result's bits, never change.
  auto partial_sums = [&](auto* typed) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(typed)>>;
    if (aligned(typed, 16))
      square_partials_kernel<T, true><<<kSquareBlocks, kSquareThreads, 0, stream>>>(typed, n, partials);
    else
      square_partials_kernel<T, false><<<kSquareBlocks, kSquareThreads, 0, stream>>>(typed, n, partials);
  };
  if (dtype == DType::f32) {
    partial_sums(static_cast<const float*>(x));
  } else if (dtype == DType::f16) {
    partial_sums(static_cast<const __half*>(x));
  } else {
    DLB_KERNEL_REQUIRE(dtype == DType::bf16, "sum_of_squares", "x must be f32, f16 or bf16");
    partial_sums(static_cast<const __nv_bfloat16*>(x));
  }
  DLB_KERNEL_LAUNCH_CHECK();
  square_total_kernel<<<1, kSquareThreads, 0, stream>>>(partials, out, accumulate);
  DLB_KERNEL_LAUNCH_CHECK();
}

void adamw_update(float* params, const float* grads, float* m, float* v, const ParamSegment* segments,
                  int count, const AdamWStep& step, const StepScalars* scalars, const UpdateCopies& copies,
                  cudaStream_t stream) {
  DLB_KERNEL_REQUIRE(count >= 0, "adamw_update", "the segment count is negative");
  DLB_KERNEL_REQUIRE(step.max_grad_norm == 0 || step.grad_norm_squared, "adamw_update",
                     "clipping needs grad_norm_squared (the gradients' sum of squares)");
  if (count > 0) {
    const bool vector_ok = aligned(params, 16) && aligned(grads, 16) && aligned(m, 16) && aligned(v, 16) &&
                           copies_aligned(copies);
    with_copies(copies, [&](auto typed) {
      using C = std::remove_const_t<std::remove_pointer_t<decltype(typed.gradients)>>;
      const AdamWUpdate<C> update{params,
                                  grads,
                                  m,
                                  v,
                                  step.lr,
                                  step.beta1,
                                  step.beta2,
                                  step.eps,
                                  step.weight_decay,
                                  step.grad_scale,
                                  step.max_grad_norm,
                                  step.step,
                                  scalars,
                                  step.grad_norm_squared,
                                  step.step_count,
                                  typed,
                                  0,
                                  0,
                                  0,
                                  0};
      launch_segments(segments, count, update, vector_ok, stream);
    });
  }
  if (step.step_count) {
    advance_step_count_kernel<<<1, 1, 0, stream>>>(step.step_count, scalars);
    DLB_KERNEL_LAUNCH_CHECK();
  }
}

namespace {
__global__ void update_loss_scale_kernel(StepScalars* scalars) { advance_loss_scale(*scalars); }
}  // namespace

void update_loss_scale(StepScalars* scalars, cudaStream_t stream) {
  update_loss_scale_kernel<<<1, 1, 0, stream>>>(scalars);
  DLB_KERNEL_LAUNCH_CHECK();
}

}  // namespace dlbench::cuda
