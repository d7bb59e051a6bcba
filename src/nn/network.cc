#include "nn/network.h"

#include <unordered_set>

#include "core/status.h"
#include "core/timeline.h"

namespace dlbench {

Network::Network(Backend& backend, NetworkOptions options)
    : backend_(backend), options_(options), memory_(backend, master_dtype(), options.dtype) {}

Activation& Network::new_activation(std::string name, std::vector<int64_t> dims, DType dtype) {
  DLB_CHECK(!finalized_, "activation {} added after finalize", name);
  Activation& a = activations_.emplace_back();
  a.name = std::move(name);
  a.value = Tensor(nullptr, dims, dtype, options_.layout, backend_.device());
  a.grad = Tensor(nullptr, std::move(dims), dtype, options_.layout, backend_.device());
  return a;
}

Activation& Network::new_input(std::string name, std::vector<int64_t> dims, DType dtype) {
  Activation& a = new_activation(std::move(name), std::move(dims), dtype);
  a.needs_grad = false;
  return a;
}

void Network::finalize(uint64_t seed) {
  DLB_CHECK(!finalized_, "network finalized twice");
  // Gradient modes: walking the layers in backward order, the first writer of an activation's gradient
  // overwrites it and every later writer adds to it.
  std::unordered_set<const Activation*> written;
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) {
    Layer& layer = **it;
    for (int i = 0; i < static_cast<int>(layer.inputs().size()); ++i) {
      Activation* input = layer.inputs()[static_cast<size_t>(i)];
      if (!input->needs_grad) {
        layer.set_input_grad_mode(i, GradMode::none);
      } else if (written.insert(input).second) {
        layer.set_input_grad_mode(i, GradMode::overwrite);
      } else {
        DLB_CHECK(layer.can_accumulate_input_grad(i),
                  "layer {} would have to add into the gradient of {}, which it cannot; reorder the layers",
                  layer.name(), input->name);
        layer.set_input_grad_mode(i, GradMode::accumulate);
      }
    }
  }
  for (Activation& a : activations_) {
    memory_.add_activation(a.value);
    if (a.needs_grad) memory_.add_activation(a.grad);
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    memory_.set_current_layer(static_cast<int>(i));
    layers_[i]->plan(memory_);
  }
  memory_.allocate(seed);
  finalized_ = true;
}

void Network::forward(Phase phase) {
  DLB_CHECK(finalized_, "forward before finalize");
  for (auto& layer : layers_) {
    TimelineSpan span(layer->name(), "compute");
    layer->forward(phase);
  }
}

void Network::backward() {
  DLB_CHECK(finalized_, "backward before finalize");
  for (int i = static_cast<int>(layers_.size()) - 1; i >= 0; --i) {
    {
      TimelineSpan span(layers_[static_cast<size_t>(i)]->name() + " backward", "compute");
      layers_[static_cast<size_t>(i)]->backward();
    }
    if (backward_observer_) backward_observer_(i);
  }
}

int64_t Network::parameter_count() const {
  int64_t count = 0;
  for (const auto& p : memory_.parameters()) count += p.value->numel();
  return count;
}

int64_t Network::forward_macs() const {
  int64_t macs = 0;
  for (const auto& layer : layers_) macs += layer->forward_macs();
  return macs;
}

}  // namespace dlbench
