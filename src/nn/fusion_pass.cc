#include "nn/fusion_pass.h"

#include <unordered_map>
#include <utility>
#include <vector>

#include "nn/batchnorm.h"
#include "nn/batchnorm_max_pool.h"
#include "nn/batchnorm_shortcut.h"
#include "nn/causal_self_attention.h"
#include "nn/conv.h"
#include "nn/gelu.h"
#include "nn/layernorm.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "nn/network.h"
#include "nn/pool.h"
#include "nn/residual_add.h"

namespace dlbench {
namespace {

// Which layer writes each activation of a layer list, and how many read it.
class Uses {
 public:
  explicit Uses(const Network& net) {
    for (const auto& layer : net.layers()) {
      producer_[layer->output()] = layer.get();
      for (const Activation* input : layer->inputs()) {
        ++readers_[input];
        first_reader_.emplace(input, layer.get());  // kept where there is one
      }
    }
  }
  // The layer that writes `a`, where it is an L.
  template <typename L>
  L* producer(const Activation& a) const {
    auto it = producer_.find(&a);
    return it == producer_.end() ? nullptr : dynamic_cast<L*>(it->second);
  }
  // Whether one layer alone reads `a`, and nothing from outside after the step: a value a fusion that
  // takes its reader in may do without.
  bool read_once(const Activation& a) const {
    auto it = readers_.find(&a);
    return !a.kept_after_step && it != readers_.end() && it->second == 1;
  }
  // The first layer in the list that reads `a`: the last whose backward adds to a's gradient.
  Layer* first_reader(const Activation& a) const {
    auto it = first_reader_.find(&a);
    return it == first_reader_.end() ? nullptr : it->second;
  }

