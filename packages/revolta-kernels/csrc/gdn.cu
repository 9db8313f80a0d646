// C ABI of the Gated DeltaNet kernels (gated delta rule decode and prefill, the fused decode step, causal conv1d,
// gating, gated RMSNorm): checks that need no device access, dtype dispatch, launch on the caller's stream.
#include "revolta_kernels.h"
#include "dtype_dispatch.cuh"
#include "conv1d.cuh"
#include "gdn_decode.cuh"
#include "gdn_decode_fused.cuh"
#include "gdn_gating.cuh"
#include "gdn_prefill.cuh"

using namespace revolta;

namespace {

int num_sms() {  // of the current device, cached (a host query, allowed while a stream is being captured)
  static int cached[64] = {0};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 0;
  if (cached[dev] == 0) cudaDeviceGetAttribute(&cached[dev], cudaDevAttrMultiProcessorCount, dev);
  return cached[dev];
}

// A grid of the GPU's resident size (or the items, if fewer) walking the items (gdn_decode.cuh).
template <typename T, int DK>
cudaError_t gdn_decode_dk(const GdnDecodeParams& p, cudaStream_t stream) {
  static int per_sm = 0;
  if (per_sm == 0) {
    const cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, gdn_decode_kernel<T, DK>, kGdnDecodeThreads, 0);
    if (err != cudaSuccess) return err;
  }
  const int items = p.batch * p.num_v_heads * (p.dv / kGdnDecodeCols);
  const int slots = (per_sm > 0 ? per_sm : 1) * (num_sms() > 0 ? num_sms() : 1);
  gdn_decode_kernel<T, DK><<<items < slots ? items : slots, kGdnDecodeThreads, 0, stream>>>(p, items);
  return cudaGetLastError();
}

template <typename T>
cudaError_t gdn_decode(const GdnDecodeParams& p, int dk, cudaStream_t stream) {
  switch (dk) {
    case 64: return gdn_decode_dk<T, 64>(p, stream);
    case 128: return gdn_decode_dk<T, 128>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}

template <typename T>
cudaError_t gdn_decode_fused(const GdnFusedParams& p, const GdnConvParams* cv, int* counters, int dk,
                                   cudaStream_t stream) {
  const dim3 grid(kGdnSplitChunks, p.num_v_heads, p.batch), block(kGdnDecodeThreads);
  const GdnConvParams none = {};
  if (cv == nullptr) {
    switch (dk) {
      case 64: return launch(gdn_decode_fused_kernel<T, 64, false>, grid, block, 0, stream, p, counters, none);
      case 128: return launch(gdn_decode_fused_kernel<T, 128, false>, grid, block, 0, stream, p, counters, none);
      default: return cudaErrorInvalidValue;
    }
  }
  switch (dk) {
    case 64: return launch(gdn_decode_fused_kernel<T, 64, true>, grid, block, 0, stream, p, counters, *cv);
    case 128: return launch(gdn_decode_fused_kernel<T, 128, true>, grid, block, 0, stream, p, counters, *cv);
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

}  // namespace

extern "C" {

// Recurrent gated delta rule, one token per sequence; Dv % 64 == 0, dk in {64, 128}, 16-byte aligned states.
int revolta_gdn_decode(const GdnDecodeParams* p, int dk, int dtype, cudaStream_t stream) {
  if (p->batch == 0) return cudaSuccess;
  if (p->dv % kGdnDecodeCols || p->num_k_heads <= 0 || p->num_v_heads % p->num_k_heads) return cudaErrorInvalidValue;
  REVOLTA_STORAGE_DISPATCH(dtype, return gdn_decode<T>(*p, dk, stream))
  return cudaSuccess;
}

// Gating + gated delta rule + gated RMSNorm of one decode step (Dv == 128, dk in {64, 128}), each head's columns
// split over 4 blocks (PDL launch); counters: batch * (num_v_heads + num_k_heads) zeroed ints, left zero.
// conv != null: the layer's conv1d update (silu, no bias, K <= 8) runs in it too, on conv->x (the pre-conv
// [q | k | v] rows); p's q/k/v are then unused.
int revolta_gdn_fused_decode(const GdnFusedParams* p, const GdnConvParams* conv, int* counters, int dk, int dtype,
                             cudaStream_t stream) {
  if (p->batch == 0) return cudaSuccess;
  if (p->num_k_heads <= 0 || p->num_v_heads % p->num_k_heads || counters == nullptr) return cudaErrorInvalidValue;
  if (conv != nullptr && (conv->K < 2 || conv->K > kConvMaxWidth || conv->key_dim != p->num_k_heads * dk ||
                          conv->conv_dim != 2 * conv->key_dim + p->num_v_heads * kGdnFusedDv))
    return cudaErrorInvalidValue;
  REVOLTA_STORAGE_DISPATCH(dtype, return gdn_decode_fused<T>(*p, conv, counters, dk, stream))
  return cudaSuccess;
}

// Gated delta rule over variable-length sequences (recurrent form, tokens in order); Dv % 16 == 0, dk in
// {64, 128}, q/k rows aligned to dk / 32 elements.
int revolta_gdn_prefill(const GdnPrefillParams* p, int dk, int dtype, cudaStream_t stream) {
  if (p->num_seqs == 0) return cudaSuccess;
  if (p->dv % kGdnPrefillCols || p->num_k_heads <= 0 || p->num_v_heads % p->num_k_heads)
    return cudaErrorInvalidValue;
  REVOLTA_STORAGE_DISPATCH(dtype, return gdn_prefill<T>(*p, dk, stream))
  return cudaSuccess;
}

// Causal conv1d, one new token per sequence (x row stride x_stride; out [B, C]); 2 <= K <= 8.
int revolta_conv1d_update(void* out, const void* x, long long x_stride, const void* weight, const void* bias,
                          void* states, const int64_t* state_indices, int batch, int channels, int K, int silu,
                          int dtype, cudaStream_t stream) {
  if (batch == 0 || channels == 0) return cudaSuccess;
  if (K < 2 || K > kConvMaxWidth) return cudaErrorInvalidValue;
  const dim3 grid((channels + kConvThreads - 1) / kConvThreads, batch);
  REVOLTA_STORAGE_DISPATCH(dtype, return launch(conv1d_update_kernel<T>, grid, dim3(kConvThreads), 0, stream,
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
  REVOLTA_STORAGE_DISPATCH(dtype, {
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
  REVOLTA_STORAGE_DISPATCH(dtype, gdn_gating_kernel<T><<<(n + 255) / 256, 256, 0, stream>>>(
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
  REVOLTA_STORAGE_DISPATCH(dtype, rms_norm_gated_kernel<T><<<(rows + kRowsPerBlock - 1) / kRowsPerBlock,
                                                            32 * kRowsPerBlock, 0, stream>>>(
      static_cast<T*>(out), static_cast<const T*>(x), static_cast<const T*>(gate), static_cast<const T*>(weight),
      n0, n1, D, x_s0, x_s1, g_s0, g_s1, eps))
  return cudaGetLastError();
}

}  // extern "C"
