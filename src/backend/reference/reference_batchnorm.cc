// Batch normalisation over (N, H, W) for each channel c, with M = N * H * W values per channel:
//   mean = sum(x) / M,  var = sum((x - mean)^2) / M  (biased: what normalises the batch),
//   xhat = (x - mean) / sqrt(var + eps),  z = gamma * xhat + beta [+ residual],  y = act(z).
// The running variance tracks the unbiased estimate var * M / (M - 1), as PyTorch does.
// Statistics and parameters are FP32 [C] (or FP64 with FP64 activations); all arithmetic here is double.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/reference/reference_backend.h"
#include "backend/reference/reference_common.h"

namespace dlbench {
namespace {

using reference::View4;

std::vector<int64_t> activation_dims(const BatchNormGeometry& g) { return {g.batch, g.channels, g.h, g.w}; }
std::vector<int64_t> channel_dims(const BatchNormGeometry& g) { return {g.channels}; }
int64_t values_per_channel(const BatchNormGeometry& g) { return g.batch * g.h * g.w; }
bool has_relu(const BatchNormGeometry& g) { return g.fusion != BatchNormFusion::none; }
bool has_residual(const BatchNormGeometry& g) { return g.fusion == BatchNormFusion::add_relu; }

void check_geometry(const BatchNormGeometry& g) {
  DLB_CHECK(g.batch > 0 && g.channels > 0 && g.h > 0 && g.w > 0,
            "batchnorm: sizes must be positive ({}x{}x{}x{})", g.batch, g.channels, g.h, g.w);
  DLB_CHECK(g.epsilon > 0, "batchnorm: epsilon must be positive, got {}", g.epsilon);
}

void check_activation(const char* op, const char* name, const BatchNormGeometry& g, const Tensor& t) {
  reference::check_tensor(op, name, t, activation_dims(g), g.dtype, g.layout);
}
void check_channels(const char* op, const char* name, const BatchNormGeometry& g, const Tensor& t) {
  // FP32 statistics; FP64 activations may also have FP64 ones (cuDNN's rule; double-precision networks).
  const bool f64_statistics = g.dtype == DType::f64 && t.dtype() == DType::f64;
  reference::check_tensor(op, name, t, channel_dims(g), f64_statistics ? DType::f64 : DType::f32);
}

void check_residual(const char* op, const char* name, const BatchNormGeometry& g, const Tensor* residual) {
  if (has_residual(g)) {
    DLB_CHECK(residual != nullptr, "{}: fusion add_relu needs {}", op, name);
    check_activation(op, name, g, *residual);
  } else {
    DLB_CHECK(residual == nullptr, "{}: {} is given but the fusion has no residual add", op, name);
  }
}

// y = act(gamma * xhat + beta [+ residual]) with xhat = (x - mean) * inv_std, per channel.
template <typename T>
void normalize(const BatchNormGeometry& g, const Tensor& xt, const Tensor* residual_t,
               const std::vector<double>& mean, const std::vector<double>& inv_std,
               const std::vector<double>& gamma, const std::vector<double>& beta, Tensor& yt) {
  const View4<T> x(xt), y(yt);
  const View4<T> residual(residual_t ? *residual_t : Tensor());  // used only when given
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t c = 0; c < g.channels; ++c)
      for (int64_t h = 0; h < g.h; ++h)
        for (int64_t w = 0; w < g.w; ++w) {
          const size_t ci = static_cast<size_t>(c);
          const double xhat = (double(x(n, c, h, w)) - mean[ci]) * inv_std[ci];
          double z = gamma[ci] * xhat + beta[ci];
          if (residual_t) z += double(residual(n, c, h, w));
          if (has_relu(g)) z = std::max(z, 0.0);
          y(n, c, h, w) = static_cast<T>(z);
        }
}

// The batch's mean and (biased) variance per channel from x: two passes (mean first, then squared
// deviations) rather than E[x^2] - E[x]^2, which cancels badly.
template <typename T>
void statistics_of(const BatchNormGeometry& g, const Tensor& xt, std::vector<double>& mean,
                   std::vector<double>& var) {
  const View4<T> x(xt);
  const double M = static_cast<double>(values_per_channel(g));
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t c = 0; c < g.channels; ++c)
      for (int64_t h = 0; h < g.h; ++h)
        for (int64_t w = 0; w < g.w; ++w) mean[static_cast<size_t>(c)] += double(x(n, c, h, w));
  for (double& m : mean) m /= M;
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t c = 0; c < g.channels; ++c)
      for (int64_t h = 0; h < g.h; ++h)
        for (int64_t w = 0; w < g.w; ++w) {
          const double d = double(x(n, c, h, w)) - mean[static_cast<size_t>(c)];
          var[static_cast<size_t>(c)] += d * d;
        }
  for (double& v : var) v /= M;
}

