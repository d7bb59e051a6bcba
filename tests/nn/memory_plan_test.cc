// The memory plan's liveness placement: much smaller than every tensor in memory of its own, never two
// tensors that hold data at the same step in the same bytes, and the same placement estimated as
// allocated.
#include "nn/memory_plan.h"

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "core/status.h"
#include "models/resnet.h"

namespace dlbench {
namespace {

Model planned_model(Backend& backend, const std::string& name, int64_t batch, bool allocate,
                    DType dtype = DType::f32) {
  NetworkOptions options;
  options.batch = batch;
  options.dtype = dtype;
  ModelOptions model_options;
  model_options.input = default_input_shape(name);
  model_options.num_classes = default_num_classes(name);
  Model model = build_model(name, backend, options, model_options);
  if (allocate) {
    model.net->finalize(1);
  } else {
    model.net->plan_memory_only();
  }
  return model;
}

size_t always_bytes(const MemoryPlan& plan) {
  size_t total = 0;
  for (const Placement& p : plan.placements()) total += p.always ? p.bytes : 0;
  return total;
}

TEST(MemoryPlan, ResNet50ActivationsTakeLittleMoreThanTheValuesRead) {
  auto backend = make_reference_backend();
  Model model = planned_model(*backend, "resnet50", 2, /*allocate=*/false);
  const MemoryPlan& plan = model.net->memory();
  // Before: every value and gradient in memory of its own. Now every tensor holds memory only while it
  // holds data: the gradients (about half of the total) fit into the memory the saved values leave behind
  // as the backward pass walks back, so the arena is about the values alone.
  EXPECT_LT(plan.activation_bytes(), plan.unshared_activation_bytes() * 50 / 100);
  EXPECT_GE(plan.activation_bytes(), always_bytes(plan) + plan.transient_peak_bytes());
  // The greedy placement reaches the lower bound here, give or take a few percent of the peak.
  EXPECT_LE(plan.activation_bytes(), always_bytes(plan) + plan.transient_peak_bytes() * 105 / 100);
  check_placements(plan.placements(), plan.activation_bytes());
}

TEST(MemoryPlan, GradientsLiveFromTheirFirstWriteToTheirProducersBackward) {
  auto backend = make_reference_backend();
  Model model = planned_model(*backend, "resnet20", 2, /*allocate=*/false);
  const int layers = static_cast<int>(model.net->layers().size());
  int transient_gradients = 0;
  for (const Placement& p : model.net->memory().placements()) {
    const bool gradient = p.name.size() > 5 && p.name.compare(p.name.size() - 5, 5, ".grad") == 0;
    if (gradient && !p.always) {
      ++transient_gradients;
      EXPECT_GE(p.first, layers) << p.name;  // in the backward pass
      EXPECT_LT(p.first, p.last) << p.name;  // written by a consumer, read later by the producer
      EXPECT_LE(p.last, 2 * layers - 1) << p.name;
    }
    // Images, labels, logits and the loss are read or written from outside the step.
    if (p.name == "images" || p.name == "labels" || p.name == "fc.out" || p.name == "loss.loss") {
      EXPECT_TRUE(p.always) << p.name;
    }
    // A projection shortcut's batch norm output is only added by the closing batch norm's forward.
    if (p.name == "layer2.0.downsample.1.out") {
      EXPECT_FALSE(p.always);
      EXPECT_LT(p.last, layers);
    }
  }
  EXPECT_GT(transient_gradients, 20);
}

TEST(MemoryPlan, SavedValuesLiveUntilTheLastBackwardThatReadsThem) {
  auto backend = make_reference_backend();
  Model model = planned_model(*backend, "resnet20", 2, /*allocate=*/false);
  const auto& layers = model.net->layers();
  const int count = static_cast<int>(layers.size());
  ASSERT_EQ(layers[0]->name(), "conv1");
  ASSERT_EQ(layers[1]->name(), "bn1");
  bool seen = false;
  for (const Placement& p : model.net->memory().placements()) {
    // conv1's output: written by conv1's forward (step 0), read last by bn1's backward (step 2L-2).
    if (p.name == "conv1.out") {
      seen = true;
      EXPECT_FALSE(p.always);
      EXPECT_EQ(p.first, 0);
      EXPECT_EQ(p.last, 2 * count - 2);
    }
    if (!p.always) {
      EXPECT_LE(p.first, p.last) << p.name;
      EXPECT_LE(p.last, 2 * count - 1) << p.name;
    }
  }
  EXPECT_TRUE(seen);
}

TEST(MemoryPlan, EstimateIsWhatFinalizeAllocates) {
  for (bool onednn : {false, true}) {
    auto backend = onednn ? make_onednn_backend(1) : make_reference_backend();
    Model estimated = planned_model(*backend, "resnet20", 4, /*allocate=*/false);
    Model allocated = planned_model(*backend, "resnet20", 4, /*allocate=*/true);
    EXPECT_EQ(estimated.net->memory().total_bytes(), allocated.net->memory().total_bytes()) << onednn;
    EXPECT_EQ(estimated.net->memory().activation_bytes(), allocated.net->memory().activation_bytes());
    EXPECT_THROW(estimated.net->forward(Phase::train), Error);
  }
}

TEST(MemoryPlan, TensorsAreWhereThePlacementSays) {
  auto backend = make_reference_backend();
  Model model = planned_model(*backend, "resnet20", 2, /*allocate=*/true);
  const std::vector<Placement>& placements = model.net->memory().placements();
  ASSERT_EQ(placements[0].name, "images");  // the first activation, at the arena's start
  const auto* base = static_cast<const std::byte*>(model.images->value.data()) - placements[0].offset;
  for (const Placement& p : placements) {
    if (p.name == "fc.out") {
      EXPECT_EQ(static_cast<const std::byte*>(model.logits->value.data()), base + p.offset);
    }
    if (p.name == "fc.out.grad") {
      EXPECT_EQ(static_cast<const std::byte*>(model.logits->grad.data()), base + p.offset);
    }
  }
}

// set_gradient_memory: the gradient arenas come from the source (and stay its own: the plan frees only what
// it allocated); a source that gives nothing leaves the plan allocating as usual.
TEST(MemoryPlan, GradientArenasComeFromTheGivenSource) {
  auto backend = make_reference_backend();
  for (bool source_gives : {true, false}) {
    std::vector<std::vector<std::byte>> given;  // outlives the model, as a communicator's windows do
    NetworkOptions options;
    options.batch = 2;
    ModelOptions model_options;
    model_options.input = default_input_shape("resnet20");
    model_options.num_classes = default_num_classes("resnet20");
    Model model = build_model("resnet20", *backend, options, model_options);
    int asked = 0;
    model.net->memory().set_gradient_memory([&](size_t bytes) -> void* {
      ++asked;
      if (!source_gives) return nullptr;
      given.emplace_back(bytes);
      return given.back().data();
    });
    model.net->finalize(1);
    MemoryPlan& plan = model.net->memory();
    EXPECT_EQ(asked, 1) << "fp32: one gradient arena (no compute-dtype copies)";
    const bool inside = !given.empty() && plan.flat_gradients().data() == given.front().data();
    EXPECT_EQ(inside, source_gives);
    EXPECT_GE(given.empty() ? plan.flat_gradients().bytes() : given.front().size(),
              plan.flat_gradients().bytes());
    // Every parameter's gradient points into the flat gradients, wherever they came from.
    const auto* begin = static_cast<const std::byte*>(plan.flat_gradients().data());
    for (const ParameterInfo& p : plan.parameters()) {
      const auto* g = static_cast<const std::byte*>(p.grad->data());
      EXPECT_TRUE(g >= begin && g + p.grad->bytes() <= begin + plan.flat_gradients().bytes()) << p.name;
    }
  }
}

// Mixed precision with one rank: the optimizer's update reads the gradients in the compute dtype, so the
// plan keeps no FP32 copy of them. GPT-2 (every parameter a compute one) then has no FP32 gradient arena at
// all; a ResNet keeps it, for batch norm's FP32 parameters, and the update reads those there.
TEST(MemoryPlan, OneRankKeepsGradientsInTheComputeDtype) {
  auto backend = make_reference_backend();
  for (const std::string name : {"gpt-mini", "resnet20"}) {
    SCOPED_TRACE(name);
    const bool gpt = name == "gpt-mini";
    auto make = [&](bool keep) {
      NetworkOptions options;
      options.batch = 2;
      options.dtype = DType::bf16;
      ModelOptions model_options;
      if (gpt) {
        model_options.seq_len = 32;
      } else {
        model_options.input = default_input_shape(name);
        model_options.num_classes = default_num_classes(name);
      }
      Model model = build_model(name, *backend, options, model_options);
      if (keep) model.net->memory().keep_gradients_in_compute_dtype();
      model.net->finalize(1);
      return model;
    };
    Model plain_model = make(false), kept_model = make(true);
    MemoryPlan& plain = plain_model.net->memory();
    MemoryPlan& kept = kept_model.net->memory();
    EXPECT_FALSE(plain.gradients_in_compute_dtype());
    ASSERT_TRUE(kept.gradients_in_compute_dtype());
    // Both updates refresh the compute copies of the weights; only one reads the compute gradients.
    EXPECT_NE(plain.compute_copies().parameters, nullptr);
    EXPECT_EQ(plain.compute_copies().gradients, nullptr);
    EXPECT_EQ(kept.compute_copies().gradients, &kept.compute_gradients());

    const int64_t count = kept.parameter_count(), copied = kept.compute_count();
    EXPECT_EQ(copied == count, gpt) << "only GPT-2's parameters are all compute ones";
    const size_t fp32_gradients = static_cast<size_t>(count) * sizeof(float);
    EXPECT_EQ(plain.total_bytes() - kept.total_bytes(), gpt ? fp32_gradients : 0);
    EXPECT_EQ(kept.flat_gradients().numel(), gpt ? 0 : count);
    EXPECT_EQ(kept.has_master_gradients(), !gpt);

    // What the checks over every gradient read: the compute gradients, then the FP32 ones of the rest.
    const std::vector<Tensor> stored = kept.stored_gradients();
    ASSERT_EQ(stored.size(), gpt ? 1u : 2u);
    EXPECT_EQ(stored[0].data(), kept.compute_gradients().data());
    EXPECT_EQ(stored[0].dtype(), DType::bf16);
    EXPECT_EQ(stored[0].numel(), copied);
    if (!gpt) {
      EXPECT_EQ(stored[1].dtype(), DType::f32);
      EXPECT_EQ(stored[1].numel(), count - copied);
    }
    // Every parameter's gradient lies in one of them.
    for (const ParameterInfo& p : kept.parameters()) {
      const auto* g = static_cast<const std::byte*>(p.grad->data());
      bool inside = false;
      for (const Tensor& t : stored) {
        const auto* begin = static_cast<const std::byte*>(t.data());
        inside = inside || (g >= begin && g + p.grad->bytes() <= begin + t.bytes());
      }
      EXPECT_TRUE(inside) << p.name;
    }
    EXPECT_EQ(plain.stored_gradients().size(), 1u);
    EXPECT_EQ(plain.stored_gradients()[0].data(), plain.flat_gradients().data());
    EXPECT_THROW(kept.gradients_to_master(), Error) << "there are no FP32 gradients of them to fill";
  }
}

// check_placements must catch a placement that puts two live tensors in the same bytes.
TEST(MemoryPlan, CheckCatchesTwoLiveTensorsInTheSameMemory) {
  auto backend = make_reference_backend();
  for (const char* name : {"resnet20", "resnet50"}) {
    Model model = planned_model(*backend, name, 2, /*allocate=*/false);
    std::vector<Placement> placements = model.net->memory().placements();
    const size_t arena = model.net->memory().activation_bytes();
    ASSERT_NO_THROW(check_placements(placements, arena));

    // Two gradients live at the same step: move the second onto the first.
    size_t a = SIZE_MAX, b = SIZE_MAX;
    for (size_t i = 0; i < placements.size() && b == SIZE_MAX; ++i) {
      for (size_t j = i + 1; j < placements.size(); ++j) {
        if (!placements[i].always && !placements[j].always && placements[i].overlaps_in_time(placements[j]) &&
            placements[i].bytes <= placements[j].bytes) {
          a = i;
          b = j;
          break;
        }
      }
    }
    ASSERT_NE(b, SIZE_MAX);
    std::vector<Placement> wrong = placements;
    wrong[b].offset = wrong[a].offset;
    EXPECT_THROW(check_placements(wrong, arena), Error) << name;
    // One byte of overlap is enough.
    wrong = placements;
    wrong[b].offset = placements[a].offset + placements[a].bytes - 1;
    if (wrong[b].offset + wrong[b].bytes <= arena) {
      EXPECT_THROW(check_placements(wrong, arena), Error) << name;
    }

    // A gradient over a value that is live all step.
    wrong = placements;
    wrong[b].offset = 0;
    EXPECT_THROW(check_placements(wrong, arena), Error) << name;

    // Past the arena's end.
    wrong = placements;
    wrong[b].offset = arena - wrong[b].bytes + 256;
    EXPECT_THROW(check_placements(wrong, arena), Error) << name;
  }
}

TEST(MemoryPlan, TensorsLiveAtDifferentStepsShareMemory) {
  std::vector<Placement> p{
      {"always", 0, 256, true, 0, 0}, {"a", 0, 1024, false, 0, 1}, {"b", 0, 1024, false, 2, 3},
      {"c", 0, 512, false, 1, 2},     {"d", 0, 512, false, 3, 3},
  };
  const size_t arena = place_by_liveness(p);
  check_placements(p, arena);
  // a and b share, c sits beside both (it overlaps each), d takes c's place once c is dead.
  EXPECT_EQ(arena, 256u + 1024 + 512);
  EXPECT_EQ(p[0].offset, 0u);
  EXPECT_EQ(p[1].offset, p[2].offset);
  EXPECT_EQ(p[3].offset, p[4].offset);
}

}  // namespace
}  // namespace dlbench
