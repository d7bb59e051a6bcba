// Memory, elementwise utilities, 16-bit float conversion and the SGD step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/reference/half_float.h"
#include "backend/reference/reference_backend.h"
#include "core/status.h"
#include "reference_test_util.h"

namespace dlbench {
namespace {

using testing::from_values;
using testing::get_element;
using testing::zeros;

TEST(Memory, HostAllocationAndCopies) {
  auto backend = make_reference_backend();
  EXPECT_EQ(backend->name(), "reference");
  EXPECT_EQ(backend->device().kind, DeviceKind::cpu);
  const double host[4] = {1, 2, 3, 4};
  void* a = backend->allocate(sizeof(host));
  void* b = backend->allocate(sizeof(host));
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
  backend->copy_to_device(a, host, sizeof(host));
  backend->copy(b, a, sizeof(host));
  double back[4] = {};
  backend->copy_to_host(back, b, sizeof(host));
  backend->synchronize();
  EXPECT_EQ(std::memcmp(back, host, sizeof(host)), 0);
  backend->deallocate(a);
  backend->deallocate(b);
  backend->deallocate(nullptr);
}

TEST(Elementwise, FillAddScale) {
  ReferenceBackend backend;
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dtype));
    HostBuffer a = zeros({2, 2, 1, 3}, dtype, Layout::nhwc), b = zeros({2, 2, 1, 3}, dtype, Layout::nhwc);
    HostBuffer y = zeros({2, 2, 1, 3}, dtype, Layout::nhwc);
    backend.fill(a.tensor(), 1.5);
    for (int64_t i = 0; i < b.numel(); ++i) testing::set_element(b.tensor(), i, static_cast<double>(i));
    backend.add(a.tensor(), b.tensor(), y.tensor());
    for (int64_t i = 0; i < y.numel(); ++i)
      EXPECT_EQ(get_element(y.tensor(), i), 1.5 + static_cast<double>(i));
    backend.scale(y.tensor(), -2);
    for (int64_t i = 0; i < y.numel(); ++i)
      EXPECT_EQ(get_element(y.tensor(), i), -3 - 2 * static_cast<double>(i));
  }
  HostBuffer flag = zeros({1}, DType::i32);
  backend.fill(flag.tensor(), 7);
  EXPECT_EQ(flag.ptr<int32_t>()[0], 7);
  EXPECT_THROW(backend.fill(flag.tensor(), 0.5), Error);
  // add needs one shape and one layout for all three.
  HostBuffer a = zeros({1, 2, 2, 2}, DType::f32, Layout::nchw),
             b = zeros({1, 2, 2, 2}, DType::f32, Layout::nhwc);
  EXPECT_THROW(backend.add(a.tensor(), b.tensor(), a.tensor()), Error);
}

TEST(Cast, F32AndF64BothWays) {
  ReferenceBackend backend;
  HostBuffer d = from_values({4}, DType::f64, {1.0, 0.1, -1e-40, 3.0e38});
  HostBuffer f = zeros({4}, DType::f32), back = zeros({4}, DType::f64);
  backend.cast(d.tensor(), f.tensor());
  EXPECT_EQ(f.ptr<float>()[0], 1.0f);
  EXPECT_EQ(f.ptr<float>()[1], 0.1f);                        // nearest float
  EXPECT_EQ(f.ptr<float>()[2], static_cast<float>(-1e-40));  // a subnormal float
  EXPECT_EQ(f.ptr<float>()[3], 3.0e38f);
  backend.cast(f.tensor(), back.tensor());
  EXPECT_EQ(back.ptr<double>()[1], static_cast<double>(0.1f));
  HostBuffer wrong = zeros({5}, DType::f32);
  EXPECT_THROW(backend.cast(d.tensor(), wrong.tensor()), Error);
}

