// The ResNet family, built layer by layer into a Network.
//
//   resnet18/34      ImageNet ResNets of BasicBlocks  [2,2,2,2] / [3,4,6,3], 3x224x224, 1000 classes
//   resnet50/101/152 ResNet v1.5 of Bottlenecks       [3,4,6,3] / [3,4,23,3] / [3,8,36,3]
//                    (v1.5: the stride-2 sits in the 3x3 conv, as torchvision and NVIDIA's examples do)
//   resnet20         He et al.'s CIFAR ResNet: 3 stages x 3 BasicBlocks of 16/32/64 channels, for 28x28
//                    (1 channel, Fashion-MNIST) or 32x32 inputs; projection shortcuts where the shape changes
//
// Parameter names follow torchvision ("layer1.0.conv1.weight"), so counts and shapes can be compared.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nn/network.h"
#include "nn/softmax_cross_entropy.h"

namespace dlbench {

struct ImageShape {
  int64_t channels = 3, height = 224, width = 224;
};

// A built model: the network and the handles the trainer feeds and reads.
struct Model {
  std::string name;
  std::unique_ptr<Network> net;
  Activation* images = nullptr;  // [N, C, H, W] input, in the network's dtype and layout
  Activation* labels = nullptr;  // [N] i32
  Activation* logits = nullptr;  // [N, classes]
  SoftmaxCrossEntropyLayer* loss = nullptr;
  int64_t num_classes = 0;
};

const std::vector<std::string>& model_names();
bool is_model_name(const std::string& name);
// The input a model is made for when the data does not say (224x224 RGB; resnet20: 1x28x28).
ImageShape default_input_shape(const std::string& model);
// The smallest side an input may have: what the model's downsampling leaves at least one pixel of.
int smallest_input_size(const std::string& model);
int64_t default_num_classes(const std::string& model);

struct ModelOptions {
  ImageShape input;
  int64_t num_classes = 1000;
  float label_smoothing = 0.f;
};

// Builds (but does not finalize) the model: torchvision's layers, each batch norm with the ReLU or residual
// add + ReLU after it; where the backend fuses more, the network rewrites them when it is finalized
// (nn/fusion_pass.h). Throws UserError for an unknown name or an input the model
// cannot take.
Model build_model(const std::string& name, Backend& backend, const NetworkOptions& net_options,
                  const ModelOptions& options);

}  // namespace dlbench
