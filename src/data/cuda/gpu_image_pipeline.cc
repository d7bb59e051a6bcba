// The GPU input pipeline of data/gpu_image_pipeline.h: a read thread, a decode thread, `depth` device
// buffers, and events between the decode stream and the caller's compute stream.
//
// Batch n lives in slot n % depth from its read to the copy out of it. The slot's states, in order:
//   free -> read (bytes, headers, crops; read thread) -> ready (decoded and augmented on the decode stream,
//   `ready` recorded; decode thread) -> handed out (the caller's stream waits for `ready`, copies, records
//   `copied`; next()) -> free again once `copied` has completed (the read thread waits for it on the host
//   before it rewrites the slot's bytes and labels, which the copies and nvJPEG may still be reading).
#include "data/gpu_image_pipeline.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "backend/cuda/kernel_check.h"
#include "core/status.h"
#include "core/thread_name.h"
#include "core/work_pool.h"
#include "data/cuda/image_augment.h"
#include "data/cuda/jpeg_batch_decoder.h"
#include "data/jpeg_image.h"
#include "data/nvjpeg_library.h"

namespace dlbench {
namespace {

struct Clock {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
};

// One sample of a batch once read: the file that was finally used (after replacements of bad ones).
struct Sample {
  int64_t index = 0;
  uint64_t attempt = 0;  // replacements so far (the draw number's attempt)
  std::vector<uint8_t> bytes;
  JpegInfo info;
  SampleCrop crop;
  bool to_cpu = false;  // libjpeg-turbo decodes it (the GPU cannot give what the network takes)
  RgbImage cpu_image;   // its pixels then, uploaded into the slot's fallback buffer
};

struct Slot {
  std::vector<Sample> samples;
  std::vector<int32_t> labels;     // filled by the read thread
  int32_t* host_labels = nullptr;  // pinned: what next() copies from
  void* images = nullptr;          // device: the augmented batch
  uint8_t* fallback = nullptr;     // device: the CPU-decoded images of the batch
  size_t fallback_bytes = 0;
  cudaEvent_t ready = nullptr;   // decode stream: the batch is in `images`
  cudaEvent_t copied = nullptr;  // caller's stream: the batch has been copied out
  bool handed_out = false;       // `copied` was recorded at least once
  int64_t ready_batch = -1;      // the batch last made ready in it
};

class NvjpegImagePipeline final : public GpuImagePipeline {
 public:
  NvjpegImagePipeline(const ImageDataset& data, GpuPipelineOptions options, const NvjpegLibrary& library)
      : data_(data), options_(std::move(options)), library_(library) {
    const ImageDatasetOptions& image = data_.options();
    const std::vector<int64_t>& dims = options_.image_dims;
    DLB_CHECK(dims.size() == 4 && dims[1] == image.channels && dims[2] == image.image_size &&
                  dims[3] == image.image_size,
              "GPU pipeline: input dims do not match the data set's samples");
    DLB_CHECK(options_.depth >= 2 && options_.count >= 0, "GPU pipeline: depth {} count {}", options_.depth,
              options_.count);
    DLB_CHECK(options_.dtype == DType::f32 || options_.dtype == DType::f16 || options_.dtype == DType::bf16,
              "GPU pipeline: images in {}", dtype_name(options_.dtype));
    batch_ = dims[0];
    DLB_CHECK(batch_ >= 1 && batch_ <= 65535, "GPU pipeline: batch of {}", batch_);
    image_bytes_ = static_cast<size_t>(dims[0] * dims[1] * dims[2] * dims[3]) * dtype_size(options_.dtype);

    DLB_CHECK(options_.decode_threads >= 1 && options_.depth > options_.decode_threads,
              "GPU pipeline: {} decode threads and depth {}", options_.decode_threads, options_.depth);

    DLB_KERNEL_CHECK(cudaSetDevice(options_.device));
    int least = 0, greatest = 0;
    DLB_KERNEL_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cuda::JpegBatchDecoderOptions decoder_options;
    decoder_options.backend =
        options_.hardware ? cuda::JpegBackendChoice::hardware_first : cuda::JpegBackendChoice::cuda_only;
    workers_.resize(static_cast<size_t>(options_.decode_threads));
    for (Worker& w : workers_) {
      // The greatest priority: the batch this stream makes is what the next step waits for, and its work
      // (nvJPEG's and the augmentation) is a few percent of the GPU's. Measured no different from the
      // lowest in training (ResNet-50 fp16 from JPEGs on an H200: 81-86% of synthetic either way).
      DLB_KERNEL_CHECK(cudaStreamCreateWithPriority(&w.stream, cudaStreamNonBlocking, greatest));
      for (Decoder& d : w.decoders) {
        d.decoder = std::make_unique<cuda::JpegBatchDecoder>(library_, decoder_options);
        DLB_KERNEL_CHECK(cudaEventCreateWithFlags(&d.done, cudaEventDisableTiming | cudaEventBlockingSync));
      }
      w.augmenter = std::make_unique<cuda::ImageAugmenter>(static_cast<int>(batch_));
    }
    slots_.resize(static_cast<size_t>(options_.depth));
    for (Slot& slot : slots_) {
      slot.samples.resize(static_cast<size_t>(batch_));
      slot.labels.resize(static_cast<size_t>(batch_));
      void* labels = nullptr;
      DLB_KERNEL_CHECK(cudaMallocHost(&labels, static_cast<size_t>(batch_) * sizeof(int32_t)));
      slot.host_labels = static_cast<int32_t*>(labels);
      DLB_KERNEL_CHECK(cudaMalloc(&slot.images, image_bytes_));
      DLB_KERNEL_CHECK(cudaEventCreateWithFlags(&slot.ready, cudaEventDisableTiming));
      // The read thread waits for `copied` on the host: blocking, so that the wait costs no CPU.
      DLB_KERNEL_CHECK(
          cudaEventCreateWithFlags(&slot.copied, cudaEventDisableTiming | cudaEventBlockingSync));
    }
    readers_ = std::make_unique<WorkPool>(image.threads);
    read_thread_ = std::thread([this] {
      name_this_thread("dlb-jpeg-read");
      guarded([this] { read_loop(); }, &read_);
    });
    for (size_t w = 0; w < workers_.size(); ++w)
      workers_[w].thread = std::thread([this, w] {
        name_this_thread("dlb-jpeg-dec" + std::to_string(w));
        guarded([this, w] { decode_loop(w); }, &workers_[w].batch);
      });
  }

