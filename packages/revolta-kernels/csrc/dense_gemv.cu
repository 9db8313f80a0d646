// C ABI of the skinny fp16 GEMV (dense_gemv.cuh): shape checks, the launch plan, PDL launch on the caller's
// stream. No workspace, no allocation: CUDA-graph capturable.
#include <cuda_runtime.h>

#include "dense_gemv.cuh"
#include "dense_gemv_norm.cuh"

using namespace revolta;

namespace {

constexpr int kDenseMaxM = 8;
constexpr long long kDenseDefaultPrefetch = 0;  // as the quantized kernel's (measured no better)
// Bytes of weights the whole grid prefetches to L2 before its PDL wait (as the quantized skinny kernel).
long long g_dense_prefetch_bytes = kDenseDefaultPrefetch;
// Block shape: warps per block (4 or 8) and weight rows per block (4 or 8; always 4 at M > 4, for registers).
// Default = the best of the H200 sweep (8 warps x 4 rows: 87-103% of copy at M=1 on the Llama-8B shapes).
constexpr int kDenseDefaultWarps = 8, kDenseDefaultRows = 4;
int g_dense_warps = kDenseDefaultWarps, g_dense_rows = kDenseDefaultRows;

int dense_rows(int mt) { return mt >= 8 ? 4 : g_dense_rows; }

template <int MT, int R, int W, bool ACT>
cudaError_t launch_dense(const DenseGemvParams& p, cudaStream_t stream) {
  const int blocks = (p.N + R - 1) / R;
  return launch(dense_gemv_kernel<MT, R, W, ACT>, dim3(blocks), dim3(W * 32), 0, stream, p);
}

template <int MT, bool ACT>
cudaError_t launch_dense_rw(const DenseGemvParams& p, cudaStream_t stream) {
  const int rows = dense_rows(MT);
  if constexpr (MT >= 8) {
    return g_dense_warps == 4 ? launch_dense<MT, 4, 4, ACT>(p, stream) : launch_dense<MT, 4, 8, ACT>(p, stream);
  } else {
    if (rows == 4) {
      return g_dense_warps == 4 ? launch_dense<MT, 4, 4, ACT>(p, stream) : launch_dense<MT, 4, 8, ACT>(p, stream);
    }
    return g_dense_warps == 4 ? launch_dense<MT, 8, 4, ACT>(p, stream) : launch_dense<MT, 8, 8, ACT>(p, stream);
  }
}

template <bool ACT>
cudaError_t launch_dense_mt(const DenseGemvParams& p, int mt, cudaStream_t stream) {
  switch (mt) {
    case 1: return launch_dense_rw<1, ACT>(p, stream);
    case 2: return launch_dense_rw<2, ACT>(p, stream);
    case 4: return launch_dense_rw<4, ACT>(p, stream);
    default: return launch_dense_rw<8, ACT>(p, stream);
  }
}

template <int MT, int R, int W>
cudaError_t launch_dense_norm(const DenseGemvNormParams& p, cudaStream_t stream) {
  const int blocks = (p.N + R - 1) / R;
  return launch(dense_gemv_norm_kernel<MT, R, W>, dim3(blocks), dim3(W * 32), 0, stream, p);
}

// Variant of the fused add + RMSNorm GEMV: 1 (default) = one pass, the norm recomputed in every block; 2 = the
// norm staged once per resident block in shared memory (exactly the norm kernel's arithmetic), persistent GEMV.
// Its own block shape (warps, rows per block). Defaults from the H200 sweep (benchmarks/results/dense/run2):
// variant 1 with 4 warps x 4 rows was the fastest fused kernel on all four measured shapes at M=1 (chained,
// PDL: 14.0 / 56.8 / 14.8 / 11.3 us on 6144x4096 / 28672x4096 / 12352x2048 / 9216x2048); variant 2 with the
// GEMV's 8 x 4 reproduces the unfused ops bit for bit but measured no faster than them.
constexpr int kDenseNormDefaultVariant = 1, kDenseNormDefaultWarps = 4, kDenseNormDefaultRows = 4;
constexpr size_t kDenseNormMaxStage = 80 * 1024;  // variant 2's M x K fp16 staging (Volta: <= 96 KB per block)
int g_dense_norm_variant = kDenseNormDefaultVariant;
int g_norm_warps = kDenseNormDefaultWarps, g_norm_rows = kDenseNormDefaultRows;
int norm_rows(int mt) { return mt >= 8 ? 4 : g_norm_rows; }

template <int MT, int R, int W>
cudaError_t launch_dense_norm2(const DenseGemvNormParams& p, cudaStream_t stream) {
  auto kernel = dense_gemv_norm2_kernel<MT, R, W>;
  const size_t smem = static_cast<size_t>(p.M) * p.K * 2;
  // Dynamic + static shared memory above 48 KB needs the opt-in (once per instantiation; the static part is
  // ~2 KB, so opt in from 40 KB of staging: the H200 run failed at exactly 48 KB, M=3 x K=8192, without it).
  static bool opted = false;
  if (smem > 40 * 1024 && !opted) {
    if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(kDenseNormMaxStage)))
      return e;
    opted = true;
  }
  int dev = 0, sms = 0, per_sm = 0;
  if (cudaError_t e = cudaGetDevice(&dev)) return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) return e;
  if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, W * 32, smem)) return e;
  const long long groups = (p.N + R - 1) / R;
  const long long resident = static_cast<long long>(sms) * (per_sm > 0 ? per_sm : 1);
  const int blocks = static_cast<int>(groups < resident ? groups : resident);
  return launch(kernel, dim3(blocks), dim3(W * 32), smem, stream, p);
}

