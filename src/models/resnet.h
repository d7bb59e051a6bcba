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

#include "models/model.h"

namespace dlbench {

const std::vector<std::string>& resnet_model_names();
// The input a model is made for when the data does not say (224x224 RGB; resnet20: 1x28x28).
ImageShape default_input_shape(const std::string& model);
// The smallest side an input may have: what the model's downsampling leaves at least one pixel of.
int smallest_input_size(const std::string& model);
int64_t default_num_classes(const std::string& model);

// Builds (but does not finalize) the model: torchvision's layers, each batch norm with the ReLU or residual
// add + ReLU after it; where the backend fuses more, the network rewrites them when it is finalized
// (nn/fusion_pass.h). Throws UserError for an unknown name or an input the model
// cannot take.
Model build_resnet(const std::string& name, Backend& backend, const NetworkOptions& net_options,
                   const ModelOptions& options);

}  // namespace dlbench
