/* C ABI of the native library: raw device pointers plus the caller's cudaStream_t, so any framework (or
 * none) can call it; nothing here links libtorch. Every function returns a cudaError_t value (0 = ok);
 * revolta_error_string() turns it into words. */
#pragma once

#include <cuda_runtime.h>
#include "attention.cuh"
#include "gdn_decode.cuh"
#include "gdn_decode_fused.cuh"
#include "gdn_prefill.cuh"
#include "moe_common.cuh"
#include "moe_router.cuh"
#include "moe_routing.cuh"
#include "quant_moe.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/* dtype codes: 0 = float16, 1 = bfloat16, 2 = float32 */
int revolta_paged_attention(const revolta::AttnParams* params, int head_dim, int kv_kind, int prefill,
                            int num_seqs, int max_query_len, cudaStream_t stream);
/* Rotary on the decode tokens' q and k (DecodeRope: strided projections), the cache write of k and v and
 * paged attention, in one launch, where the vec decode kernel applies (fp16 cache, one token per sequence;
 * see revolta_set_decode_vec). *taken = 0 when it does not: then nothing ran and the caller runs
 * rotary_and_cache and paged_attention. */
int revolta_rope_paged_decode(const revolta::AttnParams* params, const revolta::DecodeRope* rope, int head_dim,
                              int num_seqs, int* taken, cudaStream_t stream);
/* Run once per device, outside CUDA-graph capture, to enable the "mma" attention kernels: checks that the
 * GPU's WMMA fragments have the layout they rely on (sm_80 and later do; Volta does not) and remembers the
 * answer for the current device. *ok = 1 when they do; maps (2048 ints, may be NULL) receives what each
 * fragment element holds after a load (4 fragments x 32 lanes x 16 elements), for diagnostics. Without it the generic attention kernels run. */
int revolta_mma_layout_probe(int* ok, int* maps);
/* Attention kernel choice: 0 = best for the case (default), 1 = generic kernels only, 2+ = alternative
 * mma configurations for tuning benchmarks (they skip the layout probe: never use them on Volta). */
int revolta_set_attention_variant(int decode, int prefill);
/* paged_decode_vec_kernel for fp16 one-token decode: 0 = never, 1 = batches with at most half as many
 * (sequence, KV head) pairs as SMs (default), 2 = wherever it applies (tests). Returns the previous mode, -1 for
 * a bad one. */
int revolta_set_decode_vec(int mode);
/* 1 when launches on the current device use programmatic dependent launch (sm_90+, not turned off). */
int revolta_pdl_on(void);
/* how many blocks of the attention kernel for `rows` packed rows (query tokens x group) fit on one SM */
int revolta_attention_blocks_per_sm(int head_dim, int kv_kind, int prefill, int rows, int* blocks);
int revolta_rms_norm(void* out, const void* x, const void* w, int rows, int hidden, float eps,
                     int zero_centered, int dtype, cudaStream_t stream);
int revolta_fused_add_rms_norm(void* out, void* residual_out, const void* x, const void* residual,
                               const void* w, int rows, int hidden, float eps, int zero_centered, int dtype,
                               cudaStream_t stream);
int revolta_silu_and_mul(void* out, const void* x, int rows, int d, int dtype, cudaStream_t stream);
// out [rows, heads * d] = x * sigmoid(gate), gate strided [rows, heads, d] (torch's rounding).
int revolta_sigmoid_gate_mul(void* out, const void* x, const void* gate, int rows, int heads, int d,
                             long long gate_row, long long gate_head, int dtype, cudaStream_t stream);
// out[r] = argmax of float32 row r (torch.argmax semantics); ws: 4 * rows zeroed ints, left zero.
int revolta_argmax_rows(long long* out, const float* x, int rows, int cols, int* ws, cudaStream_t stream);
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
/* rotary on q and k, then k and v into the paged cache, in one launch; q_out is contiguous [T, H, D] */
int revolta_rotary_and_cache(void* q_out, const void* q, const void* k, const void* v, const int64_t* positions,
                             const void* cos_sin, int cos_sin_is_f32, void* key_cache, void* value_cache,
                             float* k_scales, float* v_scales, const int64_t* slots, int num_tokens, int num_heads,
                             int num_kv_heads, int head_dim, int rot_dim, int block_size, long long q_tok_stride,
                             long long q_head_stride, long long k_tok_stride, long long k_head_stride,
                             long long v_tok_stride, long long v_head_stride, int neox, const void* q_norm_w,
                             const void* k_norm_w, float eps, int zero_centered, int dtype, int cache_kind,
                             cudaStream_t stream);
