#include "nn/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <span>

#include "core/align.h"
#include "core/machine_limits.h"
#include "core/status.h"
#include "core/work_pool.h"

namespace dlbench {

namespace {

constexpr size_t kAlignment = 256;  // cuDNN/cuBLAS and AVX loads like aligned starts

}  // namespace

MemoryPlan::~MemoryPlan() {
  for (const Arena& a : arenas_) {
    if (a.owned) backend_.deallocate(a.pointer);
  }
}

namespace {
// Every parameter starts aligned for vector loads: the flat buffers are padded to 64 elements.
int64_t padded(int64_t count) { return (count + 63) / 64 * 64; }
}  // namespace

void MemoryPlan::add_parameter(std::string name, Tensor& value, Tensor& grad, ParamInit init, int64_t fan,
                               bool is_norm_or_bias, ParamUse use, double init_std) {
  DLB_CHECK(!allocated(), "parameter {} declared after allocation", name);
  DType expected = use == ParamUse::compute ? compute_dtype_ : master_dtype_;
  DLB_CHECK(value.dtype() == expected && grad.dtype() == expected, "parameter {} is not {}", name,
            dtype_name(expected));
  for (const ParameterInfo& p : parameters_)
    DLB_CHECK(p.value != &value && p.name != name, "parameter {} declared twice", name);
  parameters_.push_back(
      {std::move(name), &value, &grad, init, fan, is_norm_or_bias, use, 0, current_layer_, init_std});
}

void MemoryPlan::add_buffer(Tensor& value, float initial_value) {
  DLB_CHECK(value.dtype() == master_dtype_, "buffers are {}", dtype_name(master_dtype_));
  buffers_.push_back({&value, initial_value, buffer_count_});
  buffer_count_ += value.numel();
}

void MemoryPlan::add_activation(Tensor& tensor, std::string name) {
  DLB_CHECK(!placed_, "activation {} declared after placement", name);
  per_step_.push_back({&tensor, nullptr});
  placements_.push_back({std::move(name), 0, align_up(tensor.bytes(), kAlignment), true, 0, 0});
}

void MemoryPlan::add_transient(Tensor& tensor, std::string name, int first, int last, int again_first,
                               int again_last) {
  DLB_CHECK(!placed_, "activation {} declared after placement", name);
  DLB_CHECK(0 <= first && first <= last, "{}: live range [{}, {}] is empty", name, first, last);
  DLB_CHECK(again_first < 0 || (last < again_first && again_first <= again_last),
            "{}: second live range [{}, {}] does not follow [{}, {}]", name, again_first, again_last, first,
            last);
  per_step_.push_back({&tensor, nullptr});
  placements_.push_back({std::move(name), 0, align_up(tensor.bytes(), kAlignment), false, first, last,
                         again_first, again_last});
}

std::string Placement::steps() const {
  if (always) return "all";
  return again_first < 0 ? fmt::format("{}-{}", first, last)
                         : fmt::format("{}-{} and {}-{}", first, last, again_first, again_last);
}

void MemoryPlan::add_alias(Tensor& tensor, const Tensor& of) {
  DLB_CHECK(!placed_, "an alias declared after placement");
  DLB_CHECK(tensor.bytes() <= of.bytes(), "an alias of {} bytes onto {} bytes", tensor.bytes(), of.bytes());
  DLB_CHECK(
      std::any_of(per_step_.begin(), per_step_.end(), [&](const PerStep& p) { return p.tensor == &of; }),
      "an alias onto a tensor the plan does not hold");
  aliases_.emplace_back(&tensor, &of);
}

void MemoryPlan::add_saved_bytes(void** pointer, size_t bytes) {
  DLB_CHECK(!placed_, "saved state declared after placement");
  per_step_.push_back({nullptr, pointer});
  placements_.push_back({"saved state", 0, align_up(bytes, kAlignment), true, 0, 0});
}

void MemoryPlan::require_workspace(size_t bytes) { workspace_bytes_ = std::max(workspace_bytes_, bytes); }

size_t MemoryPlan::total_bytes() const {
  DLB_CHECK(placed_, "total_bytes before the plan is placed");
  size_t total = held_bytes_;
  for (size_t bytes : arena_sizes_) total += bytes;
  return total;
}

size_t MemoryPlan::unshared_activation_bytes() const {
  size_t total = 0;
  for (const Placement& p : placements_) total += p.bytes;
  return total;
}

size_t MemoryPlan::transient_peak_bytes() const {
  // The sum of live sizes only changes where a range starts, so the peak is at some range's first step.
  size_t peak = 0;
  for (const Placement& at : placements_) {
    if (at.always) continue;
    for (const int step : {at.first, at.again_first}) {
      if (step < 0) continue;
      size_t live = 0;
      for (const Placement& p : placements_) {
        if (!p.always && p.live_at(step)) live += p.bytes;
      }
      peak = std::max(peak, live);
    }
  }
  return peak;
}

void check_placements(std::span<const Placement> placements, size_t arena_bytes) {
  for (const Placement& p : placements) {
    DLB_CHECK(p.offset + p.bytes <= arena_bytes,
              "memory plan: {} [{}, {}) reaches past the arena of {} bytes", p.name, p.offset,
              p.offset + p.bytes, arena_bytes);
  }
  // Sorted by offset, a tensor can only share bytes with those that start before it ends; the sweep stops
  // at the first that starts at or after its end.
  std::vector<size_t> order(placements.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return placements[a].offset < placements[b].offset; });
  for (size_t i = 0; i < order.size(); ++i) {
    const Placement& a = placements[order[i]];
    for (size_t j = i + 1; j < order.size(); ++j) {
      const Placement& b = placements[order[j]];
      if (b.offset >= a.offset + a.bytes) break;
      if (a.bytes == 0 || b.bytes == 0 || !a.overlaps_in_time(b)) continue;
      DLB_CHECK(
          false,
          "memory plan: {} [{}, {}) and {} [{}, {}) share memory while both hold data (steps {} and {})",
          a.name, a.offset, a.offset + a.bytes, b.name, b.offset, b.offset + b.bytes, a.steps(), b.steps());
    }
  }
}