// Bit patterns from IEEE 754 binary16 and bfloat16; ties round to the even neighbour.
TEST(Cast, HalfPrecisionRoundsToNearestEven) {
  EXPECT_EQ(f16_from_double(1.0), 0x3C00);
  EXPECT_EQ(f16_from_double(-2.0), 0xC000);
  EXPECT_EQ(f16_from_double(65504.0), 0x7BFF);                   // largest finite
  EXPECT_EQ(f16_from_double(65519.0), 0x7BFF);                   // below the halfway point to 65536
  EXPECT_EQ(f16_from_double(65520.0), 0x7C00);                   // halfway, odd neighbour: rounds up to Inf
  EXPECT_EQ(f16_from_double(std::ldexp(1.0, -24)), 0x0001);      // smallest subnormal
  EXPECT_EQ(f16_from_double(std::ldexp(1.0, -25)), 0x0000);      // halfway to 0: even is 0
  EXPECT_EQ(f16_from_double(std::ldexp(3.0, -25)), 0x0002);      // 1.5 steps: even is 2
  EXPECT_EQ(f16_from_double(std::ldexp(1023.5, -24)), 0x0400);   // rounds up into the normals
  EXPECT_EQ(f16_from_double(1 + std::ldexp(1.0, -11)), 0x3C00);  // tie: keep even 1.0
  EXPECT_EQ(f16_from_double(1 + std::ldexp(3.0, -11)), 0x3C02);  // tie: up to even
  EXPECT_EQ(f16_from_double(1 + std::ldexp(1.0, -11) + 1e-12), 0x3C01);  // just past the tie
  EXPECT_EQ(f16_from_double(INFINITY), 0x7C00);
  EXPECT_TRUE(std::isnan(f16_to_double(f16_from_double(NAN))));
  EXPECT_EQ(f16_to_double(0x3555), 0.333251953125);
  EXPECT_EQ(f16_to_double(0x0001), std::ldexp(1.0, -24));
  EXPECT_EQ(f16_to_double(0xFC00), -INFINITY);

  EXPECT_EQ(bf16_from_double(1.0), 0x3F80);
  EXPECT_EQ(bf16_from_double(1 + std::ldexp(1.0, -8)), 0x3F80);  // tie: keep even
  EXPECT_EQ(bf16_from_double(1 + std::ldexp(3.0, -8)), 0x3F82);  // tie: up to even
  EXPECT_EQ(bf16_from_double(-3.0e38), 0xFF62);
  EXPECT_EQ(bf16_from_double(std::numeric_limits<float>::max()), 0x7F80);  // rounds past the largest: Inf
  EXPECT_EQ(bf16_to_double(0x4049), 3.140625);
  // Rounding straight from double: 1 + 2^-8 + 2^-30 is just above the tie, so it rounds up, whereas a
  // detour through float (which drops the 2^-30) would land on the tie and round down.
  EXPECT_EQ(bf16_from_double(1 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30)), 0x3F81);

  // Every f16 value survives a round trip through double.
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const double value = f16_to_double(static_cast<uint16_t>(bits));
    if (std::isnan(value)) continue;
    ASSERT_EQ(f16_from_double(value), bits) << bits;
  }
}

TEST(Cast, ThroughHalfTypes) {
  ReferenceBackend backend;
  HostBuffer d = from_values({3}, DType::f64, {1.0, 1 + std::ldexp(3.0, -11), -0.5});
  HostBuffer h = zeros({3}, DType::f16), bf = zeros({3}, DType::bf16), back = zeros({3}, DType::f64);
  backend.cast(d.tensor(), h.tensor());
  EXPECT_EQ(h.ptr<uint16_t>()[1], 0x3C02);
  backend.cast(h.tensor(), back.tensor());
  EXPECT_EQ(back.ptr<double>()[1], 1 + std::ldexp(1.0, -9));
  EXPECT_EQ(back.ptr<double>()[2], -0.5);
  backend.cast(d.tensor(), bf.tensor());
  EXPECT_EQ(bf.ptr<uint16_t>()[0], 0x3F80);
  EXPECT_EQ(bf.ptr<uint16_t>()[2], 0xBF00);
}

