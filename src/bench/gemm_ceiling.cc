#include "bench/gemm_ceiling.h"

#include <algorithm>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "bench/measure.h"
#include "core/status.h"

namespace dlbench {
namespace {

// Device memory released however the measurement ends.
class Scratch {
 public:
  Scratch(Backend& backend, size_t bytes) : backend_(backend), data_(backend.allocate(bytes)) {}
  ~Scratch() { backend_.deallocate(data_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* data() const { return data_; }

 private:
  Backend& backend_;
  void* data_;
};

// Fills `m` (n x n in its dtype) with values uniform in [-1, 1): a GEMM's power, and so the clock it runs
// at under a power cap, depends on how many bits toggle, so constant inputs would overstate the rate. One
// random block of f32 is cast into each sixteenth of the matrix.
void fill_random(Backend& backend, Tensor& m) {
  constexpr int kPieces = 16;
  const int64_t piece = m.numel() / kPieces;
  std::vector<float> host(static_cast<size_t>(piece));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  for (float& v : host) v = uniform(rng);
  Scratch block(backend, host.size() * sizeof(float));
  backend.copy_to_device(block.data(), host.data(), host.size() * sizeof(float));
  Tensor source(block.data(), {piece}, DType::f32, Layout::nchw, backend.device());
  for (int i = 0; i < kPieces; ++i) {
    Tensor part(static_cast<char*>(m.data()) + static_cast<size_t>(i * piece) * dtype_size(m.dtype()),
                {piece}, m.dtype(), Layout::nchw, backend.device());
    backend.cast(source, part);
  }
  backend.synchronize();  // `host` and `block` go out of scope
}

}  // namespace

std::optional<GemmCeiling> measure_gemm_ceiling(Backend& backend, DType dtype, int64_t n, int calls,
                                                std::string* why_not) {
  DLB_CHECK(n % 16 == 0 && calls >= 1, "measure_gemm_ceiling: n {} calls {}", n, calls);
  try {
    const size_t bytes = static_cast<size_t>(n * n) * dtype_size(dtype);
    Scratch a_memory(backend, bytes), b_memory(backend, bytes), c_memory(backend, bytes);
    Tensor a(a_memory.data(), {n, n}, dtype, Layout::nchw, backend.device());
    Tensor b(b_memory.data(), {n, n}, dtype, Layout::nchw, backend.device());
    Tensor c(c_memory.data(), {n, n}, dtype, Layout::nchw, backend.device());
    fill_random(backend, a);
    fill_random(backend, b);
    const auto gemm = [&] { backend.gemm(Transpose::no, Transpose::no, n, n, n, 1.f, a, b, 0.f, c); };
    gemm();  // the library's first call of a shape chooses its kernel
    gemm();
    std::vector<int64_t> markers{backend.mark()};
    for (int i = 0; i < calls; ++i) {
      gemm();
      markers.push_back(backend.mark());
    }
    backend.synchronize();
    std::vector<double> ms;
    for (size_t i = 1; i < markers.size(); ++i)
      ms.push_back(backend.marker_ms(markers[i]) - backend.marker_ms(markers[i - 1]));
    GemmCeiling ceiling;
    ceiling.n = n;
    ceiling.call_ms = percentile(ms, 50);
    ceiling.tflops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) /
                     (ceiling.call_ms * 1e-3) / 1e12;
    ceiling.dtype = dtype_name(dtype);
    return ceiling;
  } catch (const Error& e) {
    if (why_not) *why_not = e.what();
    return std::nullopt;
  }
}

}  // namespace dlbench