  ~NvjpegImagePipeline() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    read_thread_.join();
    for (Worker& w : workers_) w.thread.join();
    readers_.reset();
    // Nothing may still read or write the buffers: the decode streams' work and the copies out.
    cudaSetDevice(options_.device);
    for (Worker& w : workers_) cudaStreamSynchronize(w.stream);
    for (Slot& slot : slots_) {
      if (slot.handed_out) cudaEventSynchronize(slot.copied);
      cudaFreeHost(slot.host_labels);
      cudaFree(slot.images);
      cudaFree(slot.fallback);
      cudaEventDestroy(slot.ready);
      cudaEventDestroy(slot.copied);
    }
    for (Worker& w : workers_) {
      w.augmenter.reset();
      for (Decoder& d : w.decoders) {
        d.decoder.reset();
        cudaEventDestroy(d.done);
      }
      cudaStreamDestroy(w.stream);
    }
  }

  std::span<const int32_t> next(Tensor& images, Tensor& labels, void* stream) override {
    DLB_CHECK(images.bytes() == image_bytes_ && images.dtype() == options_.dtype &&
                  images.layout() == options_.layout && images.device().kind == DeviceKind::cuda,
              "GPU pipeline: next() into a tensor of another shape, dtype, layout or device");
    DLB_CHECK(
        labels.dtype() == DType::i32 && labels.numel() == batch_ && labels.device().kind == DeviceKind::cuda,
        "GPU pipeline: labels tensor of the wrong shape");
    std::unique_lock<std::mutex> lock(mutex_);
    DLB_CHECK(handed_ < options_.count, "GPU pipeline: batch {} of {}", handed_ + 1, options_.count);
    const int64_t n = handed_;
    const auto start = std::chrono::steady_clock::now();
    Slot& slot = slots_[static_cast<size_t>(n % options_.depth)];
    changed_.wait(lock, [&] { return slot.ready_batch == n || (failure_ && failed_batch_ <= n); });
    waited_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (slot.ready_batch != n) std::rethrow_exception(failure_);
    auto* s = static_cast<cudaStream_t>(stream);
    DLB_KERNEL_CHECK(cudaStreamWaitEvent(s, slot.ready, 0));
    DLB_KERNEL_CHECK(cudaMemcpyAsync(images.data(), slot.images, image_bytes_, cudaMemcpyDeviceToDevice, s));
    DLB_KERNEL_CHECK(cudaMemcpyAsync(labels.data(), slot.host_labels,
                                     static_cast<size_t>(batch_) * sizeof(int32_t), cudaMemcpyHostToDevice,
                                     s));
    DLB_KERNEL_CHECK(cudaEventRecord(slot.copied, s));
    slot.handed_out = true;
    handed_labels_.assign(slot.host_labels, slot.host_labels + batch_);
    handed_ = n + 1;
    changed_.notify_all();
    return handed_labels_;
  }

