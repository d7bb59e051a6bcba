#include "nn/residual_add.h"

#include "core/status.h"
#include "nn/network.h"

namespace dlbench {

ResidualAddLayer::ResidualAddLayer(Network& net, std::string name, Activation& a, Activation& b)
    : Layer(net, std::move(name)) {
  DLB_CHECK(a.value.dims() == b.value.dims() && a.value.dtype() == b.value.dtype(),
            "{}: adds {} and {} of different shapes", name_, a.name, b.name);
  DLB_CHECK(&a != &b, "{}: adds {} to itself", name_, a.name);
  set_inputs({&a, &b});
  output_ = &net.new_activation(name_ + ".out", a.value.dims(), a.value.dtype());
}

void ResidualAddLayer::forward(Phase) {
  net_.backend().add(inputs_[0]->value, inputs_[1]->value, output_->value);
}

void pass_gradient(Backend& backend, GradMode mode, const Tensor& dy, Tensor& dx) {
  switch (mode) {
    case GradMode::none:
      break;
    case GradMode::overwrite:
      if (dx.data() != dy.data()) backend.copy(dx.data(), dy.data(), dy.bytes());
      break;
    case GradMode::accumulate:
      backend.add(dx, dy, dx);
      break;
  }
}

void ResidualAddLayer::backward() {
  for (int i = 0; i < 2; ++i)
    pass_gradient(net_.backend(), input_grad_mode(i), output_->grad, inputs_[static_cast<size_t>(i)]->grad);
}

}  // namespace dlbench
