// The memory plan: every tensor the network will touch is declared first (shape and dtype known, no data),
// then allocate() sizes the arenas, allocates each once and points every declared Tensor into it.
// Nothing is allocated after that, and never inside the timed loop.
//
// Arenas:
//   parameters  one contiguous buffer of the master dtype: the trained weights (master copy)
//   gradients   same dtype and offsets as parameters, so a gradient bucket is a slice
//   momentum    same dtype and offsets (optimizer state: SGD's momentum, AdamW's first moment m)
//   second moment  same dtype and offsets, only where asked (AdamW's v: require_second_moment)
//   buffers     master dtype, non-trained state saved in checkpoints (batch-norm running statistics)
// The master dtype is FP32, except FP64 for double-precision networks (the reference backend's
// gradient checks), where every parameter and statistic is double too.
//
// Mixed precision: when the compute dtype (FP16, BF16) differs from the master dtype, the parameters that
// layers read in the compute dtype (conv and linear weights: ParamUse::compute) get a second copy in two
// more flat buffers, compute parameters and compute gradients. Those parameters are placed first in the
// flat buffers, so that one leading range holds every copy. The optimizer's update refreshes the compute
// parameters as it writes the masters (compute_copies(), Backend's ComputeCopies). Where ranks sum the
// gradients in FP32, one cast first moves the compute gradients to the master gradients
// (gradients_to_master); with one rank the update reads them where the backward wrote them
// (keep_gradients_in_compute_dtype), and where every parameter is a compute one (GPT-2) no FP32 gradient
// arena is allocated at all. Batch-norm parameters (ParamUse::master) stay FP32 and are used directly.
//   activations everything per-step: layer outputs and their gradients, saved state, labels, the loss
//   workspace   one scratch area shared by all ops (they run one after another): the largest request
//
// The activation arena is placed by liveness. A layer output holds data from its producer's forward to
// the last step that reads it (Network::plan), an activation's gradient from the first write of the
// backward pass to the backward of the layer that produced the activation; such transient tensors are
// declared with their live range on the step's timeline and share memory with every transient tensor whose
// range is disjoint from theirs (greedy interval placement: largest first, each in the tightest gap that no
// overlapping tensor uses). Saved state and tensors read from outside the step hold memory all step. In
// ResNet-50 the gradients fit into what the saved values leave behind. Every placement is checked
// (check_placements) before anything is allocated.
//
// Memory outside the arenas that a backend plan holds (cuDNN's batch-norm reserve space) is declared with
// add_held_bytes, so that total_bytes() is the device memory the network takes.
//
// A plan can be made for estimation only (set_estimate_only): the layers then make estimate plans (no
// timed search, nothing allocated; see Backend::estimate_conv) and place() sizes everything without
// allocating, so the memory of a batch is known before any of it is asked for.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"
#include "nn/param_init.h"

namespace dlbench {

enum class ParamUse : uint8_t {
  compute,  // read by the layer in the network's compute dtype (conv, linear)
  master,   // read by the layer in the master dtype (batch norm's gamma and beta)
};

struct ParameterInfo {
  std::string name;
  Tensor* value = nullptr;
  Tensor* grad = nullptr;
  ParamInit init = ParamInit::zeros;
  int64_t fan = 1;  // fan_in or fan_out, as the init needs
  bool is_norm_or_bias = false;
  ParamUse use = ParamUse::compute;
  int64_t offset = 0;   // elements into the flat buffers (assigned by allocate())
  int layer = -1;       // the owning layer's index in execution order (its backward writes the gradient)
  double init_std = 0;  // ParamInit::normal's standard deviation
};

// Where the plan put one per-step tensor in the activation arena, and when it holds data. Steps: on the
// timeline of one training step with L layers, layer i's forward is step i and its backward step 2L-1-i.
struct Placement {
  std::string name;
  size_t offset = 0;   // bytes into the activation arena
  size_t bytes = 0;    // aligned size
  bool always = true;  // live over the whole step and between steps (values, saved state)
  int first = 0;       // else live over steps [first, last], both included
  int last = 0;
  // A value recomputed in the backward pass (NetworkOptions::recompute) holds data again over
  // [again_first, again_last]; -1: it does not.
  int again_first = -1, again_last = -1;
  bool live_at(int step) const {
    return always || (first <= step && step <= last) || (again_first <= step && step <= again_last);
  }
  bool overlaps_in_time(const Placement& other) const {
    if (always || other.always) return true;
    auto overlap = [](int a0, int a1, int b0, int b1) { return a0 >= 0 && b0 >= 0 && a0 <= b1 && b0 <= a1; };
    return overlap(first, last, other.first, other.last) ||
           overlap(first, last, other.again_first, other.again_last) ||
           overlap(again_first, again_last, other.first, other.last) ||
           overlap(again_first, again_last, other.again_first, other.again_last);
  }
  std::string steps() const;  // "all", "3-7", or "3-7 and 12-15"
};

// Throws an internal error naming both tensors if two placements live at the same step share a byte, or
// naming the tensor that reaches past `arena_bytes`.
void check_placements(std::span<const Placement> placements, size_t arena_bytes);

// Places `placements` (their bytes, always, first and last set) in one arena: the tensors live always one
// after the other from offset 0, then each transient tensor, largest first, in the smallest gap left by the
// already placed tensors whose ranges overlap its own (or above them all). Returns the arena's size.
size_t place_by_liveness(std::vector<Placement>& placements);

class MemoryPlan {
 public:
  MemoryPlan(Backend& backend, DType master_dtype, DType compute_dtype)
      : backend_(backend), master_dtype_(master_dtype), compute_dtype_(compute_dtype) {}
  ~MemoryPlan();
  MemoryPlan(const MemoryPlan&) = delete;
  MemoryPlan& operator=(const MemoryPlan&) = delete;