// The same from a convolution's sums ([2, C]: sum, then sum of squares): what conv_forward_with_statistics
// hands over instead of a pass over x. E[x^2] - E[x]^2 cancels where the mean is large against the spread;
// a convolution's output in a trained network is not such a case, and the result is clamped at 0.
void statistics_from_sums(const BatchNormGeometry& g, const Tensor& sums, std::vector<double>& mean,
                          std::vector<double>& var) {
  const std::vector<double> s = reference::read_channels(sums);
  const auto C = static_cast<size_t>(g.channels);
  const double M = static_cast<double>(values_per_channel(g));
  for (size_t c = 0; c < C; ++c) {
    mean[c] = s[c] / M;
    var[c] = std::max(s[C + c] / M - mean[c] * mean[c], 0.0);
  }
}

// `input_sums` null: the statistics from x.
template <typename T>
void forward_training(const BatchNormGeometry& g, const Tensor& xt, const Tensor* residual,
                      const Tensor& gamma_t, const Tensor& beta_t, Tensor& yt, Tensor& running_mean_t,
                      Tensor& running_var_t, Tensor& saved_mean_t, Tensor& saved_inv_std_t,
                      const Tensor* input_sums) {
  const auto C = static_cast<size_t>(g.channels);
  const double M = static_cast<double>(values_per_channel(g));
  std::vector<double> mean(C, 0.0), var(C, 0.0), inv_std(C);
  if (input_sums) {
    statistics_from_sums(g, *input_sums, mean, var);
  } else {
    statistics_of<T>(g, xt, mean, var);
  }
  for (size_t c = 0; c < C; ++c) inv_std[c] = 1.0 / std::sqrt(var[c] + g.epsilon);

  normalize<T>(g, xt, residual, mean, inv_std, reference::read_channels(gamma_t),
               reference::read_channels(beta_t), yt);

  std::vector<double> running_mean = reference::read_channels(running_mean_t);
  std::vector<double> running_var = reference::read_channels(running_var_t);
  for (size_t c = 0; c < C; ++c) {
    const double unbiased_var = var[c] * M / (M - 1);
    running_mean[c] = (1 - g.momentum) * running_mean[c] + g.momentum * mean[c];
    running_var[c] = (1 - g.momentum) * running_var[c] + g.momentum * unbiased_var;
  }
  reference::write_channels(running_mean_t, running_mean);
  reference::write_channels(running_var_t, running_var);
  reference::write_channels(saved_mean_t, mean);
  reference::write_channels(saved_inv_std_t, inv_std);
}

template <typename T>
void forward_inference(const BatchNormGeometry& g, const Tensor& x, const Tensor* residual,
                       const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                       const Tensor& running_var, Tensor& y) {
  std::vector<double> inv_std = reference::read_channels(running_var);
  for (double& v : inv_std) v = 1.0 / std::sqrt(v + g.epsilon);
  normalize<T>(g, x, residual, reference::read_channels(running_mean), inv_std,
               reference::read_channels(gamma), reference::read_channels(beta), y);
}

// With dz = dL/dz (dy through the ReLU mask), per channel:
//   dbeta = sum dz,  dgamma = sum dz * xhat,
//   dx = gamma * inv_std / M * (M * dz - dbeta - xhat * dgamma)   (the batch statistics depend on x too),
//   dresidual = dz.
template <typename T>
void backward(const BatchNormGeometry& g, const Tensor& xt, const Tensor& yt, const Tensor& dyt,
              const Tensor& gamma_t, const Tensor& saved_mean_t, const Tensor& saved_inv_std_t, Tensor& dxt,
              Tensor* dresidual_t, Tensor& dgamma_t, Tensor& dbeta_t, Accumulate accumulate) {
  const View4<T> x(xt), y(yt), dy(dyt), dx(dxt);
  const View4<T> dresidual(dresidual_t ? *dresidual_t : Tensor());  // used only when given
  const auto C = static_cast<size_t>(g.channels);
  const double M = static_cast<double>(values_per_channel(g));
  const std::vector<double> gamma = reference::read_channels(gamma_t);
  const std::vector<double> mean = reference::read_channels(saved_mean_t);
  const std::vector<double> inv_std = reference::read_channels(saved_inv_std_t);

  // The ReLU passes the gradient where it passed the value: y > 0 (its output is 0 elsewhere).
  auto dz = [&](int64_t n, int64_t c, int64_t h, int64_t w) {
    const bool blocked_by_relu = has_relu(g) && !(double(y(n, c, h, w)) > 0);
    return blocked_by_relu ? 0.0 : double(dy(n, c, h, w));
  };
  auto xhat = [&](int64_t n, int64_t c, int64_t h, int64_t w) {
    const size_t ci = static_cast<size_t>(c);
    return (double(x(n, c, h, w)) - mean[ci]) * inv_std[ci];
  };

  std::vector<double> dgamma(C, 0.0), dbeta(C, 0.0);
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t c = 0; c < g.channels; ++c)
      for (int64_t h = 0; h < g.h; ++h)
        for (int64_t w = 0; w < g.w; ++w) {
          dbeta[static_cast<size_t>(c)] += dz(n, c, h, w);
          dgamma[static_cast<size_t>(c)] += dz(n, c, h, w) * xhat(n, c, h, w);
        }

  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t c = 0; c < g.channels; ++c)
      for (int64_t h = 0; h < g.h; ++h)
        for (int64_t w = 0; w < g.w; ++w) {
          const size_t ci = static_cast<size_t>(c);
          const double d = dz(n, c, h, w);
          dx(n, c, h, w) = static_cast<T>(gamma[ci] * inv_std[ci] / M *
                                          (M * d - dbeta[ci] - xhat(n, c, h, w) * dgamma[ci]));
          if (dresidual_t) dresidual(n, c, h, w) = static_cast<T>(d);
        }

  reference::write_channels(dgamma_t, dgamma, accumulate);
  reference::write_channels(dbeta_t, dbeta, accumulate);
}

}  // namespace

