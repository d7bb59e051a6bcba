#include "backend/cuda_options.h"

#include <fmt/format.h>

namespace dlbench {

const char* kernel_choice_name(KernelChoice choice) {
  switch (choice) {
    case KernelChoice::automatic:
      return "auto";
    case KernelChoice::off:
      return "off";
    case KernelChoice::force:
      return "force";
  }
  return "?";
}

std::optional<KernelChoice> parse_kernel_choice(std::string_view text) {
  for (KernelChoice c : {KernelChoice::automatic, KernelChoice::off, KernelChoice::force})
    if (text == kernel_choice_name(c)) return c;
  return std::nullopt;
}

const char* fp8_fast_accumulation_name(Fp8FastAccumulation f) {
  switch (f) {
    case Fp8FastAccumulation::off:
      return "off";
    case Fp8FastAccumulation::forward:
      return "forward";
    case Fp8FastAccumulation::all:
      return "all";
  }
  return "?";
}

const char* on_off(bool value) { return value ? "on" : "off"; }

nlohmann::json cuda_options_to_json(const CudaOptions& o) {
  return {{"allow_tf32", o.allow_tf32},
          {"conv_workspace_mb", static_cast<double>(o.conv_workspace_limit) / (1 << 20)},
          {"conv_graph", kernel_choice_name(o.conv_graph)},
          {"conv_gemm", kernel_choice_name(o.conv_gemm)},
          {"conv_space_to_depth", kernel_choice_name(o.conv_space_to_depth)},
          {"conv_statistics", kernel_choice_name(o.conv_statistics)},
          {"bn_fold_shortcut", on_off(o.fold_shortcut_batchnorm)},
          {"stem_pool_fusion", on_off(o.stem_pool_fusion)},
          {"dense_epilogues", on_off(o.dense_epilogues)},
          {"fp8_fast_accumulation", fp8_fast_accumulation_name(o.fp8_fast_accumulation)},
          {"training_stream_priority",
           o.training_stream == TrainingStreamPriority::greatest ? "greatest" : "normal"}};
}

std::string describe_cuda_options(const CudaOptions& o) {
  return fmt::format(
      "conv-graph {} | conv-gemm {} | conv-space-to-depth {} | conv-statistics {} | bn-fold-shortcut {} | "
      "stem-pool-fusion {} | conv workspace {} MiB{}",
      kernel_choice_name(o.conv_graph), kernel_choice_name(o.conv_gemm),
      kernel_choice_name(o.conv_space_to_depth), kernel_choice_name(o.conv_statistics),
      on_off(o.fold_shortcut_batchnorm), on_off(o.stem_pool_fusion), o.conv_workspace_limit >> 20,
      o.training_stream == TrainingStreamPriority::greatest ? " | training stream above the sums'" : "");
}

}  // namespace dlbench
