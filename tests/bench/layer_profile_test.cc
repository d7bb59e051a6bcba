// Per-layer timing (bench/layer_profile.h) on the CPU backend: every layer is timed in both directions, the
// convolutions take time in both, and the table and JSON list them all.
#include "bench/layer_profile.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/backend_factory.h"
#include "models/resnet.h"

namespace dlbench {
namespace {

TEST(LayerProfile, TimesEveryLayerInBothDirections) {
  auto backend = make_backend("onednn", Device{}, 1);
  NetworkOptions options;
  options.batch = 4;
  ModelOptions model_options;
  model_options.input = default_input_shape("resnet20");
  model_options.num_classes = default_num_classes("resnet20");
  Model model = build_model("resnet20", *backend, options, model_options);
  model.net->finalize(1);
  // The labels in range: the loss refuses others, and memory another test left may hold anything.
  const std::vector<int32_t> labels = {0, 3, 7, 9};
  backend->copy_to_device(model.labels->value.data(), labels.data(), labels.size() * sizeof(int32_t));
  const std::vector<LayerTime> times = profile_layers(*model.net, 2);
  ASSERT_EQ(times.size(), model.net->layers().size());
  double conv_forward = 0, conv_backward = 0;
  for (const LayerTime& t : times) {
    EXPECT_GE(t.forward_ms, 0) << t.name;
    EXPECT_GE(t.backward_ms, 0) << t.name;
    if (t.kind != "conv") continue;
    EXPECT_GT(t.forward_ms, 0) << t.name;
    EXPECT_GT(t.backward_ms, 0) << t.name;
    conv_forward += t.forward_ms;
    conv_backward += t.backward_ms;
  }
  EXPECT_GT(conv_forward, 0);
  EXPECT_GT(conv_backward, 0);
  const std::string table = format_layer_profile(times);
  for (const LayerTime& t : times) EXPECT_NE(table.find(t.name), std::string::npos) << t.name;
  EXPECT_NE(table.find("total"), std::string::npos);
  EXPECT_EQ(to_json(times).size(), times.size());
}

TEST(LayerProfile, TableColumnsLineUpWhateverTheNamesAndKinds) {
  std::vector<LayerTime> times(2);
  times[0].name = "conv1", times[0].kind = "conv", times[0].forward_ms = 1.5, times[0].backward_ms = 2.25;
  times[0].forward_macs = 1000000;
  times[1].name = "transformer.h.11.attn.attention", times[1].kind = "batchnorm+maxpool",
  times[1].forward_ms = 0.5;
  times[1].backward_ms = 0.75, times[1].forward_macs = 2000000;
  const std::string table = format_layer_profile(times);
  // Every layer's line ends with the plan column (empty here): both are as long as each other once the
  // columns line up, and the forward times end where the header's "fwd ms" does.
  std::vector<std::string> lines;
  for (size_t at = 0, end; (end = table.find('\n', at)) != std::string::npos; at = end + 1)
    lines.push_back(table.substr(at, end - at));
  ASSERT_EQ(lines.size(), 4u);  // header, two layers, total
  EXPECT_EQ(lines[1].size(), lines[2].size());
  const size_t column = lines[0].find("fwd ms") + std::string("fwd ms").size();
  EXPECT_EQ(lines[1].find("1.500") + 5, column);
  EXPECT_EQ(lines[2].find("0.500") + 5, column);
  EXPECT_EQ(lines[3].find("2.000") + 5, column);  // the total
}

}  // namespace
}  // namespace dlbench
