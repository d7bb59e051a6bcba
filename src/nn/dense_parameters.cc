#include "nn/dense_parameters.h"

#include "nn/fp8_scaling.h"
#include "nn/memory_plan.h"
#include "nn/network.h"

namespace dlbench {

DenseParameters::DenseParameters(Network& net, int64_t in, int64_t out, double std)
    : in_features(in), out_features(out), normal_std(std), fp8_scaling_(net.fp8()) {
  const Device device = net.backend().device();
  weight = Tensor(nullptr, {out, in}, net.dtype(), Layout::nchw, device);
  dweight = Tensor(nullptr, {out, in}, net.dtype(), Layout::nchw, device);
  bias = Tensor(nullptr, {out}, net.dtype(), Layout::nchw, device);
  dbias = Tensor(nullptr, {out}, net.dtype(), Layout::nchw, device);
}

void DenseParameters::declare(MemoryPlan& plan, const std::string& name) {
  if (fp8_scaling_ && fp8_first_ < 0) fp8_first_ = fp8_scaling_->add_dense(name);
  if (normal_std > 0) {
    plan.add_parameter(name + ".weight", weight, dweight, ParamInit::normal, in_features, false,
                       ParamUse::compute, normal_std);
    plan.add_parameter(name + ".bias", bias, dbias, ParamInit::zeros, in_features, true, ParamUse::compute);
    return;
  }
  plan.add_parameter(name + ".weight", weight, dweight, ParamInit::uniform_fan_in, in_features, false,
                     ParamUse::compute);
  plan.add_parameter(name + ".bias", bias, dbias, ParamInit::uniform_fan_in, in_features, true,
                     ParamUse::compute);
}

}  // namespace dlbench

namespace dlbench {

std::optional<Fp8DenseScaling> DenseParameters::fp8(bool training) const {
  if (!fp8_scaling_) return std::nullopt;
  Fp8DenseScaling scaling = fp8_scaling_->dense(fp8_first_, training);
  if (training && input_codes_t_.numel() > 0) {
    scaling.input_codes_transposed = static_cast<uint8_t*>(input_codes_t_.data());
    scaling.weight_codes_transposed = static_cast<uint8_t*>(weight_codes_t_.data());
  }
  return scaling;
}

void DenseParameters::keep_codes(Network& net, int64_t rows) {
  // cuBLASLt's FP8 GEMMs take dimensions in multiples of 16: the backward then runs them on the kept codes
  // (and where the backend reads those in place of x, the layer keeps no x for it: backward_needs_no_input).
  if (!fp8_scaling_ || !net.backend().runs_fp8_gemms() || net.options().recompute || rows % 16 != 0 ||
      in_features % 16 != 0 || out_features % 16 != 0)
    return;
  auto codes = [&](int64_t count) {  // one byte a code, in i32 words
    return Tensor(nullptr, {(count + 3) / 4}, DType::i32, Layout::nchw, net.backend().device());
  };
  input_codes_t_ = codes(rows * in_features);
  codes_replace_x_ = net.backend().reads_kept_codes_for_x();
  weight_codes_t_ = codes(out_features * in_features);
}

std::vector<SavedValue> DenseParameters::kept_codes(const std::string& layer_name) {
  if (input_codes_t_.numel() == 0) return {};
  return {{layer_name + ".input_codes_t", &input_codes_t_},
          {layer_name + ".weight_codes_t", &weight_codes_t_}};
}

}  // namespace dlbench
