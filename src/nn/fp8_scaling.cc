#include "nn/fp8_scaling.h"

#include <cstring>

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

void Fp8Scaling::allocate() {
  DLB_CHECK(!allocated(), "fp8: allocated twice");
  const size_t n = formats_.size(), length = static_cast<size_t>(recipe_.amax_history);
  // Host image of the state, laid out as in the backend's memory.
  const size_t floats = 3 * n + n * length;
  std::vector<unsigned char> image(floats * sizeof(float) + n * sizeof(Fp8Format));
  auto* f = reinterpret_cast<float*>(image.data());
  for (size_t i = 0; i < 2 * n; ++i) f[i] = 1.f;  // scales and inverses; amaxes and histories stay 0
  std::memcpy(image.data() + floats * sizeof(float), formats_.data(), n * sizeof(Fp8Format));
  memory_ = backend_.allocate(image.size());
  backend_.copy_to_device(memory_, image.data(), image.size());
  float* base = static_cast<float*>(memory_);
  state_.scale = base;
  state_.inverse_scale = base + n;
  state_.amax = base + 2 * n;
  state_.history = base + 3 * n;
  state_.format = reinterpret_cast<const Fp8Format*>(base + floats);
  state_.count = static_cast<int>(n);
  state_.history_length = recipe_.amax_history;
  state_.margin = recipe_.margin;
}

Fp8DenseScaling Fp8Scaling::dense(int first, bool count_amax) const {
  DLB_CHECK(allocated() && first >= 0 && first + kFp8OperandsPerDense <= operands(),
            "fp8: no dense layer at operand {}", first);
  return {state_.scale + first, state_.inverse_scale + first, count_amax ? state_.amax + first : nullptr};
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

std::vector<float> Fp8Scaling::state() const {
  std::vector<float> floats(state_floats());
  if (allocated() && !floats.empty()) {
    backend_.synchronize();
    backend_.copy_to_host(floats.data(), state_.scale, floats.size() * sizeof(float));
  }
  return floats;
}

void Fp8Scaling::load_state(const float* floats, size_t count) {
  DLB_CHECK(allocated() && count == state_floats(), "fp8: a state of {} floats for {} expected", count,
            state_floats());
  if (count > 0) backend_.copy_to_device(state_.scale, floats, count * sizeof(float));
}

}  // namespace dlbench
