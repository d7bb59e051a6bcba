// What the CUDA backend runs where it has a choice: typed options built from the command line (apps/
// dlbench.cc), handed to make_backend, printed in a run's header and recorded in its result's `config`.
// This header needs no CUDA headers: the CPU build and the run layer see it too.
//
// Each choice stays selectable because a measurement keeps it worth an A/B comparison; docs/PERFORMANCE.md
// says by how much each default won. The defaults are what a run gets without flags.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace dlbench {

// The most workspace one GPU convolution direction may take unless told otherwise (--conv-workspace-mb).
inline constexpr size_t kDefaultConvWorkspaceLimit = size_t{1} << 30;

// Whether a kernel path is a candidate: `automatic` where the plan's timed search finds it faster, `off`
// never, `force` wherever the shape allows whatever the times (tests and measurements).
enum class KernelChoice { automatic, off, force };

// The stream training runs on against the gradient sums': alike (normal), or at the device's greatest
// priority, so that the sums take SMs only where training leaves some (--comm-priority low).
enum class TrainingStreamPriority { normal, greatest };

// Which FP8 GEMMs (--precision fp8) take cuBLASLt's fast accumulation (CUBLASLT_MATMUL_DESC_FAST_ACCUM:
// partial sums not promoted to FP32 at intervals, faster and less exact): none, the forward's (Transformer
// Engine's recipe), or every one.
enum class Fp8FastAccumulation { off, forward, all };
const char* fp8_fast_accumulation_name(Fp8FastAccumulation f);  // "off", "forward", "all"

struct CudaOptions {
  // FP32 convolutions and GEMMs may use TF32 tensor cores (--precision tf32).
  bool allow_tf32 = false;
  // The dense layers multiply in FP8 (--precision fp8): the GPU must have FP8 tensor cores.
  bool fp8_gemms = false;
  // The largest workspace one convolution direction may take; the fastest candidate within it wins.
  size_t conv_workspace_limit = kDefaultConvWorkspaceLimit;
  // --conv-graph: cuDNN's graph-API engines beside its legacy algorithms.
  KernelChoice conv_graph = KernelChoice::automatic;
  // --conv-gemm: NHWC 1x1 convolutions as cuBLAS GEMMs.
  KernelChoice conv_gemm = KernelChoice::automatic;
  // --conv-space-to-depth: stride-2 convolutions on few channels (the stem) over 2x2 blocks of the input.
  KernelChoice conv_space_to_depth = KernelChoice::automatic;
  // --conv-statistics: batch norms' statistics summed by the convolutions before them.
  KernelChoice conv_statistics = KernelChoice::automatic;
  // --bn-fold-shortcut: a projection shortcut's batch norm folded into its block's closing one.
  bool fold_shortcut_batchnorm = true;
  // --stem-pool-fusion: the stem's batch norm + ReLU and max pool as one op.
  bool stem_pool_fusion = true;
  // --dense-epilogues: dense layers' biases, GELU (and its gradient) and residual adds applied by their
  // cuBLASLt GEMMs (epilogues), and the transformer's MLP fused (Fusion::dense_gelu_dense).
  bool dense_epilogues = true;
  // --fp8-fast-accumulation (Fp8FastAccumulation). The forward's by default: gpt2-large 1.117x bf16
  // against 1.087x with none, and gpt2's loss on real text as bf16's (bench/results/gpt2-fp8).
  Fp8FastAccumulation fp8_fast_accumulation = Fp8FastAccumulation::forward;
  TrainingStreamPriority training_stream = TrainingStreamPriority::normal;

  bool operator==(const CudaOptions&) const = default;
};

const char* kernel_choice_name(KernelChoice choice);  // "auto", "off", "force"
std::optional<KernelChoice> parse_kernel_choice(std::string_view text);
const char* on_off(bool value);  // "on", "off"

// {"conv_graph": "auto", ..., "conv_workspace_mb": 1024, ...}: the options as a result records them.
nlohmann::json cuda_options_to_json(const CudaOptions& options);
// "conv-graph auto | conv-gemm auto | ...": one header line's worth.
std::string describe_cuda_options(const CudaOptions& options);

}  // namespace dlbench
