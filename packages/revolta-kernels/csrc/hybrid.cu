// C ABI of the hybrid-model kernels (gated delta rule, causal conv1d, gating, gated RMSNorm, MoE decode):
// checks that need no device access, dtype dispatch, launch on the caller's stream.
#include "revolta_kernels.h"
#include "env_setting.h"
#include "conv1d.cuh"
#include "gated_delta.cuh"
#include "gdn_decode.cuh"
#include "gdn_misc.cuh"
#include "moe.cuh"
#include "moe_routing.cuh"

#include <cstdlib>
#include <cstring>
#include <utility>

using namespace revolta;

#define REVOLTA_HYBRID_DISPATCH(dtype, ...)                  \
  switch (dtype) {                                           \
    case 0: { using T = __half; __VA_ARGS__; break; }        \
    case 1: { using T = __nv_bfloat16; __VA_ARGS__; break; } \
    case 2: { using T = float; __VA_ARGS__; break; }         \
    default: return cudaErrorInvalidValue;                   \
  }

namespace {

int num_sms() {  // of the current device, cached (a host query, allowed while a stream is being captured)
  static int cached[64] = {0};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 0;
  if (cached[dev] == 0) cudaDeviceGetAttribute(&cached[dev], cudaDevAttrMultiProcessorCount, dev);
  return cached[dev];
}

template <typename T, int DK>
cudaError_t gdn_decode_persistent(const GdnDecodeParams& p, cudaStream_t stream) {
  static int per_sm = 0;
  if (per_sm == 0) {
    const cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, gdn_decode_persistent_kernel<T, DK>, kGdnDecodeThreads, 0);
    if (err != cudaSuccess) return err;
  }
  const int items = p.batch * p.num_v_heads * (p.dv / kGdnDecodeCols);
  const int slots = (per_sm > 0 ? per_sm : 1) * (num_sms() > 0 ? num_sms() : 1);
  gdn_decode_persistent_kernel<T, DK><<<items < slots ? items : slots, kGdnDecodeThreads, 0, stream>>>(p, items);
  return cudaGetLastError();
}