size_t place_by_liveness(std::vector<Placement>& placements) {
  size_t base = 0;
  for (Placement& p : placements) {
    if (!p.always) continue;
    p.offset = base;
    base += p.bytes;
  }
  // Largest first: the big gradients settle the arena's size, the small ones fill the gaps they leave.
  // Ties go by first step, then by declaration, so that the placement is the same on every platform.
  std::vector<size_t> order;
  for (size_t i = 0; i < placements.size(); ++i) {
    if (!placements[i].always) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (placements[a].bytes != placements[b].bytes) return placements[a].bytes > placements[b].bytes;
    return placements[a].first < placements[b].first;
  });
  size_t end = base;
  std::vector<size_t> placed;
  std::vector<std::pair<size_t, size_t>> busy;  // [begin, end) of placed tensors overlapping in time
  for (size_t index : order) {
    Placement& p = placements[index];
    busy.clear();
    for (size_t other : placed) {
      const Placement& q = placements[other];
      if (q.overlaps_in_time(p)) busy.emplace_back(q.offset, q.offset + q.bytes);
    }
    std::sort(busy.begin(), busy.end());
    // The smallest gap between busy ranges that fits; above all of them when none does.
    size_t cursor = base, best = SIZE_MAX, best_gap = SIZE_MAX;
    for (const auto& [begin, finish] : busy) {
      if (begin > cursor && begin - cursor >= p.bytes && begin - cursor < best_gap) {
        best = cursor;
        best_gap = begin - cursor;
      }
      cursor = std::max(cursor, finish);
    }
    p.offset = best != SIZE_MAX ? best : cursor;
    end = std::max(end, p.offset + p.bytes);
    placed.push_back(index);
  }
  return end;
}

void MemoryPlan::place() {
  DLB_CHECK(!placed_, "memory plan placed twice");
  // Offsets: parameters read in the compute dtype first, then the others (declaration order within each),
  // so the compute copies cover one leading range of the flat buffers.
  std::stable_partition(parameters_.begin(), parameters_.end(),
                        [](const ParameterInfo& p) { return p.use == ParamUse::compute; });
  parameter_count_ = 0;
  compute_count_ = 0;
  for (auto& p : parameters_) {
    p.offset = parameter_count_;
    parameter_count_ += padded(p.value->numel());
    if (p.use == ParamUse::compute) compute_count_ = parameter_count_;
  }
  activation_bytes_ = place_by_liveness(placements_);
  check_placements(placements_, activation_bytes_);

  // The arenas in the order allocate() makes them.
  const size_t flat_bytes = static_cast<size_t>(parameter_count_) * dtype_size(master_dtype_);
  arena_sizes_ = {flat_bytes, has_master_gradients() ? flat_bytes : 0, flat_bytes};
  if (second_moment_) arena_sizes_.push_back(flat_bytes);
  if (has_compute_copies()) {
    const size_t compute_bytes = static_cast<size_t>(compute_count_) * dtype_size(compute_dtype_);
    arena_sizes_.insert(arena_sizes_.end(), {compute_bytes, compute_bytes});
  }
  arena_sizes_.push_back(static_cast<size_t>(buffer_count_) * dtype_size(master_dtype_));
  arena_sizes_.push_back(activation_bytes_);
  if (workspace_bytes_ > 0) arena_sizes_.push_back(workspace_bytes_);
  placed_ = true;
}

