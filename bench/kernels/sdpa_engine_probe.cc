// Which of cuDNN's engine configurations for the fused causal attention (backend/cuda/sdpa_graph.h) is
// fastest at GPT-2's shapes? The backend runs the first configuration of cuDNN's heuristics that builds a
// plan; this probe builds every one, in the heuristics' order, for the forward and the backward graph,
// and times each between CUDA events (the median of --reps launches after 3 warm-ups). Each
// configuration's outputs are compared with the first's (the largest absolute difference), so that a
// faster one is known to compute the same attention.
//
// With --knob-space it also builds every configuration of the heuristics' engines that their knobs'
// ranges allow (cuda::attention_engine_space), not only the few the heuristics list, and times each the
// same way; their lines say "space" in the config column's place.
//
// FLOPs: the causal forward is half of Q K^T and P V, 2 B T^2 C; the backward 2.5 times that (its five
// products, two of them recomputing the forward's).
//
//   sdpa_engine_probe [--model gpt2|gpt2-medium|gpt2-large|gpt2-xl] [--batch B] [--reps N] [--configs N]
//                     [--knob-space [LIMIT]]
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/kernel_check.h"
#include "backend/cuda/sdpa_graph.h"
#include "event_timing.h"

using namespace dlbench;
using dlbench::cuda::AttentionPass;
using dlbench::cuda::AttentionPlan;
using dlbench::cuda::AttentionShape;
using dlbench::cuda::DeviceBuffer;

namespace {

void upload_random_bf16(const DeviceBuffer& b, uint64_t seed) {
  std::vector<__nv_bfloat16> host(b.bytes() / sizeof(__nv_bfloat16));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (auto& x : host) x = __float2bfloat16(dist(rng));
  DLB_KERNEL_CHECK(cudaMemcpy(b.get(), host.data(), b.bytes(), cudaMemcpyHostToDevice));
}

std::vector<float> download_bf16(const DeviceBuffer& b) {
  std::vector<__nv_bfloat16> host(b.bytes() / sizeof(__nv_bfloat16));
  DLB_KERNEL_CHECK(cudaMemcpy(host.data(), b.get(), b.bytes(), cudaMemcpyDeviceToHost));
  std::vector<float> v(host.size());
  for (size_t i = 0; i < host.size(); ++i) v[i] = __bfloat162float(host[i]);
  return v;
}

double largest_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
  return d;
}

struct Model {
  const char* name;
  int64_t channels, heads;
};
const Model kModels[] = {
    {"gpt2", 768, 12}, {"gpt2-medium", 1024, 16}, {"gpt2-large", 1280, 20}, {"gpt2-xl", 1600, 25}};

}  // namespace

