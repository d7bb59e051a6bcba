// A dense layer's parameters: W [O, I] and b [O] with their gradients, in the network's compute dtype,
// declared to the memory plan as `<name>.weight` and `<name>.bias`. LinearLayer holds one; the fused MLP
// (nn/mlp.h) holds two, under the names of the layers it replaces, so checkpoints and initial values do
// not depend on what was fused.
//   initialisation: U(-1/sqrt(I), 1/sqrt(I)) for both (PyTorch's default); or, with a normal_std above 0,
//   W ~ N(0, normal_std^2) and b = 0 (GPT-2's)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"
#include "nn/layer.h"

namespace dlbench {

class Fp8Scaling;
class MemoryPlan;
class Network;

struct DenseParameters {
  DenseParameters(Network& net, int64_t in_features, int64_t out_features, double normal_std);
  // Declares the parameters and, in an FP8 network, registers the layer's FP8 operands.
  void declare(MemoryPlan& plan, const std::string& name);
  // The layer's FP8 scaling in an FP8 network; nullopt otherwise. A training pass's values count towards
  // the next scales and it is given the kept codes where there are; an evaluation pass neither
  // counts nor writes codes no backward will read.
  std::optional<Fp8DenseScaling> fp8(bool training) const;
  // Keeps the codes of the layer's input x^T ([I, rows], one byte each) from the forward for the
  // backward's weight GEMM (Fp8DenseScaling::input_codes_transposed), and those of W^T ([I, O]) for its
  // data GEMM (weight_codes_transposed), where that saves a pass over x and one over W: in an FP8 network
  // whose backend's GEMMs run in FP8, and not under --recompute, where they would hold memory for every
  // block (the passes are cheap beside the recomputed forward), and in dimensions FP8 GEMMs take (multiples
  // of 16). Called by the layer's constructor.
  void keep_codes(Network& net, int64_t rows);
  // The kept codes as values the layer saves for its backward (Layer::saved_values),
  // `<layer>.input_codes_t` and `<layer>.weight_codes_t`; none where they are not kept.
  std::vector<SavedValue> kept_codes(const std::string& layer_name);
  bool in_fp8() const { return fp8_scaling_ != nullptr; }  // the network trains its dense layers in FP8
  bool keeps_codes() const { return input_codes_t_.numel() > 0; }  // keep_codes kept them
  // Whether the backward reads no x: the codes are kept and the backend reads them in its place.
  bool backward_needs_no_input() const { return keeps_codes() && codes_replace_x_; }

  int64_t in_features, out_features;
  double normal_std;
  Tensor weight, dweight, bias, dbias;

 private:
  Fp8Scaling* fp8_scaling_;  // the network's, or null
  int fp8_first_ = -1;
  Tensor input_codes_t_;          // x^T's E4M3 codes as i32 words, where kept (keep_codes); else empty
  Tensor weight_codes_t_;         // W^T's, likewise
  bool codes_replace_x_ = false;  // the backend's backward reads x^T's kept codes, not x
};

// The pointer the dense ops take for an optional scaling.
inline const Fp8DenseScaling* fp8_or_null(const std::optional<Fp8DenseScaling>& fp8) {
  return fp8 ? &*fp8 : nullptr;
}

}  // namespace dlbench
