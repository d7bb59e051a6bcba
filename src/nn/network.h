// Network: the activations, the layers in execution order, and the memory plan that backs them.
//
// Built in three stages: add layers (shapes only), finalize() (rewrites the layers where the backend fuses
// them, nn/fusion_pass.h; plans every op, allocates the arenas, works out each activation's gradient mode),
// then run forward/backward as often as needed.
#pragma once

#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "nn/fp8_scaling.h"
#include "nn/fusion_pass.h"
#include "nn/layer.h"
#include "nn/memory_plan.h"

namespace dlbench {

struct NetworkOptions {
  DType dtype = DType::f32;      // activation (compute) dtype
  Layout layout = Layout::nchw;  // activation layout
  int64_t batch = 1;
  // Fusions forced on or off whatever the backend says (unset: the backend decides).
  FusionChoices fusions;
  // Activation recomputation (--recompute): the values made inside each block the model marks
  // (set_block) are dropped after the forward pass and made again just before the block's backward, by
  // running the block's layers forward once more. The memory of a block's inner activations is then
  // needed by one block at a time instead of by all of them, for about a third more forward compute.
  bool recompute = false;
  // FP8 dense layers (--precision fp8): their GEMMs' operands in FP8 with delayed scaling (nn/fp8_scaling.h).
  // The dtype is then the activations' (BF16).
  std::optional<Fp8Recipe> fp8;
};

class Network {
 public:
  Network(Backend& backend, NetworkOptions options);

  Backend& backend() { return backend_; }
  const NetworkOptions& options() const { return options_; }
  DType dtype() const { return options_.dtype; }
  // Parameters, their gradients and statistics: FP32, or FP64 in a double-precision network.
  DType master_dtype() const { return options_.dtype == DType::f64 ? DType::f64 : DType::f32; }
  Layout layout() const { return options_.layout; }
  int64_t batch() const { return options_.batch; }

  // A new activation of logical dims (4-D dims use the network layout).
  Activation& new_activation(std::string name, std::vector<int64_t> dims, DType dtype);
  Activation& new_activation(std::string name, std::vector<int64_t> dims) {
    return new_activation(std::move(name), std::move(dims), options_.dtype);
  }
  // An input fed from outside (images, labels): no gradient.
  Activation& new_input(std::string name, std::vector<int64_t> dims, DType dtype);
  // A value read from outside after a training step (the logits): it keeps its memory all step, where it
  // would otherwise hand it to gradients once the last backward that reads it has run.
  void keep_after_step(Activation& value) { value.kept_after_step = true; }

  template <typename L, typename... Args>
  L& add(Args&&... args) {
    auto layer = std::make_unique<L>(*this, std::forward<Args>(args)...);
    layer->set_block(current_block_);
    L& ref = *layer;
    layers_.push_back(std::move(layer));
    return ref;
  }

  // Layers added from now on belong to block `index` (-1: to none). A block is a run of consecutive
  // layers; its last layer's output is what the next block reads, and is never recomputed.
  void set_block(int index) { current_block_ = index; }

  // The fusion pass's edits, before planning. `fused` takes `layer`'s place in the execution order (and
  // `layer` is destroyed); remove_layer takes a layer out with its output, which no layer may read any more.
  void replace_layer(const Layer& layer, std::unique_ptr<Layer> fused);
  void remove_layer(const Layer& layer);

  // Fuses layers (fuse_layers), plans every layer, allocates all memory, initialises parameters from `seed`.
  void finalize(uint64_t seed);
  // Plans every layer with estimate plans and places every tensor, allocating nothing: memory() then
  // states the bytes finalize() would take (at most: estimate plans bound workspaces from above). The
  // network can do nothing else afterwards.
  void plan_memory_only();

  void forward(Phase phase);
  void backward();
  // Called after each layer's backward with the layer's index (execution order), so that gradients can
  // leave (to other ranks) while backward goes on. Empty: none.
  void set_backward_observer(std::function<void(int layer)> observer) {
    backward_observer_ = std::move(observer);
  }

  // Parameter gradients: overwritten by default; `accumulate` adds (micro-batch accumulation).
  void set_parameter_grad_mode(Accumulate mode) { parameter_grad_mode_ = mode; }
  Accumulate parameter_grad_mode() const { return parameter_grad_mode_; }
  // The factor the loss gradient is multiplied by (loss scaling in FP16): a float in the backend's memory,
  // read when the loss layer's backward runs, so that the scale can change between replays of a recorded
  // step. Null: 1.
  void set_loss_scale_source(const float* loss_scale) { loss_scale_ = loss_scale; }
  const float* loss_scale_source() const { return loss_scale_; }

  // The FP8 scaling of the dense layers; null unless the options ask for FP8. update_fp8_scales ends a
  // step's delayed scaling (nothing without FP8).
  Fp8Scaling* fp8() const { return fp8_.get(); }
  void update_fp8_scales() {
    if (fp8_) fp8_->update();
  }

  MemoryPlan& memory() { return memory_; }
  void* workspace() const { return memory_.workspace(); }
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  // Trained scalars (no alignment padding): ResNet-50 has 25,557,032.
  int64_t parameter_count() const;
  int64_t forward_macs() const;

 private:
  Backend& backend_;
  NetworkOptions options_;
  std::list<Activation> activations_;  // list: stable addresses, and the fusion pass removes some
  std::vector<std::unique_ptr<Layer>> layers_;
  MemoryPlan memory_;
  std::unique_ptr<Fp8Scaling> fp8_;
  Accumulate parameter_grad_mode_ = Accumulate::overwrite;
  const float* loss_scale_ = nullptr;
  std::function<void(int)> backward_observer_;
  int current_block_ = -1;
  // With recompute: the layers whose forward runs again just before layer i's backward (execution order).
  std::vector<std::vector<int>> recompute_before_;
  std::vector<bool> only_saved_;  // run again for the layer's saved values alone
  bool finalized_ = false, planned_ = false;

  void plan();  // fusions, gradient modes, live ranges, layer plans, placement
  size_t index_of(const Layer& layer) const;
};

}  // namespace dlbench
