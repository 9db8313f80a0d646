// C ABI of the mixture-of-experts kernels for few tokens (router, routing, dense experts' decode, combination):
// checks that need no device access, dtype dispatch, launch on the caller's stream.
#include "revolta_kernels.h"
#include "dtype_dispatch.cuh"
#include "moe.cuh"
#include "moe_routing.cuh"

using namespace revolta;

namespace {

// The up kernel (routing inside it when the router logits are given, else read from topk_ids), then the down kernel,
// both with PDL.
template <typename T>
cudaError_t moe(const MoeParams& p, cudaStream_t stream) {
  if (p.H > kMoeMaxSmemFloats || p.K * p.I + p.Is > kMoeMaxSmemFloats) return cudaErrorInvalidValue;
  const int items = p.K * p.I + p.Is + (p.shared_w13 != nullptr ? 1 : 0);
  const dim3 block(kMoeWarps * 32);
  const dim3 up_grid((items + 2 * kMoeWarps - 1) / (2 * kMoeWarps), p.T);
  const size_t up_smem = static_cast<size_t>(p.H) * sizeof(float);
  const cudaError_t err = p.router_logits != nullptr
                              ? launch(moe_route_up_kernel<T>, up_grid, block, up_smem, stream, p)
                              : launch(moe_up_kernel<T>, up_grid, block, up_smem, stream, p);
  if (err != cudaSuccess) return err;
  const dim3 down_grid((p.H + kMoeWarps - 1) / kMoeWarps, p.T);
  const size_t down_smem = static_cast<size_t>(p.K * p.I + p.Is) * sizeof(float);
  return launch(moe_down_kernel<T>, down_grid, block, down_smem, stream, p);
}

}  // namespace

extern "C" {

// SwiGLU experts of a few tokens over the selected experts only (see moe.cuh). H, I, Is multiples of 8,
// 1 <= K <= 16, E <= 512 when routing here, H and K * I + Is at most kMoeMaxSmemFloats (11520).
int revolta_moe(const MoeParams* p, int dtype, cudaStream_t stream) {
  if (p->T == 0) return cudaSuccess;
  if (p->H % 8 || p->I % 8 || p->Is % 8 || p->K < 1 || p->K > kMoeMaxTopK ||
      (p->router_logits != nullptr && (p->E > kMoeMaxExperts || p->K > p->E)) ||
      (p->shared_w13 != nullptr) != (p->shared_w2 != nullptr) || (p->shared_w13 == nullptr && p->Is))
    return cudaErrorInvalidValue;
  REVOLTA_STORAGE_DISPATCH(dtype, return moe<T>(*p, stream))
  return cudaSuccess;
}

// Router logits [T, E] (contiguous, storage type) = x [T, H] (row stride x_stride) . w [E, H]^T, fp32
// accumulation; H % 8 == 0, 16-byte aligned rows. Launched with PDL: w's rows are loaded before the wait.
int revolta_moe_router(void* logits, const void* x, long long x_stride, const void* w, int tokens, int H, int E,
                       int dtype, cudaStream_t stream) {
  if (tokens == 0 || E == 0) return cudaSuccess;
  if (H % 8 || H <= 0) return cudaErrorInvalidValue;
  const dim3 grid((E + kMoeRouterWarps - 1) / kMoeRouterWarps);
  REVOLTA_STORAGE_DISPATCH(dtype, return launch(moe_router_kernel<T>, grid, dim3(kMoeRouterWarps * 32), 0, stream,
                                                  static_cast<const T*>(x), x_stride, static_cast<const T*>(w),
                                                  static_cast<T*>(logits), tokens, H, E))
  return cudaSuccess;
}

// Router logits of norm(x + residual) with h = x + residual and norm(h) written too (MoeRouterNormParams,
// moe_router.cuh); bit-identical h and normed to revolta_fused_add_rms_norm. H % 8 == 0, H <= kMoeMaxSmemFloats,
// 16-byte aligned rows. Launched with PDL.
int revolta_moe_router_norm(const MoeRouterNormParams* p, int dtype, cudaStream_t stream) {
  if (p->tokens == 0 || p->E == 0) return cudaSuccess;
  if (p->H % 8 || p->H <= 0 || p->H > kMoeMaxSmemFloats || p->norm_threads < 32 || p->norm_threads > 1024 ||
      (p->norm_threads & (p->norm_threads - 1)))
    return cudaErrorInvalidValue;
  const dim3 grid((p->E + kMoeRouterWarps - 1) / kMoeRouterWarps);
  const size_t smem = static_cast<size_t>(p->H) * sizeof(float);
  REVOLTA_STORAGE_DISPATCH(dtype, return launch(moe_router_norm_kernel<T>, grid, dim3(kMoeRouterWarps * 32), smem,
                                                  stream, *p))
  return cudaSuccess;
}

// Softmax top-k routing of `tokens` rows of router logits (moe_routing.cuh): ids int64 and weights fp32 [tokens, K].
// E <= kMoeMaxExperts, 1 <= K <= min(kMoeMaxTopK, E). A plain launch (moe_routing.cuh says why).
int revolta_moe_topk_softmax(const void* logits, long long logits_stride, void* ids, void* weights, int tokens, int E,
                             int K, int renormalize, int dtype, cudaStream_t stream) {
  if (tokens == 0) return cudaSuccess;
  if (E <= 0 || E > kMoeMaxExperts || K < 1 || K > kMoeMaxTopK || K > E || logits_stride < E)
    return cudaErrorInvalidValue;
  REVOLTA_STORAGE_DISPATCH(dtype, moe_topk_softmax_kernel<T><<<tokens, kMoeWarps * 32, 0, stream>>>(
                                        static_cast<const T*>(logits), logits_stride, E, K, renormalize,
                                        static_cast<long long*>(ids), static_cast<float*>(weights));
                             return cudaGetLastError())
  return cudaSuccess;
}

// The routed experts' outputs weighted and summed, plus the gated shared expert (MoeCombineParams,
// moe_routing.cuh). H % 8 == 0, 16-byte aligned rows. A plain launch (moe_routing.cuh says why).
int revolta_moe_combine(const MoeCombineParams* p, int dtype, cudaStream_t stream) {
  if (p->T == 0 || p->H == 0) return cudaSuccess;
  if (p->H % 8 || p->H < 0 || p->T > 65535 || p->K < 1 || p->K > kMoeMaxTopK || p->y_stride % 8 ||
      p->y_stride < static_cast<long long>(p->K) * p->H ||
      (p->shared != nullptr && (p->x_stride % 8 || p->x_stride < p->H || p->shared_stride % 8 ||
                                p->shared_stride < p->H)))
    return cudaErrorInvalidValue;
  const dim3 grid((p->H + kMoeCombineThreads * 8 - 1) / (kMoeCombineThreads * 8), p->T);
  REVOLTA_STORAGE_DISPATCH(dtype, moe_combine_kernel<T><<<grid, kMoeCombineThreads, 0, stream>>>(*p);
                             return cudaGetLastError())
  return cudaSuccess;
}

}  // extern "C"
