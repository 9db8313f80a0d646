/* C ABI of the native library: raw device pointers plus the caller's cudaStream_t, so any framework (or
 * none) can call it; nothing here links libtorch. Every function returns a cudaError_t value (0 = ok);
 * revolta_error_string() turns it into words. */
#pragma once

#include <cuda_runtime.h>
#include "attention.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/* dtype codes: 0 = float16, 1 = bfloat16, 2 = float32 */
int revolta_paged_attention(const revolta::AttnParams* params, int head_dim, int kv_kind, int prefill,
                            int num_seqs, int max_query_len, cudaStream_t stream);
/* Run once per device, outside CUDA-graph capture, to enable the "frag" attention kernels: checks that the
 * GPU's WMMA fragments have the layout they rely on (sm_80 and later do; Volta does not) and remembers the
 * answer for the current device. *ok = 1 when they do; maps (2048 ints, may be NULL) receives what each
 * fragment element holds after a load (4 fragments x 32 lanes x 16 elements), for diagnostics. Without it the generic attention kernels run. */
int revolta_frag_layout_probe(int* ok, int* maps);
/* Attention kernel choice: 0 = best for the case (default), 1 = generic kernels only, 2+ = alternative
 * frag configurations for tuning benchmarks (they skip the layout probe: never use them on Volta). */
int revolta_set_attention_variant(int decode, int prefill);
/* how many blocks of the attention kernel for `rows` packed rows (query tokens x group) fit on one SM */
int revolta_attention_blocks_per_sm(int head_dim, int kv_kind, int prefill, int rows, int* blocks);
int revolta_rms_norm(void* out, const void* x, const void* w, int rows, int hidden, float eps,
                     int zero_centered, int dtype, cudaStream_t stream);
int revolta_fused_add_rms_norm(void* out, void* residual_out, const void* x, const void* residual,
                               const void* w, int rows, int hidden, float eps, int zero_centered, int dtype,
                               cudaStream_t stream);
int revolta_silu_and_mul(void* out, const void* x, int rows, int d, int dtype, cudaStream_t stream);
int revolta_rotary_embedding(void* q_out, void* k_out, const void* q, const void* k, const int64_t* positions,
                             const void* cos_sin, int cos_sin_is_f32, int num_tokens, int num_heads,
                             int num_kv_heads, int head_dim, int rot_dim, long long q_tok_stride,
                             long long q_head_stride, long long k_tok_stride, long long k_head_stride,
                             int neox, int dtype, cudaStream_t stream);
int revolta_reshape_and_cache(const void* key, const void* value, void* key_cache, void* value_cache,
                              float* k_scales, float* v_scales, const int64_t* slots, int num_tokens,
                              int num_kv_heads, int head_dim, int block_size, long long k_tok_stride,
                              long long k_head_stride, long long v_tok_stride, long long v_head_stride,
                              int dtype, int cache_kind, cudaStream_t stream);
const char* revolta_error_string(int err);
const char* revolta_build_archs(void);

#ifdef __cplusplus
}
#endif