TEST(CheckFinite, CatchesNanAndInfAndNeverClears) {
  ReferenceBackend backend;
  HostBuffer flag = zeros({1}, DType::i32);
  for (DType dtype : {DType::f32, DType::f64}) {
    HostBuffer x = from_values({4}, dtype, {1, -2, 1e30, 0});
    flag.ptr<int32_t>()[0] = 0;
    backend.check_finite(x.tensor(), flag.tensor());
    EXPECT_EQ(flag.ptr<int32_t>()[0], 0) << "finite values must not set the flag";
    for (double bad : {NAN, INFINITY, -INFINITY}) {
      testing::set_element(x.tensor(), 3, bad);
      flag.ptr<int32_t>()[0] = 0;
      backend.check_finite(x.tensor(), flag.tensor());
      EXPECT_EQ(flag.ptr<int32_t>()[0], 1) << bad << " in " << dtype_name(dtype);
      testing::set_element(x.tensor(), 3, 0);
    }
  }
  // A later finite tensor does not clear a flag set earlier.
  HostBuffer finite = from_values({2}, DType::f32, {1, 2});
  flag.ptr<int32_t>()[0] = 1;
  backend.check_finite(finite.tensor(), flag.tensor());
  EXPECT_EQ(flag.ptr<int32_t>()[0], 1);
  // f16: the overflow of a cast shows up as Inf.
  HostBuffer h = zeros({2}, DType::f16);
  h.ptr<uint16_t>()[1] = 0x7C00;
  flag.ptr<int32_t>()[0] = 0;
  backend.check_finite(h.tensor(), flag.tensor());
  EXPECT_EQ(flag.ptr<int32_t>()[0], 1);
}

// A hand-worked step: lr 0.1, momentum 0.9, weight decay 0.01, grad_scale 0.5. Elements 0-1 decay,
// 2-3 do not (a BN/bias segment), 4 is in no segment and must not move.
TEST(Sgd, HandComputedStepWithMomentumNesterovAndWeightDecay) {
  ReferenceBackend backend;
  const std::vector<double> p0 = {1.0, -2.0, 0.5, 3.0, 7.0};
  const std::vector<double> g0 = {0.2, 0.4, -0.6, 1.0, 5.0};
  const std::vector<double> v0 = {0.1, 0.0, 0.2, -0.1, 1.0};
  const ParamSegment segments[] = {{0, 2, true}, {2, 2, false}};
  SgdStep step;
  step.lr = 0.1f;
  step.momentum = 0.9f;
  step.weight_decay = 0.01f;
  step.grad_scale = 0.5f;
  // g = 0.5 * grad (+ 0.01 * p): 0.11, 0.18, -0.3, 0.5.  v = 0.9 * v + g: 0.2, 0.18, -0.12, 0.41.
  const std::vector<double> v_expected = {0.2, 0.18, -0.12, 0.41, 1.0};
  // Plain: p -= 0.1 * v.  Nesterov: p -= 0.1 * (g + 0.9 * v).
  const std::vector<double> p_plain = {0.98, -2.018, 0.512, 2.959, 7.0};
  const std::vector<double> p_nesterov = {0.971, -2.0342, 0.5408, 2.9131, 7.0};
  for (bool nesterov : {false, true}) {
    SCOPED_TRACE(nesterov ? "nesterov" : "plain");
    step.nesterov = nesterov;
    HostBuffer p = from_values({5}, DType::f32, p0), g = from_values({5}, DType::f32, g0);
    HostBuffer v = from_values({5}, DType::f32, v0);
    backend.sgd_update(p.tensor(), g.tensor(), v.tensor(), segments, step);
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_NEAR(v.ptr<float>()[i], v_expected[i], 1e-6) << i;
      EXPECT_NEAR(p.ptr<float>()[i], (nesterov ? p_nesterov : p_plain)[i], 1e-6) << i;
    }
  }
}

