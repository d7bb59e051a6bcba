// One training step of ResNet-50 (batch 16, 224x224x3, 1000 classes) or resnet20 (batch 128, 28x28x1, 10
// classes) written directly against the Backend interface: forward, softmax-cross-entropy, backward, SGD.
// It stands in for the engine's network until src/nn exists, to compare a whole step with PyTorch's
// (bench/kernels/torch_step_timing.py). Not a test; random data, real arithmetic.
//
//   onednn_step_timing [--threads 2] [--steps 5] [--net resnet50|resnet20] [--layout nchw|nhwc]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"

using namespace dlbench;

namespace {

double cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Net;

// Device memory for one tensor, freed with the net.
struct Act {
  Tensor t;
};

struct Net {
  Backend& be;
  Layout layout;
  int64_t batch;
  std::vector<void*> allocations;
  std::vector<float> param_init;  // host values of the flat parameter buffer, filled as layers are made
  std::vector<ParamSegment> segments;
  size_t workspace_bytes = 0;
  void* workspace = nullptr;
  Tensor params, grads, momentum;
  std::map<std::string, double> time_ms;  // per op kind, summed over timed steps

  Net(Backend& b, Layout l, int64_t n) : be(b), layout(l), batch(n) {}
  ~Net() {
    for (void* p : allocations) be.deallocate(p);
  }
  Tensor tensor(std::vector<int64_t> dims, DType dtype = DType::f32) {
    Tensor t(nullptr, std::move(dims), dtype, layout);
    void* p = be.allocate(std::max<size_t>(t.bytes(), 4));
    allocations.push_back(p);
    t.set_data(p);
    if (dtype == DType::f32) be.fill(t, 0.0);
    return t;
  }
  // Reserves `count` parameters (offset into the flat buffer), with He-like random init or a constant.
  int64_t reserve_params(int64_t count, double init_scale, double constant, bool decay) {
    const int64_t offset = static_cast<int64_t>(param_init.size());
    std::mt19937 rng(static_cast<unsigned>(offset + 1));
    std::normal_distribution<float> dist(0.f, static_cast<float>(init_scale));
    for (int64_t i = 0; i < count; ++i)
      param_init.push_back(init_scale > 0 ? dist(rng) : static_cast<float>(constant));
    segments.push_back({offset, count, decay});
    return offset;
  }
  Tensor param_view(int64_t offset, std::vector<int64_t> dims, bool grad) {
    const Tensor& base = grad ? grads : params;
    return Tensor(base.ptr<float>() + offset, std::move(dims), DType::f32, layout);
  }
  template <typename F>
  void timed(const char* kind, F&& f) {
    const double t0 = now_ms();
    f();
    time_ms[kind] += now_ms() - t0;
  }
};

struct Conv {
  ConvGeometry g;
  std::unique_ptr<ConvPlan> plan;
  int64_t offset = 0;
  Tensor w, dw;
  void make(Net& net, int64_t c, int64_t h, int64_t w_in, int64_t k, int64_t r, int64_t stride, int64_t pad) {
    g.batch = net.batch, g.in_channels = c, g.in_h = h, g.in_w = w_in, g.out_channels = k;
    g.kernel_h = g.kernel_w = r, g.stride_h = g.stride_w = stride, g.pad_h = g.pad_w = pad,
    g.layout = net.layout;
    plan = net.be.plan_conv(g);
    net.workspace_bytes = std::max(net.workspace_bytes, plan->workspace_bytes());
    offset = net.reserve_params(k * c * r * r, std::sqrt(2.0 / static_cast<double>(c * r * r)), 0, true);
  }
  void bind(Net& net) {
    w = net.param_view(offset, {g.out_channels, g.in_channels, g.kernel_h, g.kernel_w}, false);
    dw = net.param_view(offset, {g.out_channels, g.in_channels, g.kernel_h, g.kernel_w}, true);
  }
  std::vector<int64_t> out_dims() const { return {g.batch, g.out_channels, g.out_h(), g.out_w()}; }
};

struct BatchNorm {
  BatchNormGeometry g;
  std::unique_ptr<BatchNormPlan> plan;
  int64_t offset = 0;
  Tensor gamma, beta, dgamma, dbeta, rmean, rvar, smean, sinv;
  void make(Net& net, const std::vector<int64_t>& dims, BatchNormFusion fusion) {
    g.batch = dims[0], g.channels = dims[1], g.h = dims[2], g.w = dims[3], g.layout = net.layout,
    g.fusion = fusion;
    plan = net.be.plan_batchnorm(g);
    net.workspace_bytes = std::max(net.workspace_bytes, plan->workspace_bytes());
    offset = net.reserve_params(g.channels, 0, 1.0, false);
    net.reserve_params(g.channels, 0, 0.0, false);
    rmean = net.tensor({g.channels});
    rvar = net.tensor({g.channels});
    net.be.fill(rvar, 1.0);
    smean = net.tensor({g.channels});
    sinv = net.tensor({g.channels});
  }
  void bind(Net& net) {
    gamma = net.param_view(offset, {g.channels}, false);
    beta = net.param_view(offset + g.channels, {g.channels}, false);
    dgamma = net.param_view(offset, {g.channels}, true);
    dbeta = net.param_view(offset + g.channels, {g.channels}, true);
  }
  void forward(Net& net, const Tensor& x, const Tensor* residual, Tensor& y) {
    net.timed("batchnorm fwd", [&] {
      net.be.batchnorm_forward_training(*plan,
                                        BatchNormTensors{.x = &x,
                                                         .gamma = &gamma,
                                                         .beta = &beta,
                                                         .running_mean = &rmean,
                                                         .running_var = &rvar,
                                                         .saved_mean = &smean,
                                                         .saved_inv_std = &sinv},
                                        residual, y, net.workspace);
    });
  }
  void backward(Net& net, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx, Tensor* dres) {
    net.timed("batchnorm bwd", [&] {
      net.be.batchnorm_backward(*plan,
                                BatchNormTensors{.x = &x,
                                                 .gamma = &gamma,
                                                 .saved_mean = &smean,
                                                 .saved_inv_std = &sinv,
                                                 .dx = &dx,
                                                 .dgamma = &dgamma,
                                                 .dbeta = &dbeta},
                                y, dy, dres, Accumulate::overwrite, net.workspace);
    });
  }
};

void conv_forward(Net& net, Conv& c, const Tensor& x, Tensor& y) {
  net.timed("conv fwd", [&] { net.be.conv_forward(*c.plan, x, c.w, y, net.workspace); });
}
void conv_backward(Net& net, Conv& c, const Tensor& x, const Tensor& dy, Tensor* dx, Accumulate acc) {
  if (dx)
    net.timed("conv bwd data", [&] { net.be.conv_backward_data(*c.plan, dy, c.w, *dx, acc, net.workspace); });
  net.timed("conv bwd filter",
            [&] { net.be.conv_backward_filter(*c.plan, x, dy, c.dw, Accumulate::overwrite, net.workspace); });
}

// A residual block: basic (two 3x3) or bottleneck (1x1, 3x3 with the stride, 1x1 to 4x), with a projection
// shortcut (1x1 conv + BN) when the shape changes. Owns its activations and their gradients.
struct Block {
  bool bottleneck = false, projection = false;
  std::vector<Conv> convs;
  std::vector<BatchNorm> bns;
  Conv proj;
  BatchNorm proj_bn;
  std::vector<Tensor> conv_out, bn_out, dconv_out, dbn_out;  // per main-path conv
  Tensor proj_out, proj_bn_out, dproj_out, dproj_bn_out;

