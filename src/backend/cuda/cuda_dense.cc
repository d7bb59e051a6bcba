// ReLU and the dense algebra of fully connected layers: GEMM on cuBLAS, bias add and its gradient on our
// kernels.
//
// GEMM: our matrices are row-major and cuBLAS's column-major. A row-major [r, c] matrix is the
// column-major [c, r] one, its transpose, so c = op(a) op(b) (row-major) is c^T = op(b)^T op(a)^T
// (column-major): cublasGemmEx with the operands swapped, m and n swapped, and each operand's leading
// dimension its row length. FP16/BF16 inputs compute in FP32 (CUBLAS_COMPUTE_32F) on tensor cores; FP32
// computes in plain FP32, or on TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32) when the backend allows
// TF32; FP64 in FP64. beta == 0 does not read c (BLAS convention).
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/kernels.h"

namespace dlbench {
namespace cuda {
namespace {

// Dims of the stored matrix whose op() is [rows, cols].
std::vector<int64_t> stored_dims(Transpose t, int64_t rows, int64_t cols) {
  return t == Transpose::no ? std::vector<int64_t>{rows, cols} : std::vector<int64_t>{cols, rows};
}

int checked_blas_int(int64_t v, const char* what) {
  DLB_CHECK(v >= 0 && v <= INT32_MAX, "gemm: {} = {} does not fit cuBLAS's int", what, v);
  return static_cast<int>(v);
}

}  // namespace

// ---- ReLU ----

void CudaBackend::relu_forward(const Tensor& x, Tensor& y) {
  check_float("relu_forward", "x", x);
  check_same_shape("relu_forward", "x", x, "y", y);
  activate();
  cuda::relu_forward(x.data(), y.data(), x.dtype(), x.numel(), stream_);
}

void CudaBackend::relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  check_float("relu_backward", "y", y);
  check_same_shape("relu_backward", "y", y, "dy", dy);
  check_same_shape("relu_backward", "y", y, "dx", dx);
  activate();
  cuda::relu_backward(y.data(), dy.data(), dx.data(), y.dtype(), y.numel(), stream_);
}

// ---- bias of fully connected layers ----

void CudaBackend::add_bias(Tensor& y, const Tensor& bias) {
  const char* op = "add_bias";
  check_float(op, "y", y);
  check_float(op, "bias", bias);
  DLB_CHECK(y.rank() == 2 && bias.rank() == 1 && bias.dim(0) == y.dim(1), "{}: y is {}, bias is {}", op,
            y.describe(), bias.describe());
  DLB_CHECK(bias.dtype() == y.dtype() || bias.dtype() == DType::f32, "{}: bias {} must be f32 or y's dtype",
            op, bias.describe());
  activate();
  cuda::add_bias(y.data(), y.dtype(), bias.data(), bias.dtype(), y.dim(0), y.dim(1), stream_);
}

void CudaBackend::bias_backward(const Tensor& dy, Tensor& dbias, Accumulate accumulate) {
  DLB_CHECK(dy.rank() == 2 && dbias.rank() == 1 && dbias.dim(0) == dy.dim(1),
            "bias_backward: dy is {}, dbias is {}", dy.describe(), dbias.describe());
  bias_backward_columns(dy, 0, dbias, accumulate);
}

void CudaBackend::bias_backward_columns(const Tensor& dy, int64_t first_column, Tensor& dbias,
                                        Accumulate accumulate) {
  const char* op = "bias_backward_columns";
  check_float(op, "dy", dy);
  check_float(op, "dbias", dbias);
  DLB_CHECK(
      dy.rank() == 2 && dbias.rank() == 1 && first_column >= 0 && first_column + dbias.dim(0) <= dy.dim(1),
      "{}: dbias {} is no column range of dy {} from column {}", op, dbias.describe(), dy.describe(),
      first_column);
  activate();
  void* work = scratch(cuda::bias_backward_scratch_bytes(dy.dim(0), dbias.dim(0), dy.dtype()), op);
  const auto* first = static_cast<const char*>(dy.data()) + first_column * dtype_size(dy.dtype());
  cuda::bias_backward_columns(first, dy.dtype(), dy.dim(1), dbias.data(), dbias.dtype(), dy.dim(0),
                              dbias.dim(0), accumulate == Accumulate::add, work, stream_);
}

void CudaBackend::gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha,
                       const Tensor& a, const Tensor& b, float beta, Tensor& c) {
  const char* op = "gemm";
  DLB_CHECK(m >= 0 && n >= 0 && k >= 0, "{}: m {}, n {}, k {} must not be negative", op, m, n, k);
  check_float(op, "c", c);
  check_device_tensor(op, "a", a);
  check_device_tensor(op, "b", b);
  const DType dtype = c.dtype();
  const auto a_dims = stored_dims(ta, m, k), b_dims = stored_dims(tb, k, n);
  DLB_CHECK(a.numel() == m * k && (a.rank() != 2 || a.dims() == a_dims) && a.dtype() == dtype,
            "{}: a is {}, expected {}[{}, {}]", op, a.describe(), dtype_name(dtype), a_dims[0], a_dims[1]);
  DLB_CHECK(b.numel() == k * n && (b.rank() != 2 || b.dims() == b_dims) && b.dtype() == dtype,
            "{}: b is {}, expected {}[{}, {}]", op, b.describe(), dtype_name(dtype), b_dims[0], b_dims[1]);
  DLB_CHECK(c.numel() == m * n, "{}: c is {}, expected [{}, {}]", op, c.describe(), m, n);
  if (m == 0 || n == 0) return;
  activate();

  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  if (dtype == DType::f64) {
    compute = CUBLAS_COMPUTE_64F;
  } else if (dtype == DType::f32 && allow_tf32()) {
    compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  }
  const double alpha_d = alpha, beta_d = beta;
  const void* alpha_p = dtype == DType::f64 ? static_cast<const void*>(&alpha_d) : &alpha;
  const void* beta_p = dtype == DType::f64 ? static_cast<const void*>(&beta_d) : &beta;
  // Column-major: C^T[n, m] = op(B)^T[n, k] * op(A)^T[k, m].
  const cublasOperation_t op_b = tb == Transpose::no ? CUBLAS_OP_N : CUBLAS_OP_T;
  const cublasOperation_t op_a = ta == Transpose::no ? CUBLAS_OP_N : CUBLAS_OP_T;
  const int ldb = checked_blas_int(tb == Transpose::no ? n : k, "ldb");
  const int lda = checked_blas_int(ta == Transpose::no ? k : m, "lda");
  const int ldc = checked_blas_int(n, "ldc");
  const cudaDataType_t t = cuda_dtype(dtype);
  CUBLAS_CHECK(cublasGemmEx(cublas_, op_b, op_a, checked_blas_int(n, "n"), checked_blas_int(m, "m"),
                            checked_blas_int(k, "k"), alpha_p, b.data(), t, ldb, a.data(), t, lda, beta_p,
                            c.data(), t, ldc, compute, CUBLAS_GEMM_DEFAULT));
}

}  // namespace cuda
}  // namespace dlbench
