#include "models/resnet.h"

#include <fmt/format.h>

#include "core/status.h"
#include "nn/batchnorm.h"
#include "nn/conv.h"
#include "nn/linear.h"
#include "nn/pool.h"

namespace dlbench {

namespace {

enum class BlockKind { basic, bottleneck };

struct ResNetSpec {
  BlockKind block;
  std::vector<int> blocks_per_stage;
  std::vector<int64_t> stage_channels;  // output channels of each stage's 3x3 convs
  bool imagenet_stem;                   // 7x7/2 conv + 3x3/2 max pool, else one 3x3/1 conv
};

ResNetSpec spec_for(const std::string& name) {
  const std::vector<int64_t> imagenet_channels{64, 128, 256, 512};
  if (name == "resnet18") return {BlockKind::basic, {2, 2, 2, 2}, imagenet_channels, true};
  if (name == "resnet34") return {BlockKind::basic, {3, 4, 6, 3}, imagenet_channels, true};
  if (name == "resnet50") return {BlockKind::bottleneck, {3, 4, 6, 3}, imagenet_channels, true};
  if (name == "resnet101") return {BlockKind::bottleneck, {3, 4, 23, 3}, imagenet_channels, true};
  if (name == "resnet152") return {BlockKind::bottleneck, {3, 8, 36, 3}, imagenet_channels, true};
  if (name == "resnet20") return {BlockKind::basic, {3, 3, 3}, {16, 32, 64}, false};
  throw_user_error("unknown model '{}'; choose one of: {}", name, fmt::join(model_names(), ", "));
}

// conv -> batch norm (+ ReLU), the unit every ResNet is made of.
Activation& conv_bn(Network& net, const std::string& prefix, const std::string& suffix, Activation& x,
                    int64_t channels, int64_t kernel, int64_t stride, BatchNormFusion fusion) {
  auto& conv =
      net.add<ConvLayer>(prefix + "conv" + suffix, x, ConvOptions{channels, kernel, stride, kernel / 2});
  return *net.add<BatchNormLayer>(prefix + "bn" + suffix, *conv.output(), fusion).output();
}

// A block's end: relu(bn(main) + shortcut(x)), main the output of `conv`, the shortcut the identity or,
// where the shape changes, a strided 1x1 projection and its batch norm (torchvision's downsample).
Activation& block_end(Network& net, const std::string& prefix, const std::string& closing_name,
                      ConvLayer& conv, Activation& x, int64_t channels, int64_t stride) {
  Activation* shortcut = &x;
  if (stride != 1 || x.value.c() != channels) {
    auto& projection = net.add<ConvLayer>(prefix + "downsample.0", x, ConvOptions{channels, 1, stride, 0});
    shortcut = net.add<BatchNormLayer>(prefix + "downsample.1", *projection.output(), BatchNormFusion::none)
                   .output();
  }
  return *net.add<BatchNormLayer>(prefix + closing_name, *conv.output(), BatchNormFusion::add_relu, shortcut)
              .output();
}

// BasicBlock: relu(bn2(conv3x3(relu(bn1(conv3x3(x))))) + shortcut(x)).
Activation& basic_block(Network& net, const std::string& prefix, Activation& x, int64_t channels,
                        int64_t stride) {
  Activation& a = conv_bn(net, prefix, "1", x, channels, 3, stride, BatchNormFusion::relu);
  auto& conv2 = net.add<ConvLayer>(prefix + "conv2", a, ConvOptions{channels, 3, 1, 1});
  return block_end(net, prefix, "bn2", conv2, x, channels, stride);
}

// Bottleneck (v1.5): 1x1 reduce -> 3x3 (strided) -> 1x1 expand x4, plus the shortcut.
Activation& bottleneck_block(Network& net, const std::string& prefix, Activation& x, int64_t width,
                             int64_t stride) {
  const int64_t out_channels = width * 4;
  Activation& a = conv_bn(net, prefix, "1", x, width, 1, 1, BatchNormFusion::relu);
  Activation& b = conv_bn(net, prefix, "2", a, width, 3, stride, BatchNormFusion::relu);
  auto& conv3 = net.add<ConvLayer>(prefix + "conv3", b, ConvOptions{out_channels, 1, 1, 0});
  return block_end(net, prefix, "bn3", conv3, x, out_channels, stride);
}

// The ImageNet stem: 7x7/2 convolution, batch norm + ReLU, 3x3/2 max pool.
Activation& imagenet_stem(Network& net, Activation& images, int64_t channels) {
  Activation& a = conv_bn(net, "", "1", images, channels, 7, 2, BatchNormFusion::relu);
  return *net.add<MaxPoolLayer>("maxpool", a, 3, 2, 1).output();
}

}  // namespace

const std::vector<std::string>& resnet_model_names() {
  static const std::vector<std::string> names{"resnet18",  "resnet34",  "resnet50",
                                              "resnet101", "resnet152", "resnet20"};
  return names;
}

ImageShape default_input_shape(const std::string& model) {
  return model == "resnet20" ? ImageShape{1, 28, 28} : ImageShape{3, 224, 224};
}

int smallest_input_size(const std::string& model) {
  // The ImageNet stem divides the input by 4 and the stages by 8 more; below 32 pixels nothing is left.
  return spec_for(model).imagenet_stem ? 32 : 8;
}

int64_t default_num_classes(const std::string& model) { return model == "resnet20" ? 10 : 1000; }

Model build_resnet(const std::string& name, Backend& backend, const NetworkOptions& net_options,
                   const ModelOptions& options) {
  ResNetSpec spec = spec_for(name);
  const ImageShape& in = options.input;
  const int64_t min_size = smallest_input_size(name);
  DLB_REQUIRE(in.height >= min_size && in.width >= min_size,
              "{} needs inputs of at least {}x{} pixels, got {}x{}", name, min_size, min_size, in.height,
              in.width);
  DLB_REQUIRE(options.num_classes >= 2, "{} needs at least 2 classes, got {}", name, options.num_classes);

  Model model;
  model.name = name;
  model.num_classes = options.num_classes;
  model.net = std::make_unique<Network>(backend, net_options);
  Network& net = *model.net;
  const int64_t n = net_options.batch;
  model.images = &net.new_input("images", {n, in.channels, in.height, in.width}, net_options.dtype);
  model.labels = &net.new_input("labels", {n}, DType::i32);

  Activation* x;
  if (spec.imagenet_stem) {
    x = &imagenet_stem(net, *model.images, spec.stage_channels[0]);
  } else {
    x = &conv_bn(net, "", "1", *model.images, spec.stage_channels[0], 3, 1, BatchNormFusion::relu);
  }
  for (size_t stage = 0; stage < spec.blocks_per_stage.size(); ++stage) {
    for (int block = 0; block < spec.blocks_per_stage[stage]; ++block) {
      int64_t stride = (stage > 0 && block == 0) ? 2 : 1;
      std::string prefix = fmt::format("layer{}.{}.", stage + 1, block);
      x = spec.block == BlockKind::basic
              ? &basic_block(net, prefix, *x, spec.stage_channels[stage], stride)
              : &bottleneck_block(net, prefix, *x, spec.stage_channels[stage], stride);
    }
  }
  x = net.add<GlobalAvgPoolLayer>("avgpool", *x).output();
  model.logits = net.add<LinearLayer>("fc", *x, options.num_classes).output();
  net.keep_after_step(*model.logits);
  model.loss =
      &net.add<SoftmaxCrossEntropyLayer>("loss", *model.logits, *model.labels, options.label_smoothing);
  return model;
}

}  // namespace dlbench
