// The layer contract. A network is an ordered list of layers: forward runs them in order, backward in
// reverse (Caffe's Net). Each layer reads its input Activations and writes its output Activation; in
// backward it reads the output's gradient and writes (or adds to) its inputs' gradients.
//
// Gradient rule (as in llm.c): parameter gradients follow the network's parameter mode (overwrite, or +=
// when accumulating micro-batches); an activation's gradient is overwritten by the first consumer whose
// backward runs and accumulated by every later one. Network::finalize works out which is which.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"

namespace dlbench {

class MemoryPlan;
class Network;

enum class Phase : uint8_t { train, inference };
enum class GradMode : uint8_t { none, overwrite, accumulate };

struct Activation {
  std::string name;
  Tensor value;                  // written by the producing layer's forward
  Tensor grad;                   // dLoss/dvalue, written by the consumers' backward
  bool needs_grad = true;        // false for the network's inputs (images, labels)
  bool kept_after_step = false;  // read from outside after a training step (Network::keep_after_step)
};

// A value a layer makes in its forward for its own backward, beside its output (the fused MLP's GELU
// input): the memory plan holds it from the layer's forward to its backward, and a layer of a recomputed
// block that has one is run again before the block's backward.
struct SavedValue {
  std::string name;
  Tensor* tensor = nullptr;
};

class Layer {
 public:
  Layer(Network& net, std::string name) : net_(net), name_(std::move(name)) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  virtual const char* kind() const = 0;

  // Declares every tensor the layer owns (parameters, saved state, workspace) and builds the backend
  // plans. Called once, before memory exists.
  virtual void plan(MemoryPlan& plan) = 0;
  virtual void forward(Phase phase) = 0;
  virtual void backward() = 0;
  // Whether backward can add into input `index`'s gradient (rather than only overwrite it).
  virtual bool can_accumulate_input_grad(int index) const { return false; }
  // How the backend runs this layer (algorithms, fusion), for the per-layer profile; empty if nothing to say.
  virtual std::string plan_summary() const { return {}; }
  // Whether backward reads the value of input `index`, or of the output. A value that no backward reads
  // only holds data while the forward pass needs it, so the memory plan lets it share memory; a layer says
  // false only where its backward (on every backend) provably never reads the value.
  virtual bool backward_reads_input(int index) const { return true; }
  // Whether the layer writes input `index`'s gradient over the input's value (in its training forward:
  // the fused loss). The memory plan then gives the gradient the value's memory, from the value's making
  // to its producer's backward; the layer must be the value's only reader.
  virtual bool gradient_over_input(int index) const { return false; }
  // Whether input `index`'s gradient is the output's gradient as it is (a residual connection's). Where
  // the layer is that gradient's first writer (GradMode::overwrite), the memory plan gives both gradients
  // one placement (a transformer's residual stream: one buffer through every block), and handing dy on
  // (pass_gradient) copies nothing.
  virtual bool passes_output_gradient_to(int index) const { return false; }
  virtual bool backward_reads_output() const { return true; }
  // The values beside the output that the layer's forward makes for its backward (see SavedValue).
  virtual std::vector<SavedValue> saved_values() { return {}; }
  // Tensors the layer's backward alone uses (the fused MLP's dh): the plan holds them over that step only,
  // so they share memory with everything not live then.
  virtual std::vector<SavedValue> backward_scratch() { return {}; }
  // Makes the saved values again where nothing needs the output again (a recomputed block's last layer):
  // the training forward, unless the layer can skip the work that only the output takes.
  virtual void recompute_saved_values() { forward(Phase::train); }
  // Elements of the largest tensor the layer's ops may index with 32-bit integers (cuDNN's tensor
  // descriptors): a batch that makes one pass 2^31 elements cannot run (train/memory_fit). Every input and
  // output unless the layer knows better: cuBLAS's GEMMs and dlbench's own kernels index with 64 bits.
  virtual int64_t largest_32bit_indexed_tensor() const {
    int64_t largest = output_ ? output_->value.numel() : 0;
    for (const Activation* input : inputs_) largest = std::max(largest, input->value.numel());
    return largest;
  }
  // Multiply-accumulates of one forward pass (for FLOP counts and the per-layer profile).
  virtual int64_t forward_macs() const { return 0; }

  // The block (a transformer block) the layer belongs to, -1 for none: set by Network::add from
  // Network::set_block. With NetworkOptions::recompute a block's activations are recomputed in backward.
  int block() const { return block_; }
  void set_block(int block) { block_ = block; }

  const std::vector<Activation*>& inputs() const { return inputs_; }
  Activation* output() const { return output_; }
  GradMode input_grad_mode(int index) const { return input_grad_modes_[static_cast<size_t>(index)]; }
  void set_input_grad_mode(int index, GradMode mode) { input_grad_modes_[static_cast<size_t>(index)] = mode; }

 protected:
  void set_inputs(std::vector<Activation*> inputs) {
    inputs_ = std::move(inputs);
    input_grad_modes_.assign(inputs_.size(), GradMode::none);
  }
  Network& net_;
  std::string name_;
  std::vector<Activation*> inputs_;
  std::vector<GradMode> input_grad_modes_;
  Activation* output_ = nullptr;
  int block_ = -1;
};

inline Accumulate to_accumulate(GradMode mode) {
  return mode == GradMode::accumulate ? Accumulate::add : Accumulate::overwrite;
}

}  // namespace dlbench
