// The mpi communicator with real ranks. CMake runs this binary under mpirun (-np 2 and -np 4) with
// --gtest_filter=MpiRanks*; started alone, these tests skip themselves. Every rank runs every test, in
// the same order, so the collectives inside them match.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "backend/backend.h"
#include "models/resnet.h"
#include "parallel/communicators.h"
#include "parallel/config_check.h"
#include "parallel/gradient_exchange.h"
#include "parallel/launch.h"
#include "parallel/mpi_runtime.h"
#include "parallel_test_util.h"
#include "temp_dir.h"

namespace dlbench::parallel {
namespace {

using namespace parallel_testing;
using dlbench::testing::user_error_message;

class MpiRanks : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
#if DLBENCH_WITH_MPI
    if (!launched_by_mpi()) return;
    LaunchOptions options;
    options.launcher = Launcher::mpi;
    options.timeout_seconds = 20;
    backend_ = make_reference_backend();
    comm_ = make_communicator(options, *backend_);
#endif
  }
  static void TearDownTestSuite() {
    comm_.reset();  // collective: every rank is here
    backend_.reset();
  }
  void SetUp() override {
#if !DLBENCH_WITH_MPI
    GTEST_SKIP() << "this build has no MPI (DLBENCH_WITH_MPI=OFF)";
#endif
    if (!launched_by_mpi())
      GTEST_SKIP() << "not started by mpirun: ctest runs these as parallel_mpi_2ranks/4ranks";
  }
  static std::unique_ptr<Backend> backend_;
  static std::unique_ptr<Communicator> comm_;
};
std::unique_ptr<Backend> MpiRanks::backend_;
std::unique_ptr<Communicator> MpiRanks::comm_;

TEST_F(MpiRanks, Identity) {
  EXPECT_EQ(comm_->name(), "mpi");
  EXPECT_GE(comm_->size(), 2);
  const auto ranks = comm_->all_gather(std::to_string(comm_->rank()));
  for (int r = 0; r < comm_->size(); ++r) EXPECT_EQ(ranks[static_cast<size_t>(r)], std::to_string(r));
}

TEST_F(MpiRanks, AllReduceIsExactAtEverySize) {
  // One element, odd sizes, and several MB (3 Mi + 1 floats = 12 MB) with two tensors in flight.
  for (int64_t count : {int64_t{1}, int64_t{3}, int64_t{1001}, int64_t{65537}, (int64_t{3} << 20) + 1}) {
    comm_->set_step(count);
    expect_exact_all_reduce(*comm_, *backend_, DType::f32, count);
  }
}

TEST_F(MpiRanks, HalfPrecisionIsRefusedOnTheCpu) {
  std::vector<double> v{1, 2, 3};
  Buffer x(*backend_, DType::f16, v);
  Tensor t = x.tensor();
  EXPECT_EQ(user_error_message([&] { comm_->all_reduce_sum(t); }),
            "the mpi communicator sums f32 tensors only (CPU ranks train in fp32), not f16");
}

TEST_F(MpiRanks, BroadcastFromEveryRoot) {
  for (int root = 0; root < comm_->size(); ++root) {
    expect_broadcast(*comm_, *backend_, DType::f32, root, 1001);
  }
  expect_broadcast(*comm_, *backend_, DType::f16, comm_->size() - 1, 7);  // bytes: any dtype
}

TEST_F(MpiRanks, ControlPlane) { expect_control_plane(*comm_); }

// Small integers per rank and element, so that every sum is exact in f32.
float gradient_value(int rank, int64_t i) { return static_cast<float>(rank * 7 + i % 13 - 6); }