void MemoryPlan::allocate(uint64_t seed) {
  DLB_CHECK(!allocated(), "memory plan allocated twice");
  DLB_CHECK(!estimate_only_, "a memory plan made for estimation is never allocated");
  if (!placed_) place();
  Device device = backend_.device();
  auto new_arena = [&](size_t bytes) {
    void* pointer = backend_.allocate(std::max<size_t>(bytes, kAlignment));
    arenas_.push_back({pointer, bytes, /*owned=*/true});
    return static_cast<std::byte*>(pointer);
  };
  auto new_gradient_arena = [&](size_t bytes) {
    void* pointer = gradient_memory_ ? gradient_memory_(std::max<size_t>(bytes, kAlignment)) : nullptr;
    if (pointer == nullptr) return new_arena(bytes);
    arenas_.push_back({pointer, bytes, /*owned=*/false});
    return static_cast<std::byte*>(pointer);
  };

  // Three buffers with identical offsets: parameters, gradients, momentum.
  const size_t element = dtype_size(master_dtype_);
  size_t flat_bytes = static_cast<size_t>(parameter_count_) * element;
  std::byte* params = new_arena(flat_bytes);
  std::byte* grads = has_master_gradients() ? new_gradient_arena(flat_bytes) : nullptr;
  std::byte* momentum = new_arena(flat_bytes);
  flat_parameters_ = Tensor(params, {parameter_count_}, master_dtype_, Layout::nchw, device);
  if (grads) flat_gradients_ = Tensor(grads, {parameter_count_}, master_dtype_, Layout::nchw, device);
  flat_momentum_ = Tensor(momentum, {parameter_count_}, master_dtype_, Layout::nchw, device);
  if (second_moment_)
    flat_second_moment_ =
        Tensor(new_arena(flat_bytes), {parameter_count_}, master_dtype_, Layout::nchw, device);
  std::byte* compute_params = nullptr;
  std::byte* compute_grads = nullptr;
  if (has_compute_copies()) {
    size_t compute_bytes = static_cast<size_t>(compute_count_) * dtype_size(compute_dtype_);
    compute_params = new_arena(compute_bytes);
    compute_grads = new_gradient_arena(compute_bytes);
    compute_parameters_ = Tensor(compute_params, {compute_count_}, compute_dtype_, Layout::nchw, device);
    compute_gradients_ = Tensor(compute_grads, {compute_count_}, compute_dtype_, Layout::nchw, device);
  }
  for (auto& p : parameters_) {
    const bool copy = has_compute_copies() && p.use == ParamUse::compute;
    size_t byte_offset = static_cast<size_t>(p.offset) * (copy ? dtype_size(compute_dtype_) : element);
    p.value->set_data((copy ? compute_params : params) + byte_offset);
    p.grad->set_data((copy ? compute_grads : grads) + byte_offset);
  }

  std::byte* buffers = new_arena(static_cast<size_t>(buffer_count_) * element);
  flat_buffers_ = Tensor(buffers, {buffer_count_}, master_dtype_, Layout::nchw, device);
  for (auto& b : buffers_) b.value->set_data(buffers + static_cast<size_t>(b.offset) * element);

  std::byte* activations = new_arena(activation_bytes_);
  for (size_t i = 0; i < per_step_.size(); ++i) {
    std::byte* data = activations + placements_[i].offset;
    if (per_step_[i].tensor) per_step_[i].tensor->set_data(data);
    if (per_step_[i].pointer) *per_step_[i].pointer = data;
  }
  for (auto& [tensor, of] : aliases_) tensor->set_data(of->data());

  workspace_ = workspace_bytes_ > 0 ? new_arena(workspace_bytes_) : nullptr;
  initialise(seed);
}

void MemoryPlan::copy_to_flat(Tensor& flat, const std::vector<double>& values) {
  if (master_dtype_ == DType::f64) {
    backend_.copy_to_device(flat.data(), values.data(), values.size() * sizeof(double));
  } else {
    std::vector<float> narrow(values.begin(), values.end());
    backend_.copy_to_device(flat.data(), narrow.data(), narrow.size() * sizeof(float));
  }
}

