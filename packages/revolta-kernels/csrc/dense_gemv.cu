// C ABI of the skinny fp16 GEMV (dense_gemv.cuh): shape checks, the launch plan, PDL launch on the caller's
// stream. No workspace, no allocation: CUDA-graph capturable.
#include <cuda_runtime.h>

#include "dense_gemv.cuh"

using namespace revolta;

namespace {

constexpr int kDenseWarps = 8;
constexpr int kDenseMaxM = 8;
// Bytes of weights the whole grid prefetches to L2 before its PDL wait (as the quantized skinny kernel).
long long g_dense_prefetch_bytes = 16ll << 20;

template <int MT, bool ACT>
cudaError_t launch_dense(const DenseGemvParams& p, cudaStream_t stream) {
  constexpr int R = dense_gemv_rows(MT);
  const int blocks = (p.N + R - 1) / R;
  return launch(dense_gemv_kernel<MT, R, kDenseWarps, ACT>, dim3(blocks), dim3(kDenseWarps * 32), 0, stream, p);
}

template <bool ACT>
cudaError_t launch_dense_mt(const DenseGemvParams& p, cudaStream_t stream) {
  if (p.M <= 1) return launch_dense<1, ACT>(p, stream);
  if (p.M <= 2) return launch_dense<2, ACT>(p, stream);
  if (p.M <= 4) return launch_dense<4, ACT>(p, stream);
  return launch_dense<8, ACT>(p, stream);
}

}  // namespace

extern "C" {

// out[M, N] (fp16) = a[M, K] @ w[N, K]^T (fp16 weights in torch's Linear layout), a = x (act 0; x rows
// x_stride apart) or silu(gate) * up (act 1; x rows are [gate (K), up (K)]). M <= 8, K % 8 == 0,
// x_stride % 8 == 0, 16-byte aligned x and w.
int revolta_dense_gemv(void* out, const void* x, const void* w, int M, int N, int K, int x_stride, int act,
                       cudaStream_t stream) {
  if (M == 0 || N == 0) return cudaSuccess;
  if (M < 0 || M > kDenseMaxM || N < 0 || K <= 0 || K % 8 || x_stride % 8 || (act != 0 && act != 1) ||
      x_stride < (act ? 2 * K : K))
    return cudaErrorInvalidValue;
  const int mt = M <= 1 ? 1 : M <= 2 ? 2 : M <= 4 ? 4 : 8;
  const int rows = mt >= 8 ? 4 : 8;
  const long long blocks = (N + rows - 1) / rows;
  const long long per_block = g_dense_prefetch_bytes / blocks / (static_cast<long long>(rows) * kDenseChunk * 2);
  const int chunks = (K + kDenseChunk - 1) / kDenseChunk;
  DenseGemvParams p{static_cast<const __half*>(x), static_cast<const __half*>(w), static_cast<__half*>(out),
                    M, N, K, x_stride, act, static_cast<int>(per_block < chunks ? per_block : chunks)};
  const cudaError_t e = act ? launch_dense_mt<true>(p, stream) : launch_dense_mt<false>(p, stream);
  return e != cudaSuccess ? e : cudaGetLastError();
}

// L2 prefetch budget of a whole grid before its PDL wait, in KB (0 = none, < 0 = the default 16 MB).
int revolta_dense_gemv_tune(int prefetch_kb) {
  g_dense_prefetch_bytes = prefetch_kb < 0 ? (16ll << 20) : static_cast<long long>(prefetch_kb) * 1024;
  return cudaSuccess;
}

}  // extern "C"
