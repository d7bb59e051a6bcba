// GradientExchange: sums the gradients of every rank while backward is still running (the fusion buffer of
// data-parallel training).
//
// The flat gradient buffer is cut into buckets of about `bucket_bytes`, walking the parameters in the order
// backward produces them (last layer first). A bucket is ready once the earliest layer owning a parameter in
// it has run its backward; the network's backward observer then hands it to the communicator, which reduces
// it on its own stream while the compute stream goes on with the layers below. Buckets never span the two
// regions of the flat buffers: parameters read in the compute dtype (conv, linear; FP16/BF16 copies under
// mixed precision) and those kept in FP32 (batch norm).
//
// Mixed precision, reduce_in_compute_dtype = false (the default): each compute-region bucket is cast to its
// FP32 master slice first and reduced in FP32 (exact sums of FP16 values, twice the bytes). True: reduced in
// FP16/BF16 and cast afterwards (half the bytes, rounding in the sum).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "nn/memory_plan.h"
#include "parallel/communicator.h"

namespace dlbench::parallel {

struct GradientBucket {
  bool compute_region = false;    // [0, compute_count) of the flat buffers, else [compute_count, count)
  int64_t offset = 0, count = 0;  // elements of the flat buffers
  int ready_after_layer = 0;      // its gradients are complete once this layer's backward has run
};

// The smallest bucket the tail of a region is cut into (see plan_gradient_buckets).
inline constexpr size_t kTailBucketBytes = size_t{1} << 20;

// Buckets in launch order. Bucket sizes count the bytes that travel (FP32, or the compute dtype when
// reduce_in_compute_dtype). A parameter larger than a bucket is a bucket of its own; neighbouring small
// ones share one. A bucket is cut once it holds bucket_bytes; the last two buckets' worth of a region (its
// earliest layers) is cut in halves down to kTailBucketBytes, so that little is left to send once backward
// ends.
// bucket_bytes = 0: one bucket per region.
std::vector<GradientBucket> plan_gradient_buckets(const MemoryPlan& memory, size_t bucket_bytes,
                                                  bool reduce_in_compute_dtype);

class GradientExchange {
 public:
  GradientExchange(Backend& backend, MemoryPlan& memory, Communicator& comm, size_t bucket_bytes,
                   bool reduce_in_compute_dtype);

  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  // Arms the exchange for the backward pass about to run (the last micro-batch of a step).
  void arm();
  // The network's backward observer: launches every bucket that layer `layer` completes.
  void layer_done(int layer);
  // After backward: launches what is left (nothing, normally), makes the compute stream wait for every
  // reduction and leaves the summed gradients in the FP32 master buffer (mixed precision included).
  void finish();

 private:
  void launch(const GradientBucket& bucket);
  Tensor slice(const GradientBucket& bucket, bool master) const;

  Backend& backend_;
  MemoryPlan& memory_;
  Communicator& comm_;
  bool in_compute_dtype_;
  std::vector<GradientBucket> buckets_;
  size_t next_ = 0;  // the first bucket not launched yet
  bool armed_ = false;
};

}  // namespace dlbench::parallel
