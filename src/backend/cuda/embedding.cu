// GPT-2's input embedding (reference_embedding.cc): out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :], and its
// backward, a scatter-add of dout's rows into the rows of dwte their tokens name and into dwpe.
//
// The backward is deterministic: atomics would add a frequent token's rows in whatever order the blocks
// ran. Instead the positions are sorted by token with cub's radix sort (stable, so each token's positions
// stay in ascending order) and one block per vocabulary row finds its run in the sorted keys by binary
// search and sums those rows of dout in that order, in f32. A row no token names is written 0 (overwrite)
// or left alone (accumulate), so dwte needs no separate clearing pass. dwpe[t] sums dout[b, t] over b in
// order of b.
//
// A token outside [0, V) cannot be reported from the device without a host synchronisation: the forward
// writes NaN to its row (visible in the loss, never a stray read) and the backward leaves it out.
#include <cub/device/device_radix_sort.cuh>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"

namespace dlbench::cuda {
namespace {

using namespace detail;

constexpr int kRowThreads = 128;

template <typename T>
__global__ void embedding_forward_kernel(const int32_t* __restrict__ tokens, const T* __restrict__ wte,
                                         const T* __restrict__ wpe, T* __restrict__ out, int64_t n,
                                         int64_t T_, int64_t C, int64_t V) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += stride) {
    const int64_t row = e / C, c = e - row * C, t = row % T_;
    const int64_t token = tokens[row];
    out[e] = token >= 0 && token < V ? narrow<T>(widen(wte[token * C + c]) + widen(wpe[t * C + c]))
                                     : narrow<T>(NAN);
  }
}

// keys[i] = tokens[i] (V for a token outside [0, V): sorted last, summed nowhere); positions[i] = i.
__global__ void sort_inputs_kernel(const int32_t* __restrict__ tokens, uint32_t* __restrict__ keys,
                                   uint32_t* __restrict__ positions, int64_t n, int64_t V) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t token = tokens[i];
  keys[i] = static_cast<uint32_t>(token >= 0 && token < V ? token : V);
  positions[i] = static_cast<uint32_t>(i);
}

__device__ __forceinline__ int64_t lower_bound(const uint32_t* keys, int64_t n, uint32_t key) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (keys[mid] < key) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Block v: dwte[v, :] (=|+=) the sum of dout's rows at the positions whose token is v, in position order.
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    token_rows_kernel(const uint32_t* __restrict__ sorted_keys, const uint32_t* __restrict__ sorted_positions,
                      const T* __restrict__ dout, T* __restrict__ dwte, int64_t n, int64_t C,
                      bool accumulate) {
  const uint32_t v = blockIdx.x;
  const int64_t begin = lower_bound(sorted_keys, n, v), end = lower_bound(sorted_keys, n, v + 1);
  if (begin == end && accumulate) return;
  T* row = dwte + int64_t(v) * C;
  for (int64_t c = threadIdx.x; c < C; c += kRowThreads) {
    float sum = accumulate ? widen(row[c]) : 0.f;
    for (int64_t j = begin; j < end; ++j) sum += widen(dout[int64_t(sorted_positions[j]) * C + c]);
    row[c] = narrow<T>(sum);
  }
}

// dwpe[t, c] (=|+=) sum over b of dout[b, t, c]; rows t >= T get nothing (0 when overwriting).
template <typename T>
__global__ void position_rows_kernel(const T* __restrict__ dout, T* __restrict__ dwpe, int64_t B, int64_t T_,
                                     int64_t C, int64_t positions, bool accumulate) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < positions * C; e += stride) {
    const int64_t t = e / C;
    if (t >= T_ && accumulate) continue;
    float sum = accumulate ? widen(dwpe[e]) : 0.f;
    if (t < T_)
      for (int64_t b = 0; b < B; ++b) sum += widen(dout[b * T_ * C + e]);
    dwpe[e] = narrow<T>(sum);
  }
}

// The scratch: sort keys and positions in, and sorted, then cub's temporary storage.
struct SortScratch {
  uint32_t *keys, *positions, *sorted_keys, *sorted_positions;
  void* temp;
  size_t temp_bytes;
};

int key_bits(int64_t vocabulary) {
  int bits = 1;
  while ((int64_t{1} << bits) <= vocabulary) ++bits;  // keys go up to V inclusive
  return bits;
}

