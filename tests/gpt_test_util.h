// What the GPT step tests share: gpt-mini as they build it, and fixed tokens and targets for its step.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "models/gpt.h"
#include "models/model.h"

namespace dlbench::testing {

// gpt-mini at batch 2 x 32 tokens on `backend`, from seed 7's weights, its blocks recomputed or not and the
// dense layers' fusions (the MLP as one layer, residual adds in the projections, the projections' bias
// gradients summed by the layer norms after them) forced on or off.
inline Model finalized_gpt_mini(Backend& backend, bool recompute, bool fuse) {
  NetworkOptions options;
  options.batch = 2;
  options.recompute = recompute;
  options.fusions.dense_gelu_dense = fuse;
  options.fusions.dense_residual = fuse;
  options.fusions.layernorm_dx_sums = fuse;
  Model model = build_gpt("gpt-mini", backend, options, 32);
  model.net->finalize(7);
  return model;
}

// Token i is (37 i + 11) mod 256 and its target (53 i + 5) mod 256 (gpt-mini's vocabulary), copied to the
// model's inputs on `backend`.
inline void feed_fixed_tokens(Backend& backend, Model& model) {
  const int64_t n = model.tokens->value.numel();
  std::vector<int32_t> tokens(static_cast<size_t>(n)), targets(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    tokens[static_cast<size_t>(i)] = static_cast<int32_t>((i * 37 + 11) % 256);
    targets[static_cast<size_t>(i)] = static_cast<int32_t>((i * 53 + 5) % 256);
  }
  backend.copy_to_device(model.tokens->value.data(), tokens.data(), tokens.size() * sizeof(int32_t));
  backend.copy_to_device(model.targets->value.data(), targets.data(), targets.size() * sizeof(int32_t));
}

}  // namespace dlbench::testing