  DType master_dtype() const { return master_dtype_; }
  DType compute_dtype() const { return compute_dtype_; }
  bool has_compute_copies() const { return compute_dtype_ != master_dtype_; }
  // `value` and `grad` must have dims set, in the compute dtype (ParamUse::compute) or the master dtype
  // (ParamUse::master); their data is assigned by allocate(). `init_std`: ParamInit::normal's.
  // A parameter two layers read (a tied embedding) is declared once, by the layer that completes its
  // gradient last in the backward pass (the earliest in execution order): the gradient exchange sends it
  // once that layer's backward has run. The other layer holds the same Tensors, writes the gradient first
  // (by the network's parameter mode) and the owner adds into it.
  void add_parameter(std::string name, Tensor& value, Tensor& grad, ParamInit init, int64_t fan,
                     bool is_norm_or_bias, ParamUse use, double init_std = 0);
  // Parameters added from now on belong to layer `index` (execution order).
  void set_current_layer(int index) { current_layer_ = index; }
  void add_buffer(Tensor& value, float initial_value);
  // A per-step tensor that holds data all step and between steps (a layer output, saved state).
  void add_activation(Tensor& tensor, std::string name = {});
  // A per-step tensor that holds data only over steps [first, last] of the step's timeline (see Placement),
  // and, recomputed in the backward pass, again over [again_first, again_last].
  void add_transient(Tensor& tensor, std::string name, int first, int last, int again_first = -1,
                     int again_last = -1);
  // `tensor` takes the memory of `of`, a per-step tensor declared before it (an activation's gradient
  // written over the activation: the fused loss's logits).
  void add_alias(Tensor& tensor, const Tensor& of);
  void add_saved_bytes(void** pointer, size_t bytes);
  void require_workspace(size_t bytes);
  // Device memory a backend plan holds outside the arenas (BatchNormPlan::held_bytes).
  void add_held_bytes(size_t bytes) { held_bytes_ += bytes; }

  // Estimation only: layers make estimate plans, and only place() may follow, never allocate().
  void set_estimate_only() { estimate_only_ = true; }
  bool estimate_only() const { return estimate_only_; }
  // Sizes every arena and places every tensor, allocating nothing (done by allocate() too). Afterwards
  // total_bytes() and the byte counts below are what allocate() takes.
  void place();
  bool placed() const { return placed_; }
  // Places (unless done), allocates every arena and initialises parameters (seeded) and buffers.
  void allocate(uint64_t seed);
  // Where allocate() takes the gradient arenas from (the FP32 flat gradients, and the compute-dtype ones
  // under mixed precision): a data-parallel run hands memory its communicator sums fastest (an NCCL
  // symmetric window). The source owns that memory and must outlive the plan; it may return nullptr, and
  // the plan then allocates the arena from the backend as usual.
  void set_gradient_memory(std::function<void*(size_t bytes)> source) {
    gradient_memory_ = std::move(source);
  }
  // Mixed precision with one rank: the optimizer reads the compute parameters' gradients in the compute
  // dtype, so no FP32 copy of them is kept (see the top). Before place().
  void keep_gradients_in_compute_dtype();
  bool gradients_in_compute_dtype() const { return gradients_in_compute_dtype_ && has_compute_copies(); }
  // Whether the FP32 gradient arena exists: flat_gradients() is empty where it does not.
  bool has_master_gradients() const;
  bool allocated() const { return !arenas_.empty(); }

