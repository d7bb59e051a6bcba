#include "nn/fusion_pass.h"

#include <unordered_map>
#include <utility>
#include <vector>

#include "nn/batchnorm.h"
#include "nn/batchnorm_max_pool.h"
#include "nn/batchnorm_shortcut.h"
#include "nn/conv.h"
#include "nn/network.h"
#include "nn/pool.h"

namespace dlbench {
namespace {

// Which layer writes each activation of a layer list, and how many read it.
class Uses {
 public:
  explicit Uses(const Network& net) {
    for (const auto& layer : net.layers()) {
      producer_[layer->output()] = layer.get();
      for (const Activation* input : layer->inputs()) ++readers_[input];
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

 private:
  std::unordered_map<const Activation*, Layer*> producer_;
  std::unordered_map<const Activation*, int> readers_;
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

}  // namespace

void fuse_layers(Network& net, const FusionChoices& choices) {
  fold_shortcut_batchnorms(net, choices.shortcut_batchnorm);
  fuse_batchnorm_max_pools(net, choices.batchnorm_max_pool);
  // Last: the batch norms the fusions above made take their statistics too.
  take_statistics_from_convolutions(net, choices.conv_statistics);
}

}  // namespace dlbench