/* Gated DeltaNet (csrc/gdn.cu): gated delta rule, causal conv1d, gating, gated RMSNorm */
int revolta_gdn_decode(const revolta::GdnDecodeParams* p, int dk, int dtype, cudaStream_t stream);
int revolta_gdn_fused_decode(const revolta::GdnFusedParams* p, const revolta::GdnConvParams* conv, int* counters,
                             int dk, int dtype, cudaStream_t stream);
int revolta_gdn_prefill(const revolta::GdnPrefillParams* p, int dk, int dtype, cudaStream_t stream);
int revolta_conv1d_update(void* out, const void* x, long long x_stride, const void* weight, const void* bias,
                          void* states, const int64_t* state_indices, int batch, int channels, int K, int silu,
                          int dtype, cudaStream_t stream);
int revolta_conv1d_prefill(void* out, const void* x, const void* weight, const void* bias, void* states,
                           const int* query_start_loc, const int64_t* state_indices, const int* snap_offsets,
                           const int64_t* snap_len, const int64_t* snap_slot, int num_tokens, int num_seqs,
                           int channels, int K, int silu, int dtype, cudaStream_t stream);
int revolta_gdn_gating(float* g, void* beta, const void* a, const void* b, const void* a_log, const void* dt_bias,
                       int num_tokens, int heads, long long a_stride, long long b_stride, int dtype,
                       cudaStream_t stream);
int revolta_rms_norm_gated(void* out, const void* x, const void* gate, const void* weight, int n0, int n1, int D,
                           long long x_s0, long long x_s1, long long g_s0, long long g_s1, float eps, int dtype,
                           cudaStream_t stream);
/* mixture of experts for few tokens (csrc/moe.cu): router, routing, dense experts, combination */
int revolta_moe(const revolta::MoeParams* p, int dtype, cudaStream_t stream);
int revolta_moe_router(void* logits, const void* x, long long x_stride, const void* w, int tokens, int H, int E,
                       int dtype, cudaStream_t stream);
int revolta_moe_router_norm(const revolta::MoeRouterNormParams* p, int dtype, cudaStream_t stream);
int revolta_moe_topk_softmax(const void* logits, long long logits_stride, void* ids, void* weights, int tokens, int E,
                             int K, int renormalize, int dtype, cudaStream_t stream);
int revolta_moe_combine(const revolta::MoeCombineParams* p, int dtype, cudaStream_t stream);
/* Quantized MoE experts for few tokens (csrc/quant_moe.cu, quant_moe.cuh): out[t, k] = in[t, k] @ W[ids[t, k]] for stacked int4 / int8
 * experts in the kernel layout, bits 4 or 8; act 0 (in = x[t]) or 1 (in = silu(gate) * up of x[t, k]). */
int revolta_quant_moe_gemv(const revolta::QuantMoeParams* p, int bits, cudaStream_t stream);
/* revolta_quant_moe_gemv (act 1) and revolta_moe_combine in one launch (quant_moe_combine.cuh): out[t] = sum_k
 * w[t, k] * down(silu(gate) * up of row (t, k)) + sigmoid(x[t] . g) * the shared expert's row when shared_id >= 0. */
int revolta_quant_moe_down_combine(const revolta::QuantMoeCombineParams* p, int bits, cudaStream_t stream);
/* Tensor-core GEMM of stacked quantized experts over R rows sorted by expert (quant_moe_gemm.cuh, a MoE prefill):
 * sorted row r is expert e's for offsets[e] <= r < offsets[e + 1] (device int64 [E + 1]); its input is x row
 * x_rows[r] / x_row_div (x_rows null: r), its output goes to out row out_rows[r] (null: r); rows outside every
 * expert's get zeros. silu 1: W's columns are [gate, up] and out [R, N / 2] gets silu(gate) * up. */
int revolta_quant_moe_gemm_rows(void* out, const void* x, const void* qweight, const void* scales, const void* qzeros,
                                const long long* offsets, const long long* x_rows, const long long* out_rows,
                                long long x_limit, int R, int E, int N, int K, int bits, int group_size,
                                int zero_offset, int x_row_div, int silu, cudaStream_t stream);
const char* revolta_error_string(int err);
const char* revolta_build_archs(void);
int revolta_struct_size(const char* name);

#ifdef __cplusplus
}
#endif