size_t cub_temp_bytes(int64_t n, int64_t vocabulary) {
  size_t bytes = 0;
  DLB_KERNEL_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr), static_cast<int>(n), 0,
      key_bits(vocabulary)));
  return bytes;
}

SortScratch carve(void* scratch, int64_t n, int64_t vocabulary) {
  const size_t array = align_up(static_cast<size_t>(n) * sizeof(uint32_t), size_t{256});
  auto* base = static_cast<std::byte*>(scratch);
  SortScratch s;
  s.keys = reinterpret_cast<uint32_t*>(base);
  s.positions = reinterpret_cast<uint32_t*>(base + array);
  s.sorted_keys = reinterpret_cast<uint32_t*>(base + 2 * array);
  s.sorted_positions = reinterpret_cast<uint32_t*>(base + 3 * array);
  s.temp = base + 4 * array;
  s.temp_bytes = cub_temp_bytes(n, vocabulary);
  return s;
}

}  // namespace

void embedding_forward(const int32_t* tokens, const void* wte, const void* wpe, void* out, int64_t batch,
                       int64_t time, int64_t channels, int64_t vocabulary, DType dtype, cudaStream_t stream) {
  const char* op = "embedding_forward";
  DLB_KERNEL_REQUIRE(batch >= 0 && time >= 0 && channels > 0, op, "negative sizes");
  const int64_t n = batch * time * channels;
  if (n == 0) return;
  dispatch_float(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    embedding_forward_kernel<T>
        <<<grid_for(n), kThreads, 0, stream>>>(tokens, static_cast<const T*>(wte), static_cast<const T*>(wpe),
                                               static_cast<T*>(out), n, time, channels, vocabulary);
    DLB_KERNEL_LAUNCH_CHECK();
  });
}

size_t embedding_backward_scratch_bytes(int64_t tokens, int64_t vocabulary) {
  return 4 * align_up(static_cast<size_t>(tokens) * sizeof(uint32_t), size_t{256}) +
         cub_temp_bytes(tokens, vocabulary);
}

void embedding_backward(const int32_t* tokens, const void* dout, void* dwte, void* dwpe, int64_t batch,
                        int64_t time, int64_t channels, int64_t vocabulary, int64_t positions, DType dtype,
                        bool accumulate, void* scratch, cudaStream_t stream) {
  const char* op = "embedding_backward";
  DLB_KERNEL_REQUIRE(batch >= 0 && time >= 0 && channels > 0 && positions >= time, op, "bad sizes");
  DLB_KERNEL_REQUIRE(vocabulary > 0 && vocabulary < int64_t(INT32_MAX), op, "the vocabulary is out of range");
  const int64_t n = batch * time;
  DLB_KERNEL_REQUIRE(n < int64_t(INT32_MAX), op, "too many tokens for the sort");
  const SortScratch s = carve(scratch, n, vocabulary);
  if (n > 0) {
    sort_inputs_kernel<<<static_cast<unsigned>(ceil_div<int64_t>(n, 256)), 256, 0, stream>>>(
        tokens, s.keys, s.positions, n, vocabulary);
    DLB_KERNEL_LAUNCH_CHECK();
    size_t temp_bytes = s.temp_bytes;
    DLB_KERNEL_CHECK(cub::DeviceRadixSort::SortPairs(s.temp, temp_bytes, s.keys, s.sorted_keys, s.positions,
                                                     s.sorted_positions, static_cast<int>(n), 0,
                                                     key_bits(vocabulary), stream));
  }
  dispatch_float(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    token_rows_kernel<T><<<static_cast<unsigned>(vocabulary), kRowThreads, 0, stream>>>(
        s.sorted_keys, s.sorted_positions, static_cast<const T*>(dout), static_cast<T*>(dwte), n, channels,
        accumulate);
    DLB_KERNEL_LAUNCH_CHECK();
    position_rows_kernel<T><<<grid_for(positions * channels), kThreads, 0, stream>>>(
        static_cast<const T*>(dout), static_cast<T*>(dwpe), batch, time, channels, positions, accumulate);
    DLB_KERNEL_LAUNCH_CHECK();
  });
}

}  // namespace dlbench::cuda