  const std::vector<ParameterInfo>& parameters() const { return parameters_; }
  int64_t parameter_count() const { return parameter_count_; }
  int64_t buffer_count() const { return buffer_count_; }
  Tensor& flat_parameters() { return flat_parameters_; }
  Tensor& flat_gradients() { return flat_gradients_; }  // the FP32 gradients (empty: see above)
  Tensor& flat_momentum() { return flat_momentum_; }
  // AdamW's second moment: allocated (zeroed) only where require_second_moment() was called before.
  void require_second_moment() { second_moment_ = true; }
  bool has_second_moment() const { return second_moment_; }
  Tensor& flat_second_moment() { return flat_second_moment_; }
  Tensor& flat_buffers() { return flat_buffers_; }
  // Mixed precision: the compute copies, over the first compute_count() elements of the flat buffers.
  int64_t compute_count() const { return compute_count_; }
  Tensor& compute_gradients() { return compute_gradients_; }  // valid when has_compute_copies()
  void gradients_to_master();    // master gradients[0, compute_count) = compute gradients
  void parameters_to_compute();  // compute parameters = master parameters[0, compute_count)
  // What the optimizer's update folds in: the compute parameters it refreshes and, where
  // gradients_in_compute_dtype(), the compute gradients it reads (nothing without compute copies).
  ComputeCopies compute_copies();
  // Every gradient the update reads, as stored when the step's backward (and any exchange) is done: the
  // FP32 gradients, or the compute gradients and the FP32 ones of the other parameters. Checks over all
  // gradients (overflow, the clipping norm) read these.
  std::vector<Tensor> stored_gradients();
  void* workspace() const { return workspace_; }
  size_t workspace_bytes() const { return workspace_bytes_; }
  // The activation arena's size, and what it would be with every tensor in memory of its own.
  size_t activation_bytes() const { return activation_bytes_; }
  size_t unshared_activation_bytes() const;
  // The largest sum of the transient tensors live at one step: no placement can use less than this above
  // the always-live tensors.
  size_t transient_peak_bytes() const;
  const std::vector<Placement>& placements() const { return placements_; }
  size_t held_bytes() const { return held_bytes_; }
  // Every arena plus the held bytes, once placed.
  size_t total_bytes() const;
  // Segments of the flat buffers for the optimizer: weight decay on or off.
  std::vector<ParamSegment> segments(bool decay_norm_and_bias) const;
  // Fills parameters and buffers with their initial values (also done by allocate()).
  void initialise(uint64_t seed);

 private:
  void copy_to_flat(Tensor& flat, const std::vector<double>& values);
  struct Buffer {
    Tensor* value;
    float initial;
    int64_t offset;
  };
  // A per-step tensor: a Tensor or saved bytes, with its placement (same index in placements_).
  struct PerStep {
    Tensor* tensor = nullptr;
    void** pointer = nullptr;
  };
  Backend& backend_;
  DType master_dtype_, compute_dtype_;
  int64_t compute_count_ = 0;
  Tensor compute_parameters_, compute_gradients_;
  std::vector<ParameterInfo> parameters_;
  std::vector<Buffer> buffers_;
  std::vector<PerStep> per_step_;
  std::vector<std::pair<Tensor*, const Tensor*>> aliases_;
  std::vector<Placement> placements_;
  std::vector<size_t> arena_sizes_;  // set by place(), in allocation order
  int64_t parameter_count_ = 0, buffer_count_ = 0;
  int current_layer_ = -1;
  size_t workspace_bytes_ = 0, activation_bytes_ = 0, held_bytes_ = 0;
  bool estimate_only_ = false, placed_ = false, second_moment_ = false, gradients_in_compute_dtype_ = false;
  void* workspace_ = nullptr;
  Tensor flat_parameters_, flat_gradients_, flat_momentum_, flat_second_moment_, flat_buffers_;
  struct Arena {
    void* pointer = nullptr;
    size_t bytes = 0;
    bool owned = true;  // false: from gradient_memory_, its source's to free
  };
  std::vector<Arena> arenas_;
  std::function<void*(size_t)> gradient_memory_;
};

}  // namespace dlbench
