// A temporary tensor for Backend's composed defaults (composed_ops.cc, dense_ops.cc): the intermediate
// values a backend without a kernel for the whole op must hold between the single ops.
#pragma once

#include "backend/backend.h"

namespace dlbench {

// A tensor of `like`'s shape, dtype and layout in the backend's memory, freed at scope exit.
class ScratchTensor {
 public:
  ScratchTensor(Backend& backend, const Tensor& like)
      : backend_(backend),
        tensor_(backend.allocate(like.bytes()), like.dims(), like.dtype(), like.layout(), backend.device()) {}
  ~ScratchTensor() { backend_.deallocate(tensor_.data()); }
  ScratchTensor(const ScratchTensor&) = delete;
  ScratchTensor& operator=(const ScratchTensor&) = delete;
  Tensor& tensor() { return tensor_; }
  const Tensor& tensor() const { return tensor_; }

 private:
  Backend& backend_;
  Tensor tensor_;
};

}  // namespace dlbench
