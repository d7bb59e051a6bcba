// The gradient check the layer tests share: a double-precision network's analytic parameter gradients
// against central differences of its loss.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "nn/network.h"

namespace dlbench::testing {

// Runs forward (through `loss_value`) and backward once, then checks `samples` evenly spread parameter
// gradients (every one if samples >= their count) against (loss(w + h) - loss(w - h)) / 2h.
inline void check_parameter_gradients(Network& net, const std::function<double()>& loss_value, int samples) {
  loss_value();
  net.backward();
  Tensor& params = net.memory().flat_parameters();
  Tensor& grads = net.memory().flat_gradients();
  const std::vector<double> analytic(grads.ptr<double>(), grads.ptr<double>() + grads.numel());
  const double h = 1e-5;
  int checked = 0;
  for (const auto& p : net.memory().parameters()) {
    const int64_t count = p.value->numel();
    const int64_t stride =
        std::max<int64_t>(1, count * static_cast<int64_t>(net.memory().parameters().size()) / samples);
    for (int64_t i = 0; i < count; i += stride) {
      double& w = params.ptr<double>()[p.offset + i];
      const double saved = w;
      w = saved + h;
      const double up = loss_value();
      w = saved - h;
      const double down = loss_value();
      w = saved;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(analytic[static_cast<size_t>(p.offset + i)], numeric, 1e-7 + 1e-5 * std::abs(numeric))
          << p.name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

}  // namespace dlbench::testing