std::unique_ptr<BatchNormPlan> ReferenceBackend::plan_batchnorm(const BatchNormGeometry& geometry) {
  check_geometry(geometry);
  return std::make_unique<BatchNormPlan>(geometry);
}

void ReferenceBackend::batchnorm_forward_training(const BatchNormPlan& plan, const BatchNormTensors& bn,
                                                  const Tensor* residual, Tensor& y, void*) {
  const BatchNormGeometry& g = plan.geometry;
  const char* op = "batchnorm_forward_training";
  check_geometry(g);
  check_batchnorm_tensors(op, bn, BatchNormPass::training);
  const Tensor& x = *bn.x;
  // The unbiased variance divides by M - 1 (PyTorch refuses a single value per channel too).
  DLB_CHECK(values_per_channel(g) > 1, "{}: training needs more than one value per channel, x is {}", op,
            x.describe());
  check_activation(op, "x", g, x);
  check_residual(op, "residual", g, residual);
  check_activation(op, "y", g, y);
  check_channels(op, "gamma", g, *bn.gamma);
  check_channels(op, "beta", g, *bn.beta);
  check_channels(op, "running_mean", g, *bn.running_mean);
  check_channels(op, "running_var", g, *bn.running_var);
  check_channels(op, "saved_mean", g, *bn.saved_mean);
  check_channels(op, "saved_inv_std", g, *bn.saved_inv_std);
  if (const Tensor* sums = bn.input_sums) {
    DLB_CHECK(sums->numel() == 2 * g.channels && (sums->dtype() == DType::f32 || sums->dtype() == DType::f64),
              "{}: input_sums must hold 2 x {} FP32 or FP64 values, got {}", op, g.channels,
              sums->describe());
    reference::check_host(op, "input_sums", *sums);
  }
  reference::dispatch_float(g.dtype, op, [&](auto tag) {
    forward_training<decltype(tag)>(g, x, residual, *bn.gamma, *bn.beta, y, *bn.running_mean, *bn.running_var,
                                    *bn.saved_mean, *bn.saved_inv_std, bn.input_sums);
  });
}

void ReferenceBackend::batchnorm_forward_inference(const BatchNormPlan& plan, const BatchNormTensors& bn,
                                                   const Tensor* residual, Tensor& y) {
  const BatchNormGeometry& g = plan.geometry;
  const char* op = "batchnorm_forward_inference";
  check_geometry(g);
  check_batchnorm_tensors(op, bn, BatchNormPass::inference);
  check_activation(op, "x", g, *bn.x);
  check_residual(op, "residual", g, residual);
  check_activation(op, "y", g, y);
  check_channels(op, "gamma", g, *bn.gamma);
  check_channels(op, "beta", g, *bn.beta);
  check_channels(op, "running_mean", g, *bn.running_mean);
  check_channels(op, "running_var", g, *bn.running_var);
  reference::dispatch_float(g.dtype, op, [&](auto tag) {
    forward_inference<decltype(tag)>(g, *bn.x, residual, *bn.gamma, *bn.beta, *bn.running_mean,
                                     *bn.running_var, y);
  });
}

void ReferenceBackend::batchnorm_backward(const BatchNormPlan& plan, const BatchNormTensors& bn,
                                          const Tensor& y, const Tensor& dy, Tensor* dresidual,
                                          Accumulate accumulate, void*) {
  const BatchNormGeometry& g = plan.geometry;
  const char* op = "batchnorm_backward";
  check_geometry(g);
  check_batchnorm_tensors(op, bn, BatchNormPass::backward);
  check_activation(op, "x", g, *bn.x);
  check_activation(op, "y", g, y);
  check_activation(op, "dy", g, dy);
  check_activation(op, "dx", g, *bn.dx);
  check_residual(op, "dresidual", g, dresidual);
  check_channels(op, "gamma", g, *bn.gamma);
  check_channels(op, "saved_mean", g, *bn.saved_mean);
  check_channels(op, "saved_inv_std", g, *bn.saved_inv_std);
  check_channels(op, "dgamma", g, *bn.dgamma);
  check_channels(op, "dbeta", g, *bn.dbeta);
  reference::dispatch_float(g.dtype, op, [&](auto tag) {
    backward<decltype(tag)>(g, *bn.x, y, dy, *bn.gamma, *bn.saved_mean, *bn.saved_inv_std, *bn.dx, dresidual,
                            *bn.dgamma, *bn.dbeta, accumulate);
  });
}

}  // namespace dlbench
