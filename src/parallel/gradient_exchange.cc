#include "parallel/gradient_exchange.h"

#include <algorithm>

#include "core/status.h"

namespace dlbench::parallel {

std::vector<GradientBucket> plan_gradient_buckets(const MemoryPlan& memory, size_t bucket_bytes,
                                                  bool reduce_in_compute_dtype) {
  const bool mixed = memory.has_compute_copies();
  std::vector<GradientBucket> buckets;
  for (bool compute_region : {true, false}) {
    // Region bounds in the flat buffers, and the parameters in it by offset.
    const int64_t begin = compute_region ? 0 : memory.compute_count();
    const int64_t end = compute_region ? memory.compute_count() : memory.parameter_count();
    if (end <= begin) continue;
    std::vector<const ParameterInfo*> params;
    for (const ParameterInfo& p : memory.parameters())
      if (p.offset >= begin && p.offset < end) params.push_back(&p);
    std::sort(params.begin(), params.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
    const size_t element = compute_region && mixed && reduce_in_compute_dtype
                               ? dtype_size(memory.compute_dtype())
                               : dtype_size(memory.master_dtype());
    // Backward writes the last parameters first: walk from the end, cutting whenever a bucket is full.
    // What is left once fewer than two full buckets remain is cut in halves (half of what is left, then
    // half of the rest, down to kTailBucketBytes): the earliest layers' gradients are complete only when
    // backward ends, and the bucket holding them is the communication nothing hides. Halving keeps that
    // last bucket small while the ones before it still go out under the backward of the layers below.
    const size_t smallest = std::min(bucket_bytes, kTailBucketBytes);
    int64_t bucket_end = end;
    int min_layer = INT32_MAX;
    for (auto it = params.rbegin(); it != params.rend(); ++it) {
      const ParameterInfo& p = **it;
      min_layer = std::min(min_layer, p.layer);
      const size_t bytes = static_cast<size_t>(bucket_end - p.offset) * element;
      const size_t left = static_cast<size_t>(bucket_end - begin) * element;  // this bucket and all below
      if (bucket_bytes > 0 && bytes >= std::clamp(left / 2, smallest, bucket_bytes)) {
        buckets.push_back({compute_region, p.offset, bucket_end - p.offset, min_layer});
        bucket_end = p.offset;
        min_layer = INT32_MAX;
      }
    }
    if (bucket_end > begin) buckets.push_back({compute_region, begin, bucket_end - begin, min_layer});
  }
  // Launch order: as backward completes them (the later the layer, the earlier the bucket).
  std::stable_sort(buckets.begin(), buckets.end(),
                   [](const auto& a, const auto& b) { return a.ready_after_layer > b.ready_after_layer; });
  return buckets;
}

GradientExchange::GradientExchange(Backend& backend, MemoryPlan& memory, Communicator& comm,
                                   size_t bucket_bytes, bool reduce_in_compute_dtype)
    : backend_(backend),
      memory_(memory),
      comm_(comm),
      in_compute_dtype_(reduce_in_compute_dtype && memory.has_compute_copies()),
      buckets_(plan_gradient_buckets(memory, bucket_bytes, reduce_in_compute_dtype)) {}

Tensor GradientExchange::slice(const GradientBucket& bucket, bool master) const {
  Tensor& flat = master ? memory_.flat_gradients() : memory_.compute_gradients();
  auto* base =
      static_cast<std::byte*>(flat.data()) + static_cast<size_t>(bucket.offset) * dtype_size(flat.dtype());
  return Tensor(base, {bucket.count}, flat.dtype(), Layout::nchw, flat.device());
}

void GradientExchange::arm() {
  next_ = 0;
  armed_ = true;
}

void GradientExchange::launch(const GradientBucket& bucket) {
  const bool cast = bucket.compute_region && memory_.has_compute_copies();
  if (cast && !in_compute_dtype_) {
    // FP16/BF16 gradients of this bucket into their FP32 master slice, which is what travels.
    Tensor master = slice(bucket, /*master=*/true);
    backend_.cast(slice(bucket, /*master=*/false), master);
    comm_.all_reduce_sum(master);
  } else {
    Tensor t = slice(bucket, /*master=*/!cast);
    comm_.all_reduce_sum(t);
  }
}

void GradientExchange::layer_done(int layer) {
  if (!armed_) return;
  while (next_ < buckets_.size() && buckets_[next_].ready_after_layer >= layer) launch(buckets_[next_++]);
}

void GradientExchange::finish() {
  DLB_CHECK(armed_, "gradient exchange finished without a backward pass");
  while (next_ < buckets_.size()) launch(buckets_[next_++]);
  armed_ = false;
  comm_.wait_all_reduces();
  if (in_compute_dtype_) {
    // Reduced in the compute dtype: now into the master buffer, as one cast.
    memory_.gradients_to_master();
  }
}

}  // namespace dlbench::parallel
