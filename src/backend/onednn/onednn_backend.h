// The oneDNN CPU backend: convolutions, batch norm and pooling on oneDNN primitives planned once per shape,
// GEMM on dnnl_sgemm, everything else in OpenMP loops. FP32 only; NCHW and NHWC activations.
// The transformer ops (GPT-2): layer norm and GELU on oneDNN primitives made at a shape's first call and
// kept; causal attention on dnnl_sgemm over blocks of queries; embedding, the padded cross-entropy, the
// sum of squares and AdamW in OpenMP loops. Their overrides are declared with the class (onednn_common.h);
// another dtype is a UserError.
//
// make_onednn_backend(threads) (declared in backend/backend.h) is the normal way in; this header adds what
// the kernel timing program and the tests need to look inside a plan.
//
// Threads: the factory calls omp_set_num_threads(threads) (0 = all cores) on the constructing thread, which
// oneDNN's primitives follow; the backend's own loops ask for `threads` explicitly. Call the backend from
// the thread that made it, or set the OpenMP thread count on the calling thread too.
// Workspaces: conv and batch-norm plans report workspace_bytes() (oneDNN's scratchpad in user mode, reorder
// buffers, per-thread partial sums); the caller's workspace may be shared by all layers, since each op uses
// it only while it runs. Max pooling saves one byte per output (NCHW) or oneDNN's workspace (NHWC).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"

namespace dlbench {

// How a convolution op feeds oneDNN. `plain`: our NCHW/NHWC tensors as they are. `blocked`: oneDNN picks
// its blocked formats for activations and weights (format_tag::any) and the plan reorders in and out.
// `blocked_weights`: activations plain, weights in oneDNN's chosen format.
enum class OneDnnConvFormat : uint8_t { plain, blocked, blocked_weights };

struct OneDnnConvStrategy {
  OneDnnConvFormat forward = OneDnnConvFormat::plain;
  OneDnnConvFormat backward_data = OneDnnConvFormat::plain;
  OneDnnConvFormat backward_weights = OneDnnConvFormat::plain;
};

// The strategy plan_conv uses for a geometry (the measured choice; see onednn_conv.cc).
OneDnnConvStrategy default_onednn_conv_strategy(const ConvGeometry& geometry);

// Plans a convolution with a forced strategy; `backend` must be a onednn backend.
std::unique_ptr<ConvPlan> plan_onednn_conv(Backend& backend, const ConvGeometry& geometry,
                                           const OneDnnConvStrategy& strategy);

// "fwd: jit:avx2 (blocked) | bwd_data: ... | bwd_weights: ...": the implementations oneDNN chose.
std::string describe_onednn_conv_plan(const ConvPlan& plan);

const char* onednn_conv_format_name(OneDnnConvFormat format);

}  // namespace dlbench
