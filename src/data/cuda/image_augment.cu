// The batched crop + resize + flip + normalise + cast of image_augment.h. One block covers kRowsPerBlock
// output rows of one image (grid: rows x images), its threads over the rows' values in memory order, so
// every warp stores one contiguous run: in NHWC the threads walk channels within pixels, in NCHW pixels
// within a channel plane's rows.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <type_traits>

#include "backend/cuda/kernel_check.h"
#include "data/cuda/image_augment.h"

namespace dlbench::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = 4;  // about 2,700 values of a 224-wide RGB row group: 10 per thread
constexpr int kMaxOutputSide = 1 << 16;

// lut[c][v]: channel c's normalised value of level v, exactly as crop_resize_normalize builds it.
struct NormTable {
  float lut[3][256];
};

// One image as the kernel reads it: each axis' start and step in the decoded image's pixels, computed on
// the host as make_taps computes them (image_transform.cc), so the device repeats only the per-pixel part.
struct ImageDescriptor {
  const uint8_t* pixels;
  double start_x, step_x, start_y, step_y;
  int width, height, pitch, channels;
  int flip;  // 1: output column k samples column out_w - 1 - k's coordinate
  int unused;
};

// The staging layout of one slot: the table, then the descriptors (3072 bytes keep them 8-aligned).
constexpr size_t slot_bytes(int images) {
  return sizeof(NormTable) + size_t(images) * sizeof(ImageDescriptor);
}
static_assert(sizeof(NormTable) % alignof(ImageDescriptor) == 0);

struct Tap {
  int i0, i1;
  float w1;  // weight of i1
};

// make_taps for output k: start + (k + 0.5) * step - 0.5 with every operation rounded as the host rounds
// it (plain nvcc would fuse the multiply and the add), clamped to [0, size - 1].
__device__ __forceinline__ Tap tap(double start, double step, int k, int size) {
  double src = __dsub_rn(__dadd_rn(start, __dmul_rn(k + 0.5, step)), 0.5);
  if (!(src > 0)) src = 0;
  if (src >= size - 1) return {size - 1, size - 1, 0.f};
  const int i0 = static_cast<int>(src);
  return {i0, i0 + 1, __double2float_rn(src - i0)};
}

// The CPU's a + (b - a) * w, unfused: exact when w is 0 and when a == b, as on the CPU.
__device__ __forceinline__ float lerp(float a, float b, float w) {
  return __fadd_rn(a, __fmul_rn(__fsub_rn(b, a), w));
}

template <typename T>
__device__ __forceinline__ T narrow(float v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(v);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(v);
  } else {
    return v;
  }
}

// Output value (ox, oy, c): the horizontal lerps of the two source rows, then the vertical one, as the
// CPU's two passes do. A gray image serves every output channel (table c at its one level).
__device__ __forceinline__ float sample_value(const ImageDescriptor& d, const float (*lut)[256], int ox,
                                              int oy, int c, int out_w) {
  const Tap tx = tap(d.start_x, d.step_x, d.flip ? out_w - 1 - ox : ox, d.width);
  const Tap ty = tap(d.start_y, d.step_y, oy, d.height);
  const int channel = d.channels == 3 ? c : 0;
  const int x0 = tx.i0 * d.channels + channel, x1 = tx.i1 * d.channels + channel;
  const uint8_t* top = d.pixels + size_t(ty.i0) * size_t(d.pitch);
  const uint8_t* bottom = d.pixels + size_t(ty.i1) * size_t(d.pitch);
  const float* t = lut[c];
  const float upper = lerp(t[__ldg(top + x0)], t[__ldg(top + x1)], tx.w1);
  const float lower = lerp(t[__ldg(bottom + x0)], t[__ldg(bottom + x1)], tx.w1);
  return lerp(upper, lower, ty.w1);
}

