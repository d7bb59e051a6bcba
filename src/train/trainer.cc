#include "train/trainer.h"

#include <fmt/format.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/timeline.h"
#include "core/timer.h"

namespace dlbench {

Trainer::Trainer(Backend& backend, Model& model, const RunConfig& config, parallel::Communicator* comm)
    : backend_(backend),
      model_(model),
      batch_(*config.batch_size),
      accumulate_steps_(config.accumulate_steps),
      comm_(comm),
      ranks_(comm ? comm->size() : 1) {
  Network& network = *model_.net;
  // Gradients are exchanged when there is more than one rank. A one-rank group (`--gpus 1 --launcher
  // threads`, `mpirun -np 1`) has nothing to sum and runs as `local` does: on an H200 the buckets' fork to
  // the communication stream and NCCL's one-rank calls inside backward cost 0.5 ms of a 34 ms ResNet-50
  // fp16 step with nothing sent (docs/PERFORMANCE.md), which would handicap every 1-GPU baseline.
  const bool exchanges = comm_ && comm_->size() > 1;
  // The gradients in memory the communicator sums fastest, where it has some (--nccl-symmetric).
  if (exchanges) {
    network.memory().set_gradient_memory([this](size_t bytes) { return comm_->allocate_window(bytes); });
  } else {
    // One rank: the update reads FP16/BF16 gradients where the backward wrote them (no FP32 copy).
    network.memory().keep_gradients_in_compute_dtype();
  }
  prepare_optimizer_memory(network.memory(), config);
  network.finalize(config.seed);
  if (exchanges) {
    // Every rank starts from rank 0's weights and statistics (the same seed gives the same ones; this
    // makes it so whatever the ranks were built with).
    MemoryPlan& memory = network.memory();
    comm_->broadcast(memory.flat_parameters(), 0);
    comm_->broadcast(memory.flat_buffers(), 0);
    memory.parameters_to_compute();
    exchange_ = std::make_unique<parallel::GradientExchange>(
        backend, memory, *comm_, static_cast<size_t>(config.parallel.bucket_mb * (1 << 20)),
        config.parallel.allreduce_precision == AllreducePrecision::compute);
    network.set_backward_observer([this](int layer) { exchange_->layer_done(layer); });
  }
  optimizer_ = make_optimizer(backend, network.memory(), config);
  if (model_.family == ModelFamily::gpt) {
    staging_images_ = HostBuffer({batch_, model_.seq_len}, DType::i32);
    staging_labels_ = HostBuffer({batch_, model_.seq_len}, DType::i32);
    config_digest_ = fmt::format("{} sequences of {} tokens, vocabulary {}", model_.name, model_.seq_len,
                                 model_.num_classes);
  } else {
    const Tensor& images = model_.images->value;
    staging_images_ = HostBuffer(images.dims(), DType::f32, images.layout());
    staging_labels_ = HostBuffer({batch_}, DType::i32);
    config_digest_ = fmt::format("{} input {}x{}x{} classes {}", model_.name, images.c(), images.h(),
                                 images.w(), model_.num_classes);
    if (images.dtype() != DType::f32) device_staging_ = backend.allocate(staging_images_.tensor().bytes());
  }
  dynamic_loss_scale_ = config.optimizer.loss_scaling == LossScaling::dynamic;
  fp8_scales_pending_ = network.fp8() != nullptr;
  StepScalars initial;
  initial.loss_scale = static_cast<float>(config.optimizer.loss_scale);
  initial.dynamic = dynamic_loss_scale_ ? 1 : 0;
  initial.growth_interval =
      static_cast<int32_t>(std::min<int64_t>(config.optimizer.loss_scale_growth_interval, INT32_MAX));
  scalars_ = static_cast<StepScalars*>(backend.allocate(sizeof(StepScalars)));
  backend.copy_to_device(scalars_, &initial, sizeof initial);
  network.set_loss_scale_source(&scalars_->loss_scale);  // an address in device memory, not dereferenced here
}

Trainer::~Trainer() {
  recorded_step_.reset();
  if (device_staging_) backend_.deallocate(device_staging_);
  backend_.deallocate(scalars_);
}

Tensor Trainer::scalar_view(size_t offset, DType dtype) const {
  return Tensor(reinterpret_cast<std::byte*>(scalars_) + offset, {1}, dtype, Layout::nchw, backend_.device());
}

StepScalars Trainer::read_scalars() const {
  StepScalars s;
  backend_.copy_to_host(&s, scalars_, sizeof s);
  return s;
}

void Trainer::load_batch(const Dataset& data, std::span<const int64_t> indices) {
  DLB_CHECK(!indices.empty() && static_cast<int64_t>(indices.size()) <= batch_, "batch of {} samples for {}",
            indices.size(), batch_);
  TimelineSpan span("load batch", "data");  // host work, but ordered with the compute stream's copies
  std::vector<int64_t> padded(indices.begin(), indices.end());
  padded.resize(static_cast<size_t>(batch_), indices[0]);
  data.gather(padded, staging_images_.tensor(), staging_labels_.tensor());
  load_batch(staging_images_.tensor(), staging_labels_.tensor());
}

void Trainer::load_batch(const Tensor& host_images, const Tensor& host_labels) {
  Tensor& images = model_.images->value;
  DLB_CHECK(host_images.numel() == images.numel() && host_labels.numel() == model_.labels->value.numel(),
            "load_batch: a host batch of another shape");
  if (host_images.dtype() == images.dtype()) {
    // Written in the compute dtype by the data pipeline (or FP32 for an FP32 network): one copy.
    DLB_CHECK(host_images.layout() == images.layout(), "load_batch: host batch in another layout");
    backend_.copy_to_device(images.data(), host_images.data(), images.bytes());
  } else {
    DLB_CHECK(host_images.dtype() == DType::f32, "load_batch: host images in {}",
              dtype_name(host_images.dtype()));
    // Data arrives in FP32; the cast to the compute dtype runs on the device.
    Tensor staged(device_staging_, images.dims(), DType::f32, images.layout(), backend_.device());
    backend_.copy_to_device(device_staging_, host_images.data(), staged.bytes());
    backend_.cast(staged, images);
  }
  backend_.copy_to_device(model_.labels->value.data(), host_labels.data(), model_.labels->value.bytes());
}

void Trainer::load_tokens(const TokenSource& data, std::span<const int64_t> starts) {
  DLB_CHECK(model_.family == ModelFamily::gpt, "load_tokens: {} reads images", model_.name);
  DLB_CHECK(!starts.empty() && static_cast<int64_t>(starts.size()) <= batch_, "batch of {} windows for {}",
            starts.size(), batch_);
  TimelineSpan span("load batch", "data");
  std::vector<int64_t> padded(starts.begin(), starts.end());
  padded.resize(static_cast<size_t>(batch_), starts[0]);
  data.gather(padded, staging_images_.tensor(), staging_labels_.tensor());
  backend_.copy_to_device(model_.tokens->value.data(), staging_images_.tensor().data(),
                          model_.tokens->value.bytes());
  backend_.copy_to_device(model_.targets->value.data(), staging_labels_.tensor().data(),
                          model_.targets->value.bytes());
}

float Trainer::step(const std::function<void(int64_t)>& feed, double lr, bool read_loss) {
  // The rate goes to the device asynchronously, ahead of the step that reads it.
  Tensor lr_slot = scalar_view(offsetof(StepScalars, lr), DType::f32);
  backend_.fill(lr_slot, lr);
  // A traced step runs op by op, so that the timeline sees every layer and bucket.
  if (recorded_step_ && !Timeline::current()) {
    feed(0);
    recorded_step_->replay();
    if (comm_) comm_->watch_compute_stream();  // the recorded collectives are watched for stalls too
    return read_loss ? this->read_loss() : NAN;
  }
  if (fp8_scales_pending_) calibrate_fp8_scales(feed);
  float loss_sum = 0.f;
  for (int64_t micro = 0; micro < accumulate_steps_; ++micro) {
    feed(micro);
    forward_backward(micro);
    if (read_loss) loss_sum += this->read_loss();
  }
  finish_step();
  // The loss is computed from scaled logits' gradients only: its value is unscaled.
  return read_loss ? loss_sum / static_cast<float>(accumulate_steps_) : NAN;
}

void Trainer::calibrate_fp8_scales(const std::function<void(int64_t)>& feed) {
  Network& network = *model_.net;
  feed(0);
  network.set_parameter_grad_mode(Accumulate::overwrite);  // the step's first micro-batch overwrites them
  network.forward(Phase::train);
  network.backward();  // no exchange armed: nothing leaves for the other ranks
  network.update_fp8_scales();
  fp8_scales_pending_ = false;
}

void Trainer::forward_backward(int64_t micro) {
  Network& network = *model_.net;
  // The first micro-batch overwrites the parameter gradients, the others add to them.
  network.set_parameter_grad_mode(micro == 0 ? Accumulate::overwrite : Accumulate::add);
  // Gradients leave for the other ranks during the last micro-batch's backward, once complete.
  if (exchange_ && micro + 1 == accumulate_steps_) exchange_->arm();
  network.forward(Phase::train);  // ends with the loss
  network.backward();             // starts from dLoss/dlogits
}

void Trainer::finish_step() {
  MemoryPlan& memory = model_.net->memory();
  // FP8 delayed scaling: this step's amaxes make the next step's scales.
  model_.net->update_fp8_scales();
  // The sum over the ranks, in the FP32 master gradients; one rank's gradients stay where they are.
  if (exchange_) exchange_->finish();
  // The summed gradients are the same on every rank, so every rank takes the same overflow decision.
  if (dynamic_loss_scale_) {
    Tensor overflow = scalar_view(offsetof(StepScalars, overflow), DType::i32);
    for (const Tensor& gradients : memory.stored_gradients()) backend_.check_finite(gradients, overflow);
  }
  // Skipped on the device when a gradient overflowed; divides by the loss scale it finds there.
  // The mean over micro-batches and ranks. Mixed precision: the update also refreshes the FP16/BF16
  // copies of the weights (MemoryPlan::compute_copies). A traced step shows it (with the gradient norm it
  // clips by) as one span.
  TimelineSpan span(kOptimizerSpan, "compute");
  optimizer_->step(1.f / static_cast<float>(accumulate_steps_ * ranks_), scalars_);
  if (dynamic_loss_scale_) backend_.update_loss_scale(scalars_);
}

double Trainer::time_gradient_exchange(int iterations) {
  if (!exchange_ || iterations < 1) return 0;
  backend_.synchronize();
  comm_->barrier();
  WallTimer timer;
  for (int i = 0; i < iterations; ++i) {
    exchange_->arm();
    exchange_->finish();
  }
  backend_.synchronize();
  return timer.milliseconds() / iterations;
}

bool Trainer::record_step() {
  if (accumulate_steps_ > 1) return false;
  recorded_step_ = backend_.capture([this] {
    forward_backward(0);
    finish_step();
  });
  return recorded_step_ != nullptr;
}

float Trainer::read_loss() {
  float loss = 0.f;
  backend_.copy_to_host(&loss, model_.loss->output()->value.data(), sizeof(float));
  return loss;
}

std::optional<double> Trainer::evaluate(const Dataset& data, int64_t total,
                                        const std::function<bool(int64_t done, int64_t count)>& keep_going) {
  return evaluate(
      std::min(total, data.size()),
      [&](int64_t start, int64_t count) {
        std::vector<int64_t> indices(static_cast<size_t>(count));
        for (int64_t i = 0; i < count; ++i) indices[static_cast<size_t>(i)] = start + i;
        load_batch(data, indices);
        return std::span<const int32_t>(staging_labels_.ptr<int32_t>(), static_cast<size_t>(count));
      },
      keep_going);
}

std::optional<double> Trainer::evaluate(int64_t total, const BatchLoader& load,
                                        const std::function<bool(int64_t done, int64_t count)>& keep_going) {
  Network& network = *model_.net;
  const int64_t classes = model_.num_classes;
  std::vector<float> logits(static_cast<size_t>(batch_ * classes));
  int64_t correct = 0;
  for (int64_t start = 0; start < total; start += batch_) {
    if (start > 0 && !keep_going(start, total)) return std::nullopt;
    int64_t count = std::min(batch_, total - start);
    const std::span<const int32_t> labels = load(start, count);
    DLB_CHECK(static_cast<int64_t>(labels.size()) >= count, "evaluate: {} labels for {} samples",
              labels.size(), count);
    network.forward(Phase::inference);
    const Tensor& out = model_.logits->value;
    if (out.dtype() == DType::f32) {
      backend_.copy_to_host(logits.data(), out.data(), out.bytes());
    } else {
      // FP16/BF16 logits are widened on the device, reusing the input staging buffer (large enough).
      Tensor wide(device_staging_, out.dims(), DType::f32, Layout::nchw, backend_.device());
      DLB_CHECK(wide.bytes() <= staging_images_.tensor().bytes(), "logits larger than the input batch");
      backend_.cast(out, wide);
      backend_.copy_to_host(logits.data(), wide.data(), wide.bytes());
    }
    for (int64_t i = 0; i < count; ++i) {
      const float* row = logits.data() + i * classes;
      int64_t best = std::max_element(row, row + classes) - row;
      if (best == labels[static_cast<size_t>(i)]) ++correct;
    }
  }
  return total > 0 ? static_cast<double>(correct) / static_cast<double>(total) : 0.0;
}

std::optional<double> Trainer::evaluate_loss(
    const TokenSource& data, std::span<const int64_t> starts,
    const std::function<bool(int64_t done, int64_t count)>& keep_going) {
  DLB_CHECK(!starts.empty(), "evaluate_loss: no windows");
  const auto total = static_cast<int64_t>(starts.size());
  double sum = 0;
  int64_t batches = 0;
  std::vector<int64_t> batch(static_cast<size_t>(batch_));
  for (int64_t first = 0; first < total; first += batch_) {
    if (first > 0 && !keep_going(first, total)) return std::nullopt;
    // A short last batch is filled up from the start, so that every batch is a full one's mean.
    for (int64_t i = 0; i < batch_; ++i)
      batch[static_cast<size_t>(i)] = starts[static_cast<size_t>((first + i) % total)];
    load_tokens(data, batch);
    model_.net->forward(Phase::inference);
    sum += read_loss();
    ++batches;
  }
  return sum / static_cast<double>(batches);
}

Checkpoint Trainer::make_checkpoint(int64_t step, int64_t epoch) const {
  MemoryPlan& memory = model_.net->memory();
  Checkpoint c;
  c.model = model_.name;
  c.config_digest = config_digest_;
  c.step = step;
  c.epoch = epoch;
  c.loss_scale = read_scalars().loss_scale;
  auto read = [&](Tensor& flat, std::vector<float>& out) {
    out.resize(static_cast<size_t>(flat.numel()));
    backend_.copy_to_host(out.data(), flat.data(), flat.bytes());
  };
  read(memory.flat_parameters(), c.parameters);
  read(memory.flat_momentum(), c.momentum);
  read(memory.flat_buffers(), c.buffers);
  // FP8's delayed scaling (scales and amax histories) is state that is not trained, like a batch norm's
  // running statistics: it follows the buffers, so that a resumed run quantizes as the stopped one would.
  if (const Fp8Scaling* fp8 = model_.net->fp8()) {
    const std::vector<float> state = fp8->state();
    c.buffers.insert(c.buffers.end(), state.begin(), state.end());
  }
  if (memory.has_second_moment()) read(memory.flat_second_moment(), c.second_moment);
  return c;
}

void Trainer::restore(const Checkpoint& c) {
  MemoryPlan& memory = model_.net->memory();
  const Fp8Scaling* fp8 = model_.net->fp8();
  const size_t buffer_count = static_cast<size_t>(memory.buffer_count());
  check_checkpoint_matches(c, model_.name, static_cast<size_t>(memory.parameter_count()),
                           buffer_count + (fp8 ? fp8->state_floats() : 0));
  DLB_REQUIRE(c.config_digest == config_digest_,
              "checkpoint was made for {}, this run is {}; resume with the "
              "same model and data",
              c.config_digest, config_digest_);
  backend_.copy_to_device(memory.flat_parameters().data(), c.parameters.data(),
                          c.parameters.size() * sizeof(float));
  backend_.copy_to_device(memory.flat_momentum().data(), c.momentum.data(),
                          c.momentum.size() * sizeof(float));
  backend_.copy_to_device(memory.flat_buffers().data(), c.buffers.data(), buffer_count * sizeof(float));
  if (fp8) model_.net->fp8()->load_state(c.buffers.data() + buffer_count, c.buffers.size() - buffer_count);
  if (memory.has_second_moment()) {
    DLB_REQUIRE(c.second_moment.size() == c.parameters.size(),
                "checkpoint holds no AdamW second moment (it was trained with SGD); resume with the same "
                "--optimizer");
    backend_.copy_to_device(memory.flat_second_moment().data(), c.second_moment.data(),
                            c.second_moment.size() * sizeof(float));
  }
  // AdamW's bias corrections go on from the checkpoint's step (one update per optimizer step; steps an
  // fp16 overflow skipped count here, which moves 1 - beta^t by less than beta^t itself).
  optimizer_->set_steps_taken(c.step);
  fp8_scales_pending_ = false;  // the checkpoint's scales go on
  StepScalars scalars = read_scalars();
  scalars.loss_scale = c.loss_scale;
  scalars.good_steps = 0;
  backend_.copy_to_device(scalars_, &scalars, sizeof scalars);
  memory.parameters_to_compute();
}

}  // namespace dlbench