template <int MT, int R, int W>
cudaError_t launch_dense_norm_v(const DenseGemvNormParams& p, cudaStream_t stream) {
  if (g_dense_norm_variant == 2 && static_cast<size_t>(p.M) * p.K * 2 <= kDenseNormMaxStage)
    return launch_dense_norm2<MT, R, W>(p, stream);
  return launch_dense_norm<MT, R, W>(p, stream);
}

template <int MT>
cudaError_t launch_dense_norm_rw(const DenseGemvNormParams& p, cudaStream_t stream) {
  if constexpr (MT >= 8) {
    return g_norm_warps == 4 ? launch_dense_norm_v<MT, 4, 4>(p, stream) : launch_dense_norm_v<MT, 4, 8>(p, stream);
  } else {
    if (norm_rows(MT) == 4) {
      return g_norm_warps == 4 ? launch_dense_norm_v<MT, 4, 4>(p, stream) : launch_dense_norm_v<MT, 4, 8>(p, stream);
    }
    return g_norm_warps == 4 ? launch_dense_norm_v<MT, 8, 4>(p, stream) : launch_dense_norm_v<MT, 8, 8>(p, stream);
  }
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
  const int rows = dense_rows(mt);
  const long long blocks = (N + rows - 1) / rows;
  const long long per_block = g_dense_prefetch_bytes / blocks / (static_cast<long long>(rows) * kDenseChunk * 2);
  const int chunks = (K + kDenseChunk - 1) / kDenseChunk;
  DenseGemvParams p{static_cast<const __half*>(x), static_cast<const __half*>(w), static_cast<__half*>(out),
                    M, N, K, x_stride, act, static_cast<int>(per_block < chunks ? per_block : chunks)};
  const cudaError_t e = act ? launch_dense_mt<true>(p, mt, stream) : launch_dense_mt<false>(p, mt, stream);
  return e != cudaSuccess ? e : cudaGetLastError();
}

// Overrides for sweeps: L2 prefetch budget of a whole grid before its PDL wait in KB (0 = none, < 0 = the
// default: none), warps per block (4 or 8; other = default), weight rows per block (4 or 8; other = default).
int revolta_dense_gemv_tune(int prefetch_kb, int warps, int rows) {
  g_dense_prefetch_bytes = prefetch_kb < 0 ? kDenseDefaultPrefetch : static_cast<long long>(prefetch_kb) * 1024;
  g_dense_warps = warps == 4 || warps == 8 ? warps : kDenseDefaultWarps;
  g_dense_rows = rows == 4 || rows == 8 ? rows : kDenseDefaultRows;
  return cudaSuccess;
}

// The block shape a call with M rows uses: info[0] = warps, info[1] = rows per block.
int revolta_dense_gemv_plan(int M, int* info) {
  const int mt = M <= 1 ? 1 : M <= 2 ? 2 : M <= 4 ? 4 : 8;
  info[0] = g_dense_warps;
  info[1] = dense_rows(mt);
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
  DenseGemvNormParams p{static_cast<const __half*>(x), static_cast<const __half*>(residual),
                        static_cast<const __half*>(norm_w), static_cast<const __half*>(w),
                        static_cast<__half*>(out), static_cast<__half*>(h_out), M, N, K, eps, zero_centered ? 1 : 0};
  const int mt = M <= 1 ? 1 : M <= 2 ? 2 : M <= 4 ? 4 : 8;
  cudaError_t e;
  switch (mt) {
    case 1: e = launch_dense_norm_rw<1>(p, stream); break;
    case 2: e = launch_dense_norm_rw<2>(p, stream); break;
    case 4: e = launch_dense_norm_rw<4>(p, stream); break;
    default: e = launch_dense_norm_rw<8>(p, stream); break;
  }
  return e != cudaSuccess ? e : cudaGetLastError();
}

// Which fused add + RMSNorm GEMV later calls use: variant 1 or 2 (other = the default, 1), warps per block 4 or 8
// and weight rows per block 4 or 8 (other = the defaults, 4 and 4; always 4 rows at M > 4). Returns the variant
// now set. Variant 2 takes calls with M x K x 2 bytes <= 80 KB; larger ones run variant 1.
int revolta_dense_gemv_norm_variant(int variant, int warps, int rows) {
  g_dense_norm_variant = variant == 1 || variant == 2 ? variant : kDenseNormDefaultVariant;
  g_norm_warps = warps == 4 || warps == 8 ? warps : kDenseNormDefaultWarps;
  g_norm_rows = rows == 4 || rows == 8 ? rows : kDenseNormDefaultRows;
  return g_dense_norm_variant;
}

}  // extern "C"