// The buckets of `memory` cover every element of the flat buffers once, never span the two regions, and
// launch in the order backward completes them; the exchange then leaves every element's exact sum over
// the ranks, whatever the bucket size.
void expect_exchange_sums_exactly(Communicator& comm, Backend& backend, MemoryPlan& memory,
                                  size_t bucket_bytes) {
  SCOPED_TRACE(fmt::format("buckets of {} bytes", bucket_bytes));
  auto buckets = plan_gradient_buckets(memory, bucket_bytes, /*reduce_in_compute_dtype=*/false);
  ASSERT_FALSE(buckets.empty());
  for (size_t b = 1; b < buckets.size(); ++b)
    EXPECT_LE(buckets[b].ready_after_layer, buckets[b - 1].ready_after_layer) << "launch order";
  auto by_offset = buckets;
  std::sort(by_offset.begin(), by_offset.end(), [](auto& a, auto& b) { return a.offset < b.offset; });
  int64_t covered = 0;
  for (const GradientBucket& bucket : by_offset) {
    EXPECT_EQ(bucket.offset, covered) << "a gap or an overlap";
    EXPECT_GT(bucket.count, 0);
    const int64_t region_end = bucket.compute_region ? memory.compute_count() : memory.parameter_count();
    EXPECT_LE(bucket.offset + bucket.count, region_end) << "a bucket spans the two regions";
    covered = bucket.offset + bucket.count;
  }
  EXPECT_EQ(covered, memory.parameter_count());
  // Every parameter is in a bucket that is launched no earlier than its own layer's backward.
  for (const ParameterInfo& p : memory.parameters()) {
    for (const GradientBucket& bucket : buckets) {
      if (p.offset >= bucket.offset && p.offset < bucket.offset + bucket.count) {
        EXPECT_LE(bucket.ready_after_layer, p.layer) << p.name;
      }
    }
  }

  Tensor& grads = memory.flat_gradients();
  std::vector<float> mine(static_cast<size_t>(grads.numel()));
  for (int64_t i = 0; i < grads.numel(); ++i) mine[static_cast<size_t>(i)] = gradient_value(comm.rank(), i);
  backend.copy_to_device(grads.data(), mine.data(), grads.bytes());
  GradientExchange exchange(backend, memory, comm, bucket_bytes, /*reduce_in_compute_dtype=*/false);
  exchange.arm();
  int last_layer = 0;
  for (const ParameterInfo& p : memory.parameters()) last_layer = std::max(last_layer, p.layer);
  for (int layer = last_layer; layer >= 0; --layer) exchange.layer_done(layer);  // backward's order
  exchange.finish();
  std::vector<float> summed(mine.size());
  backend.copy_to_host(summed.data(), grads.data(), grads.bytes());
  int wrong = 0;
  for (int64_t i = 0; i < grads.numel(); ++i) {
    float expected = 0;
    for (int r = 0; r < comm.size(); ++r) expected += gradient_value(r, i);
    if (summed[static_cast<size_t>(i)] != expected && wrong++ < 5)
      ADD_FAILURE() << "element " << i << ": " << summed[static_cast<size_t>(i)] << ", expected " << expected;
  }
  EXPECT_EQ(wrong, 0);
}

// Hand-made parameters of 1, 7 and 300 elements on three layers: a one-element bucket, buckets of several
// parameters, and one bucket larger than all gradients. (A parameter is never split: one larger than the
// bucket size is a bucket of its own, as DDP does.)
TEST_F(MpiRanks, GradientExchangeSumsEveryBucketBoundaryCaseExactly) {
  MemoryPlan memory(*backend_, DType::f32, DType::f32);
  std::vector<Tensor> values, grads;
  values.reserve(3);
  grads.reserve(3);
  const int64_t sizes[] = {1, 7, 300};
  for (int layer = 0; layer < 3; ++layer) {
    values.emplace_back(nullptr, std::vector<int64_t>{sizes[layer]}, DType::f32, Layout::nchw,
                        backend_->device());
    grads.emplace_back(nullptr, std::vector<int64_t>{sizes[layer]}, DType::f32, Layout::nchw,
                       backend_->device());
    memory.set_current_layer(layer);
    memory.add_parameter(fmt::format("p{}", layer), values.back(), grads.back(), ParamInit::zeros, 1, false,
                         ParamUse::compute);
  }
  memory.allocate(/*seed=*/1);
  for (size_t bytes : {size_t{4}, size_t{40}, size_t{1} << 30})
    expect_exchange_sums_exactly(*comm_, *backend_, memory, bytes);
}

// The buckets of a real network (resnet20: 65 parameter tensors in two regions) at sizes from one tensor
// per bucket to one bucket per region.
TEST_F(MpiRanks, GradientExchangeSumsResnet20Exactly) {
  NetworkOptions options;
  options.batch = 2;
  ModelOptions model_options;
  model_options.input = {1, 28, 28};
  model_options.num_classes = 10;
  Model model = build_model("resnet20", *backend_, options, model_options);
  model.net->finalize(/*seed=*/3);
  for (size_t bytes : {size_t{4}, size_t{64} << 10, size_t{1} << 30})
    expect_exchange_sums_exactly(*comm_, *backend_, model.net->memory(), bytes);
}

TEST_F(MpiRanks, ConfigMismatchNamesTheFlag) {
  nlohmann::json config = {{"model", "resnet50"}, {"batch_size", 32}, {"lr", 0.1}, {"device", "cpu"}};
  check_same_config(*comm_, config);  // the same everywhere: passes
  nlohmann::json mine = config;
  if (comm_->rank() == 1) mine["lr"] = 0.2;
  mine["device"] = "cuda:" + std::to_string(comm_->rank());  // rank-specific, left out below
  // Rank 0 says it; the others stop silently (one line for the run).
  EXPECT_EQ(user_error_message([&] { check_same_config(*comm_, mine, {"device"}); }),
            comm_->rank() != 0 ? ""
                               : "the ranks were started with different settings: --lr (lr): rank 0 has 0.1, "
                                 "rank 1 has 0.2; start every rank with the same flags");
}

}  // namespace
}  // namespace dlbench::parallel
