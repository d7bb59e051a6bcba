#include "nn/fp8_scaling.h"

#include <algorithm>

#include "core/status.h"

namespace dlbench {

Fp8Scaling::Fp8Scaling(Backend& backend, Fp8Recipe recipe) : backend_(backend), recipe_(recipe) {
  DLB_CHECK(recipe.amax_history >= 1 && recipe.margin >= 0, "fp8: amax history {} and margin {}",
            recipe.amax_history, recipe.margin);
}

Fp8Scaling::~Fp8Scaling() {
  if (memory_) backend_.deallocate(memory_);
}

int Fp8Scaling::add_dense(const std::string& name) {
  DLB_CHECK(!allocated(), "fp8: {} registered after the state was allocated", name);
  const int first = operands();
  formats_.insert(formats_.end(), {Fp8Format::e4m3, Fp8Format::e4m3, Fp8Format::e5m2});  // x, w, dy
  names_.push_back(name);
  return first;
}

// The backend's memory: the inverse scales first, 16 bytes apart from the allocation's (aligned) start,
// then scale [n], amax [n], history [n * length] and format [n].
size_t Fp8Scaling::inverse_floats() const { return formats_.size() * kFp8InverseScaleStride; }
size_t Fp8Scaling::device_floats() const {
  return inverse_floats() + formats_.size() * (2 + static_cast<size_t>(recipe_.amax_history));
}

void Fp8Scaling::allocate() {
  DLB_CHECK(!allocated(), "fp8: allocated twice");
  const size_t n = formats_.size();
  std::vector<float> floats(device_floats(), 0.f);  // amaxes and histories 0
  std::fill(floats.begin(), floats.begin() + static_cast<ptrdiff_t>(inverse_floats() + n), 1.f);
  memory_ = backend_.allocate(floats.size() * sizeof(float) + n * sizeof(Fp8Format));
  float* base = static_cast<float*>(memory_);
  state_.inverse_scale = base;
  state_.scale = base + inverse_floats();
  state_.amax = state_.scale + n;
  state_.history = state_.amax + n;
  state_.format = reinterpret_cast<const Fp8Format*>(base + floats.size());
  state_.count = static_cast<int>(n);
  state_.history_length = recipe_.amax_history;
  state_.margin = recipe_.margin;
  backend_.copy_to_device(memory_, floats.data(), floats.size() * sizeof(float));
  backend_.copy_to_device(base + floats.size(), formats_.data(), n * sizeof(Fp8Format));
}

Fp8DenseScaling Fp8Scaling::dense(int first, bool count_amax) const {
  DLB_CHECK(allocated() && first >= 0 && first + kFp8OperandsPerDense <= operands(),
            "fp8: no dense layer at operand {}", first);
  return {state_.scale + first, state_.inverse_scale + static_cast<ptrdiff_t>(first) * kFp8InverseScaleStride,
          count_amax ? state_.amax + first : nullptr};
}

void Fp8Scaling::update() {
  if (allocated() && state_.count > 0) backend_.update_fp8_scales(state_);
}

std::vector<float> Fp8Scaling::read_scales() const {
  std::vector<float> scales(formats_.size());
  if (allocated()) {
    backend_.synchronize();
    backend_.copy_to_host(scales.data(), state_.scale, scales.size() * sizeof(float));
  }
  return scales;
}

// A checkpoint keeps scale, inverse, amax [n] each and history [n * length]: the inverses gathered from their
// 16-byte strides and spread back on load.
std::vector<float> Fp8Scaling::state() const {
  std::vector<float> floats(state_floats());
  if (!allocated() || floats.empty()) return floats;
  const size_t n = formats_.size();
  std::vector<float> device(device_floats());
  backend_.synchronize();
  backend_.copy_to_host(device.data(), memory_, device.size() * sizeof(float));
  const auto rest = device.begin() + static_cast<ptrdiff_t>(inverse_floats());  // scale, amax, history
  std::copy(rest, rest + static_cast<ptrdiff_t>(n), floats.begin());
  for (size_t i = 0; i < n; ++i) floats[n + i] = device[i * kFp8InverseScaleStride];
  std::copy(rest + static_cast<ptrdiff_t>(n), device.end(), floats.begin() + static_cast<ptrdiff_t>(2 * n));
  return floats;
}

void Fp8Scaling::load_state(const float* floats, size_t count) {
  DLB_CHECK(allocated() && count == state_floats(), "fp8: a state of {} floats for {} expected", count,
            state_floats());
  if (count == 0) return;
  const size_t n = formats_.size();
  std::vector<float> device(device_floats(), 0.f);
  for (size_t i = 0; i < n; ++i) device[i * kFp8InverseScaleStride] = floats[n + i];
  float* rest = device.data() + inverse_floats();
  std::copy(floats, floats + n, rest);
  std::copy(floats + 2 * n, floats + count, rest + n);
  backend_.copy_to_device(memory_, device.data(), device.size() * sizeof(float));
}

}  // namespace dlbench
