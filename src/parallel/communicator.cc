#include "parallel/communicator.h"

#include "core/status.h"
#include "parallel/progress.h"

namespace dlbench::parallel {

Communicator::Communicator(std::shared_ptr<ProgressTracker> progress) : progress_(std::move(progress)) {
  DLB_CHECK(progress_ != nullptr, "a communicator needs a progress tracker");
}

Communicator::~Communicator() = default;

void Communicator::set_step(int64_t step) { progress_->set_step(step); }
int64_t Communicator::step() const { return progress_->step(); }

void check_reducible(const char* op, const Tensor& x) {
  DLB_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::f16 || x.dtype() == DType::bf16,
            "{}: {} is not f32, f16 or bf16", op, x.describe());
  DLB_CHECK(x.numel() >= 1 && x.data() != nullptr, "{}: {} is empty", op, x.describe());
}

}  // namespace dlbench::parallel
