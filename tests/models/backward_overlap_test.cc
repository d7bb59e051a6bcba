// Backend::backward_work_outlives_layer (the CUDA backend's --weight-gradient-stream next-layer): a
// layer's backward may leave work running into the next layer's. The network must then plan every value
// that backward reads to live through the next layer's backward, settle the left-over work after each
// layer, and tell the gradient observer (the exchange of gradients between ranks) of a layer only once
// its work is settled. On the reference backend, which runs every op as it is called, the step must not
// change a bit; the plan is checked value by value.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "backend/reference/reference_backend.h"
#include "gpt_test_util.h"
#include "models/gpt.h"
#include "nn/network.h"

namespace dlbench {
namespace {

// The reference backend, saying that backward work outlives its layer and logging each settle.
class OutlivingBackend : public ReferenceBackend {
 public:
  bool backward_work_outlives_layer() const override { return true; }
  void settle_backward_work(bool all) override { log.push_back(all ? "settle all" : "settle"); }
  std::vector<std::string> log;
};

std::vector<float> stepped_gradients(Backend& backend, Model& model, float& loss) {
  testing::feed_fixed_tokens(backend, model);
  model.net->forward(Phase::train);
  model.net->backward();
  backend.synchronize();
  loss = model.loss->output()->value.ptr<float>()[0];
  const Tensor& g = model.net->memory().flat_gradients();
  return {g.ptr<float>(), g.ptr<float>() + g.numel()};
}

TEST(BackwardOverlap, TheStepIsTheSameToTheBit) {
  for (const bool fuse : {false, true}) {
    for (const bool recompute : {false, true}) {
      SCOPED_TRACE(std::string(fuse ? "fused" : "layers") + (recompute ? ", recomputed" : ""));
      ReferenceBackend plain;
      OutlivingBackend outliving;
      Model a = testing::finalized_gpt_mini(plain, recompute, fuse),
            b = testing::finalized_gpt_mini(outliving, recompute, fuse);
      float loss_a = 0, loss_b = 0;
      const std::vector<float> ga = stepped_gradients(plain, a, loss_a),
                               gb = stepped_gradients(outliving, b, loss_b);
      EXPECT_EQ(loss_a, loss_b);
      ASSERT_EQ(ga.size(), gb.size());
      EXPECT_EQ(std::memcmp(ga.data(), gb.data(), ga.size() * sizeof(float)), 0) << "the gradients differ";
      double norm = 0;
      for (float v : ga) norm += double(v) * v;
      EXPECT_GT(norm, 0.0);  // a backward pass that wrote nothing would match too
    }
  }
}

// Without recompute layer k's backward is step 2L-1-k, so the next layer's (k-1) is 2L-k: each value a
// backward reads, and the gradient of its output, must live at least that long where work outlives the
// layer, and the plain plan frees some of them a step earlier (else the check would prove nothing).
TEST(BackwardOverlap, WhatABackwardReadsLivesThroughTheNextLayersBackward) {
  for (const bool fuse : {false, true}) {
    SCOPED_TRACE(fuse ? "fused" : "layers");
    ReferenceBackend plain;
    OutlivingBackend outliving;
    const Model a = testing::finalized_gpt_mini(plain, false, fuse),
                b = testing::finalized_gpt_mini(outliving, false, fuse);
    std::map<std::string, Placement> plain_at, outliving_at;
    for (const Placement& p : a.net->memory().placements()) plain_at[p.name] = p;
    for (const Placement& p : b.net->memory().placements()) outliving_at[p.name] = p;
    ASSERT_EQ(plain_at.size(), outliving_at.size());
    const auto& layers = b.net->layers();
    const int count = static_cast<int>(layers.size());
    int checked = 0, freed_earlier_in_plain = 0;
    auto expect_lives_until = [&](const std::string& name, int step) {
      const auto found = outliving_at.find(name);
      if (found == outliving_at.end()) return;  // memory of another's (the loss's gradient over the logits)
      const Placement& p = found->second;
      if (p.always) return;
      ++checked;
      EXPECT_GE(p.last, step) << name;
      freed_earlier_in_plain += plain_at.at(name).last < step;
    };
    for (int k = 1; k < count; ++k) {
      Layer& layer = *layers[static_cast<size_t>(k)];
      const int next_backward = 2 * count - k;
      for (int i = 0; i < static_cast<int>(layer.inputs().size()); ++i)
        if (layer.backward_reads_input(i))
          expect_lives_until(layer.inputs()[static_cast<size_t>(i)]->name, next_backward);
      if (layer.backward_reads_output()) expect_lives_until(layer.output()->name, next_backward);
      if (layer.output()->needs_grad) expect_lives_until(layer.output()->name + ".grad", next_backward);
      for (const SavedValue& v : layer.saved_values()) expect_lives_until(v.name, next_backward);
      for (const SavedValue& v : layer.backward_scratch()) expect_lives_until(v.name, next_backward);
    }
    EXPECT_GT(checked, 20);
    EXPECT_GT(freed_earlier_in_plain, 10);
    // Nothing lives longer than one step more than in the plain plan.
    for (const auto& [name, p] : plain_at) {
      if (p.always) continue;
      EXPECT_LE(outliving_at.at(name).last, p.last + 1) << name;
    }
  }
}

// After each layer's backward the network settles the work left before it; the observer hears of layer
// i + 1 after layer i's backward and that settle, and of layer 0 after the last settle. Where nothing
// outlives its layer, it hears of each layer right after its backward.
TEST(BackwardOverlap, TheObserverHearsOfALayerOnceItsWorkIsSettled) {
  OutlivingBackend outliving;
  Model model = testing::finalized_gpt_mini(outliving, false, true);
  const int count = static_cast<int>(model.net->layers().size());
  model.net->set_backward_observer(
      [&](int layer) { outliving.log.push_back("layer " + std::to_string(layer)); });
  testing::feed_fixed_tokens(outliving, model);
  model.net->forward(Phase::train);
  outliving.log.clear();
  model.net->backward();
  std::vector<std::string> expected{"settle"};
  for (int i = count - 2; i >= 0; --i) {
    expected.push_back("settle");
    expected.push_back("layer " + std::to_string(i + 1));
  }
  expected.push_back("settle all");
  expected.push_back("layer 0");
  EXPECT_EQ(outliving.log, expected);

  ReferenceBackend plain;
  Model plain_model = testing::finalized_gpt_mini(plain, false, true);
  std::vector<int> heard;
  plain_model.net->set_backward_observer([&](int layer) { heard.push_back(layer); });
  testing::feed_fixed_tokens(plain, plain_model);
  plain_model.net->forward(Phase::train);
  plain_model.net->backward();
  ASSERT_EQ(static_cast<int>(heard.size()), count);
  for (int i = 0; i < count; ++i) EXPECT_EQ(heard[static_cast<size_t>(i)], count - 1 - i);
}

}  // namespace
}  // namespace dlbench
