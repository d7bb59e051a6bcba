// Times the onednn backend's convolution strategies (plain / blocked / blocked_weights, see
// backend/onednn/onednn_backend.h) per op on ResNet-50 (batch 16, 224x224) and resnet20 (batch 128, 28x28)
// shapes, in both layouts, and sums them over each network with its layer counts. Not a test.
//
//   onednn_conv_timing [--threads N] [--reps N] [--net resnet50|resnet20|all] [--layout nchw|nhwc|all]
//                      [--strategies plain,blocked,blocked_weights,default] [--clock wall|cpu]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/onednn/onednn_backend.h"

using namespace dlbench;

namespace {

struct Shape {
  const char* net;
  int count;  // convolutions of this shape in the network
  int64_t n, c, h, w, k, r, stride, pad;
};

// ResNet-50 v1.5 (stride in the 3x3), batch 16.
const Shape kResNet50[] = {
    {"resnet50", 1, 16, 3, 224, 224, 64, 7, 2, 3},   {"resnet50", 1, 16, 64, 56, 56, 64, 1, 1, 0},
    {"resnet50", 3, 16, 64, 56, 56, 64, 3, 1, 1},    {"resnet50", 4, 16, 64, 56, 56, 256, 1, 1, 0},
    {"resnet50", 2, 16, 256, 56, 56, 64, 1, 1, 0},   {"resnet50", 1, 16, 256, 56, 56, 128, 1, 1, 0},
    {"resnet50", 1, 16, 128, 56, 56, 128, 3, 2, 1},  {"resnet50", 1, 16, 256, 56, 56, 512, 1, 2, 0},
    {"resnet50", 4, 16, 128, 28, 28, 512, 1, 1, 0},  {"resnet50", 3, 16, 512, 28, 28, 128, 1, 1, 0},
    {"resnet50", 3, 16, 128, 28, 28, 128, 3, 1, 1},  {"resnet50", 1, 16, 512, 28, 28, 256, 1, 1, 0},
    {"resnet50", 1, 16, 256, 28, 28, 256, 3, 2, 1},  {"resnet50", 1, 16, 512, 28, 28, 1024, 1, 2, 0},
    {"resnet50", 6, 16, 256, 14, 14, 1024, 1, 1, 0}, {"resnet50", 5, 16, 1024, 14, 14, 256, 1, 1, 0},
    {"resnet50", 5, 16, 256, 14, 14, 256, 3, 1, 1},  {"resnet50", 1, 16, 1024, 14, 14, 512, 1, 1, 0},
    {"resnet50", 1, 16, 512, 14, 14, 512, 3, 2, 1},  {"resnet50", 1, 16, 1024, 14, 14, 2048, 1, 2, 0},
    {"resnet50", 3, 16, 512, 7, 7, 2048, 1, 1, 0},   {"resnet50", 2, 16, 2048, 7, 7, 512, 1, 1, 0},
    {"resnet50", 2, 16, 512, 7, 7, 512, 3, 1, 1},
};

// resnet20 (3 stages of 3 basic blocks, 16/32/64 channels, 1x1 projection shortcuts), batch 128, 28x28x1.
const Shape kResNet20[] = {
    {"resnet20", 1, 128, 1, 28, 28, 16, 3, 1, 1},  {"resnet20", 6, 128, 16, 28, 28, 16, 3, 1, 1},
    {"resnet20", 1, 128, 16, 28, 28, 32, 3, 2, 1}, {"resnet20", 1, 128, 16, 28, 28, 32, 1, 2, 0},
    {"resnet20", 5, 128, 32, 14, 14, 32, 3, 1, 1}, {"resnet20", 1, 128, 32, 14, 14, 64, 3, 2, 1},
    {"resnet20", 1, 128, 32, 14, 14, 64, 1, 2, 0}, {"resnet20", 5, 128, 64, 7, 7, 64, 3, 1, 1},
};

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Buffer {
  Backend& backend;
  void* data;
  Buffer(Backend& b, size_t bytes) : backend(b), data(b.allocate(bytes)) {
    std::vector<float> host(bytes / sizeof(float));
    for (size_t i = 0; i < host.size(); ++i)
      host[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.f - 0.5f;
    b.copy_to_device(data, host.data(), host.size() * sizeof(float));
  }
  ~Buffer() { backend.deallocate(data); }
};

double cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

// The machine is shared: other processes steal time slices. Wall time is the minimum over the reps;
// with --clock cpu the process CPU time is used instead (run with OMP_WAIT_POLICY=passive so that idle
// threads do not spin), which time slicing does not inflate.
bool g_use_cpu_time = false;

template <typename F>
double min_ms(int reps, F&& f) {
  f();  // warm-up
  double best = 1e300;
  for (int i = 0; i < reps; ++i) {
    const double t0 = g_use_cpu_time ? cpu_ms() : now_ms();
    f();
    best = std::min(best, (g_use_cpu_time ? cpu_ms() : now_ms()) - t0);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, reps = 3;
  std::string net = "all", layout_arg = "all", strategies_arg = "plain,blocked,blocked_weights,default";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads"))
      threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--reps"))
      reps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--net"))
      net = argv[i + 1];
    else if (!std::strcmp(argv[i], "--layout"))
      layout_arg = argv[i + 1];
    else if (!std::strcmp(argv[i], "--strategies"))
      strategies_arg = argv[i + 1];
    else if (!std::strcmp(argv[i], "--clock"))
      g_use_cpu_time = !std::strcmp(argv[i + 1], "cpu");
  }
  auto backend = make_onednn_backend(threads);
  std::vector<Shape> shapes;
  if (net == "all" || net == "resnet50")
    shapes.insert(shapes.end(), std::begin(kResNet50), std::end(kResNet50));
  if (net == "all" || net == "resnet20")
    shapes.insert(shapes.end(), std::begin(kResNet20), std::end(kResNet20));
  std::vector<Layout> layouts;
  if (layout_arg != "nhwc") layouts.push_back(Layout::nchw);
  if (layout_arg != "nchw") layouts.push_back(Layout::nhwc);
  std::vector<std::string> strategies;
  for (size_t pos = 0; pos < strategies_arg.size();) {
    size_t end = strategies_arg.find(',', pos);
    if (end == std::string::npos) end = strategies_arg.size();
    strategies.push_back(strategies_arg.substr(pos, end - pos));
    pos = end + 1;
  }
  std::printf("# onednn conv timing: %d threads, min of %d, %s ms per op\n", threads, reps,
              g_use_cpu_time ? "process CPU" : "wall");
  std::printf("%-8s %-4s %-32s %-15s %8s %8s %8s %8s  %s\n", "net", "lay", "shape (NxC HxW -> K RxR /s)",
              "strategy", "fwd", "bwd_d", "bwd_w", "total", "impl");
  for (Layout layout : layouts) {
    std::vector<double> net_total(strategies.size(), 0.0);
    std::string current_net;
    auto flush = [&] {
      if (current_net.empty()) return;
      for (size_t s = 0; s < strategies.size(); ++s) {
        std::printf("TOTAL %-8s %-4s %-15s %10.1f ms per fwd+bwd of all convs\n", current_net.c_str(),
                    layout_name(layout), strategies[s].c_str(), net_total[s]);
      }
      std::fill(net_total.begin(), net_total.end(), 0.0);
    };
    for (const Shape& s : shapes) {
      if (current_net != s.net) {
        flush();
        current_net = s.net;
      }
      ConvGeometry g;
      g.batch = s.n, g.in_channels = s.c, g.in_h = s.h, g.in_w = s.w, g.out_channels = s.k;
      g.kernel_h = g.kernel_w = s.r, g.stride_h = g.stride_w = s.stride, g.pad_h = g.pad_w = s.pad;
      g.layout = layout;
      const int64_t p = g.out_h(), q = g.out_w();
      Buffer x(*backend, s.n * s.c * s.h * s.w * 4), dx(*backend, s.n * s.c * s.h * s.w * 4);
      Buffer w(*backend, s.k * s.c * s.r * s.r * 4), dw(*backend, s.k * s.c * s.r * s.r * 4);
      Buffer y(*backend, s.n * s.k * p * q * 4), dy(*backend, s.n * s.k * p * q * 4);
      Tensor tx(x.data, {s.n, s.c, s.h, s.w}, DType::f32, layout),
          tdx(dx.data, {s.n, s.c, s.h, s.w}, DType::f32, layout);
      Tensor tw(w.data, {s.k, s.c, s.r, s.r}, DType::f32, layout),
          tdw(dw.data, {s.k, s.c, s.r, s.r}, DType::f32, layout);
      Tensor ty(y.data, {s.n, s.k, p, q}, DType::f32, layout),
          tdy(dy.data, {s.n, s.k, p, q}, DType::f32, layout);
      char shape_name[64];
      std::snprintf(shape_name, sizeof shape_name, "%ldx%ld %ldx%ld -> %ld %ldx%ld /%ld (x%d)", (long)s.n,
                    (long)s.c, (long)s.h, (long)s.w, (long)s.k, (long)s.r, (long)s.r, (long)s.stride,
                    s.count);
      for (size_t si = 0; si < strategies.size(); ++si) {
        const std::string& name = strategies[si];
        std::unique_ptr<ConvPlan> plan;
        if (name == "default") {
          plan = backend->plan_conv(g);
        } else {
          OneDnnConvFormat f = name == "plain"     ? OneDnnConvFormat::plain
                               : name == "blocked" ? OneDnnConvFormat::blocked
                                                   : OneDnnConvFormat::blocked_weights;
          plan = plan_onednn_conv(*backend, g, {f, f, f});
        }
        Buffer ws(*backend, std::max<size_t>(plan->workspace_bytes(), 4));
        const double f = min_ms(reps, [&] { backend->conv_forward(*plan, tx, tw, ty, ws.data); });
        const double bd = min_ms(
            reps, [&] { backend->conv_backward_data(*plan, tdy, tw, tdx, Accumulate::overwrite, ws.data); });
        const double bw = min_ms(reps, [&] {
          backend->conv_backward_filter(*plan, tx, tdy, tdw, Accumulate::overwrite, ws.data);
        });
        // The first conv of a network needs no backward data.
        const bool first = s.c <= 3;
        const double total = f + bw + (first ? 0 : bd);
        net_total[si] += s.count * total;
        std::printf("%-8s %-4s %-32s %-15s %8.2f %8.2f %8.2f %8.2f  %s\n", s.net, layout_name(layout),
                    shape_name, name.c_str(), f, bd, bw, total, describe_onednn_conv_plan(*plan).c_str());
        std::fflush(stdout);
      }
    }
    flush();
  }
  return 0;
}
