#include "nn/network.h"

#include <unordered_map>

#include "core/status.h"
#include "core/timeline.h"

namespace dlbench {

Network::Network(Backend& backend, NetworkOptions options)
    : backend_(backend), options_(options), memory_(backend, master_dtype(), options.dtype) {}

Activation& Network::new_activation(std::string name, std::vector<int64_t> dims, DType dtype) {
  DLB_CHECK(!planned_, "activation {} added after finalize", name);
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

size_t Network::index_of(const Layer& layer) const {
  for (size_t i = 0; i < layers_.size(); ++i)
    if (layers_[i].get() == &layer) return i;
  DLB_CHECK(false, "layer {} is not in the network", layer.name());
  return 0;
}

void Network::replace_layer(const Layer& layer, std::unique_ptr<Layer> fused) {
  DLB_CHECK(!planned_, "layer {} replaced after finalize", layer.name());
  layers_[index_of(layer)] = std::move(fused);
}

void Network::remove_layer(const Layer& layer) {
  DLB_CHECK(!planned_, "layer {} removed after finalize", layer.name());
  const Activation* output = layer.output();
  for (const auto& other : layers_) {
    for (const Activation* input : other->inputs())
      DLB_CHECK(input != output, "layer {} is removed, but {} reads its output", layer.name(), other->name());
  }
  layers_.erase(layers_.begin() + static_cast<std::ptrdiff_t>(index_of(layer)));
  activations_.remove_if([&](const Activation& a) { return &a == output; });
}

void Network::finalize(uint64_t seed) {
  DLB_CHECK(!finalized_ && !planned_, "network finalized twice");
  plan();
  memory_.allocate(seed);
  finalized_ = true;
}

void Network::plan_memory_only() {
  DLB_CHECK(!finalized_ && !planned_, "network planned twice");
  memory_.set_estimate_only();
  plan();
}

void Network::plan() {
  fuse_layers(*this, options_.fusions);
  planned_ = true;
  // The timeline of one step: layer i runs its forward at step i and its backward at step 2L-1-i.
  const int layer_count = static_cast<int>(layers_.size());
  auto backward_step = [&](int layer) { return 2 * layer_count - 1 - layer; };
  std::unordered_map<const Activation*, int> producer;
  for (int i = 0; i < layer_count; ++i) producer[layers_[static_cast<size_t>(i)]->output()] = i;

  // Gradient modes: walking the layers in backward order, the first writer of an activation's gradient
  // overwrites it and every later writer adds to it.
  std::unordered_map<const Activation*, int> first_write;  // the backward step of the first writer
  for (int index = layer_count - 1; index >= 0; --index) {
    Layer& layer = *layers_[static_cast<size_t>(index)];
    for (int i = 0; i < static_cast<int>(layer.inputs().size()); ++i) {
      Activation* input = layer.inputs()[static_cast<size_t>(i)];
      if (!input->needs_grad) {
        layer.set_input_grad_mode(i, GradMode::none);
      } else if (first_write.emplace(input, backward_step(index)).second) {
        layer.set_input_grad_mode(i, GradMode::overwrite);
      } else {
        DLB_CHECK(layer.can_accumulate_input_grad(i),
                  "layer {} would have to add into the gradient of {}, which it cannot; reorder the layers",
                  layer.name(), input->name);
        layer.set_input_grad_mode(i, GradMode::accumulate);
      }
    }
  }

  // Which layers read each value: its producer's and consumers' forward and backward steps.
  struct Readers {
    int last_forward = -1;           // the forward step of the last consumer
    int first_backward_reader = -1;  // the lowest index of a layer whose backward reads it (-1: none)
  };
  std::unordered_map<const Activation*, Readers> readers;
  auto read_in_backward_by = [](Readers& r, int index) {
    r.first_backward_reader = r.first_backward_reader < 0 ? index : std::min(r.first_backward_reader, index);
  };
  for (int index = 0; index < layer_count; ++index) {
    const Layer& layer = *layers_[static_cast<size_t>(index)];
    Readers& own = readers[layer.output()];
    if (layer.backward_reads_output()) read_in_backward_by(own, index);
    for (int i = 0; i < static_cast<int>(layer.inputs().size()); ++i) {
      Readers& r = readers[layer.inputs()[static_cast<size_t>(i)]];
      r.last_forward = index;
      if (layer.backward_reads_input(i)) read_in_backward_by(r, index);
    }
  }

  // A value holds data from its producer's forward to the last step that reads it: its last consumer's
  // forward, or, when a backward reads it, the backward of the earliest layer that does (the backward pass
  // runs in reverse, so that one comes last). After that its memory is free for the gradients of the
  // layers before it, which is what keeps ResNet-50's gradients inside the memory its saved activations
  // leave behind. The network's inputs (fed before the step), its outputs (read after it) and the values
  // marked keep_after_step hold data all step.
  // A gradient holds data from its first write in the backward pass until its producer's backward has
  // read it. Every backward reads only its output's gradient, its inputs and output where it says so
  // (backward_reads_input/output), and writes only its inputs' gradients (the layer contract); all those
  // ranges contain the layer's backward step, so no layer ever finds two of its tensors in the same
  // memory. A gradient that no layer writes, or no layer reads, is fed or read from outside the pass (a
  // test's input or output) and holds data all step.
  for (Activation& a : activations_) {
    auto produced = producer.find(&a);
    auto read = readers.find(&a);
    if (produced != producer.end() && read != readers.end() && read->second.last_forward >= 0 &&
        !a.kept_after_step) {
      const Readers& r = read->second;
      const int last = r.first_backward_reader >= 0 ? backward_step(r.first_backward_reader) : r.last_forward;
      memory_.add_transient(a.value, a.name, produced->second, last);
    } else {
      memory_.add_activation(a.value, a.name);
    }
    if (!a.needs_grad) continue;
    auto written = first_write.find(&a);
    if (produced != producer.end() && written != first_write.end()) {
      memory_.add_transient(a.grad, a.name + ".grad", written->second, backward_step(produced->second));
    } else {
      memory_.add_activation(a.grad, a.name + ".grad");
    }
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    memory_.set_current_layer(static_cast<int>(i));
    layers_[i]->plan(memory_);
  }
  memory_.place();
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