  void make(Net& net, int64_t c, int64_t h, int64_t w, int64_t width, int64_t out_c, int64_t stride,
            bool is_bottleneck) {
    bottleneck = is_bottleneck;
    struct Spec {
      int64_t c, k, r, stride, pad;
    };
    std::vector<Spec> specs;
    if (bottleneck) {
      specs = {{c, width, 1, 1, 0}, {width, width, 3, stride, 1}, {width, out_c, 1, 1, 0}};
    } else {
      specs = {{c, out_c, 3, stride, 1}, {out_c, out_c, 3, 1, 1}};
    }
    convs.resize(specs.size());
    bns.resize(specs.size());
    int64_t ch = h, cw = w;
    for (size_t i = 0; i < specs.size(); ++i) {
      convs[i].make(net, specs[i].c, ch, cw, specs[i].k, specs[i].r, specs[i].stride, specs[i].pad);
      auto dims = convs[i].out_dims();
      ch = dims[2], cw = dims[3];
      const bool last = i + 1 == specs.size();
      bns[i].make(net, dims, last ? BatchNormFusion::add_relu : BatchNormFusion::relu);
      conv_out.push_back(net.tensor(dims));
      bn_out.push_back(net.tensor(dims));
      dconv_out.push_back(net.tensor(dims));
      dbn_out.push_back(net.tensor(dims));
    }
    projection = stride != 1 || c != out_c;
    if (projection) {
      proj.make(net, c, h, w, out_c, 1, stride, 0);
      proj_bn.make(net, proj.out_dims(), BatchNormFusion::none);
      proj_out = net.tensor(proj.out_dims());
      proj_bn_out = net.tensor(proj.out_dims());
      dproj_out = net.tensor(proj.out_dims());
      dproj_bn_out = net.tensor(proj.out_dims());
    }
  }
  void bind(Net& net) {
    for (auto& c : convs) c.bind(net);
    for (auto& b : bns) b.bind(net);
    if (projection) proj.bind(net), proj_bn.bind(net);
  }
  const Tensor& output() const { return bn_out.back(); }
  void forward(Net& net, const Tensor& x) {
    const Tensor* residual = &x;
    if (projection) {
      conv_forward(net, proj, x, proj_out);
      proj_bn.forward(net, proj_out, nullptr, proj_bn_out);
      residual = &proj_bn_out;
    }
    const Tensor* in = &x;
    for (size_t i = 0; i < convs.size(); ++i) {
      conv_forward(net, convs[i], *in, conv_out[i]);
      const bool last = i + 1 == convs.size();
      bns[i].forward(net, conv_out[i], last ? residual : nullptr, bn_out[i]);
      in = &bn_out[i];
    }
  }
  // dy: gradient of output(); writes dx (the gradient of this block's input x).
  void backward(Net& net, const Tensor& x, const Tensor& dy, Tensor& dx) {
    const size_t n = convs.size();
    Tensor& dres = projection ? dproj_bn_out : dbn_out[n - 1];  // the gradient reaching the residual input
    for (size_t j = n; j-- > 0;) {
      const Tensor& dout = j == n - 1 ? dy : dbn_out[j];
      Tensor* dresidual = j == n - 1 ? &dres : nullptr;
      if (j == n - 1 && !projection) dresidual = &dbn_out[n - 1];
      bns[j].backward(net, conv_out[j], bn_out[j], dout, dconv_out[j], dresidual);
      const Tensor& in = j == 0 ? x : bn_out[j - 1];
      conv_backward(net, convs[j], in, dconv_out[j], j == 0 ? &dx : &dbn_out[j - 1], Accumulate::overwrite);
    }
    if (projection) {
      proj_bn.backward(net, proj_out, proj_bn_out, dproj_bn_out, dproj_out, nullptr);
      conv_backward(net, proj, x, dproj_out, &dx, Accumulate::add);
    } else {
      net.timed("add", [&] { net.be.add(dx, dbn_out[n - 1], dx); });
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, steps = 5;
  std::string net_name = "resnet20", layout_arg = "nhwc";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads"))
      threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--steps"))
      steps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--net"))
      net_name = argv[i + 1];
    else if (!std::strcmp(argv[i], "--layout"))
      layout_arg = argv[i + 1];
  }
  const bool r50 = net_name == "resnet50";
  const Layout layout = layout_arg == "nchw" ? Layout::nchw : Layout::nhwc;
  auto backend = make_onednn_backend(threads);
  const int64_t batch = r50 ? 16 : 128, in_c = r50 ? 3 : 1, size = r50 ? 224 : 28, classes = r50 ? 1000 : 10;
  Net net(*backend, layout, batch);

  // ---- build ----
  Conv stem;
  BatchNorm stem_bn;
  std::unique_ptr<PoolPlan> maxpool;
  PoolGeometry mp;
  if (r50) {
    stem.make(net, in_c, size, size, 64, 7, 2, 3);
  } else {
    stem.make(net, in_c, size, size, 16, 3, 1, 1);
  }
  stem_bn.make(net, stem.out_dims(), BatchNormFusion::relu);
  Tensor x = net.tensor({batch, in_c, size, size});
  Tensor stem_out = net.tensor(stem.out_dims()), stem_bn_out = net.tensor(stem.out_dims());
  Tensor dstem_out = net.tensor(stem.out_dims()), dstem_bn_out = net.tensor(stem.out_dims());
  auto d = stem.out_dims();
  Tensor pool_out, dpool_out;
  void* pool_saved = nullptr;
  if (r50) {
    mp.batch = batch, mp.channels = 64, mp.in_h = d[2], mp.in_w = d[3], mp.kernel_h = mp.kernel_w = 3;
    mp.stride_h = mp.stride_w = 2, mp.pad_h = mp.pad_w = 1, mp.kind = PoolKind::max, mp.layout = layout;
    maxpool = backend->plan_pool(mp);
    pool_saved = backend->allocate(std::max<size_t>(maxpool->saved_bytes(), 4));
    d = {batch, 64, mp.out_h(), mp.out_w()};
    pool_out = net.tensor(d);
    dpool_out = net.tensor(d);
  }
  std::vector<Block> blocks;
  {
    int64_t c = d[1], h = d[2], w = d[3];
    struct Stage {
      int64_t width, out_c, blocks, stride;
    };
    std::vector<Stage> stages =
        r50 ? std::vector<Stage>{{64, 256, 3, 1}, {128, 512, 4, 2}, {256, 1024, 6, 2}, {512, 2048, 3, 2}}
            : std::vector<Stage>{{16, 16, 3, 1}, {32, 32, 3, 2}, {64, 64, 3, 2}};
    size_t total = 0;
    for (auto& s : stages) total += static_cast<size_t>(s.blocks);
    blocks.resize(total);
    size_t b = 0;
    for (auto& s : stages) {
      for (int64_t i = 0; i < s.blocks; ++i, ++b) {
        blocks[b].make(net, c, h, w, s.width, s.out_c, i == 0 ? s.stride : 1, r50);
        auto od = blocks[b].convs.back().out_dims();
        c = od[1], h = od[2], w = od[3];
      }
    }
  }
  std::vector<Tensor> dblock_in(blocks.size());
  for (size_t b = 0; b < blocks.size(); ++b) {
    dblock_in[b] = net.tensor(b == 0 ? (r50 ? d : stem.out_dims()) : blocks[b - 1].output().dims());
  }
  const auto last_dims = blocks.back().output().dims();
  const int64_t features = last_dims[1];
  PoolGeometry gp;
  gp.batch = batch, gp.channels = features, gp.in_h = last_dims[2], gp.in_w = last_dims[3];
  gp.kernel_h = last_dims[2], gp.kernel_w = last_dims[3], gp.kind = PoolKind::average, gp.layout = layout;
  auto avgpool = backend->plan_pool(gp);
  Tensor pooled = net.tensor({batch, features, 1, 1}), dpooled = net.tensor({batch, features, 1, 1});
  Tensor dlast = net.tensor(last_dims);
  const int64_t fc_w =
      net.reserve_params(classes * features, std::sqrt(1.0 / static_cast<double>(features)), 0, true);
  const int64_t fc_b = net.reserve_params(classes, 0, 0.0, false);
  Tensor logits = net.tensor({batch, classes}), probs = net.tensor({batch, classes}),
         dlogits = net.tensor({batch, classes});
  Tensor loss = net.tensor({1}), labels = net.tensor({batch}, DType::i32);

  const int64_t nparams = static_cast<int64_t>(net.param_init.size());
  net.params = net.tensor({nparams});
  net.grads = net.tensor({nparams});
  net.momentum = net.tensor({nparams});
  backend->copy_to_device(net.params.data(), net.param_init.data(), net.param_init.size() * sizeof(float));
  stem.bind(net), stem_bn.bind(net);
  for (auto& b : blocks) b.bind(net);
  Tensor fcw = net.param_view(fc_w, {classes, features}, false),
         dfcw = net.param_view(fc_w, {classes, features}, true);
  Tensor fcb = net.param_view(fc_b, {classes}, false), dfcb = net.param_view(fc_b, {classes}, true);
  net.workspace = backend->allocate(std::max<size_t>(net.workspace_bytes, 4));
  {
    std::vector<float> hx(static_cast<size_t>(x.numel()));
    std::mt19937 rng(7);
    std::normal_distribution<float> dist;
    for (auto& v : hx) v = dist(rng);
    backend->copy_to_device(x.data(), hx.data(), hx.size() * sizeof(float));
    std::vector<int32_t> hl(static_cast<size_t>(batch));
    for (size_t i = 0; i < hl.size(); ++i) hl[i] = static_cast<int32_t>(i % static_cast<size_t>(classes));
    backend->copy_to_device(labels.data(), hl.data(), hl.size() * sizeof(int32_t));
  }
  std::printf("# onednn step: %s %s batch %ld, %d threads, %ld parameters, workspace %.1f MiB\n",
              net_name.c_str(), layout_name(layout), static_cast<long>(batch), threads,
              static_cast<long>(nparams), static_cast<double>(net.workspace_bytes) / (1 << 20));

  // ---- one step ----
  SgdStep sgd;
  sgd.lr = 0.01f, sgd.momentum = 0.9f, sgd.weight_decay = 1e-4f;
  auto step = [&] {
    // forward
    conv_forward(net, stem, x, stem_out);
    stem_bn.forward(net, stem_out, nullptr, stem_bn_out);
    const Tensor* in = &stem_bn_out;
    if (r50) {
      net.timed("pool", [&] { backend->pool_forward(*maxpool, stem_bn_out, pool_out, pool_saved); });
      in = &pool_out;
    }
    for (auto& b : blocks) {
      b.forward(net, *in);
      in = &b.output();
    }
    net.timed("pool", [&] { backend->pool_forward(*avgpool, *in, pooled, nullptr); });
    net.timed("fc+loss", [&] {
      Tensor p2 = pooled.reshaped({batch, features});
      backend->gemm(Transpose::no, Transpose::yes, batch, classes, features, 1.f, p2, fcw, 0.f, logits);
      backend->add_bias(logits, fcb);
      backend->softmax_cross_entropy_forward(logits, labels, 0.f, probs, loss);
      backend->softmax_cross_entropy_backward(probs, labels, 0.f, 1.f, dlogits);
      backend->gemm(Transpose::yes, Transpose::no, classes, features, batch, 1.f, dlogits, p2, 0.f, dfcw);
      backend->bias_backward(dlogits, dfcb, Accumulate::overwrite);
      Tensor dp2 = dpooled.reshaped({batch, features});
      backend->gemm(Transpose::no, Transpose::no, batch, features, classes, 1.f, dlogits, fcw, 0.f, dp2);
    });
    net.timed("pool", [&] { backend->pool_backward(*avgpool, *in, pooled, dpooled, nullptr, dlast); });
    // backward
    const Tensor* dy = &dlast;
    for (size_t b = blocks.size(); b-- > 0;) {
      const Tensor& bx = b == 0 ? (r50 ? pool_out : stem_bn_out) : blocks[b - 1].output();
      blocks[b].backward(net, bx, *dy, dblock_in[b]);
      dy = &dblock_in[b];
    }
    if (r50) {
      net.timed("pool", [&] {
        backend->pool_backward(*maxpool, stem_bn_out, pool_out, *dy, pool_saved, dstem_bn_out);
      });
      dy = &dstem_bn_out;
    }
    stem_bn.backward(net, stem_out, stem_bn_out, *dy, dstem_out, nullptr);
    conv_backward(net, stem, x, dstem_out, nullptr, Accumulate::overwrite);
    net.timed("sgd", [&] { backend->sgd_update(net.params, net.grads, net.momentum, net.segments, sgd); });
    backend->synchronize();
  };
  for (int i = 0; i < 2; ++i) step();  // warm-up
  net.time_ms.clear();
  std::vector<double> times, cpu_times;
  for (int i = 0; i < steps; ++i) {
    const double t0 = now_ms(), c0 = cpu_ms();
    step();
    times.push_back(now_ms() - t0);
    cpu_times.push_back(cpu_ms() - c0);
  }
  float host_loss = 0;
  backend->copy_to_host(&host_loss, loss.data(), sizeof host_loss);
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  const double best = sorted.front(), median = sorted[sorted.size() / 2];
  std::printf(
      "%s %s batch %ld: step min %.1f ms, median %.1f ms, %.1f img/s (best), %.1f img/s (median); loss "
      "%.4f\n",
      net_name.c_str(), layout_name(layout), static_cast<long>(batch), best, median, batch / best * 1e3,
      batch / median * 1e3, host_loss);
  std::sort(cpu_times.begin(), cpu_times.end());
  std::printf(
      "  process CPU time per step: min %.1f ms, median %.1f ms (a shared machine inflates wall time)\n",
      cpu_times.front(), cpu_times[cpu_times.size() / 2]);
  double sum = 0;
  for (auto& [k, v] : net.time_ms) sum += v;
  for (auto& [k, v] : net.time_ms) {
    std::printf("  %-16s %8.1f ms/step  %5.1f%%\n", k.c_str(), v / steps, 100.0 * v / sum);
  }
  backend->deallocate(net.workspace);
  if (pool_saved) backend->deallocate(pool_saved);
  return 0;
}
