#include "nn/network.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "core/status.h"
#include "core/timeline.h"

namespace dlbench {

namespace {

// When each layer runs on the timeline of one training step: its forward, its forward again (a layer of a
// recomputed block, just before that block's backward; -1 for the others) and its backward. Without
// recomputation layer i runs forward at step i and backward at step 2L-1-i.
struct Schedule {
  std::vector<int> forward, again, backward;
  std::vector<std::vector<int>> recompute_before;  // the layers run again just before layer i's backward
  std::vector<bool> only_saved;                    // layer i is run again for its saved values alone
};

// The layers of the block [first, last] to run again before its backward: those whose output a backward in
// the block reads, or a layer run again reads (walked from the end, so that a layer is kept when what
// reads its output is), and those that save values for their own backward (Layer::saved_values). The
// last layer is not run again for its output, the next block's input, which is kept from the forward pass;
// nor is a layer whose output only the forward pass needed. `only_saved[j]` says that layer j is run again
// for its saved values alone (Layer::recompute_saved_values).
std::vector<int> layers_to_run_again(const std::vector<std::unique_ptr<Layer>>& layers, int first, int last,
                                     std::vector<bool>& only_saved) {
  std::vector<bool> again(layers.size(), false);
  std::vector<int> chosen;
  for (int j = last; j >= first; --j) {
    Layer& layer = *layers[static_cast<size_t>(j)];
    bool output_needed = j < last && layer.backward_reads_output();
    for (int k = j + 1; k <= last && !output_needed; ++k) {
      const Layer& reader = *layers[static_cast<size_t>(k)];
      for (int i = 0; i < static_cast<int>(reader.inputs().size()); ++i)
        if (reader.inputs()[static_cast<size_t>(i)] == layer.output() &&
            (again[static_cast<size_t>(k)] || reader.backward_reads_input(i)))
          output_needed = true;
    }
    const bool saves = !layer.saved_values().empty();
    if (!output_needed && !saves) continue;
    again[static_cast<size_t>(j)] = true;
    only_saved[static_cast<size_t>(j)] = !output_needed;
    chosen.insert(chosen.begin(), j);
  }
  return chosen;
}

Schedule schedule(const std::vector<std::unique_ptr<Layer>>& layers, bool recompute) {
  const size_t n = layers.size();
  Schedule s;
  s.forward.resize(n);
  s.again.assign(n, -1);
  s.backward.resize(n);
  s.recompute_before.resize(n);
  s.only_saved.assign(n, false);
  for (size_t first = 0; recompute && first < n;) {
    size_t last = first;
    const int block = layers[first]->block();
    while (last + 1 < n && layers[last + 1]->block() == block) ++last;
    if (block >= 0 && last > first)
      s.recompute_before[last] =
          layers_to_run_again(layers, static_cast<int>(first), static_cast<int>(last), s.only_saved);
    first = last + 1;
  }
  int step = 0;
  for (size_t i = 0; i < n; ++i) s.forward[i] = step++;
  for (size_t i = n; i-- > 0;) {
    for (int j : s.recompute_before[i]) s.again[static_cast<size_t>(j)] = step++;
    s.backward[i] = step++;
  }
  return s;
}

}  // namespace

Network::Network(Backend& backend, NetworkOptions options)
    : backend_(backend), options_(options), memory_(backend, master_dtype(), options.dtype) {
  if (options.fp8) fp8_ = std::make_unique<Fp8Scaling>(backend, *options.fp8);
}

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
  fused->set_block(layer.block());
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
  if (fp8_) fp8_->allocate();
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
  const Schedule s = schedule(layers_, options_.recompute);
  recompute_before_ = s.recompute_before;
  only_saved_ = s.only_saved;
  const int layer_count = static_cast<int>(layers_.size());
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
      } else if (first_write.emplace(input, s.backward[static_cast<size_t>(index)]).second) {
        layer.set_input_grad_mode(i, GradMode::overwrite);
      } else {
        DLB_CHECK(layer.can_accumulate_input_grad(i),
                  "layer {} would have to add into the gradient of {}, which it cannot; reorder the layers",
                  layer.name(), input->name);
        layer.set_input_grad_mode(i, GradMode::accumulate);
      }
    }
  }

  // The steps at which each value is read: its consumers' forwards (and their runs again), the backward
  // of every consumer that reads it, and its producer's backward where that reads its output.
  std::unordered_map<const Activation*, std::vector<int>> reads;
  std::unordered_map<const Activation*, int> consumers;       // how many layers' forwards read it
  std::unordered_set<const Activation*> gradient_over_value;  // a reader writes its gradient over it
  for (int index = 0; index < layer_count; ++index) {
    const Layer& layer = *layers_[static_cast<size_t>(index)];
    const auto k = static_cast<size_t>(index);
    if (layer.backward_reads_output()) reads[layer.output()].push_back(s.backward[k]);
    for (int i = 0; i < static_cast<int>(layer.inputs().size()); ++i) {
      const Activation* input = layer.inputs()[static_cast<size_t>(i)];
      ++consumers[input];
      if (layer.gradient_over_input(i)) gradient_over_value.insert(input);
      std::vector<int>& r = reads[input];
      r.push_back(s.forward[k]);
      if (s.again[k] >= 0) r.push_back(s.again[k]);
      if (layer.backward_reads_input(i)) r.push_back(s.backward[k]);
    }
  }

  // A residual's gradient is its output's gradient as it is: where the layer writes it first
  // (passes_output_gradient_to, overwrite), the input's gradient takes the output's placement (shared_with,
  // resolved to the first of a chain), which then holds data up to the last of their producers' backwards.
  // Every other write to it comes after the layer's backward, which is the last to read the output's.
  std::unordered_map<Activation*, Activation*> shared_with;  // input -> the gradient whose memory it takes
  std::unordered_map<const Activation*, int> shared_until;   // that gradient's last step
  for (int index = layer_count - 1; index >= 0; --index) {   // an output before the inputs of its producer
    const Layer& layer = *layers_[static_cast<size_t>(index)];
    Activation* out = layer.output();
    for (int i = 0; i < static_cast<int>(layer.inputs().size()); ++i) {
      Activation* input = layer.inputs()[static_cast<size_t>(i)];
      if (!layer.passes_output_gradient_to(i) || layer.input_grad_mode(i) != GradMode::overwrite ||
          !out->needs_grad || gradient_over_value.count(input) || gradient_over_value.count(out) ||
          !producer.count(input) || input->grad.dims() != out->grad.dims() ||
          input->grad.dtype() != out->grad.dtype())
        continue;
      Activation* root = out;
      if (auto it = shared_with.find(out); it != shared_with.end()) root = it->second;
      shared_with[input] = root;
      int& until =
          shared_until.try_emplace(root, s.backward[static_cast<size_t>(producer.at(root))]).first->second;
      until = std::max(until, s.backward[static_cast<size_t>(producer.at(input))]);
    }
  }
  // A value holds data from its producer's forward to the last step that reads it: its last consumer's
  // forward, or, when a backward reads it, the backward of the earliest layer that does (the backward pass
  // runs in reverse, so that one comes last). After that its memory is free for the gradients of the
  // layers before it, which is what keeps ResNet-50's gradients inside the memory its saved activations
  // leave behind. A value its producer makes again (recompute) holds data up to its last read before that,
  // and again from its remaking to its last read after it. The network's inputs (fed before the step), its
  // outputs (read after it) and the values marked keep_after_step hold data all step.
  // A gradient holds data from its first write in the backward pass until its producer's backward has
  // read it. Every backward reads only its output's gradient, its inputs and output where it says so
  // (backward_reads_input/output), and writes only its inputs' gradients (the layer contract); all those
  // ranges contain the layer's backward step, so no layer ever finds two of its tensors in the same
  // memory, but for a residual's input gradient, which is its output's by design (shared_with above). A
  // gradient that no layer writes, or no layer reads, is fed or read from outside the pass (a test's input or
  // output) and holds data all step.
  for (Activation& a : activations_) {
    auto produced = producer.find(&a);
    auto read = reads.find(&a);
    if (gradient_over_value.count(&a)) {
      // The gradient is written over the value (the fused loss's logits): one placement holds the value
      // from its making and then the gradient up to its producer's backward.
      DLB_CHECK(produced != producer.end() && consumers[&a] == 1 && !a.kept_after_step &&
                    !layers_[static_cast<size_t>(produced->second)]->backward_reads_output(),
                "{}: its gradient is written over it, so it must have one reader and no other use", a.name);
      const auto p = static_cast<size_t>(produced->second);
      memory_.add_transient(a.value, a.name, s.forward[p], s.backward[p]);
      memory_.add_alias(a.grad, a.value);
      continue;
    }
    if (produced != producer.end() && consumers.count(&a) && !a.kept_after_step) {
      const auto p = static_cast<size_t>(produced->second);
      const int again = s.only_saved[p] ? -1 : s.again[p];  // run again, it remakes its output too
      int last = s.forward[p], again_last = again;
      for (int step : read->second) {
        if (again >= 0 && step > again)
          again_last = std::max(again_last, step);
        else
          last = std::max(last, step);
      }
      if (again >= 0)
        memory_.add_transient(a.value, a.name, s.forward[p], last, again, again_last);
      else
        memory_.add_transient(a.value, a.name, s.forward[p], last);
    } else {
      memory_.add_activation(a.value, a.name);
    }
    if (!a.needs_grad || shared_with.count(&a)) continue;  // a shared gradient: an alias, below
    auto written = first_write.find(&a);
    if (produced != producer.end() && written != first_write.end()) {
      const auto until = shared_until.find(&a);
      memory_.add_transient(
          a.grad, a.name + ".grad", written->second,
          until != shared_until.end() ? until->second : s.backward[static_cast<size_t>(produced->second)]);
    } else {
      memory_.add_activation(a.grad, a.name + ".grad");
    }
  }
  for (auto& [input, root] : shared_with) memory_.add_alias(input->grad, root->grad);
  // A layer's saved values hold data from its forward to its backward, or, run again, from its run again;
  // its backward scratch over its backward alone.
  for (size_t i = 0; i < layers_.size(); ++i) {
    for (const SavedValue& v : layers_[i]->saved_values()) {
      if (s.again[i] >= 0)
        memory_.add_transient(*v.tensor, v.name, s.forward[i], s.forward[i], s.again[i], s.backward[i]);
      else
        memory_.add_transient(*v.tensor, v.name, s.forward[i], s.backward[i]);
    }
    for (const SavedValue& v : layers_[i]->backward_scratch())
      memory_.add_transient(*v.tensor, v.name, s.backward[i], s.backward[i]);
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
    for (int j : recompute_before_[static_cast<size_t>(i)]) {
      TimelineSpan span(layers_[static_cast<size_t>(j)]->name() + " recompute", "compute");
      Layer& layer = *layers_[static_cast<size_t>(j)];
      if (only_saved_[static_cast<size_t>(j)])
        layer.recompute_saved_values();
      else
        layer.forward(Phase::train);
    }
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
