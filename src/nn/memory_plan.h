// The memory plan: every tensor the network will touch is declared first (shape and dtype known, no data),
// then allocate() sizes the arenas, allocates each once and points every declared Tensor into it.
// Nothing is allocated after that, and never inside the timed loop.
//
// Arenas:
//   parameters  one contiguous buffer of the master dtype: the trained weights (master copy)
//   gradients   same dtype and offsets as parameters, so a gradient bucket is a slice
//   momentum    same dtype and offsets (optimizer state)
//   buffers     master dtype, non-trained state saved in checkpoints (batch-norm running statistics)
// The master dtype is FP32, except FP64 for double-precision networks (the reference backend's
// gradient checks), where every parameter and statistic is double too.
//
// Mixed precision: when the compute dtype (FP16, BF16) differs from the master dtype, the parameters that
// layers read in the compute dtype (conv and linear weights: ParamUse::compute) get a second copy in two
// more flat buffers, compute parameters and compute gradients. Those parameters are placed first in the
// flat buffers, so that one cast moves all compute gradients to the master gradients after backward
// (gradients_to_master) and one cast refreshes the compute copy after the update (parameters_to_compute).
// Batch-norm parameters (ParamUse::master) stay FP32 and are used directly.
//   activations everything per-step: layer outputs and their gradients, saved state, labels, the loss
//   workspace   one scratch area shared by all ops (they run one after another): the largest request
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"

namespace dlbench {

// How a parameter starts.
enum class ParamInit : uint8_t {
  he_normal_fan_out,  // N(0, 2 / fan_out): torchvision's conv init (kaiming_normal_, mode fan_out, relu)
  uniform_fan_in,     // U(-1/sqrt(fan_in), 1/sqrt(fan_in)): PyTorch's default for Linear weight and bias
  ones,
  zeros,
};

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
  int64_t offset = 0;  // elements into the flat buffers (assigned by allocate())
  int layer = -1;      // the owning layer's index in execution order (its backward writes the gradient)
};

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
  // (ParamUse::master); their data is assigned by allocate().
  void add_parameter(std::string name, Tensor& value, Tensor& grad, ParamInit init, int64_t fan,
                     bool is_norm_or_bias, ParamUse use);
  // Parameters added from now on belong to layer `index` (execution order).
  void set_current_layer(int index) { current_layer_ = index; }
  void add_buffer(Tensor& value, float initial_value);
  void add_activation(Tensor& tensor);
  void add_saved_bytes(void** pointer, size_t bytes);
  void require_workspace(size_t bytes);

  // Allocates every arena and initialises parameters (seeded) and buffers.
  void allocate(uint64_t seed);
  bool allocated() const { return !arenas_.empty(); }

  const std::vector<ParameterInfo>& parameters() const { return parameters_; }
  int64_t parameter_count() const { return parameter_count_; }
  int64_t buffer_count() const { return buffer_count_; }
  Tensor& flat_parameters() { return flat_parameters_; }
  Tensor& flat_gradients() { return flat_gradients_; }
  Tensor& flat_momentum() { return flat_momentum_; }
  Tensor& flat_buffers() { return flat_buffers_; }
  // Mixed precision: the compute copies, over the first compute_count() elements of the flat buffers.
  int64_t compute_count() const { return compute_count_; }
  Tensor& compute_gradients() { return compute_gradients_; }  // valid when has_compute_copies()
  void gradients_to_master();    // master gradients[0, compute_count) = compute gradients
  void parameters_to_compute();  // compute parameters = master parameters[0, compute_count)
  void* workspace() const { return workspace_; }
  size_t workspace_bytes() const { return workspace_bytes_; }
  size_t activation_bytes() const { return activation_bytes_; }
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
  struct Saved {
    void** pointer;
    size_t bytes;
  };
  Backend& backend_;
  DType master_dtype_, compute_dtype_;
  int64_t compute_count_ = 0;
  Tensor compute_parameters_, compute_gradients_;
  std::vector<ParameterInfo> parameters_;
  std::vector<Buffer> buffers_;
  std::vector<Tensor*> activations_;
  std::vector<Saved> saved_;
  int64_t parameter_count_ = 0, buffer_count_ = 0;
  int current_layer_ = -1;
  size_t workspace_bytes_ = 0, activation_bytes_ = 0;
  void* workspace_ = nullptr;
  Tensor flat_parameters_, flat_gradients_, flat_momentum_, flat_buffers_;
  std::vector<std::pair<void*, size_t>> arenas_;
};

}  // namespace dlbench
