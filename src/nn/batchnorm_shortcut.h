// BatchNormShortcutLayer: a projection block's end with the shortcut's batch norm folded into the closing
// one — y = relu(bn(x) + bn_s(s)), s the shortcut convolution's output — through
// Backend::batchnorm_shortcut_*: bn_s(s) and the gradient between the two batch norms need never be
// stored. The fusion pass (nn/fusion_pass.h) puts it in the place of the two BatchNormLayers where the
// backend folds (Fusion::shortcut_batchnorm).
//   input    x   [N, C, H, W]   the block's main path (its last convolution's output)
//   input    s   [N, C, H, W]   the shortcut convolution's output
//   params, buffers and saved statistics: both batch norms' (BatchNormLayer), each under its own layer's
//   name, the shortcut's first — so parameters, checkpoints and their order are those of the two layers.
#pragma once

#include "nn/batchnorm.h"

namespace dlbench {

class BatchNormShortcutLayer final : public Layer {
 public:
  // `name` and `shortcut_name` are the two batch norms'; `output` the closing one's output, which this layer
  // writes in its place.
  BatchNormShortcutLayer(Network& net, std::string name, Activation& input, std::string shortcut_name,
                         Activation& shortcut_input, Activation& output);
  // The kind of the batch norm it ends the block with (the per-layer profile's column).
  const char* kind() const override { return "batchnorm"; }
  void plan(MemoryPlan& plan) override;
  void forward(Phase phase) override;
  void backward() override;
  std::string plan_summary() const override;
  // The backward reads both inputs (s is normalised again there) and the output (it masks the ReLU): the
  // Layer defaults.

  // The batch norms of x (input 0) and s (input 1).
  BatchNormState& closing() { return closing_; }
  BatchNormState& shortcut() { return shortcut_; }

 private:
  BatchNormState closing_, shortcut_;
  std::string shortcut_name_;
};

}  // namespace dlbench
