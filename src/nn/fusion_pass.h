// The fusion pass: a model builder adds the plain layers (torchvision's graph: convolution, batch norm
// with its ReLU or residual add + ReLU, max pool), and before planning the network rewrites its layer list
// where the backend says it runs a pattern as one op (Backend::fuses, Fusion):
//   * a batch norm + ReLU read only by a max pool, and the pool  ->  BatchNormMaxPoolLayer (the pool's
//   place);
//   * a block's closing batch norm (add_relu) whose residual is a shortcut batch norm read by it alone, and
//     the shortcut's batch norm  ->  BatchNormShortcutLayer (the closing one's place);
//   * a batch norm whose input a convolution makes  ->  the convolution sums its output for it
//     (ConvLayer::request_statistics, BatchNormState::take_input_sums_from);
//   * a transformer's MLP, dense -> GELU -> dense with the inner values read by nothing else, and the
//     residual add of its output where that add alone reads it  ->  MlpLayer (the last layer's place);
//   * a dense layer whose output only a residual add reads, and the add  ->  LinearLayer with a residual
//     (the add's place);
//   * a dense layer (or a fused MLP's c_proj) whose output a layer norm reads first  ->  the layer norm's
//     backward sums that output's gradient for the dense layer's bias gradient
//     (LayerNormLayer::sum_input_gradient_into), and the dense layer's backward makes none;
//   * a layer norm whose output an FP8 dense layer (or a fused MLP's c_fc) alone reads, keeping x^T's codes
//     ->  the layer norm writes the codes of its output instead of the output
//     (LayerNormLayer::write_fp8_codes_for), and the dense layer quantizes no input;
//   * a dense layer not in FP8 whose output (qkv) attention alone reads  ->  the attention layer's backward
//     makes its bias gradient (CausalSelfAttentionLayer::make_qkv_bias_gradient), with the dense layer
//     that alone reads attention's output, where there is one, writing the v third.
// The fused layers hold the same parameters, in the same order and under the same names, as the layers
// they replace, so checkpoints do not depend on what was fused; every backend runs every fused op (composing
// the single ones where it has no kernels for it), so results do not either.
#pragma once

#include <optional>

namespace dlbench {

class Network;

// Fusions forced on or off whatever the backend says (unset: Backend::fuses decides): for the tests that
// compare a fusion with the layers it replaces, on backends that compose the fused ops.
struct FusionChoices {
  std::optional<bool> conv_statistics;
  std::optional<bool> shortcut_batchnorm;
  std::optional<bool> batchnorm_max_pool;
  std::optional<bool> dense_gelu_dense;
  std::optional<bool> dense_residual;
  std::optional<bool> layernorm_dx_sums;
  std::optional<bool> layernorm_fp8_codes;
  std::optional<bool> attention_qkv_bias;
};

// Rewrites `net`'s layers (built, not planned) where `choices` or else the backend says so.
void fuse_layers(Network& net, const FusionChoices& choices);

}  // namespace dlbench
