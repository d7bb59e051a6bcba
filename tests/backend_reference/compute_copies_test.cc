// The optimizer updates with the compute copies folded in (Backend's ComputeCopies) on the reference
// backend: the same bits as widening the FP16/BF16 gradients, updating and narrowing the weights in
// three passes (tests/compute_copies_check.h), and the copies' rule enforced.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "compute_copies_check.h"

namespace dlbench {
namespace {

using compute_copies_check::Update;

TEST(ComputeCopies, UpdatesFoldTheCastsBitForBit) {
  auto backend = make_reference_backend();
  for (Update update : {Update::sgd, Update::adamw}) {
    for (DType compute : {DType::f16, DType::bf16}) {
      // The copies cover a leading part (as batch norm's FP32 parameters follow), or every element with
      // or without FP32 gradients beside them (GPT-2 on one rank).
      compute_copies_check::expect_update_folds_copies(*backend, update, compute, 1000, 640, false);
      compute_copies_check::expect_update_folds_copies(*backend, update, compute, 1024, 1024, false);
      compute_copies_check::expect_update_folds_copies(*backend, update, compute, 1024, 1024, true);
    }
  }
}

TEST(ComputeCopies, BadCopiesAreRefused) {
  auto backend = make_reference_backend();
  compute_copies_check::expect_bad_copies_refused(*backend);
}

}  // namespace
}  // namespace dlbench