void MemoryPlan::initialise(uint64_t seed) {
  DLB_CHECK(allocated(), "initialise before allocate");
  // Each parameter's values are computed on the host a slab at a time, by all cores (nn/param_init.h:
  // the values do not depend on how the work is split), and copied into the flat buffer; the padding
  // between parameters stays zero.
  backend_.fill(flat_parameters_, 0.0);
  WorkPool pool(usable_cores());
  const size_t element = dtype_size(master_dtype_);
  constexpr int64_t kPiece = int64_t{1} << 18;  // elements one thread computes at a time
  constexpr int64_t kSlab = 64 * kPiece;        // elements staged on the host per copy (64 MiB as f32)
  std::vector<float> staged;
  std::vector<double> widened;  // an f64 master (the reference backend's checks) takes the same values
  for (size_t k = 0; k < parameters_.size(); ++k) {
    const ParameterInfo& p = parameters_[k];
    if (p.init == ParamInit::zeros) continue;
    const uint64_t key = param_stream_key(seed, k);
    const double scale = p.init == ParamInit::he_normal_fan_out ? std::sqrt(2.0 / static_cast<double>(p.fan))
                         : p.init == ParamInit::uniform_fan_in  ? 1.0 / std::sqrt(static_cast<double>(p.fan))
                                                                : p.init_std;
    const int64_t count = p.value->numel();
    for (int64_t first = 0; first < count; first += kSlab) {
      const int64_t slab = std::min(kSlab, count - first);
      staged.resize(static_cast<size_t>(slab));
      pool.run((slab + kPiece - 1) / kPiece, [&](int64_t piece) {
        const int64_t begin = piece * kPiece, end = std::min(slab, begin + kPiece);
        initial_values(p.init, scale, key, first + begin,
                       std::span<float>(staged.data() + begin, static_cast<size_t>(end - begin)));
      });
      std::byte* dst =
          static_cast<std::byte*>(flat_parameters_.data()) + static_cast<size_t>(p.offset + first) * element;
      if (master_dtype_ == DType::f64) {
        widened.assign(staged.begin(), staged.end());
        backend_.copy_to_device(dst, widened.data(), widened.size() * sizeof(double));
      } else {
        backend_.copy_to_device(dst, staged.data(), staged.size() * sizeof(float));
      }
    }
  }
  if (has_master_gradients()) backend_.fill(flat_gradients_, 0.0);
  backend_.fill(flat_momentum_, 0.0);
  if (second_moment_) backend_.fill(flat_second_moment_, 0.0);

  std::vector<double> host_buffers(static_cast<size_t>(buffer_count_));
  for (const auto& b : buffers_) {
    std::fill_n(host_buffers.begin() + b.offset, b.value->numel(), static_cast<double>(b.initial));
  }
  copy_to_flat(flat_buffers_, host_buffers);
  parameters_to_compute();
}

void MemoryPlan::keep_gradients_in_compute_dtype() {
  DLB_CHECK(!placed_, "keep_gradients_in_compute_dtype after placement");
  gradients_in_compute_dtype_ = true;
}

bool MemoryPlan::has_master_gradients() const {
  return !(gradients_in_compute_dtype() && compute_count_ == parameter_count_);
}

ComputeCopies MemoryPlan::compute_copies() {
  ComputeCopies copies;
  if (!has_compute_copies() || compute_count_ == 0) return copies;
  copies.parameters = &compute_parameters_;
  if (gradients_in_compute_dtype()) copies.gradients = &compute_gradients_;
  return copies;
}

std::vector<Tensor> MemoryPlan::stored_gradients() {
  if (!gradients_in_compute_dtype() || compute_count_ == 0) return {flat_gradients_};
  std::vector<Tensor> stored{compute_gradients_};
  if (compute_count_ < parameter_count_) {
    const size_t skipped = static_cast<size_t>(compute_count_) * dtype_size(master_dtype_);
    stored.emplace_back(static_cast<std::byte*>(flat_gradients_.data()) + skipped,
                        std::vector<int64_t>{parameter_count_ - compute_count_}, master_dtype_, Layout::nchw,
                        flat_gradients_.device());
  }
  return stored;
}

void MemoryPlan::gradients_to_master() {
  DLB_CHECK(!gradients_in_compute_dtype(), "gradients_to_master: the plan keeps no FP32 copy of them");
  if (!has_compute_copies() || compute_count_ == 0) return;
  Tensor leading(flat_gradients_.data(), {compute_count_}, master_dtype_, Layout::nchw,
                 flat_gradients_.device());
  backend_.cast(compute_gradients_, leading);
}

void MemoryPlan::parameters_to_compute() {
  if (!has_compute_copies() || compute_count_ == 0) return;
  Tensor leading(flat_parameters_.data(), {compute_count_}, master_dtype_, Layout::nchw,
                 flat_parameters_.device());
  backend_.cast(leading, compute_parameters_);
}

std::vector<ParamSegment> MemoryPlan::segments(bool decay_norm_and_bias) const {
  // Neighbouring parameters with the same rule merge into one segment (padding included: its gradient is
  // zero, so updating it is harmless).
  std::vector<ParamSegment> result;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const auto& p = parameters_[i];
    bool decay = decay_norm_and_bias || !p.is_norm_or_bias;
    int64_t end = i + 1 < parameters_.size() ? parameters_[i + 1].offset : parameter_count_;
    if (!result.empty() && result.back().weight_decay == decay) {
      result.back().count = end - result.back().offset;
    } else {
      result.push_back({p.offset, end - p.offset, decay});
    }
  }
  return result;
}

}  // namespace dlbench