// grid (ceil(out_h / kRowsPerBlock), batch); out: [batch, out_c, out_h, out_w] in layout L.
template <typename T, Layout L>
__global__ void __launch_bounds__(kThreads)
    augment_kernel(const NormTable* table, const ImageDescriptor* images, int out_w, int out_h, int out_c,
                   T* out) {
  __shared__ float lut[3][256];
  for (int i = threadIdx.x; i < 3 * 256; i += blockDim.x)
    lut[i / 256][i % 256] = table->lut[i / 256][i % 256];
  __syncthreads();
  const ImageDescriptor d = images[blockIdx.y];
  const int row0 = int(blockIdx.x) * kRowsPerBlock;
  const int rows = min(kRowsPerBlock, out_h - row0);
  const int row_values = out_w * out_c;
  T* sample = out + size_t(blockIdx.y) * size_t(out_h) * size_t(row_values);
  for (int e = threadIdx.x; e < rows * row_values; e += blockDim.x) {
    int ox, oy, c;
    size_t at;
    if constexpr (L == Layout::nhwc) {  // e runs over (row, x, channel) of the block's rows
      const int rest = e % row_values;
      oy = row0 + e / row_values;
      ox = rest / out_c;
      c = rest % out_c;
      at = size_t(oy) * size_t(row_values) + size_t(rest);
    } else {  // e runs over (channel, row, x): per channel one contiguous run of the plane
      const int plane_part = rows * out_w;
      const int rest = e % plane_part;
      c = e / plane_part;
      oy = row0 + rest / out_w;
      ox = rest % out_w;
      at = (size_t(c) * size_t(out_h) + size_t(oy)) * size_t(out_w) + size_t(ox);
    }
    sample[at] = narrow<T>(sample_value(d, lut, ox, oy, c, out_w));
  }
}

template <typename T>
void launch(const AugmentOutput& out, const void* device, int batch, cudaStream_t stream) {
  const auto* table = static_cast<const NormTable*>(device);
  const auto* images =
      reinterpret_cast<const ImageDescriptor*>(static_cast<const char*>(device) + sizeof(NormTable));
  const dim3 grid(unsigned((out.height + kRowsPerBlock - 1) / kRowsPerBlock), unsigned(batch));
  T* y = static_cast<T*>(out.data);
  if (out.layout == Layout::nhwc) {
    augment_kernel<T, Layout::nhwc>
        <<<grid, kThreads, 0, stream>>>(table, images, out.width, out.height, out.channels, y);
  } else {
    augment_kernel<T, Layout::nchw>
        <<<grid, kThreads, 0, stream>>>(table, images, out.width, out.height, out.channels, y);
  }
  DLB_KERNEL_LAUNCH_CHECK();
}

constexpr const char* kOp = "ImageAugmenter::run";

void check_output(const AugmentOutput& out) {
  DLB_KERNEL_REQUIRE(out.data != nullptr, kOp, "no output tensor");
  DLB_KERNEL_REQUIRE(
      out.width > 0 && out.height > 0 && out.width <= kMaxOutputSide && out.height <= kMaxOutputSide, kOp,
      "output width and height must be in 1..65536");
  DLB_KERNEL_REQUIRE(out.channels == 1 || out.channels == 3, kOp, "output channels must be 1 or 3");
  DLB_KERNEL_REQUIRE(out.dtype == DType::f32 || out.dtype == DType::f16 || out.dtype == DType::bf16, kOp,
                     "output dtype must be f32, f16 or bf16");
  DLB_KERNEL_REQUIRE(out.layout == Layout::nhwc || out.layout == Layout::nchw, kOp,
                     "output layout must be nhwc or nchw");
}

// The table of crop_resize_normalize (image_transform.cc), the same expression in double then to float.
void fill_table(const Normalization& norm, int channels, NormTable& table) {
  for (int c = 0; c < 3; ++c) {
    const int from = c < channels ? c : 0;  // unused channels of a 1-channel output: any finite values
    DLB_KERNEL_REQUIRE(std::isfinite(norm.mean[from]) && std::isfinite(norm.std[from]) && norm.std[from] != 0,
                       kOp, "normalisation mean and std must be finite, std non-zero");
    for (int v = 0; v < 256; ++v)
      table.lut[c][v] = static_cast<float>((v / 255.0 - static_cast<double>(norm.mean[from])) /
                                           static_cast<double>(norm.std[from]));
  }
}

