// 1x1 convolutions as cuBLAS GEMMs (--conv-gemm auto, the default; off; force). In NHWC a 1x1 convolution
// of stride 1 without padding is a matrix product over the M = N*H*W pixels, y[M, K] = x[M, C] w[K, C]^T,
// dx[M, C] = dy[M, K] w[K, C], dw[K, C] = dy[M, K]^T x[M, C] (the filter is KRSC = [K, C]); of stride s,
// the same over the pixels at the stride, gathered into the workspace first (the input gradient: computed
// there, then scattered into dx). The GEMM is one more candidate of each direction, timed back to back
// (with its gathers), and runs where the search picks it ("force": wherever the shape allows). It adds to
// its output for any call (BLAS's beta). It won every FP32 direction of ResNet-50's 1x1 convolutions, which
// made NHWC FP32's default (docs/PERFORMANCE.md).
#include "backend/cuda/conv/conv_plan.h"
#include "backend/cuda/kernels.h"

namespace dlbench::cuda::conv {

// Whether `g` is a matrix product cuBLAS can run: NHWC, 1x1, one stride for both axes, no padding, not
// FP64, and every dimension within cuBLAS's int.
bool gemm_shape(const ConvGeometry& g) {
  const int64_t pixels = g.batch * g.out_h() * g.out_w();
  return g.layout == Layout::nhwc && g.kernel_h == 1 && g.kernel_w == 1 && g.stride_h == g.stride_w &&
         g.pad_h == 0 && g.pad_w == 0 && g.dtype != DType::f64 && pixels <= INT32_MAX &&
         g.in_channels <= INT32_MAX && g.out_channels <= INT32_MAX;
}

// The workspace a strided GEMM convolution gathers its input's (or input gradient's) pixels into.
size_t gathered_pixels_bytes(const ConvGeometry& g) {
  if (g.stride_h == 1) return 0;
  return static_cast<size_t>(g.batch * g.out_h() * g.out_w() * g.in_channels) * dtype_size(g.dtype);
}

// Whether the search of `g` times cuBLAS's GEMM.
bool uses_gemm(const ConvGeometry& g, const CudaOptions& o) {
  return o.conv_gemm != KernelChoice::off && gemm_shape(g);
}

namespace {

// A row-major product c[m, n] = alpha op(a)[m, k] op(b)[k, n] + beta c on cuBLAS (column-major): the
// column-major c^T = op(b)^T op(a)^T, so the operands swap and each leading dimension is a stored row's
// length (lda, ldb, ldc below).
cublasStatus_t row_major_gemm(cublasHandle_t handle, const ConvGeometry& g, bool allow_tf32, bool transpose_a,
                              bool transpose_b, int64_t m, int64_t n, int64_t k, const void* a, int64_t lda,
                              const void* b, int64_t ldb, void* c, int64_t ldc, const Scaling& s) {
  // FP32: plain FP32 (CUDNN_FMA_MATH's counterpart) unless TF32 is allowed; FP16/BF16 accumulate in FP32.
  const cublasComputeType_t compute =
      g.dtype == DType::f32 && allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const cudaDataType_t t = cuda_dtype(g.dtype);
  auto i = [](int64_t v) { return static_cast<int>(v); };  // gemm_shape checked the range
  return cublasGemmEx(handle, transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                      transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, i(n), i(m), i(k), s.alpha(), b, t, i(ldb), a,
                      t, i(lda), s.beta(), c, t, i(ldc), compute, CUBLAS_GEMM_DEFAULT);
}

}  // namespace

// One call of direction `d` of the 1x1 convolution `g` as a GEMM over its M = N*out_h*out_w output pixels
// (x, w, y as run_legacy takes them; NHWC: x [pixels, C], y [M, K], w [K, C]), adding to the output when
// `add`. A strided one gathers x's pixels into `workspace` (gathered_pixels_bytes), or computes dx's there
// and scatters them.
cublasStatus_t run_gemm(const CudaBackend& backend, const ConvGeometry& g, ConvDirection d, void* x, void* w,
                        void* y, bool add, void* workspace) {
  const int64_t pixels = g.batch * g.out_h() * g.out_w(), c = g.in_channels, k = g.out_channels;
  const int64_t stride = g.stride_h;
  cublasHandle_t handle = backend.cublas();
  cudaStream_t stream = backend.stream();
  const bool tf32 = backend.allow_tf32();
  const Scaling s(g.dtype, 1.0, add ? 1.0 : 0.0);
  void* dense_x = x;  // x's pixels at the stride, [M, C]
  if (stride > 1 && d != ConvDirection::backward_data) {
    gather_strided_pixels(x, g.batch, g.in_h, g.in_w, c, stride, workspace, g.dtype, stream);
    dense_x = workspace;
  }
  switch (d) {
    case ConvDirection::forward:  // y[M, K] = x[M, C] w[K, C]^T
      return row_major_gemm(handle, g, tf32, false, true, pixels, k, c, dense_x, c, w, c, y, k, s);
    case ConvDirection::backward_data: {  // dx[M, C] = dy[M, K] w[K, C]
      if (stride == 1)
        return row_major_gemm(handle, g, tf32, false, false, pixels, c, k, y, k, w, c, x, c, s);
      const cublasStatus_t status = row_major_gemm(handle, g, tf32, false, false, pixels, c, k, y, k, w, c,
                                                   workspace, c, Scaling(g.dtype, 1.0, 0.0));
      if (status == CUBLAS_STATUS_SUCCESS)
        scatter_strided_pixels(workspace, g.batch, g.in_h, g.in_w, c, stride, x, g.dtype, add, stream);
      return status;
    }
    case ConvDirection::backward_filter:  // dw[K, C] = dy[M, K]^T x[M, C]
      return row_major_gemm(handle, g, tf32, true, false, k, c, pixels, y, k, dense_x, c, w, c, s);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

GemmTimes time_gemm(const CudaBackend& backend, const CudaConvPlan& plan, const SearchScratch& scratch,
                    const std::string& key) {
  const ConvGeometry& g = plan.geometry;
  void *x = scratch.x.get(), *w = scratch.w.get(), *y = scratch.y.get(), *ws = scratch.ws.get();
  GemmTimes times;
  if (gathered_pixels_bytes(g) > std::min(scratch.ws_bytes, backend.conv_workspace_limit())) return times;
  for (ConvDirection d : kDirections) {
    times[static_cast<size_t>(d)] = time_calls(backend, [&] {
      return run_gemm(backend, g, d, x, w, y, graph_adds_to_output(g, d), ws) == CUBLAS_STATUS_SUCCESS
                 ? CUDNN_STATUS_SUCCESS
                 : CUDNN_STATUS_EXECUTION_FAILED;
    });
    if (const std::optional<float>& ms = times[static_cast<size_t>(d)])
      log_debug("conv {} {} gemm: {:.4f} ms", key, direction_name(d), *ms);
  }
  CUDA_CHECK(cudaStreamSynchronize(backend.stream()));  // the scratch buffers are freed next
  return times;
}

}  // namespace dlbench::cuda::conv
