// Host-side launch of paged_attention_kernel for one configuration (shared by the decode and prefill
// translation units, each of which instantiates its own set).
#pragma once

#include "revolta_kernels.h"

namespace revolta {

template <int D, int KIND, int WM, int WN, int BN>
cudaError_t launch_attention(const AttnParams& p, int num_seqs, int max_query_len, cudaStream_t stream) {
  using C = AttnCfg<D, KIND, WM, WN, BN>;
  auto kernel = paged_attention_kernel<D, KIND, WM, WN, BN>;
  static bool configured = false;  // benign race: every caller sets the same value
  if (!configured) {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM_BYTES);
    if (e != cudaSuccess) return e;
    configured = true;
  }
  const int group = p.num_heads / p.num_kv_heads;
  const int row_tiles = (max_query_len * group + C::BM - 1) / C::BM;
  dim3 grid(num_seqs * p.num_kv_heads, row_tiles, p.num_splits);
  kernel<<<grid, C::NT, C::SMEM_BYTES, stream>>>(p);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess || p.num_splits == 1) return e;
  attn_reduce_kernel<D><<<p.num_tokens * p.num_heads, D, 0, stream>>>(p.out, p.part_o, p.part_ml,
                                                                      p.num_tokens * p.num_heads, p.num_splits);
  return cudaGetLastError();
}

template <int WM, int WN, int BN, int BN256>
cudaError_t dispatch_attention(const AttnParams& p, int head_dim, int kv_kind, int num_seqs, int max_query_len,
                               cudaStream_t stream) {
#define REVOLTA_KINDS(D, B)                                                                   \
  switch (kv_kind) {                                                                          \
    case KV_F16: return launch_attention<D, KV_F16, WM, WN, B>(p, num_seqs, max_query_len, stream);   \
    case KV_I8: return launch_attention<D, KV_I8, WM, WN, B>(p, num_seqs, max_query_len, stream);     \
    case KV_E4M3: return launch_attention<D, KV_E4M3, WM, WN, B>(p, num_seqs, max_query_len, stream); \
    case KV_E5M2: return launch_attention<D, KV_E5M2, WM, WN, B>(p, num_seqs, max_query_len, stream); \
    default: return cudaErrorInvalidValue;                                                    \
  }
  switch (head_dim) {
    case 64: REVOLTA_KINDS(64, BN)
    case 128: REVOLTA_KINDS(128, BN)
    case 256: REVOLTA_KINDS(256, BN256)
    default: return cudaErrorInvalidValue;
  }
#undef REVOLTA_KINDS
}

}  // namespace revolta
