#include "nn/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/status.h"

namespace dlbench {

namespace {

constexpr size_t kAlignment = 256;  // cuDNN/cuBLAS and AVX loads like aligned starts
size_t align_up(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// A normal deviate from two uniforms (Box-Muller), written out so every standard library gives the same
// initial weights for the same seed.
double normal_sample(std::mt19937_64& rng) {
  constexpr double kScale = 1.0 / 9007199254740992.0;  // 2^-53
  double u1 = (static_cast<double>(rng() >> 11) + 0.5) * kScale;
  double u2 = static_cast<double>(rng() >> 11) * kScale;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

double uniform_sample(std::mt19937_64& rng, double lo, double hi) {
  return lo + (hi - lo) * static_cast<double>(rng() >> 11) / 9007199254740992.0;
}

}  // namespace

MemoryPlan::~MemoryPlan() {
  for (auto& [pointer, bytes] : arenas_) backend_.deallocate(pointer);
}

namespace {
// Every parameter starts aligned for vector loads: the flat buffers are padded to 64 elements.
int64_t padded(int64_t count) { return (count + 63) / 64 * 64; }
}  // namespace

void MemoryPlan::add_parameter(std::string name, Tensor& value, Tensor& grad, ParamInit init, int64_t fan,
                               bool is_norm_or_bias, ParamUse use) {
  DLB_CHECK(!allocated(), "parameter {} declared after allocation", name);
  DType expected = use == ParamUse::compute ? compute_dtype_ : master_dtype_;
  DLB_CHECK(value.dtype() == expected && grad.dtype() == expected, "parameter {} is not {}", name,
            dtype_name(expected));
  parameters_.push_back({std::move(name), &value, &grad, init, fan, is_norm_or_bias, use, 0, current_layer_});
}

void MemoryPlan::add_buffer(Tensor& value, float initial_value) {
  DLB_CHECK(value.dtype() == master_dtype_, "buffers are {}", dtype_name(master_dtype_));
  buffers_.push_back({&value, initial_value, buffer_count_});
  buffer_count_ += value.numel();
}

void MemoryPlan::add_activation(Tensor& tensor) { activations_.push_back(&tensor); }

void MemoryPlan::add_saved_bytes(void** pointer, size_t bytes) { saved_.push_back({pointer, bytes}); }

void MemoryPlan::require_workspace(size_t bytes) { workspace_bytes_ = std::max(workspace_bytes_, bytes); }

size_t MemoryPlan::total_bytes() const {
  size_t total = 0;
  for (const auto& arena : arenas_) total += arena.second;
  return total;
}

void MemoryPlan::allocate(uint64_t seed) {
  DLB_CHECK(!allocated(), "memory plan allocated twice");
  Device device = backend_.device();
  auto new_arena = [&](size_t bytes) {
    void* pointer = backend_.allocate(std::max<size_t>(bytes, kAlignment));
    arenas_.emplace_back(pointer, bytes);
    return static_cast<std::byte*>(pointer);
  };

  // Offsets: parameters read in the compute dtype first, then the others (declaration order within each),
  // so the compute copies cover one leading range of the flat buffers.
  std::stable_partition(parameters_.begin(), parameters_.end(),
                        [](const ParameterInfo& p) { return p.use == ParamUse::compute; });
  parameter_count_ = 0;
  compute_count_ = 0;
  for (auto& p : parameters_) {
    p.offset = parameter_count_;
    parameter_count_ += padded(p.value->numel());
    if (p.use == ParamUse::compute) compute_count_ = parameter_count_;
  }

  // Three buffers with identical offsets: parameters, gradients, momentum.
  const size_t element = dtype_size(master_dtype_);
  size_t flat_bytes = static_cast<size_t>(parameter_count_) * element;
  std::byte* params = new_arena(flat_bytes);
  std::byte* grads = new_arena(flat_bytes);
  std::byte* momentum = new_arena(flat_bytes);
  flat_parameters_ = Tensor(params, {parameter_count_}, master_dtype_, Layout::nchw, device);
  flat_gradients_ = Tensor(grads, {parameter_count_}, master_dtype_, Layout::nchw, device);
  flat_momentum_ = Tensor(momentum, {parameter_count_}, master_dtype_, Layout::nchw, device);
  std::byte* compute_params = nullptr;
  std::byte* compute_grads = nullptr;
  if (has_compute_copies()) {
    size_t compute_bytes = static_cast<size_t>(compute_count_) * dtype_size(compute_dtype_);
    compute_params = new_arena(compute_bytes);
    compute_grads = new_arena(compute_bytes);
    compute_parameters_ = Tensor(compute_params, {compute_count_}, compute_dtype_, Layout::nchw, device);
    compute_gradients_ = Tensor(compute_grads, {compute_count_}, compute_dtype_, Layout::nchw, device);
  }
  for (auto& p : parameters_) {
    const bool copy = has_compute_copies() && p.use == ParamUse::compute;
    size_t byte_offset = static_cast<size_t>(p.offset) * (copy ? dtype_size(compute_dtype_) : element);
    p.value->set_data((copy ? compute_params : params) + byte_offset);
    p.grad->set_data((copy ? compute_grads : grads) + byte_offset);
  }

  std::byte* buffers = new_arena(static_cast<size_t>(buffer_count_) * element);
  flat_buffers_ = Tensor(buffers, {buffer_count_}, master_dtype_, Layout::nchw, device);
  for (auto& b : buffers_) b.value->set_data(buffers + static_cast<size_t>(b.offset) * element);

  // Activations and saved state: one arena, each tensor at an aligned offset.
  activation_bytes_ = 0;
  for (Tensor* t : activations_) activation_bytes_ += align_up(t->bytes());
  for (const Saved& s : saved_) activation_bytes_ += align_up(s.bytes);
  std::byte* cursor = new_arena(activation_bytes_);
  for (Tensor* t : activations_) {
    t->set_data(cursor);
    cursor += align_up(t->bytes());
  }
  for (const Saved& s : saved_) {
    *s.pointer = cursor;
    cursor += align_up(s.bytes);
  }

  workspace_ = workspace_bytes_ > 0 ? new_arena(workspace_bytes_) : nullptr;
  initialise(seed);
}

void MemoryPlan::copy_to_flat(Tensor& flat, const std::vector<double>& values) {
  if (master_dtype_ == DType::f64) {
    backend_.copy_to_device(flat.data(), values.data(), values.size() * sizeof(double));
  } else {
    std::vector<float> narrow(values.begin(), values.end());
    backend_.copy_to_device(flat.data(), narrow.data(), narrow.size() * sizeof(float));
  }
}

void MemoryPlan::initialise(uint64_t seed) {
  DLB_CHECK(allocated(), "initialise before allocate");
  // Initial values are computed on the host in declaration order, then copied to the device.
  std::vector<double> host(static_cast<size_t>(parameter_count_), 0.0);
  std::mt19937_64 rng(seed);
  for (const auto& p : parameters_) {
    double* out = host.data() + p.offset;
    int64_t count = p.value->numel();
    switch (p.init) {
      case ParamInit::he_normal_fan_out: {
        double stddev = std::sqrt(2.0 / static_cast<double>(p.fan));
        for (int64_t i = 0; i < count; ++i)
          out[i] = static_cast<float>(stddev * normal_sample(rng));  // FP32 values either way
        break;
      }
      case ParamInit::uniform_fan_in: {
        double bound = 1.0 / std::sqrt(static_cast<double>(p.fan));
        for (int64_t i = 0; i < count; ++i) out[i] = static_cast<float>(uniform_sample(rng, -bound, bound));
        break;
      }
      case ParamInit::ones:
        for (int64_t i = 0; i < count; ++i) out[i] = 1.0;
        break;
      case ParamInit::zeros:
        break;
    }
  }
  copy_to_flat(flat_parameters_, host);
  backend_.fill(flat_gradients_, 0.0);
  backend_.fill(flat_momentum_, 0.0);

  std::vector<double> host_buffers(static_cast<size_t>(buffer_count_));
  for (const auto& b : buffers_) {
    std::fill_n(host_buffers.begin() + b.offset, b.value->numel(), static_cast<double>(b.initial));
  }
  copy_to_flat(flat_buffers_, host_buffers);
  parameters_to_compute();
}

void MemoryPlan::gradients_to_master() {
  if (!has_compute_copies() || compute_count_ == 0) return;
  Tensor leading(flat_gradients_.data(), {compute_count_}, master_dtype_, Layout::nchw,
                 flat_gradients_.device());
  backend_.cast(compute_gradients_, leading);
}

void MemoryPlan::parameters_to_compute() {
  if (!has_compute_copies() || compute_count_ == 0) return;
  Tensor leading(flat_parameters_.data(), {compute_count_}, master_dtype_, Layout::nchw,
                 flat_parameters_.device());
  backend_.cast(leading, compute_parameters_);
}

std::vector<ParamSegment> MemoryPlan::segments(bool decay_norm_and_bias) const {
  // Neighbouring parameters with the same rule merge into one segment (padding included: its gradient is
  // zero, so updating it is harmless).
  std::vector<ParamSegment> result;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const auto& p = parameters_[i];
    bool decay = decay_norm_and_bias || !p.is_norm_or_bias;
    int64_t end = i + 1 < parameters_.size() ? parameters_[i + 1].offset : parameter_count_;
    if (!result.empty() && result.back().weight_decay == decay) {
      result.back().count = end - result.back().offset;
    } else {
      result.push_back({p.offset, end - p.offset, decay});
    }
  }
  return result;
}

}  // namespace dlbench
