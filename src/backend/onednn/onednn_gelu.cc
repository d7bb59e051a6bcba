// GELU in its tanh form (GPT-2's) on oneDNN's eltwise primitive, algorithm eltwise_gelu_tanh: the same
// formula as the reference, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), in JIT code for the CPU's
// vector width. The backward takes the forward's input (gelu_tanh's backward is defined on src). f32,
// any shape: the tensor is seen as one flat run.
#include <string>

#include "backend/onednn/onednn_common.h"

namespace dlbench {
namespace onednn {
namespace {

void check_gelu(const char* op, const Tensor& x, const Tensor& other, const char* name) {
  require_f32(x, op, "x");
  require_f32(other, op, name);
  DLB_CHECK(other.numel() == x.numel(), "{}: {} is {} but x is {}", op, name, other.describe(), x.describe());
}

dnnl::eltwise_forward::primitive_desc forward_pd(const dnnl::engine& engine, const dnnl::memory::desc& flat) {
  return {{dnnl::prop_kind::forward_training, dnnl::algorithm::eltwise_gelu_tanh, flat, 0.f, 0.f}, engine};
}

}  // namespace

void OneDnnBackend::gelu_forward(const Tensor& x, Tensor& y) {
  check_gelu("gelu_forward", x, y, "y");
  if (x.numel() == 0) return;
  const dnnl::memory::desc flat = f32_desc({x.numel()}, tag::a);
  const auto& primitive = cached_primitive(fmt::format("gelu_fwd {}", x.numel()), [&] {
    return dnnl::primitive(dnnl::eltwise_forward(forward_pd(engine_, flat)));
  });
  DNNL_CHECK(primitive.execute(stream_, {{DNNL_ARG_SRC, wrap(flat, engine_, x.data())},
                                         {DNNL_ARG_DST, wrap(flat, engine_, y.data())}}),
             "executing gelu forward on {}", x.describe());
  stream_.wait();
}

void OneDnnBackend::gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  check_gelu("gelu_backward", x, dy, "dy");
  check_gelu("gelu_backward", x, dx, "dx");
  if (x.numel() == 0) return;
  const dnnl::memory::desc flat = f32_desc({x.numel()}, tag::a);
  const auto& primitive = cached_primitive(fmt::format("gelu_bwd {}", x.numel()), [&] {
    const dnnl::eltwise_backward::desc desc(dnnl::algorithm::eltwise_gelu_tanh, flat, flat, 0.f, 0.f);
    return dnnl::primitive(dnnl::eltwise_backward(
        dnnl::eltwise_backward::primitive_desc(desc, engine_, forward_pd(engine_, flat))));
  });
  DNNL_CHECK(primitive.execute(stream_, {{DNNL_ARG_SRC, wrap(flat, engine_, x.data())},
                                         {DNNL_ARG_DIFF_DST, wrap(flat, engine_, dy.data())},
                                         {DNNL_ARG_DIFF_SRC, wrap(flat, engine_, dx.data())}}),
             "executing gelu backward on {}", x.describe());
  stream_.wait();
}

}  // namespace onednn
}  // namespace dlbench