ImageDescriptor describe(const AugmentImage& image, const AugmentOutput& out) {
  DLB_KERNEL_REQUIRE(image.pixels != nullptr && image.width > 0 && image.height > 0, kOp,
                     "an image without pixels or of zero size");
  DLB_KERNEL_REQUIRE(image.channels == 1 || image.channels == 3, kOp, "image channels must be 1 or 3");
  DLB_KERNEL_REQUIRE(int64_t{image.pitch} >= int64_t{image.width} * image.channels, kOp,
                     "image pitch below width * channels");
  DLB_KERNEL_REQUIRE(image.scale_eighths >= 1 && image.scale_eighths <= 8, kOp, "scale_eighths must be 1..8");
  const CropBox& box = image.box;
  DLB_KERNEL_REQUIRE(std::isfinite(box.x) && std::isfinite(box.y) && std::isfinite(box.width) &&
                         std::isfinite(box.height) && box.width > 0 && box.height > 0,
                     kOp, "a crop box that is not finite or empty");
  // make_taps(box.x * scale, box.width * scale, out_w, ...): step = length / count.
  const double scale = image.scale_eighths / 8.0;
  ImageDescriptor d{};
  d.pixels = image.pixels;
  d.start_x = box.x * scale;
  d.step_x = box.width * scale / out.width;
  d.start_y = box.y * scale;
  d.step_y = box.height * scale / out.height;
  d.width = image.width;
  d.height = image.height;
  d.pitch = image.pitch;
  d.channels = image.channels;
  d.flip = image.flip == Flip::horizontal ? 1 : 0;
  return d;
}

}  // namespace

ImageAugmenter::ImageAugmenter(int max_batch) : max_batch_(max_batch) {
  DLB_KERNEL_REQUIRE(max_batch >= 1 && max_batch <= 65535, "ImageAugmenter", "max_batch must be 1..65535");
  try {
    for (Slot& slot : slots_) {
      DLB_KERNEL_CHECK(cudaMallocHost(&slot.host, slot_bytes(max_batch)));
      DLB_KERNEL_CHECK(cudaMalloc(&slot.device, slot_bytes(max_batch)));
      // Waited for on the host: blocking, so that the wait costs no CPU (a spinning wait takes a core).
      DLB_KERNEL_CHECK(cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming | cudaEventBlockingSync));
    }
  } catch (...) {
    release();
    throw;
  }
}

ImageAugmenter::~ImageAugmenter() { release(); }

void ImageAugmenter::release() {
  // Unchecked (it runs in the destructor): the last launches finish before their slots are freed.
  for (Slot& slot : slots_) {
    if (slot.done) {
      cudaEventSynchronize(slot.done);
      cudaEventDestroy(slot.done);
    }
    if (slot.device) cudaFree(slot.device);
    if (slot.host) cudaFreeHost(slot.host);
    slot = Slot{};
  }
}

void ImageAugmenter::run(std::span<const AugmentImage> images, const AugmentOutput& out,
                         const Normalization& norm, cudaStream_t stream) {
  check_output(out);
  if (images.empty()) return;
  DLB_KERNEL_REQUIRE(images.size() <= size_t(max_batch_), kOp, "more images than max_batch");
  Slot& slot = slots_[next_];
  // The launch two calls back read this slot (on whatever stream it ran): it must be done first.
  if (slot.used) DLB_KERNEL_CHECK(cudaEventSynchronize(slot.done));
  NormTable& table = *static_cast<NormTable*>(slot.host);
  fill_table(norm, out.channels, table);
  auto* descriptors = reinterpret_cast<ImageDescriptor*>(static_cast<char*>(slot.host) + sizeof(NormTable));
  for (size_t i = 0; i < images.size(); ++i) descriptors[i] = describe(images[i], out);

  const int batch = static_cast<int>(images.size());
  DLB_KERNEL_CHECK(
      cudaMemcpyAsync(slot.device, slot.host, slot_bytes(batch), cudaMemcpyHostToDevice, stream));
  switch (out.dtype) {
    case DType::f32:
      launch<float>(out, slot.device, batch, stream);
      break;
    case DType::f16:
      launch<__half>(out, slot.device, batch, stream);
      break;
    default:
      launch<__nv_bfloat16>(out, slot.device, batch, stream);
      break;
  }
  DLB_KERNEL_CHECK(cudaEventRecord(slot.done, stream));
  slot.used = true;
  next_ = 1 - next_;
}

}  // namespace dlbench::cuda
