// A built model, of either family, and the names the CLI takes.
//
//   resnet  images [N, C, H, W] -> labels [N]      (models/resnet.h)
//   gpt     tokens [B, T] i32   -> targets [B, T]  (models/gpt.h): each position predicts the next token
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/network.h"
#include "nn/softmax_cross_entropy.h"

namespace dlbench {

enum class ModelFamily : uint8_t { resnet, gpt };

struct ImageShape {
  int64_t channels = 3, height = 224, width = 224;
};

// A built model: the network and the handles the trainer feeds and reads.
struct Model {
  std::string name;
  ModelFamily family = ModelFamily::resnet;
  std::unique_ptr<Network> net;
  // Image models.
  Activation* images = nullptr;  // [N, C, H, W] input, in the network's dtype and layout
  Activation* labels = nullptr;  // [N] i32
  // Token models.
  Activation* tokens = nullptr;   // [B, T] i32 input
  Activation* targets = nullptr;  // [B, T] i32: tokens shifted by one
  int64_t seq_len = 0;            // T
  Activation* logits = nullptr;   // [N, classes] ([B * T, padded vocabulary] for a token model)
  SoftmaxCrossEntropyLayer* loss = nullptr;
  int64_t num_classes = 0;  // classes; a token model's vocabulary (unpadded)
  // A token model's FLOPs per trained token, forward and backward: 6 x trained parameters (two per
  // multiply-add, a forward and two backward GEMMs) + the attention's 12 x layers x width x T (its two
  // T x T products, causal masking not subtracted): PaLM's count, as nanoGPT's estimate_mfu makes it.
  double flops_per_token = 0;
  // Parameters that exist only to pad a table (the vocabulary's rows past the real tokens): never used.
  int64_t padding_parameters = 0;

  // What the data feeds each step: images and labels, or tokens and targets.
  Activation* input() const { return family == ModelFamily::gpt ? tokens : images; }
  Activation* target() const { return family == ModelFamily::gpt ? targets : labels; }
  // Samples of one micro-batch: images, or sequences.
  int64_t batch() const { return net->batch(); }
  // The trained parameters, without padding (GPT-2 124M: 124,439,808).
  int64_t trained_parameters() const { return net->parameter_count() - padding_parameters; }
};

// Every model `--model` takes, the ResNets first.
const std::vector<std::string>& model_names();
bool is_model_name(const std::string& name);
// UserError naming the models for an unknown name.
ModelFamily model_family(const std::string& name);

struct ModelOptions {
  // Image models.
  ImageShape input;
  int64_t num_classes = 1000;
  float label_smoothing = 0.f;
  // Token models: the sequence length T (0: the model's context).
  int64_t seq_len = 0;
};

// Builds (but does not finalize) the named model of either family (build_resnet, build_gpt).
Model build_model(const std::string& name, Backend& backend, const NetworkOptions& net_options,
                  const ModelOptions& options);

}  // namespace dlbench