 private:
  std::unordered_map<const Activation*, Layer*> producer_;
  std::unordered_map<const Activation*, int> readers_;
  std::unordered_map<const Activation*, Layer*> first_reader_;
};

bool fuses(Network& net, std::optional<bool> choice, const FusionCandidate& candidate) {
  return choice.value_or(net.backend().fuses(candidate));
}

// A projection block's end: bn_s(s) read only by the closing batch norm's residual add.
void fold_shortcut_batchnorms(Network& net, std::optional<bool> choice) {
  const Uses uses(net);
  std::vector<std::pair<BatchNormLayer*, BatchNormLayer*>> folds;  // closing, shortcut
  for (const auto& layer : net.layers()) {
    auto* closing = dynamic_cast<BatchNormLayer*>(layer.get());
    if (!closing || closing->geometry().fusion != BatchNormFusion::add_relu) continue;
    auto* shortcut = uses.producer<BatchNormLayer>(*closing->inputs()[1]);
    if (shortcut && shortcut->geometry().fusion == BatchNormFusion::none &&
        uses.read_once(*shortcut->output()) &&
        fuses(net, choice, FusionCandidate::shortcut_batchnorm(closing->geometry(), shortcut->geometry())))
      folds.emplace_back(closing, shortcut);
  }
  for (auto [closing, shortcut] : folds) {
    net.replace_layer(*closing, std::make_unique<BatchNormShortcutLayer>(
                                    net, closing->name(), *closing->inputs()[0], shortcut->name(),
                                    *shortcut->inputs()[0], *closing->output()));
    net.remove_layer(*shortcut);
  }
}

// The stem: relu(bn(x)) read only by a max pool.
void fuse_batchnorm_max_pools(Network& net, std::optional<bool> choice) {
  const Uses uses(net);
  std::vector<std::pair<BatchNormLayer*, MaxPoolLayer*>> pairs;
  for (const auto& layer : net.layers()) {
    auto* pool = dynamic_cast<MaxPoolLayer*>(layer.get());
    if (!pool) continue;
    auto* bn = uses.producer<BatchNormLayer>(*pool->inputs()[0]);
    if (bn && bn->geometry().fusion == BatchNormFusion::relu && uses.read_once(*bn->output()) &&
        fuses(net, choice, FusionCandidate::batchnorm_max_pool(bn->geometry(), pool->geometry())))
      pairs.emplace_back(bn, pool);
  }
  for (auto [bn, pool] : pairs) {
    net.replace_layer(*pool, std::make_unique<BatchNormMaxPoolLayer>(net, bn->name(), *bn->inputs()[0],
                                                                     pool->geometry(), *pool->output()));
    net.remove_layer(*bn);
  }
}

// The batch norms `layer` holds, each with the input it normalises.
std::vector<std::pair<BatchNormState*, Activation*>> batch_norms(Layer& layer) {
  if (auto* bn = dynamic_cast<BatchNormLayer*>(&layer)) return {{&bn->state(), layer.inputs()[0]}};
  if (auto* pooled = dynamic_cast<BatchNormMaxPoolLayer*>(&layer))
    return {{&pooled->state(), layer.inputs()[0]}};
  if (auto* folded = dynamic_cast<BatchNormShortcutLayer*>(&layer))
    return {{&folded->closing(), layer.inputs()[0]}, {&folded->shortcut(), layer.inputs()[1]}};
  return {};
}

// Every batch norm (the fused ones' too) whose input a convolution makes.
void take_statistics_from_convolutions(Network& net, std::optional<bool> choice) {
  const Uses uses(net);
  for (const auto& layer : net.layers()) {
    for (auto [norm, input] : batch_norms(*layer)) {
      auto* conv = uses.producer<ConvLayer>(*input);
      if (conv && fuses(net, choice, FusionCandidate::conv_statistics(conv->geometry(), norm->geometry)))
        norm->take_input_sums_from(*conv);
    }
  }
}

// The residual add that alone reads `a`, and the add's other input; {nullptr, nullptr} where there is none.
std::pair<ResidualAddLayer*, Activation*> residual_reading(const Network& net, const Uses& uses,
                                                           const Activation& a) {
  if (!uses.read_once(a)) return {nullptr, nullptr};
  for (const auto& layer : net.layers()) {
    auto* add = dynamic_cast<ResidualAddLayer*>(layer.get());
    if (!add) continue;
    if (add->inputs()[1] == &a) return {add, add->inputs()[0]};
    if (add->inputs()[0] == &a) return {add, add->inputs()[1]};
  }
  return {nullptr, nullptr};
}

// fc -> GELU -> proj, each value between them read by the next layer alone, and the residual add after
// proj where it alone reads proj's output and the backend adds residuals in its GEMMs.
void fuse_mlps(Network& net, std::optional<bool> choice, std::optional<bool> residual_choice) {
  const Uses uses(net);
  struct Mlp {
    LinearLayer *fc, *proj;
    GeluLayer* gelu;
    ResidualAddLayer* add;
    Activation* residual;
  };
  std::vector<Mlp> mlps;
  for (const auto& layer : net.layers()) {
    auto* proj = dynamic_cast<LinearLayer*>(layer.get());
    if (!proj || proj->residual()) continue;
    auto* gelu = uses.producer<GeluLayer>(*proj->inputs()[0]);
    if (!gelu || !uses.read_once(*gelu->output())) continue;
    auto* fc = uses.producer<LinearLayer>(*gelu->inputs()[0]);
    if (!fc || fc->residual() || !uses.read_once(*fc->output()) ||
        !fuses(net, choice, FusionCandidate::dense_fusion(Fusion::dense_gelu_dense, fc->geometry())))
      continue;
    auto [add, residual] = residual_reading(net, uses, *proj->output());
    if (add &&
        !fuses(net, residual_choice, FusionCandidate::dense_fusion(Fusion::dense_residual, proj->geometry())))
      add = nullptr, residual = nullptr;
    mlps.push_back({fc, proj, gelu, add, residual});
  }
  for (const Mlp& m : mlps) {
    // "transformer.h.3.mlp.c_fc" -> "transformer.h.3.mlp"
    const std::string& fc_name = m.fc->name();
    const std::string name = fc_name.substr(0, fc_name.find_last_of('.'));
    Layer& last = m.add ? static_cast<Layer&>(*m.add) : *m.proj;
    net.replace_layer(last, std::make_unique<MlpLayer>(net, name, *m.fc, *m.proj, *m.fc->inputs()[0],
                                                       m.residual, *last.output()));
    if (m.add) net.remove_layer(*m.proj);
    net.remove_layer(*m.gelu);
    net.remove_layer(*m.fc);
  }
}

// A plain dense layer whose output a residual add alone reads, and that add.
void fuse_dense_residuals(Network& net, std::optional<bool> choice) {
  const Uses uses(net);
  std::vector<std::tuple<LinearLayer*, ResidualAddLayer*, Activation*>> pairs;
  for (const auto& layer : net.layers()) {
    auto* dense = dynamic_cast<LinearLayer*>(layer.get());
    if (!dense || dense->residual()) continue;
    auto [add, residual] = residual_reading(net, uses, *dense->output());
    if (add && fuses(net, choice, FusionCandidate::dense_fusion(Fusion::dense_residual, dense->geometry())))
      pairs.emplace_back(dense, add, residual);
  }
  for (auto [dense, add, residual] : pairs) {
    net.replace_layer(
        *add, std::make_unique<LinearLayer>(net, dense->name(), *dense->inputs()[0], *residual,
                                            *add->output(), dense->out_features(), dense->normal_std()));
    net.remove_layer(*dense);
  }
}

// Every layer norm that reads first the output of a dense layer (or of a fused MLP's c_proj) not in FP8:
// its backward, the last to add to that output's gradient, sums it for the dense layer's bias gradient.
void sum_bias_gradients_in_layernorms(Network& net, std::optional<bool> choice) {
  const Uses uses(net);
  for (const auto& layer : net.layers()) {
    auto* norm = dynamic_cast<LayerNormLayer*>(layer.get());
    if (!norm || uses.first_reader(*norm->inputs()[0]) != norm) continue;
    auto sum_for = [&](auto& dense, const DenseGeometry& geometry) {
      if (!dense.in_fp8() &&
          fuses(net, choice, FusionCandidate::dense_fusion(Fusion::layernorm_dx_sums, geometry)))
        norm->sum_input_gradient_into(dense.bias_gradient_made_by_reader());
    };
    const Activation& input = *norm->inputs()[0];
    if (auto* dense = uses.producer<LinearLayer>(input))
      sum_for(*dense, dense->geometry());
    else if (auto* mlp = uses.producer<MlpLayer>(input))
      sum_for(*mlp, mlp->proj_geometry());
  }
}

// Every layer norm whose output an FP8 dense layer (or a fused MLP's c_fc) alone reads as its input, where
// that layer's backward reads x^T's kept codes and no x: the layer norm writes the codes for it.
void write_fp8_codes_in_layernorms(Network& net, std::optional<bool> choice) {
  const Uses uses(net);
  for (const auto& layer : net.layers()) {
    auto* norm = dynamic_cast<LayerNormLayer*>(layer.get());
    if (!norm || !uses.read_once(*norm->output())) continue;
    Layer* reader = uses.first_reader(*norm->output());
    if (!reader || reader->inputs()[0] != norm->output()) continue;
    auto codes_for = [&](auto& dense, const DenseGeometry& geometry) {
      if (dense.in_fp8() && dense.backward_needs_no_input() &&
          fuses(net, choice, FusionCandidate::dense_fusion(Fusion::layernorm_fp8_codes, geometry)))
        norm->write_fp8_codes_for(dense.input_codes_made_by_writer());
    };
    if (auto* linear = dynamic_cast<LinearLayer*>(reader))
      codes_for(*linear, linear->geometry());
    else if (auto* mlp = dynamic_cast<MlpLayer*>(reader))
      codes_for(*mlp, mlp->fc_geometry());
  }
}

// Every attention layer that alone reads the output of a dense layer not in FP8 (c_attn's qkv): its backward
// makes that layer's bias gradient from a third of the pass over qkv's gradient, helped by the dense layer
// (not in FP8) that alone reads its output as its input (attn.c_proj), where there is one.
void make_qkv_bias_gradients_in_attention(Network& net, std::optional<bool> choice) {
  const Uses uses(net);
  for (const auto& layer : net.layers()) {
    auto* attention = dynamic_cast<CausalSelfAttentionLayer*>(layer.get());
    if (!attention) continue;
    const Activation& qkv = *attention->inputs()[0];
    auto* dense = uses.producer<LinearLayer>(qkv);
    if (!dense || dense->in_fp8() || dense->residual() || !uses.read_once(qkv) ||
        !fuses(net, choice, FusionCandidate::dense_fusion(Fusion::attention_qkv_bias, dense->geometry())))
      continue;
    auto* projection = dynamic_cast<LinearLayer*>(uses.first_reader(*attention->output()));
    if (projection && (projection->in_fp8() || !uses.read_once(*attention->output()) ||
                       projection->inputs()[0] != attention->output()))
      projection = nullptr;
    attention->make_qkv_bias_gradient(dense->bias_gradient_made_by_reader(), projection);
  }
}

}  // namespace

void fuse_layers(Network& net, const FusionChoices& choices) {
  fold_shortcut_batchnorms(net, choices.shortcut_batchnorm);
  fuse_batchnorm_max_pools(net, choices.batchnorm_max_pool);
  fuse_mlps(net, choices.dense_gelu_dense, choices.dense_residual);
  fuse_dense_residuals(net, choices.dense_residual);
  sum_bias_gradients_in_layernorms(net, choices.layernorm_dx_sums);
  write_fp8_codes_in_layernorms(net, choices.layernorm_fp8_codes);
  make_qkv_bias_gradients_in_attention(net, choices.attention_qkv_bias);
  // Last: the batch norms the fusions above made take their statistics too.
  take_statistics_from_convolutions(net, choices.conv_statistics);
}

}  // namespace dlbench