template <typename T>
cudaError_t gdn_decode(const GdnDecodeParams& p, int dk, int persistent, cudaStream_t stream) {
  if (persistent) {
    switch (dk) {
      case 64: return gdn_decode_persistent<T, 64>(p, stream);
      case 128: return gdn_decode_persistent<T, 128>(p, stream);
      default: return cudaErrorInvalidValue;
    }
  }
  const dim3 grid(p.dv / kGdnDecodeCols, p.num_v_heads, p.batch);
  switch (dk) {
    case 64: gdn_decode_kernel<T, 64><<<grid, kGdnDecodeThreads, 0, stream>>>(p); break;
    case 128: gdn_decode_kernel<T, 128><<<grid, kGdnDecodeThreads, 0, stream>>>(p); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t gdn_decode_fused(const GdnFusedParams& p, int dk, cudaStream_t stream) {
  const dim3 grid(p.num_v_heads, p.batch);
  switch (dk) {
    case 64: gdn_decode_fused_kernel<T, 64><<<grid, kGdnDecodeThreads, 0, stream>>>(p); break;
    case 128: gdn_decode_fused_kernel<T, 128><<<grid, kGdnDecodeThreads, 0, stream>>>(p); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t gdn_decode_fused_split(const GdnFusedParams& p, const GdnConvParams* cv, int* counters, int dk,
                                   cudaStream_t stream) {
  const dim3 grid(kGdnSplitChunks, p.num_v_heads, p.batch), block(kGdnDecodeThreads);
  const GdnConvParams none = {};
  if (cv == nullptr) {
    switch (dk) {
      case 64: return launch(gdn_decode_fused_split_kernel<T, 64, false>, grid, block, 0, stream, p, counters, none);
      case 128: return launch(gdn_decode_fused_split_kernel<T, 128, false>, grid, block, 0, stream, p, counters, none);
      default: return cudaErrorInvalidValue;
    }
  }
  switch (dk) {
    case 64: return launch(gdn_decode_fused_split_kernel<T, 64, true>, grid, block, 0, stream, p, counters, *cv);
    case 128: return launch(gdn_decode_fused_split_kernel<T, 128, true>, grid, block, 0, stream, p, counters, *cv);
    default: return cudaErrorInvalidValue;
  }
}

template <typename T>
cudaError_t gdn_prefill(const GdnPrefillParams& p, int dk, cudaStream_t stream) {
  const dim3 grid(p.dv / kGdnPrefillCols, p.num_v_heads, p.num_seqs);
  switch (dk) {
    case 64: gdn_prefill_kernel<T, 64><<<grid, kGdnPrefillThreads, 0, stream>>>(p); break;
    case 128: gdn_prefill_kernel<T, 128><<<grid, kGdnPrefillThreads, 0, stream>>>(p); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

// REVOLTA_HYBRID_PDL=0: the v1 MoE kernels and the conv1d update as plain launches (as before they took PDL;
// for A/B runs). Their pdl_wait()/pdl_trigger() are no-ops then.
bool hybrid_pdl() {
  static const int on = [] {
    const char* e = std::getenv("REVOLTA_HYBRID_PDL");
    return e != nullptr && std::strcmp(e, "0") == 0 ? 0 : 1;
  }();
  return on != 0;
}

template <typename... KernelArgs, typename... Args>
cudaError_t hybrid_launch(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                          Args&&... args) {
  if (hybrid_pdl()) return launch(kernel, grid, block, smem, stream, std::forward<Args>(args)...);
  kernel<<<grid, block, smem, stream>>>(static_cast<KernelArgs>(args)...);
  return cudaGetLastError();
}

// REVOLTA_MOE_PREFETCH=1: the v1 MoE kernels with their L2 prefetch of the selected rows. Off by default: on the
// H200 it measured slower (Qwen3.5-35B-A3B batch-1 forward 2.93 ms with it, 2.76 ms without; MoE block 33.3 us
// against 29.7 us; benchmarks/results/hybrid3/).
bool moe_prefetch() {
  static const int on = [] {
    const char* e = std::getenv("REVOLTA_MOE_PREFETCH");
    return e != nullptr && std::strcmp(e, "1") == 0 ? 1 : 0;
  }();
  return on != 0;
}

// REVOLTA_MOE_V2=1: the v2 decode kernels (moe.cuh). Off by default: on the H200 they measured slower than v1
// (MoE block at batch 1: 40.2 us against 29.7 us; benchmarks/results/hybrid2/), so v1 stays the default.
bool moe_v2() {
  static const int v2 = [] {
    const char* e = std::getenv("REVOLTA_MOE_V2");
    return e != nullptr && std::strcmp(e, "1") == 0 ? 1 : 0;
  }();
  return v2 != 0;
}

// The MoE decode variant (moe.cuh), from the environment at first use, changeable at run time for A/B
// benchmarks (revolta_moe_set_config): v3 (REVOLTA_MOE_V3: 1 (default) the up3 kernel, 2 v1's up kernel with
// the down kernel below, 0 v1's pair),
// pf_down (REVOLTA_MOE_PF_DOWN: 0 none, 1 the up kernel prefetches the down rows into L2 once routed, 2 after
// its dot products; only up to kMoePfDownMaxTokens tokens), down (REVOLTA_MOE_DOWN: 1 (default) v1's down kernel,
// 2 v2's, 3 down3: v1's with the first weight loads before the activation staging). On the H200 (Qwen3.5-35B-A3B
// MoE chain, batch 1, benchmarks/results/moe/run2): up3 + v1 down 30.1 us; v1 pair 33.3; up3 + down3 33.8;
// v1 up + down3 36.8; with the down prefetch 36.0-36.6 (so pf_down 1/2, down 2/3 stay opt-in).
struct MoeConfig {
  int v3, pf_down, down;
};
constexpr int kMoePfDownMaxTokens = 2;
MoeConfig& moe_config() {
  static MoeConfig c = {env_int("REVOLTA_MOE_V3", 1), env_int("REVOLTA_MOE_PF_DOWN", 0), env_int("REVOLTA_MOE_DOWN", 1)};
  return c;
}

template <typename T>
cudaError_t moe3(const MoeParams& p, cudaStream_t stream) {
  const MoeConfig& cfg = moe_config();
  const int items = p.K * p.I + p.Is + (p.shared_w13 != nullptr ? 1 : 0);
  const dim3 up_grid((items + 2 * kMoeWarps - 1) / (2 * kMoeWarps), p.T);
  const size_t up_smem = static_cast<size_t>(p.H) * sizeof(float);
  const size_t down_smem = static_cast<size_t>(p.K * p.I + p.Is) * sizeof(float);
  const dim3 down_grid((p.H + kMoeWarps - 1) / kMoeWarps, p.T);
  const int pf = p.T <= kMoePfDownMaxTokens ? cfg.pf_down : 0;
  cudaError_t err;
  if (cfg.v3 == 2) {  // v1's up kernel with the configured down kernel (A/B)
    err = hybrid_launch(moe_up_kernel<T, false>, up_grid, dim3(kMoeWarps * 32), up_smem, stream, p);
  } else switch (pf) {
    case 1: err = hybrid_launch(moe_up3_kernel<T, 1>, up_grid, dim3(kMoeWarps * 32), up_smem, stream, p); break;
    case 2: err = hybrid_launch(moe_up3_kernel<T, 2>, up_grid, dim3(kMoeWarps * 32), up_smem, stream, p); break;
    default: err = hybrid_launch(moe_up3_kernel<T, 0>, up_grid, dim3(kMoeWarps * 32), up_smem, stream, p); break;
  }
  if (err != cudaSuccess) return err;
  if (cfg.down == 1) {
    return hybrid_launch(moe_down_kernel<T, false>, down_grid, dim3(kMoeWarps * 32), down_smem, stream, p);
  }
  if (cfg.down == 2) {
    return hybrid_launch(moe_down2_kernel<T>, down_grid, dim3(kMoeWarps * 32), down_smem, stream, p);
  }
  return hybrid_launch(moe_down3_kernel<T>, down_grid, dim3(kMoeWarps * 32), down_smem, stream, p);
}

template <typename T>
cudaError_t moe(const MoeParams& p, cudaStream_t stream) {
  const int items = p.K * p.I + p.Is + (p.shared_w13 != nullptr ? 1 : 0);
  if (p.router_logits != nullptr && moe_config().v3 != 0 && !moe_v2()) {
    if (p.H > kMoeMaxSmemFloats || p.K * p.I + p.Is > kMoeMaxSmemFloats) return cudaErrorInvalidValue;
    return moe3<T>(p, stream);
  }
  if (p.router_logits != nullptr && moe_v2()) {  // routing in the up kernel, PDL chain
    if (p.H > kMoeMaxSmemFloats || p.K * p.I + p.Is > kMoeMaxSmemFloats) return cudaErrorInvalidValue;
    // one resident wave: each warp walks its items (routing and x staging once per block)
    const size_t up_smem = static_cast<size_t>(p.H) * sizeof(float);
    static int per_sm = 0;
    static size_t per_sm_smem = 0;
    if (per_sm == 0 || per_sm_smem != up_smem) {
      const cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, moe_up2_kernel<T>,
                                                                            kMoeWarps * 32, up_smem);
      if (err != cudaSuccess) return err;
      per_sm_smem = up_smem;
    }
    const int want = (items + kMoeWarps - 1) / kMoeWarps;
    const int slots = (per_sm > 0 ? per_sm : 1) * (num_sms() > 0 ? num_sms() : 1);
    const dim3 up_grid(want < slots ? want : slots, p.T);
    cudaError_t err = launch(moe_up2_kernel<T>, up_grid, dim3(kMoeWarps * 32), up_smem, stream, p);
    if (err != cudaSuccess) return err;
    const dim3 down_grid((p.H + kMoeWarps - 1) / kMoeWarps, p.T);
    return launch(moe_down2_kernel<T>, down_grid, dim3(kMoeWarps * 32),
                  static_cast<size_t>(p.K * p.I + p.Is) * sizeof(float), stream, p);
  }
  const dim3 up_grid((items + 2 * kMoeWarps - 1) / (2 * kMoeWarps), p.T);
  const size_t up_smem = static_cast<size_t>(p.H) * sizeof(float);
  const size_t down_smem = static_cast<size_t>(p.K * p.I + p.Is) * sizeof(float);
  if (p.H > kMoeMaxSmemFloats || p.K * p.I + p.Is > kMoeMaxSmemFloats) return cudaErrorInvalidValue;
  const dim3 down_grid((p.H + kMoeWarps - 1) / kMoeWarps, p.T);
  if (!moe_prefetch()) {
    cudaError_t err = hybrid_launch(moe_up_kernel<T, false>, up_grid, dim3(kMoeWarps * 32), up_smem, stream, p);
    if (err != cudaSuccess) return err;
    return hybrid_launch(moe_down_kernel<T, false>, down_grid, dim3(kMoeWarps * 32), down_smem, stream, p);
  }
  cudaError_t err = hybrid_launch(moe_up_kernel<T, true>, up_grid, dim3(kMoeWarps * 32), up_smem, stream, p);
  if (err != cudaSuccess) return err;
  return hybrid_launch(moe_down_kernel<T, true>, down_grid, dim3(kMoeWarps * 32), down_smem, stream, p);
}

}  // namespace

extern "C" {

// Recurrent gated delta rule, one token per sequence; Dv % 64 == 0, dk in {64, 128}, 16-byte aligned states.
// persistent != 0: a grid of the GPU's size walking the items with the next state prefetched.
int revolta_gdn_decode(const GdnDecodeParams* p, int dk, int dtype, int persistent, cudaStream_t stream) {
  if (p->batch == 0) return cudaSuccess;
  if (p->dv % kGdnDecodeCols || p->num_k_heads <= 0 || p->num_v_heads % p->num_k_heads) return cudaErrorInvalidValue;
  REVOLTA_HYBRID_DISPATCH(dtype, return gdn_decode<T>(*p, dk, persistent, stream))
  return cudaSuccess;
}

// Gating + gated delta rule + gated RMSNorm of one decode step (Dv == 128, dk in {64, 128}).
int revolta_gdn_decode_fused(const GdnFusedParams* p, int dk, int dtype, cudaStream_t stream) {
  if (p->batch == 0) return cudaSuccess;
  if (p->num_k_heads <= 0 || p->num_v_heads % p->num_k_heads) return cudaErrorInvalidValue;
  REVOLTA_HYBRID_DISPATCH(dtype, return gdn_decode_fused<T>(*p, dk, stream))
  return cudaSuccess;
}

// The same step with each head's columns split over 4 blocks (PDL launch); counters: batch * (num_v_heads +
// num_k_heads) zeroed ints, left zero. conv != null: the layer's conv1d update (silu, no bias, K <= 8) runs in it
// too, on conv->x (the pre-conv [q | k | v] rows); p's q/k/v are then unused.
int revolta_gdn_decode_fused_split(const GdnFusedParams* p, const GdnConvParams* conv, int* counters, int dk,
                                   int dtype, cudaStream_t stream) {
  if (p->batch == 0) return cudaSuccess;
  if (p->num_k_heads <= 0 || p->num_v_heads % p->num_k_heads || counters == nullptr) return cudaErrorInvalidValue;
  if (conv != nullptr && (conv->K < 2 || conv->K > kConvMaxWidth || conv->key_dim != p->num_k_heads * dk ||
                          conv->conv_dim != 2 * conv->key_dim + p->num_v_heads * kGdnFusedDv))
    return cudaErrorInvalidValue;
  REVOLTA_HYBRID_DISPATCH(dtype, return gdn_decode_fused_split<T>(*p, conv, counters, dk, stream))
  return cudaSuccess;
}

// Gated delta rule over variable-length sequences (recurrent form, tokens in order); Dv % 16 == 0, dk in
// {64, 128}, q/k rows aligned to dk / 32 elements.
int revolta_gdn_prefill(const GdnPrefillParams* p, int dk, int dtype, cudaStream_t stream) {
  if (p->num_seqs == 0) return cudaSuccess;
  if (p->dv % kGdnPrefillCols || p->num_k_heads <= 0 || p->num_v_heads % p->num_k_heads)
    return cudaErrorInvalidValue;
  REVOLTA_HYBRID_DISPATCH(dtype, return gdn_prefill<T>(*p, dk, stream))
  return cudaSuccess;
}

// Causal conv1d, one new token per sequence (x row stride x_stride; out [B, C]); 2 <= K <= 8.
int revolta_conv1d_update(void* out, const void* x, long long x_stride, const void* weight, const void* bias,
                          void* states, const int64_t* state_indices, int batch, int channels, int K, int silu,
                          int dtype, cudaStream_t stream) {
  if (batch == 0 || channels == 0) return cudaSuccess;
  if (K < 2 || K > kConvMaxWidth) return cudaErrorInvalidValue;
  const dim3 grid((channels + kConvThreads - 1) / kConvThreads, batch);
  REVOLTA_HYBRID_DISPATCH(dtype, return hybrid_launch(conv1d_update_kernel<T>, grid, dim3(kConvThreads), 0, stream,
      static_cast<T*>(out), static_cast<const T*>(x), x_stride, static_cast<const T*>(weight),
      static_cast<const T*>(bias), static_cast<T*>(states), state_indices, channels, K, silu))
  return cudaSuccess;
}

// Causal conv1d over variable-length sequences (x, out [T, C] contiguous), then the new states and snapshots.
int revolta_conv1d_prefill(void* out, const void* x, const void* weight, const void* bias, void* states,
                           const int* query_start_loc, const int64_t* state_indices, const int* snap_offsets,
                           const int64_t* snap_len, const int64_t* snap_slot, int num_tokens, int num_seqs,
                           int channels, int K, int silu, int dtype, cudaStream_t stream) {
  if (num_seqs == 0 || channels == 0) return cudaSuccess;
  if (K < 2 || K > kConvMaxWidth) return cudaErrorInvalidValue;
  const int cblocks = (channels + kConvThreads - 1) / kConvThreads;
  REVOLTA_HYBRID_DISPATCH(dtype, {
    if (num_tokens > 0) {
      const dim3 grid(cblocks, (num_tokens + kConvTokensPerThread - 1) / kConvTokensPerThread);
      conv1d_prefill_kernel<T><<<grid, kConvThreads, 0, stream>>>(
          static_cast<T*>(out), static_cast<const T*>(x), static_cast<const T*>(weight),
          static_cast<const T*>(bias), static_cast<const T*>(states), query_start_loc, state_indices, num_tokens,
          num_seqs, channels, K, silu);
      const cudaError_t err = cudaGetLastError();
      if (err != cudaSuccess) return err;
    }
    conv1d_state_kernel<T><<<dim3(cblocks, num_seqs), kConvThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(states), query_start_loc, state_indices, snap_offsets, snap_len,
        snap_slot, channels, K);
  })
  return cudaGetLastError();
}

// g (float32) and beta (storage type), contiguous [T, H], from the a/b projections (row strides) and params.
int revolta_gdn_gating(float* g, void* beta, const void* a, const void* b, const void* a_log, const void* dt_bias,
                       int num_tokens, int heads, long long a_stride, long long b_stride, int dtype,
                       cudaStream_t stream) {
  const int n = num_tokens * heads;
  if (n == 0) return cudaSuccess;
  REVOLTA_HYBRID_DISPATCH(dtype, gdn_gating_kernel<T><<<(n + 255) / 256, 256, 0, stream>>>(
      g, static_cast<T*>(beta), static_cast<const T*>(a), static_cast<const T*>(b), static_cast<const T*>(a_log),
      static_cast<const T*>(dt_bias), num_tokens, heads, a_stride, b_stride))
  return cudaGetLastError();
}

// weight * rmsnorm(x) * silu(gate) over D for the rows of [n0, n1, D] strided views; out contiguous.
int revolta_rms_norm_gated(void* out, const void* x, const void* gate, const void* weight, int n0, int n1, int D,
                           long long x_s0, long long x_s1, long long g_s0, long long g_s1, float eps, int dtype,
                           cudaStream_t stream) {
  const int rows = n0 * n1;
  if (rows == 0 || D == 0) return cudaSuccess;
  constexpr int kRowsPerBlock = 4;
  REVOLTA_HYBRID_DISPATCH(dtype, rms_norm_gated_kernel<T><<<(rows + kRowsPerBlock - 1) / kRowsPerBlock,
                                                            32 * kRowsPerBlock, 0, stream>>>(
      static_cast<T*>(out), static_cast<const T*>(x), static_cast<const T*>(gate), static_cast<const T*>(weight),
      n0, n1, D, x_s0, x_s1, g_s0, g_s1, eps))
  return cudaGetLastError();
}

// SwiGLU experts of a few tokens over the selected experts only (see moe.cuh). H, I, Is multiples of 8,
// 1 <= K <= 16, E <= 512 when routing here, H and K * I + Is at most kMoeMaxSmemFloats (11520).
int revolta_moe(const MoeParams* p, int dtype, cudaStream_t stream) {
  if (p->T == 0) return cudaSuccess;
  if (p->H % 8 || p->I % 8 || p->Is % 8 || p->K < 1 || p->K > kMoeMaxTopK ||
      (p->router_logits != nullptr && (p->E > kMoeMaxExperts || p->K > p->E)) ||
      (p->shared_w13 != nullptr) != (p->shared_w2 != nullptr) || (p->shared_w13 == nullptr && p->Is))
    return cudaErrorInvalidValue;
  REVOLTA_HYBRID_DISPATCH(dtype, return moe<T>(*p, stream))
  return cudaSuccess;
}

// Router logits [T, E] (contiguous, storage type) = x [T, H] (row stride x_stride) . w [E, H]^T, fp32
// accumulation; H % 8 == 0, 16-byte aligned rows. Launched with PDL: w's rows are loaded before the wait.
int revolta_moe_router(void* logits, const void* x, long long x_stride, const void* w, int tokens, int H, int E,
                       int dtype, cudaStream_t stream) {
  if (tokens == 0 || E == 0) return cudaSuccess;
  if (H % 8 || H <= 0) return cudaErrorInvalidValue;
  const dim3 grid((E + kMoeRouterWarps - 1) / kMoeRouterWarps);
  REVOLTA_HYBRID_DISPATCH(dtype, return launch(moe_router_kernel<T>, grid, dim3(kMoeRouterWarps * 32), 0, stream,
                                               static_cast<const T*>(x), x_stride, static_cast<const T*>(w),
                                               static_cast<T*>(logits), tokens, H, E))
  return cudaSuccess;
}

// Router logits of norm(x + residual) with h = x + residual and norm(h) written too (MoeRouterNormParams,
// moe.cuh); bit-identical h and normed to revolta_fused_add_rms_norm. H % 8 == 0, H <= kMoeMaxSmemFloats,
// 16-byte aligned rows. Launched with PDL. With ids_out: the softmax top-k routing too (as
// revolta_moe_topk_softmax: E <= kMoeMaxExperts, 1 <= top_k <= min(kMoeMaxTopK, E)), through a zeroed counter.
int revolta_moe_router_norm(const MoeRouterNormParams* p, int dtype, cudaStream_t stream) {
  if (p->tokens == 0 || p->E == 0) return cudaSuccess;
  if (p->H % 8 || p->H <= 0 || p->H > kMoeMaxSmemFloats || p->norm_threads < 32 || p->norm_threads > 1024 ||
      (p->norm_threads & (p->norm_threads - 1)))
    return cudaErrorInvalidValue;
  if (p->ids_out != nullptr && (p->weights_out == nullptr || p->counter == nullptr || p->E > kMoeMaxExperts ||
                                p->top_k < 1 || p->top_k > kMoeMaxTopK || p->top_k > p->E))
    return cudaErrorInvalidValue;
  const dim3 grid((p->E + kMoeRouterWarps - 1) / kMoeRouterWarps);
  // the routing tail reuses the normed row's buffer for its 2 E candidates
  const int smem_floats = p->ids_out != nullptr && 2 * p->E > p->H ? 2 * p->E : p->H;
  const size_t smem = static_cast<size_t>(smem_floats) * sizeof(float);
  REVOLTA_HYBRID_DISPATCH(dtype, return launch(moe_router_norm_kernel<T>, grid, dim3(kMoeRouterWarps * 32), smem,
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
  REVOLTA_HYBRID_DISPATCH(dtype, moe_topk_softmax_kernel<T><<<tokens, kMoeWarps * 32, 0, stream>>>(
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
  REVOLTA_HYBRID_DISPATCH(dtype, moe_combine_kernel<T><<<grid, kMoeCombineThreads, 0, stream>>>(*p);
                          return cudaGetLastError())
  return cudaSuccess;
}

// Set the MoE decode variant (see MoeConfig; a negative value leaves that field). Returns the old values
// packed as v3 * 100 + pf_down * 10 + down. For A/B benchmarks: kernels already captured in a graph keep theirs.
int revolta_moe_set_config(int v3, int pf_down, int down) {
  MoeConfig& c = moe_config();
  const int old = c.v3 * 100 + c.pf_down * 10 + c.down;
  if (v3 >= 0) c.v3 = v3;
  if (pf_down >= 0) c.pf_down = pf_down;
  if (down >= 0) c.down = down;
  return old;
}

}  // extern "C"
