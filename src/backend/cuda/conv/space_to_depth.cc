// The input as 2x2 blocks (space-to-depth; --conv-space-to-depth auto, the default; off; force): a stride-2
// convolution over C channels is a stride-1 convolution over the 2x2 blocks of its input seen as 4C
// channels (padded to a vector), with a kernel of ceil((k + pad % 2) / 2) blocks (backend/conv_blocks.h
// derives it): the stem's 7x7 over 3 channels becomes a 4x4 over 16 (FP16) or 12 (TF32) on 115x115 blocks,
// 1.7x the multiply-adds on tensor-core-sized channels. The filter is converted the same way each call (K
// images of 7x7 pixels) and the gradients go back by the transpose (space_to_depth.cu).
//
// plan_conv plans the block form of a shape's input, where it is allowed, besides the input as it is, and
// keeps the faster for the forward and filter gradient a layer runs each step, counting the conversions of
// the input (timed); the block form must win by 3%. Such a plan converts x and w into the workspace before
// each call and takes the gradients back after it. "force" always converts where it can (tests).
#include <algorithm>
#include <cmath>

#include "backend/conv_blocks.h"
#include "backend/cuda/conv/conv_plan.h"
#include "backend/cuda/kernels.h"
#include "core/log.h"

namespace dlbench::cuda::conv {

namespace {

// Elements of a tensor-core vector along NHWC channels: 8 for FP16/BF16, 4 for FP32 (TF32).
int64_t channel_vector(const ConvGeometry& g) { return g.dtype == DType::f32 ? 4 : 8; }

// The 2x2-block form of `g` (backend/conv_blocks.h), for an NHWC convolution whose channels do not fill a
// tensor-core vector (the stem).
std::optional<InputForm> blocks_form(const ConvGeometry& g) {
  if (g.layout != Layout::nhwc || g.dtype == DType::f64 || g.in_channels >= channel_vector(g))
    return std::nullopt;
  const std::optional<ConvBlocks> b = conv_blocks(g, channel_vector(g));
  if (!b) return std::nullopt;
  InputForm f;
  f.kind = InputForm::blocks;
  f.inner = b->inner;
  f.x_off_h = b->x_off_h, f.x_off_w = b->x_off_w, f.w_off_h = b->w_off_h, f.w_off_w = b->w_off_w;
  return f;
}

}  // namespace

// Every form besides `g` as it is that the options allow.
std::vector<InputForm> input_forms(const ConvGeometry& g, const CudaOptions& o) {
  std::vector<InputForm> forms;
  if (o.conv_space_to_depth != KernelChoice::off) {
    if (std::optional<InputForm> f = blocks_form(g)) forms.push_back(*f);
  }
  return forms;
}

// x of `g` into `dst` in form `f` (the inner convolution's input).
void to_inner_input(const ConvGeometry& g, const InputForm& f, const void* x, void* dst,
                    cudaStream_t stream) {
  const ConvGeometry& in = f.inner;
  space_to_depth2(x, g.batch, g.in_h, g.in_w, g.in_channels, f.x_off_h, f.x_off_w, dst, in.in_h, in.in_w,
                  in.in_channels, g.dtype, stream);
}

// w of `g` into `dst` in form `f`: [K, R, S, C] is an NHWC tensor of K images.
void to_inner_filter(const ConvGeometry& g, const InputForm& f, const void* w, void* dst,
                     cudaStream_t stream) {
  const ConvGeometry& in = f.inner;
  space_to_depth2(w, g.out_channels, g.kernel_h, g.kernel_w, g.in_channels, f.w_off_h, f.w_off_w, dst,
                  in.kernel_h, in.kernel_w, in.in_channels, g.dtype, stream);
}

// The inner convolution's input gradient `src` into dx of `g` (adding with `accumulate`).
void from_inner_input_grad(const ConvGeometry& g, const InputForm& f, const void* src, void* dx,
                           bool accumulate, cudaStream_t stream) {
  const ConvGeometry& in = f.inner;
  depth_to_space2(src, in.in_h, in.in_w, in.in_channels, g.batch, g.in_h, g.in_w, g.in_channels, f.x_off_h,
                  f.x_off_w, dx, g.dtype, accumulate, stream);
}

// The inner convolution's filter gradient `src` into dw of `g` (adding with `accumulate`).
void from_inner_filter_grad(const ConvGeometry& g, const InputForm& f, const void* src, void* dw,
                            bool accumulate, cudaStream_t stream) {
  const ConvGeometry& in = f.inner;
  depth_to_space2(src, in.kernel_h, in.kernel_w, in.in_channels, g.out_channels, g.kernel_h, g.kernel_w,
                  g.in_channels, f.w_off_h, f.w_off_w, dw, g.dtype, accumulate, stream);
}

namespace {

// Milliseconds one conversion of the input of `g` to form `f` takes (best of three, on scratch).
double time_input_conversion(const CudaBackend& backend, const ConvGeometry& g, const InputForm& f) {
  const size_t src_bytes =
      static_cast<size_t>(g.batch * g.in_h * g.in_w * g.in_channels) * dtype_size(g.dtype);
  const ConvGeometry& in = f.inner;
  DeviceBuffer src(src_bytes),
      dst(static_cast<size_t>(in.batch * in.in_h * in.in_w * in.in_channels) * dtype_size(g.dtype));
  CUDA_CHECK(cudaMemsetAsync(src.get(), 0, src_bytes, backend.stream()));
  const tuning::EventPair events;
  float best = INFINITY;
  for (int round = 0; round < 4; ++round) {  // the first is a warm-up
    CUDA_CHECK(cudaEventRecord(events.start, backend.stream()));
    to_inner_input(g, f, src.get(), dst.get(), backend.stream());
    CUDA_CHECK(cudaEventRecord(events.stop, backend.stream()));
    const float ms = events.elapsed_ms();
    if (round > 0) best = std::min(best, ms);
  }
  return best;
}

}  // namespace

InnerBuffers inner_buffers(const CudaConvPlan& p, void* workspace, const char* op) {
  DLB_CHECK(workspace != nullptr, "{}: the plan needs a workspace of {} bytes", op, p.workspace_bytes());
  auto* base = static_cast<std::byte*>(workspace);
  return {base, base + p.inner_x_bytes(), base + p.inner_x_bytes() + p.inner_w_bytes()};
}

namespace {

// The fastest of `g` as it is and `g` in each of `forms`, for what a layer runs every step: the forward and
// the filter gradient (a first layer's input needs no gradient), with the conversions of the input (timed;
// the filter's are negligible). Another form must beat `g` as it is by 3% to be worth its workspace;
// `force` takes the fastest other form whatever the times.
InputForm choose_input_form(CudaBackend& backend, const ConvGeometry& g, const CudaConvPlan& plain,
                            const std::vector<InputForm>& forms, bool force) {
  auto step_ms = [](const CudaConvPlan& p) {
    return static_cast<double>(p.choice.forward.run_ms()) +
           static_cast<double>(p.choice.backward_filter.run_ms());
  };
  InputForm best;
  double best_ms = force ? INFINITY : 0.97 * step_ms(plain);
  for (const InputForm& f : forms) {
    const std::unique_ptr<CudaConvPlan> inner = searched_plan(backend, f.inner);
    const double ms = step_ms(*inner) + 2 * time_input_conversion(backend, g, f);
    log_debug("conv {}x{}x{}x{} -> {} {}x{}: {} form {} channels {:.3f} ms (as it is {:.3f})", g.batch,
              g.in_channels, g.in_h, g.in_w, g.out_channels, g.kernel_h, g.kernel_w, "2x2-block",
              f.inner.in_channels, ms, step_ms(plain));
    if (ms < best_ms) {
      best_ms = ms;
      best = f;
    }
  }
  return best;
}

}  // namespace

// The form `plan`'s input runs in (InputForm): decided once per shape and mode, from the cache ({"kind",
// "in_channels"}: the inner input's) or choose_input_form; another form than the input as it is puts its
// plan in plan.inner.
void take_input_form(CudaBackend& backend, const ConvGeometry& g, CudaConvPlan& plan) {
  const std::vector<InputForm> forms = input_forms(g, backend.options());
  if (forms.empty()) return;
  const KernelChoice blocks = backend.options().conv_space_to_depth;
  tuning::AlgorithmCache& cache = backend.algorithms();
  const std::string key =
      stored_choice_key(g, backend) + fmt::format(" input:{}", kernel_choice_name(blocks));
  auto from_json = [](const nlohmann::json& j) -> std::optional<std::pair<int64_t, int64_t>> {
    try {
      return std::pair{j.at("kind").get<int64_t>(), j.at("in_channels").get<int64_t>()};
    } catch (const nlohmann::json::exception&) {
      return std::nullopt;
    }
  };
  std::optional<std::pair<int64_t, int64_t>> chosen;  // (kind, inner channels)
  if (const std::optional<nlohmann::json> entry = cache.find(key)) {
    chosen = from_json(*entry);
    if (!chosen) cache.forget(key, "is not an input form");
  }
  if (!chosen) {
    // "force" takes the fastest other form whatever the times.
    const InputForm f = choose_input_form(backend, g, plan, forms, blocks == KernelChoice::force);
    const std::pair<int64_t, int64_t> searched{
        f.kind, f.kind == InputForm::as_is ? g.in_channels : f.inner.in_channels};
    chosen = from_json(cache.put(key, {{"kind", searched.first}, {"in_channels", searched.second}}))
                 .value_or(searched);
  }
  for (const InputForm& f : forms) {
    if (f.kind == chosen->first && f.inner.in_channels == chosen->second) {
      plan.inner = searched_plan(backend, f.inner);
      plan.form = f;
    }
  }
}

}  // namespace dlbench::cuda::conv
