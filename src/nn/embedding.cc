#include "nn/embedding.h"

#include "core/status.h"
#include "nn/memory_plan.h"
#include "nn/network.h"

namespace dlbench {

EmbeddingLayer::EmbeddingLayer(Network& net, std::string name, Activation& tokens,
                               const EmbeddingOptions& options)
    : Layer(net, std::move(name)),
      batch_(tokens.value.rank() == 2 ? tokens.value.dim(0) : 0),
      seq_len_(tokens.value.rank() == 2 ? tokens.value.dim(1) : 0),
      channels_(options.channels),
      init_std_(options.init_std),
      prefix_(options.parameter_prefix) {
  DLB_CHECK(tokens.value.rank() == 2 && tokens.value.dtype() == DType::i32 && !tokens.needs_grad,
            "{}: tokens must be an i32 input [B, T]", name_);
  DLB_CHECK(options.padded_vocab > 0 && options.channels > 0, "{}: empty table", name_);
  DLB_CHECK(seq_len_ <= options.context, "{}: sequences of {} tokens, but {} positions", name_, seq_len_,
            options.context);
  set_inputs({&tokens});
  output_ = &net.new_activation(name_ + ".out", {batch_ * seq_len_, channels_});
  const Device device = net.backend().device();
  wte_ = Tensor(nullptr, {options.padded_vocab, channels_}, net.dtype(), Layout::nchw, device);
  dwte_ = Tensor(nullptr, {options.padded_vocab, channels_}, net.dtype(), Layout::nchw, device);
  wpe_ = Tensor(nullptr, {options.context, channels_}, net.dtype(), Layout::nchw, device);
  dwpe_ = Tensor(nullptr, {options.context, channels_}, net.dtype(), Layout::nchw, device);
}

void EmbeddingLayer::plan(MemoryPlan& plan) {
  plan.add_parameter(prefix_ + ".wte.weight", wte_, dwte_, ParamInit::normal, 1, false, ParamUse::compute,
                     init_std_);
  plan.add_parameter(prefix_ + ".wpe.weight", wpe_, dwpe_, ParamInit::normal, 1, false, ParamUse::compute,
                     init_std_);
}

void EmbeddingLayer::forward(Phase) {
  Tensor out = output_->value.reshaped({batch_, seq_len_, channels_});
  net_.backend().embedding_forward(inputs_[0]->value, wte_, wpe_, out);
}

void EmbeddingLayer::backward() {
  Backend& backend = net_.backend();
  const Tensor dout = output_->grad.reshaped({batch_, seq_len_, channels_});
  Accumulate mode = net_.parameter_grad_mode();
  if (tied_) {
    // The head has written dwte already. The op takes one mode for both tables, so where the step
    // overwrites, dwpe is zeroed here and both tables are added into.
    if (mode == Accumulate::overwrite) backend.fill(dwpe_, 0.0);
    mode = Accumulate::add;
  }
  backend.embedding_backward(inputs_[0]->value, dout, dwte_, dwpe_, mode);
}

}  // namespace dlbench
