// FP8 delayed scaling's state for a network's dense layers (--precision fp8; Fp8DenseScaling in
// backend/backend.h): three operands a layer, x and w in E4M3 and dy in E5M2, each with a scale, its
// inverse, the amax the ops fold this step's largest |value| into, and the history of the last steps'
// amaxes, all in the backend's memory. At the end of each step (Trainer) update() moves the amaxes into
// the histories and makes the next scales from them; the first step runs with scales of 1.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace dlbench {

struct Fp8Recipe {
  int amax_history = 16;  // steps
  int margin = 0;         // powers of two of headroom below the format's largest value
};

class Fp8Scaling {
 public:
  Fp8Scaling(Backend& backend, Fp8Recipe recipe);
  ~Fp8Scaling();
  Fp8Scaling(const Fp8Scaling&) = delete;
  Fp8Scaling& operator=(const Fp8Scaling&) = delete;

  // Registers a dense layer's three operands under `name`; returns the index of its first. Before allocate().
  int add_dense(const std::string& name);
  // Allocates the state: scales and inverses 1, amaxes and histories 0.
  void allocate();
  bool allocated() const { return state_.scale != nullptr; }

  // The scaling of the dense layer whose first operand is `first`; its amaxes left out where `count_amax`
  // is false (a forward pass that must not move the scales: evaluation).
  Fp8DenseScaling dense(int first, bool count_amax) const;
  // The step's end: the amaxes into the histories, the next scales from them.
  void update();

  int operands() const { return static_cast<int>(formats_.size()); }
  // The current scales, copied from the backend's memory (tests, the run's summary).
  std::vector<float> read_scales() const;
  const Fp8Recipe& recipe() const { return recipe_; }
  // The floats a checkpoint keeps (scales, inverses, amaxes, histories), to resume with the same scales;
  // load_state takes what state() returned for the same layers and recipe.
  size_t state_floats() const { return formats_.size() * (3 + static_cast<size_t>(recipe_.amax_history)); }
  std::vector<float> state() const;
  void load_state(const float* floats, size_t count);

 private:
  Backend& backend_;
  Fp8Recipe recipe_;
  std::vector<Fp8Format> formats_;
  std::vector<std::string> names_;
  size_t inverse_floats() const;  // n * kFp8InverseScaleStride
  size_t device_floats() const;   // the inverses, then scale and amax [n] each and history [n * length]
  void* memory_ = nullptr;        // device_floats() floats, then format [n]
  Fp8ScalingState state_;
};

}  // namespace dlbench