int main(int argc, char** argv) {
  kernel_bench::program = "sdpa_engine_probe";
  std::string model = "gpt2-large";
  int64_t batch = 16;
  int reps = 20, configs = 16;
  size_t knob_space_limit = 0;  // 0: the heuristics' configurations only
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model" && i + 1 < argc) {
      model = argv[++i];
    } else if (a == "--batch" && i + 1 < argc) {
      batch = std::max<int64_t>(1, std::atoll(argv[++i]));
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--configs" && i + 1 < argc) {
      configs = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--knob-space") {
      knob_space_limit = 512;
      if (i + 1 < argc && argv[i + 1][0] != '-') knob_space_limit = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr,
                   "usage: %s [--model gpt2|gpt2-medium|gpt2-large|gpt2-xl] [--batch B] [--reps N] "
                   "[--configs N] [--knob-space [LIMIT]]\n",
                   argv[0]);
      return 2;
    }
  }
  const Model* m = nullptr;
  for (const Model& candidate : kModels)
    if (model == candidate.name) m = &candidate;
  if (!m) {
    std::fprintf(stderr, "sdpa_engine_probe: unknown model '%s'\n", model.c_str());
    return 2;
  }
  try {
    AttentionShape s;
    s.batch = batch, s.time = 1024, s.channels = m->channels, s.heads = m->heads, s.dtype = DType::bf16;
    const size_t elements = static_cast<size_t>(s.batch * s.time * s.channels);
    DeviceBuffer qkv(3 * elements * 2), out(elements * 2), dout(elements * 2), dqkv(3 * elements * 2),
        stats(static_cast<size_t>(s.batch * s.heads * s.time) * sizeof(float));
    upload_random_bf16(qkv, 1);
    upload_random_bf16(dout, 2);
    cudaStream_t stream = nullptr;
    DLB_KERNEL_CHECK(cudaStreamCreate(&stream));
    cudnnHandle_t handle = nullptr;
    if (cudnnCreate(&handle) != CUDNN_STATUS_SUCCESS ||
        cudnnSetStream(handle, stream) != CUDNN_STATUS_SUCCESS) {
      std::fprintf(stderr, "sdpa_engine_probe: no cuDNN handle\n");
      return 1;
    }
    const double forward_flops = 2.0 * double(s.batch) * double(s.time) * double(s.time) * double(s.channels);
    std::printf("%s, batch %lld x %lld, %lld heads of %lld, bf16, cuDNN %zu; median of %d\n", m->name,
                static_cast<long long>(s.batch), static_cast<long long>(s.time),
                static_cast<long long>(s.heads), static_cast<long long>(s.head_size()), cudnnGetVersion(),
                reps);
    std::printf("%-9s %6s %-24s %10s %9s %12s\n", "pass", "config", "engine", "median_us", "TFLOP/s",
                "max |diff|");
    std::vector<float> first_out, first_dqkv;
    for (const AttentionPass pass : {AttentionPass::forward, AttentionPass::backward}) {
      const bool forward = pass == AttentionPass::forward;
      // Times one plan and prints its line (or that it refused to run).
      const auto time_plan = [&](const AttentionPlan& plan, const std::string& label) {
        bool ran = true;
        const auto launch = [&] {
          ran &= forward ? plan.forward(qkv.get(), out.get(), static_cast<float*>(stats.get()))
                         : plan.backward(qkv.get(), out.get(), static_cast<const float*>(stats.get()),
                                         dout.get(), dqkv.get());
        };
        const double us = 1e3 * kernel_bench::median_ms(stream, reps, launch, /*warm_ups=*/3);
        if (!ran) {
          std::printf("%-9s %6s %-24s refused to run\n", forward ? "forward" : "backward", label.c_str(),
                      plan.engine().c_str());
          return;
        }
        std::vector<float> result = download_bf16(forward ? out : dqkv);
        std::vector<float>& first = forward ? first_out : first_dqkv;
        if (first.empty()) first = result;
        const double flops = forward ? forward_flops : 2.5 * forward_flops;
        std::printf("%-9s %6s %-24s %10.1f %9.1f %12.3g\n", forward ? "forward" : "backward", label.c_str(),
                    plan.engine().c_str(), us, flops / (us * 1e6), largest_difference(result, first));
      };
      for (int config = 0; config < configs; ++config) {
        std::string why_not;
        const auto plan = AttentionPlan::build(handle, s, pass, why_not, config);
        if (!plan) {
          if (config == 0)
            std::printf("%-9s no plan: %s\n", forward ? "forward" : "backward", why_not.c_str());
          break;
        }
        time_plan(*plan, std::to_string(config));
      }
      if (knob_space_limit > 0) {
        const auto space = cuda::attention_engine_space(handle, s, pass, knob_space_limit);
        std::printf("%-9s %zu configurations in the engines' knob space\n", forward ? "forward" : "backward",
                    space.size());
        for (const cuda::GraphEngine& engine : space) {
          std::string why_not;
          const auto plan = AttentionPlan::build(handle, s, pass, why_not, engine);
          if (plan) time_plan(*plan, "space");
        }
      }
      if (forward) {  // the backward reads the first configuration's out and stats
        std::string why_not;
        const auto first_forward = AttentionPlan::build(handle, s, pass, why_not, 0);
        if (!first_forward || !first_forward->forward(qkv.get(), out.get(), static_cast<float*>(stats.get())))
          throw std::runtime_error("the first forward configuration no longer runs");
        DLB_KERNEL_CHECK(cudaStreamSynchronize(stream));
      }
    }
    cudnnDestroy(handle);
    cudaStreamDestroy(stream);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sdpa_engine_probe: %s\n", e.what());
    return 1;
  }
}
