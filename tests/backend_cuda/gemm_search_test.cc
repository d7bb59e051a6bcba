// --gemm-search: the CUDA backend's cuBLASLt GEMMs with each configuration's algorithm timed among the
// heuristic's offers at its first call (lt_matmul.h). The timed calls must leave no trace in the results
// (a GEMM that adds to its output in place is timed on a copy), the choices must go to the algorithm
// cache, and a second backend given that cache must run the same algorithms without timing anything: its
// results equal the first's to the bit.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "backend/backend_factory.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/tuning/algorithm_cache.h"
#include "cuda_test_util.h"

namespace dlbench {
namespace {

using namespace cuda_testing;

struct LayerResults {
  HostBuffer y, pre, dx, dw, db;
};

// GPT-2's c_fc on 512 tokens in bf16: the forward with GELU, then the data and the weight gradients added
// to what their outputs held (their GEMMs read their outputs).
LayerResults run_c_fc(Backend& gpu, Backend& ref) {
  const int64_t rows = 512, in = 768, out = 3072;
  const DType dtype = DType::bf16;
  DeviceTensor x(gpu, random_host(ref, {rows, in}, dtype, 81)),
      w(gpu, random_host(ref, {out, in}, dtype, 82, Layout::nchw, -0.2, 0.2)),
      b(gpu, random_host(ref, {out}, dtype, 83)), dy(gpu, random_host(ref, {rows, out}, dtype, 84)),
      dx(gpu, random_host(ref, {rows, in}, dtype, 85)), dw(gpu, random_host(ref, {out, in}, dtype, 86)),
      db(gpu, random_host(ref, {out}, dtype, 87)), y(gpu, {rows, out}, dtype), pre(gpu, {rows, out}, dtype);
  gpu.dense_forward(x.tensor(), w.tensor(), b.tensor(), DenseActivation::gelu, nullptr, y.tensor(),
                    pre.ptr());
  gpu.dense_backward_data(dy.tensor(), w.tensor(), DenseActivation::none, nullptr, Accumulate::add,
                          dx.tensor());
  gpu.dense_backward_weights(dy.tensor(), x.tensor(), Accumulate::add, dw.tensor(), db.tensor());
  return {y.download(), pre.download(), dx.download(), dw.download(), db.download()};
}

TEST(GemmSearch, TimedChoicesLeaveNoTraceAndAreKeptInTheCache) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU: cuda_device_count() == 0";
  const std::unique_ptr<Backend> ref = make_reference_backend();
  const LayerResults first_offers = run_c_fc(shared_gpu(CudaOptions{}), *ref);

  auto cache = std::make_shared<tuning::AlgorithmCache>();
  CudaOptions searched;
  searched.gemm_search = true;
  LayerResults timed = [&] {
    const std::unique_ptr<Backend> gpu = make_cuda_backend(0, searched, cache);
    return run_c_fc(*gpu, *ref);
  }();
  const size_t choices = cache->size();
  // The forward's, the data gradient's and the weight gradient's GEMMs; cuBLASLt offers several algorithms
  // for each of these shapes.
  EXPECT_GE(choices, 3u);
  LayerResults again = [&] {
    const std::unique_ptr<Backend> gpu = make_cuda_backend(0, searched, cache);
    return run_c_fc(*gpu, *ref);
  }();
  EXPECT_EQ(cache->size(), choices) << "the second backend searched again instead of reading the cache";

  // Another algorithm sums in another order: bf16's tolerance for sums over 768 and 512 terms. A timed call
  // that had added to dx, dw or db would leave them further off than that.
  const double tol = tolerance(DType::bf16, false, 2);
  const auto wide = [&](const HostBuffer& h) { return converted(*ref, h, DType::f32); };
  const std::pair<const char*, HostBuffer LayerResults::*> outputs[] = {{"y", &LayerResults::y},
                                                                        {"pre", &LayerResults::pre},
                                                                        {"dx (added)", &LayerResults::dx},
                                                                        {"dw (added)", &LayerResults::dw},
                                                                        {"db (added)", &LayerResults::db}};
  for (const auto& [name, field] : outputs) {
    expect_close(name, wide(timed.*field).tensor(), wide(first_offers.*field).tensor(), tol);
    EXPECT_TRUE(same_bits(timed.*field, again.*field))
        << name << ": the cache's choices ran, yet the result differs from the search's";
  }
}

}  // namespace
}  // namespace dlbench
