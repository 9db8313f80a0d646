// C ABI of the quantized GEMM (see quant_gemm.cuh): shape checks that need no device access, kernel choice
// (skinny split-K GEMM for M <= 8, tensor-core GEMM above), launch on the caller's stream.
#include <cuda_runtime.h>
#include "quant_gemm.cuh"

using namespace revolta;

namespace {

constexpr int kSkinnyMaxM = 8;

// Split K so the skinny kernel has about 4 blocks (16 warps) per SM, enough loads in flight to cover memory
// latency, keeping at least 8 packed rows per warp (the split-K partials stay a few % of the weight bytes).
int skinny_splits(int N, int K, int bits, int num_sms) {
  const int pack = 32 / bits, rows = K / pack, tiles = (N + kGemvCols - 1) / kGemvCols;
  int splits = (4 * num_sms + tiles - 1) / tiles;
  const int min_rows = kGemvWarps * 8;
  const int max_splits = rows / min_rows > 1 ? rows / min_rows : 1;
  return splits < 1 ? 1 : (splits > max_splits ? max_splits : splits);
}

template <int BITS>
cudaError_t launch_skinny(QuantGemmParams p, int splits, cudaStream_t stream) {
  const int rows = p.K / (32 / BITS);
  p.rows_per_split = (rows + splits - 1) / splits;
  const dim3 grid((p.N + kGemvCols - 1) / kGemvCols, splits);
  const int mt = p.M <= 1 ? 1 : p.M <= 2 ? 2 : p.M <= 4 ? 4 : 8;
  switch (mt) {
    case 1: quant_gemv_kernel<BITS, 1><<<grid, kGemvWarps * 32, 0, stream>>>(p); break;
    case 2: quant_gemv_kernel<BITS, 2><<<grid, kGemvWarps * 32, 0, stream>>>(p); break;
    case 4: quant_gemv_kernel<BITS, 4><<<grid, kGemvWarps * 32, 0, stream>>>(p); break;
    default: quant_gemv_kernel<BITS, 8><<<grid, kGemvWarps * 32, 0, stream>>>(p); break;
  }
  if (splits > 1) {
    const int mn = p.M * p.N;
    quant_splitk_reduce_kernel<<<(mn + 255) / 256, 256, 0, stream>>>(p.partial, p.out, mn, splits);
  }
  return cudaGetLastError();
}

template <int BITS>
cudaError_t launch_gemm(QuantGemmParams p, cudaStream_t stream) {
  const dim3 grid((p.N + kGemmBN - 1) / kGemmBN, (p.M + kGemmBM - 1) / kGemmBM);
  quant_gemm_kernel<BITS><<<grid, kGemmThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

extern "C" {

// Number of K splits (and fp32 partial buffers of M x N) the call with these sizes will use; 1 = none.
int revolta_quant_gemm_splits(int M, int N, int K, int bits, int group_size, int num_sms, int* splits) {
  if (bits != 4 && bits != 8) return cudaErrorInvalidValue;
  *splits = M <= kSkinnyMaxM ? skinny_splits(N, K, bits, num_sms) : 1;
  return cudaSuccess;
}

// out[M, N] (fp16) = x[M, K] (fp16) @ W; `partial` holds splits * M * N floats when splits > 1.
// Needs K % 32 == 0, N % 8 == 0, group_size % 32 == 0 (or group_size == K), 16-byte aligned x and qweight.
int revolta_quant_gemm(void* out, const void* x, const void* qweight, const void* scales, const void* qzeros,
                       float* partial, int M, int N, int K, int bits, int group_size, int zero_offset, int splits,
                       cudaStream_t stream) {
  if (M == 0 || N == 0) return cudaSuccess;
  if ((bits != 4 && bits != 8) || K % 32 || N % 8 || group_size <= 0 || group_size % 32 || K % group_size ||
      splits < 1 || (splits > 1 && partial == nullptr))
    return cudaErrorInvalidValue;
  QuantGemmParams p{static_cast<const __half*>(x), static_cast<const uint32_t*>(qweight),
                    static_cast<const __half*>(scales), static_cast<const uint32_t*>(qzeros),
                    static_cast<__half*>(out), partial, M, N, K, group_size, zero_offset, 0};
  if (M <= kSkinnyMaxM) return bits == 4 ? launch_skinny<4>(p, splits, stream) : launch_skinny<8>(p, splits, stream);
  return bits == 4 ? launch_gemm<4>(p, stream) : launch_gemm<8>(p, stream);
}

}  // extern "C"