// With StepScalars the rate and the loss scale come from memory: lr 0.1 and loss scale 4 on gradients
// 4x larger give the same update as the plain call; an overflow flag makes the update a no-op.
TEST(Sgd, StepScalarsSupplyRateAndLossScaleAndSkipOnOverflow) {
  ReferenceBackend backend;
  const std::vector<double> p0 = {1.0, -2.0, 0.5, 3.0}, g0 = {0.2, 0.4, -0.6, 1.0},
                            v0 = {0.1, 0.0, 0.2, -0.1};
  std::vector<double> g4(g0);
  for (double& x : g4) x *= 4;
  const ParamSegment segments[] = {{0, 4, true}};
  SgdStep step;
  step.lr = 0.1f;
  step.momentum = 0.9f;
  step.weight_decay = 0.01f;
  step.grad_scale = 0.5f;
  HostBuffer p = from_values({4}, DType::f32, p0), g = from_values({4}, DType::f32, g0);
  HostBuffer v = from_values({4}, DType::f32, v0);
  backend.sgd_update(p.tensor(), g.tensor(), v.tensor(), segments, step);

  StepScalars scalars;
  scalars.lr = 0.1f;
  scalars.loss_scale = 4.f;
  step.lr = 123.f;  // ignored when scalars are given
  HostBuffer ps = from_values({4}, DType::f32, p0), gs = from_values({4}, DType::f32, g4);
  HostBuffer vs = from_values({4}, DType::f32, v0);
  backend.sgd_update(ps.tensor(), gs.tensor(), vs.tensor(), segments, step, &scalars);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(ps.ptr<float>()[i], p.ptr<float>()[i]) << i;
    EXPECT_FLOAT_EQ(vs.ptr<float>()[i], v.ptr<float>()[i]) << i;
  }

  scalars.overflow = 1;
  HostBuffer before = from_values({4}, DType::f32, p0);
  HostBuffer pk = from_values({4}, DType::f32, p0), vk = from_values({4}, DType::f32, v0);
  backend.sgd_update(pk.tensor(), gs.tensor(), vk.tensor(), segments, step, &scalars);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(pk.ptr<float>()[i], before.ptr<float>()[i]) << i;
    EXPECT_EQ(vk.ptr<float>()[i], static_cast<float>(v0[i])) << i;
  }
}

// The loss-scale rule: halve and count a skip on overflow (clearing the flag), double after
// growth_interval good steps in a row; a fixed scale never changes.
TEST(LossScale, HalvesOnOverflowAndGrowsAfterTheInterval) {
  ReferenceBackend backend;
  StepScalars s;
  s.dynamic = 1;
  s.loss_scale = 1024.f;
  s.growth_interval = 3;
  s.overflow = 1;
  backend.update_loss_scale(&s);
  EXPECT_EQ(s.loss_scale, 512.f);
  EXPECT_EQ(s.skipped_steps, 1);
  EXPECT_EQ(s.overflow, 0);
  backend.update_loss_scale(&s);
  backend.update_loss_scale(&s);
  EXPECT_EQ(s.loss_scale, 512.f);
  EXPECT_EQ(s.good_steps, 2);
  backend.update_loss_scale(&s);
  EXPECT_EQ(s.loss_scale, 1024.f);
  EXPECT_EQ(s.good_steps, 0);
  s.good_steps = 2;
  s.overflow = 1;  // an overflow resets the run of good steps
  backend.update_loss_scale(&s);
  EXPECT_EQ(s.loss_scale, 512.f);
  EXPECT_EQ(s.good_steps, 0);
  EXPECT_EQ(s.skipped_steps, 2);

  StepScalars fixed;
  fixed.loss_scale = 128.f;
  fixed.growth_interval = 1;
  for (int i = 0; i < 3; ++i) backend.update_loss_scale(&fixed);
  EXPECT_EQ(fixed.loss_scale, 128.f);
  EXPECT_EQ(fixed.skipped_steps, 0);
}

TEST(Sgd, RejectsBadSegments) {
  ReferenceBackend backend;
  HostBuffer p = zeros({4}, DType::f32), g = zeros({4}, DType::f32), v = zeros({4}, DType::f32);
  const ParamSegment outside[] = {{2, 3, true}};
  EXPECT_THROW(backend.sgd_update(p.tensor(), g.tensor(), v.tensor(), outside, SgdStep{}), Error);
  const ParamSegment overlapping[] = {{0, 3, true}, {2, 2, false}};
  EXPECT_THROW(backend.sgd_update(p.tensor(), g.tensor(), v.tensor(), overlapping, SgdStep{}), Error);
  HostBuffer g_short = zeros({3}, DType::f32);
  const ParamSegment all[] = {{0, 4, true}};
  EXPECT_THROW(backend.sgd_update(p.tensor(), g_short.tensor(), v.tensor(), all, SgdStep{}), Error);
}

}  // namespace
}  // namespace dlbench