  double waited_seconds() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return waited_seconds_;
  }

  GpuPipelineStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  std::string description() const override {
    const cuda::JpegBatchDecoder& decoder = *workers_[0].decoders[0].decoder;
    return fmt::format("nvJPEG {}, {}", library_.version(),
                       decoder.has_hardware() ? "the GPU's JPEG engines first"
                                              : "its CUDA backend (" + decoder.hardware_note() + ")");
  }

 private:
  // Runs a thread's loop; what it throws stops the pipeline at the batch it was building, for next() to
  // rethrow when it gets there.
  // `on` is the batch the thread is on (for the read thread: its count of batches read).
  void guarded(const std::function<void()>& loop, const int64_t* on) {
    try {
      DLB_KERNEL_CHECK(cudaSetDevice(options_.device));
      loop();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!failure_ || *on < failed_batch_) {
        failure_ = std::current_exception();
        failed_batch_ = *on;
      }
      stop_ = true;
      changed_.notify_all();
    }
  }

  // Reads one sample: its bytes and header, replacing bad files by the next sample as the CPU path does.
  // `attempt`: the draw's first attempt (0, or the replacements already made for this sample).
  void read_sample(int64_t call, int64_t k, int64_t index, uint64_t attempt, Sample& sample) {
    const ImageDatasetOptions& image = data_.options();
    const EncodedImageSource& source = data_.source();
    const int64_t total = source.size();
    std::string error;
    for (;; ++attempt) {
      DLB_CHECK(index >= 0 && index < total, "GPU pipeline: sample {} of {}", index, total);
      bool ok = source.read(index, sample.bytes, error);
      if (ok && !read_jpeg_info(sample.bytes, sample.info, error)) {
        error = fmt::format("{}: {}", source.where(index), error);
        ok = false;
      }
      if (ok) {
        sample.index = index;
        sample.attempt = attempt;
        sample.crop = choose_sample_crop(image, sample.info.width, sample.info.height,
                                         sample_draw(static_cast<uint64_t>(call), k, attempt));
        // nvJPEG gives RGB: a gray network takes a gray file's one channel from it, but a colour file's
        // luminance comes from libjpeg-turbo, as on the CPU path.
        sample.to_cpu = image.channels == 1 && sample.info.components != 1;
        return;
      }
      if (image.strict) throw_user_error("{}", error);
      data_.note_bad(index, error);
      count_skipped();
      DLB_REQUIRE(attempt < 1000, "{}: no decodable image among 1000 samples in a row (the last: {})",
                  source.description(), error);
      index = (index + 1) % total;
    }
  }

  void count_skipped() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.skipped;
  }

  void read_loop() {
    const auto depth = static_cast<int64_t>(options_.depth);
    for (int64_t n = 0; n < options_.count; ++n) {
      Clock idle;
      {
        // Slot n % depth is free once batch n - depth was handed out.
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return stop_ || n < depth || handed_ > n - depth; });
        if (stop_) return;
      }
      Slot& slot = slots_[static_cast<size_t>(n % depth)];
      if (slot.handed_out) DLB_KERNEL_CHECK(cudaEventSynchronize(slot.copied));
      const double idle_seconds = idle.seconds();
      Clock busy;
      std::vector<int64_t> indices = options_.indices(n);
      DLB_CHECK(static_cast<int64_t>(indices.size()) == batch_, "GPU pipeline: batch of {}", indices.size());
      readers_->run(batch_, [&](int64_t k) {
        Sample& sample = slot.samples[static_cast<size_t>(k)];
        read_sample(n, k, indices[static_cast<size_t>(k)], 0, sample);
        slot.labels[static_cast<size_t>(k)] = data_.source().label(sample.index);
      });
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.read_idle_seconds += idle_seconds;
      stats_.read_seconds += busy.seconds();
      read_ = n + 1;
      changed_.notify_all();
    }
  }

  // Decodes sample k on the CPU (after nvJPEG failed it, or for a gray network), replacing it by the next
  // samples while the file is bad: false never; throws under --strict as the CPU path does.
  void decode_on_cpu(int64_t n, int64_t k, Sample& sample) {
    const ImageDatasetOptions& image = data_.options();
    const EncodedImageSource& source = data_.source();
    std::string error;
    for (;;) {
      if (decode_jpeg(sample.bytes, sample.crop.scale_eighths, image.channels, sample.cpu_image, error))
        return;
      error = fmt::format("{}: {}", source.where(sample.index), error);
      if (image.strict) throw_user_error("{}", error);
      data_.note_bad(sample.index, error);
      count_skipped();
      DLB_REQUIRE(sample.attempt < 1000, "{}: no decodable image among 1000 samples in a row (the last: {})",
                  source.description(), error);
      // The replacement takes the draw the CPU path would give it, and is decoded here too.
      read_sample(n, k, (sample.index + 1) % source.size(), sample.attempt + 1, sample);
    }
  }

  // Decode thread w takes batches w, w + W, w + 2W, ... (W threads), each on its own stream.
  void decode_loop(size_t w) {
    Worker& worker = workers_[w];
    cudaStream_t stream = worker.stream;
    const ImageDatasetOptions& image = data_.options();
    const auto threads = static_cast<int64_t>(workers_.size());
    std::vector<std::span<const uint8_t>> jpegs;
    std::vector<int64_t> gpu_samples;  // which sample each of `jpegs` is
    std::vector<cuda::AugmentImage> augment(static_cast<size_t>(batch_));
    for (int64_t n = static_cast<int64_t>(w); n < options_.count; n += threads) {
      Clock idle;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        worker.batch = n;
        changed_.wait(lock, [&] { return stop_ || read_ > n; });
        if (stop_) return;
      }
      GpuPipelineStats counts;
      counts.decode_idle_seconds = idle.seconds();
      Clock decode_clock;
      Slot& slot = slots_[static_cast<size_t>(n % options_.depth)];
      jpegs.clear();
      gpu_samples.clear();
      for (int64_t k = 0; k < batch_; ++k) {
        const Sample& sample = slot.samples[static_cast<size_t>(k)];
        if (sample.to_cpu) continue;
        jpegs.emplace_back(sample.bytes);
        gpu_samples.push_back(k);
      }
      // A thread's batches alternate between its two decoders, so that decoding one batch never writes
      // the arena that the previous one's augmentation still reads: the JPEG engines are not bound to start
      // after the work already queued on the stream. A decoder is free once its last batch is augmented.
      Decoder& decoder = worker.decoders[(n / threads) % 2];
      if (decoder.used) {
        Clock gpu_wait;
        DLB_KERNEL_CHECK(cudaEventSynchronize(decoder.done));
        counts.gpu_wait_seconds = gpu_wait.seconds();
      }
      const std::span<const cuda::DecodedJpeg> decoded = decoder.decoder->decode(jpegs, stream);
      counts.decode_seconds = decode_clock.seconds() - counts.gpu_wait_seconds;
      Clock cpu_clock;
      std::vector<int64_t> cpu_samples;
      for (size_t i = 0; i < decoded.size(); ++i) {
        const int64_t k = gpu_samples[i];
        Sample& sample = slot.samples[static_cast<size_t>(k)];
        if (!decoded[i].decoded()) {
          sample.to_cpu = true;
          continue;
        }
        (decoded[i].status == cuda::JpegDecodeStatus::hardware ? counts.decoded_on_hardware
                                                               : counts.decoded_on_gpu_cuda)++;
        augment[static_cast<size_t>(k)] = cuda::augment_image(
            decoded[i], sample.crop.box, sample.crop.flip ? cuda::Flip::horizontal : cuda::Flip::none);
      }
      // The CPU's share: decoded here, then one upload into the slot's fallback buffer.
      size_t fallback_bytes = 0;
      for (int64_t k = 0; k < batch_; ++k) {
        Sample& sample = slot.samples[static_cast<size_t>(k)];
        if (!sample.to_cpu) continue;
        decode_on_cpu(n, k, sample);
        slot.labels[static_cast<size_t>(k)] = data_.source().label(sample.index);
        cpu_samples.push_back(k);
        fallback_bytes += (sample.cpu_image.pixels.size() + 255) / 256 * 256;
      }
      if (fallback_bytes > slot.fallback_bytes) {
        DLB_KERNEL_CHECK(cudaStreamSynchronize(stream));
        DLB_KERNEL_CHECK(cudaFree(slot.fallback));
        slot.fallback = nullptr;
        slot.fallback_bytes = 0;
        void* fallback = nullptr;
        DLB_KERNEL_CHECK(cudaMalloc(&fallback, fallback_bytes));
        slot.fallback = static_cast<uint8_t*>(fallback);
        slot.fallback_bytes = fallback_bytes;
      }
      size_t offset = 0;
      for (int64_t k : cpu_samples) {
        Sample& sample = slot.samples[static_cast<size_t>(k)];
        const RgbImage& pixels = sample.cpu_image;
        uint8_t* place = slot.fallback + offset;
        offset += (pixels.pixels.size() + 255) / 256 * 256;
        DLB_KERNEL_CHECK(cudaMemcpyAsync(place, pixels.pixels.data(), pixels.pixels.size(),
                                         cudaMemcpyHostToDevice, stream));
        cuda::AugmentImage& a = augment[static_cast<size_t>(k)];
        a = {};
        a.pixels = place;
        a.width = pixels.width;
        a.height = pixels.height;
        a.channels = pixels.channels;
        a.pitch = pixels.width * pixels.channels;
        a.scale_eighths = sample.crop.scale_eighths;
        a.box = sample.crop.box;
        a.flip = sample.crop.flip ? cuda::Flip::horizontal : cuda::Flip::none;
        ++counts.decoded_on_cpu;
      }
      counts.cpu_decode_seconds = cpu_clock.seconds();
      std::copy(slot.labels.begin(), slot.labels.end(), slot.host_labels);
      cuda::AugmentOutput out;
      out.data = slot.images;
      out.width = image.image_size;
      out.height = image.image_size;
      out.channels = image.channels;
      out.dtype = options_.dtype;
      out.layout = options_.layout;
      Clock augment_clock;
      worker.augmenter->run(augment, out, image.normalization, stream);
      DLB_KERNEL_CHECK(cudaEventRecord(slot.ready, stream));
      DLB_KERNEL_CHECK(cudaEventRecord(decoder.done, stream));
      decoder.used = true;
      counts.augment_seconds = augment_clock.seconds();
      // The host copies of the CPU images and the compressed bytes stay in the slot until it is reused,
      // after `copied`, which follows `ready`: nvJPEG and the uploads are done with them by then.
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.decoded_on_hardware += counts.decoded_on_hardware;
      stats_.decoded_on_gpu_cuda += counts.decoded_on_gpu_cuda;
      stats_.decoded_on_cpu += counts.decoded_on_cpu;
      stats_.decode_idle_seconds += counts.decode_idle_seconds;
      stats_.decode_seconds += counts.decode_seconds;
      stats_.gpu_wait_seconds += counts.gpu_wait_seconds;
      stats_.cpu_decode_seconds += counts.cpu_decode_seconds;
      stats_.augment_seconds += counts.augment_seconds;
      slot.ready_batch = n;
      changed_.notify_all();
    }
  }

  const ImageDataset& data_;
  GpuPipelineOptions options_;
  const NvjpegLibrary& library_;
  int64_t batch_ = 0;
  size_t image_bytes_ = 0;
  struct Decoder {
    std::unique_ptr<cuda::JpegBatchDecoder> decoder;
    cudaEvent_t done = nullptr;  // after the augmentation of the last batch it decoded
    bool used = false;
  };
  // A decode thread and what only it uses.
  struct Worker {
    cudaStream_t stream = nullptr;  // at the device's greatest priority
    Decoder decoders[2];
    std::unique_ptr<cuda::ImageAugmenter> augmenter;
    int64_t batch = 0;  // the batch it is on (guarded() charges a failure to it)
    std::thread thread;
  };
  std::vector<Worker> workers_;
  std::unique_ptr<WorkPool> readers_;  // the read thread's only
  std::vector<Slot> slots_;
  std::vector<int32_t> handed_labels_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  int64_t read_ = 0, handed_ = 0;  // batches read, handed out
  bool stop_ = false;
  std::exception_ptr failure_;
  int64_t failed_batch_ = INT64_MAX;
  double waited_seconds_ = 0;
  GpuPipelineStats stats_;
  std::thread read_thread_;
};

}  // namespace

std::unique_ptr<GpuImagePipeline> make_gpu_image_pipeline(const ImageDataset& data,
                                                          GpuPipelineOptions options) {
  std::string why_not;
  const NvjpegLibrary* library = NvjpegLibrary::open(&why_not);
  DLB_REQUIRE(library, "--decode gpu: {}", why_not);
  return std::make_unique<NvjpegImagePipeline>(data, std::move(options), *library);
}

}  // namespace dlbench
