// C ABI of the skinny fp16 GEMV (dense_gemv.cuh): shape checks, the launch plan, PDL launch on the caller's
// stream. No workspace, no allocation: CUDA-graph capturable.
#include <cuda_runtime.h>

#include "dense_gemv.cuh"
#include "dense_gemv_norm.cuh"

using namespace revolta;

namespace {

constexpr int kDenseMaxM = 8;
// Block shape: warps per block (4 or 8) and weight rows per block (4 or 8; always 4 at M > 4, for registers).
// Default = the best of the H200 sweep (8 warps x 4 rows: 87-103% of copy at M=1 on the Llama-8B shapes).
constexpr int kDenseDefaultWarps = 8, kDenseDefaultRows = 4;
int g_dense_warps = kDenseDefaultWarps, g_dense_rows = kDenseDefaultRows;
// The fused add + RMSNorm GEMV's own block shape: 4 warps x 4 rows was the fastest on all four measured shapes at
// M=1 (H200, chained, PDL: 14.0 / 56.8 / 14.8 / 11.3 us on 6144x4096 / 28672x4096 / 12352x2048 / 9216x2048). Staging
// the norm once per resident block in shared memory (a persistent GEMV, bit-equal to the unfused ops) measured no
// faster than the two separate kernels.
constexpr int kDenseNormDefaultWarps = 4, kDenseNormDefaultRows = 4;
int g_norm_warps = kDenseNormDefaultWarps, g_norm_rows = kDenseNormDefaultRows;

int row_tile(int M) { return M <= 1 ? 1 : M <= 2 ? 2 : M <= 4 ? 4 : 8; }

// Launch `Kernel<MT, R, W>` for the block shape (warps, rows); rows is always 4 at MT = 8 (registers).
template <int MT, template <int, int, int> class Launch, class P>
cudaError_t launch_shape(const P& p, int warps, int rows, cudaStream_t stream) {
  if constexpr (MT >= 8) {
    return warps == 4 ? Launch<MT, 4, 4>::run(p, stream) : Launch<MT, 4, 8>::run(p, stream);
  } else {
    if (rows == 4) return warps == 4 ? Launch<MT, 4, 4>::run(p, stream) : Launch<MT, 4, 8>::run(p, stream);
    return warps == 4 ? Launch<MT, 8, 4>::run(p, stream) : Launch<MT, 8, 8>::run(p, stream);
  }
}

template <template <int, int, int> class Launch, class P>
cudaError_t launch_rows(const P& p, int warps, int rows, cudaStream_t stream) {
  switch (row_tile(p.M)) {
    case 1: return launch_shape<1, Launch>(p, warps, rows, stream);
    case 2: return launch_shape<2, Launch>(p, warps, rows, stream);
    case 4: return launch_shape<4, Launch>(p, warps, rows, stream);
    default: return launch_shape<8, Launch>(p, warps, rows, stream);
  }
}

template <int MT, int R, int W>
struct DenseLaunch {
  static cudaError_t run(const DenseGemvParams& p, cudaStream_t stream) {
    return launch(dense_gemv_kernel<MT, R, W>, dim3((p.N + R - 1) / R), dim3(W * 32), 0, stream, p);
  }
};

template <int MT, int R, int W>
struct DenseNormLaunch {
  static cudaError_t run(const DenseGemvNormParams& p, cudaStream_t stream) {
    return launch(dense_gemv_norm_kernel<MT, R, W>, dim3((p.N + R - 1) / R), dim3(W * 32), 0, stream, p);
  }
};

}  // namespace

extern "C" {

// out[M, N] (fp16) = x[M, K] @ w[N, K]^T (fp16 weights in torch's Linear layout; x rows x_stride apart).
// M <= 8, K % 8 == 0, x_stride % 8 == 0, x_stride >= K, 16-byte aligned x and w.
int revolta_dense_gemv(void* out, const void* x, const void* w, int M, int N, int K, int x_stride,
                       cudaStream_t stream) {
  if (M == 0 || N == 0) return cudaSuccess;
  if (M < 0 || M > kDenseMaxM || N < 0 || K <= 0 || K % 8 || x_stride % 8 || x_stride < K)
    return cudaErrorInvalidValue;
  const DenseGemvParams p{static_cast<const __half*>(x), static_cast<const __half*>(w), static_cast<__half*>(out),
                          M, N, K, x_stride};
  const cudaError_t e = launch_rows<DenseLaunch>(p, g_dense_warps, g_dense_rows, stream);
  return e != cudaSuccess ? e : cudaGetLastError();
}

// Block shape overrides for sweeps: warps per block (4 or 8; other = default), weight rows per block (4 or 8;
// other = default), for the plain GEMV (norm = 0) or the fused add + RMSNorm one (norm = 1).
int revolta_dense_gemv_tune(int norm, int warps, int rows) {
  int& w = norm ? g_norm_warps : g_dense_warps;
  int& r = norm ? g_norm_rows : g_dense_rows;
  w = warps == 4 || warps == 8 ? warps : (norm ? kDenseNormDefaultWarps : kDenseDefaultWarps);
  r = rows == 4 || rows == 8 ? rows : (norm ? kDenseNormDefaultRows : kDenseDefaultRows);
  return cudaSuccess;
}

// The block shape a call with M rows uses: info[0] = warps, info[1] = rows per block (norm as in the tune call).
int revolta_dense_gemv_plan(int norm, int M, int* info) {
  info[0] = norm ? g_norm_warps : g_dense_warps;
  info[1] = row_tile(M) >= 8 ? 4 : (norm ? g_norm_rows : g_dense_rows);
  return cudaSuccess;
}

// The GEMV with the pre-norm in front (dense_gemv_norm_kernel): h = x + residual (h = x if residual is
// null), out = rms_norm(h) * g @ w^T with g = norm_w (+ 1 if zero_centered); h written to h_out (block 0).
// x, residual, h_out: contiguous [M, K]; norm_w [K]; M <= 8, K % 8 == 0, 16-byte aligned pointers.
int revolta_dense_gemv_norm(void* out, void* h_out, const void* x, const void* residual, const void* norm_w,
                            const void* w, int M, int N, int K, float eps, int zero_centered, cudaStream_t stream) {
  if (M == 0) return cudaSuccess;
  if (M < 0 || M > kDenseMaxM || N <= 0 || K <= 0 || K % 8 || !h_out || !x || !norm_w || !w)
    return cudaErrorInvalidValue;
  const DenseGemvNormParams p{static_cast<const __half*>(x), static_cast<const __half*>(residual),
                              static_cast<const __half*>(norm_w), static_cast<const __half*>(w),
                              static_cast<__half*>(out), static_cast<__half*>(h_out), M, N, K, eps,
                              zero_centered ? 1 : 0};
  const cudaError_t e = launch_rows<DenseNormLaunch>(p, g_norm_warps, g_norm_rows, stream);
  return e != cudaSuccess ? e : cudaGetLastError();
}

}  // extern "C"
