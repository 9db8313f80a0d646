// The extern "C" entry points: argument checks that need no device access, dtype dispatch, launch.
#include <cstring>

#include "revolta_kernels.h"
#include "quant_common.cuh"
#include "cache.cuh"
#include "mma_layout.cuh"
#include "norm.cuh"
#include "rotary.cuh"
#include "sampling.cuh"

#ifndef REVOLTA_ARCHS
#define REVOLTA_ARCHS "unknown"
#endif
#ifndef REVOLTA_MAX_ARCH
#define REVOLTA_MAX_ARCH 0
#endif

namespace revolta {
cudaError_t attention_decode(const AttnParams&, int, int, int, int, cudaStream_t, int*);
cudaError_t attention_prefill(const AttnParams&, int, int, int, int, cudaStream_t, int*);
cudaError_t attention_rope_decode(const AttnParams&, const DecodeRope&, int, int, cudaStream_t, int*);

namespace {
int g_decode_variant = 0, g_prefill_variant = 0;
constexpr int kMaxDevices = 64;
int g_frag_ok[kMaxDevices] = {};  // set by revolta_mma_layout_probe, per device
}  // namespace

namespace {
int g_pdl_cached[kMaxDevices] = {};  // 0 = unknown, 1 = off, 2 = on (sm_90+)
// Device code waits for its predecessor (pdl.cuh) only where compiled for sm_90+: a library without sm_90 code
// (the Volta one, whose compute_70 PTX a newer GPU's driver compiles) must never be launched with PDL.
constexpr bool kPdlCode = REVOLTA_MAX_ARCH >= 90;
bool g_pdl_allowed = true;           // revolta_set_pdl
int g_decode_vec = 1;              // revolta_set_decode_vec
int g_sm_count[kMaxDevices] = {};
}  // namespace

bool pdl_enabled() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) return false;
  if (g_pdl_cached[dev] == 0) {
    int major = 0;
    const bool ok = kPdlCode && cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                    major >= 9;
    g_pdl_cached[dev] = ok ? 2 : 1;
  }
  return g_pdl_cached[dev] == 2 && g_pdl_allowed;
}

int decode_variant() { return g_decode_variant; }

int decode_vec_mode() { return g_decode_vec; }

int sm_count() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) return 1;
  if (g_sm_count[dev] == 0 && cudaDeviceGetAttribute(&g_sm_count[dev], cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    g_sm_count[dev] = 1;
  return g_sm_count[dev];
}
int prefill_variant() { return g_prefill_variant; }
bool mma_layout_ok() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) return false;
  return g_frag_ok[dev] == 1;
}

inline int threads_for(int n) {
  int t = 32;
  while (t < n && t < 1024) t *= 2;
  return t;
}

// Elementwise kernels split each row into column chunks so one decoding row still spreads over many SMs.
constexpr int kElementwiseThreads = 256;
inline unsigned chunks_of(int n, int per_block) {
  const int c = (n + per_block - 1) / per_block;
  return static_cast<unsigned>(c < 1 ? 1 : (c > 65535 ? 65535 : c));
}
}  // namespace revolta

using namespace revolta;

#define DISPATCH_DTYPE(dtype, ...)           \
  switch (dtype) {                                   \
    case 0: { using T = __half; __VA_ARGS__; break; }  \
    case 1: { using T = __nv_bfloat16; __VA_ARGS__; break; } \
    case 2: { using T = float; __VA_ARGS__; break; }   \
    default: return cudaErrorInvalidValue;           \
  }

extern "C" {

int revolta_paged_attention(const AttnParams* p, int head_dim, int kv_kind, int prefill, int num_seqs,
                            int max_query_len, cudaStream_t stream) {
  if (num_seqs == 0 || max_query_len == 0) return cudaSuccess;
  if (p->num_kv_heads <= 0 || p->num_heads % p->num_kv_heads != 0) return cudaErrorInvalidValue;
  return prefill ? attention_prefill(*p, head_dim, kv_kind, num_seqs, max_query_len, stream, nullptr)
                 : attention_decode(*p, head_dim, kv_kind, num_seqs, max_query_len, stream, nullptr);
}

int revolta_rope_paged_decode(const AttnParams* p, const DecodeRope* r, int head_dim, int num_seqs, int* taken,
                              cudaStream_t stream) {
  *taken = 0;
  if (num_seqs == 0) return cudaSuccess;
  if (p->num_kv_heads <= 0 || p->num_heads % p->num_kv_heads != 0) return cudaErrorInvalidValue;
  if (r->rot_dim <= 0 || r->rot_dim > head_dim || r->rot_dim % (r->neox ? 16 : 8) != 0) return cudaErrorInvalidValue;
  return attention_rope_decode(*p, *r, head_dim, num_seqs, stream, taken);
}

int revolta_attention_blocks_per_sm(int head_dim, int kv_kind, int prefill, int rows, int* blocks) {
  AttnParams p{};
  *blocks = 0;
  return prefill ? attention_prefill(p, head_dim, kv_kind, 0, rows, nullptr, blocks)
                 : attention_decode(p, head_dim, kv_kind, 0, rows, nullptr, blocks);
}

int revolta_mma_layout_probe(int* ok, int* maps) {
  *ok = 0;
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  constexpr int n = 1 + 4 * 512;
  int* d = nullptr;
  if ((e = cudaMalloc(&d, n * sizeof(int))) != cudaSuccess) return e;
  int host[n];
  wmma_layout_probe_kernel<0><<<1, 32>>>(d);
  e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaMemcpy(host, d, n * sizeof(int), cudaMemcpyDeviceToHost);
  cudaFree(d);
  if (e != cudaSuccess) return e;
  *ok = host[0];
  if (maps) memcpy(maps, host + 1, (n - 1) * sizeof(int));
  if (dev >= 0 && dev < kMaxDevices) g_frag_ok[dev] = host[0] ? 1 : 0;
  return cudaSuccess;
}

// 1 when later launches on the current device use PDL (sm_90+, unless revolta_set_pdl(0) turned it off).
int revolta_pdl_on() { return pdl_enabled() ? 1 : 0; }

// PDL for later launches: 0 = off, any other value = on where the device has it (sm_90+). Captured graphs keep
// what they were captured with. Returns the new state for the current device (1 = on).
int revolta_set_pdl(int mode) {
  g_pdl_allowed = mode != 0;
  return pdl_enabled() ? 1 : 0;
}

int revolta_set_attention_variant(int decode, int prefill) {
  if (decode < 0 || prefill < 0) return cudaErrorInvalidValue;
  g_decode_variant = decode;
  g_prefill_variant = prefill;
  return cudaSuccess;
}

// paged_decode_warp_split_kernel for later decode calls: 0 = never, 1 = batches with at most half as many
// (sequence, KV head) pairs as SMs (the default), 2 = every fp16 one-token decode it can take (tests). Returns
// the previous mode.
int revolta_set_decode_vec(int mode) {
  if (mode < 0 || mode > 2) return -1;
  const int old = decode_vec_mode();
  g_decode_vec = mode;
  return old;
}

int revolta_rms_norm(void* out, const void* x, const void* w, int rows, int hidden, float eps,
                     int zero_centered, int dtype, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  DISPATCH_DTYPE(dtype, if (cudaError_t e = launch(rms_norm_kernel<T>, rows, threads_for(hidden / 4), 0, stream,
      static_cast<T*>(out), static_cast<const T*>(x), static_cast<const T*>(w), eps, hidden, zero_centered != 0)) return e)
  return cudaSuccess;
}

int revolta_fused_add_rms_norm(void* out, void* residual_out, const void* x, const void* residual,
                               const void* w, int rows, int hidden, float eps, int zero_centered, int dtype,
                               cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  DISPATCH_DTYPE(dtype, if (cudaError_t e = launch(fused_add_rms_norm_kernel<T>, rows, threads_for(hidden / 4), 0, stream,
      static_cast<T*>(out), static_cast<T*>(residual_out), static_cast<const T*>(x),
      static_cast<const T*>(residual), static_cast<const T*>(w), eps, hidden, zero_centered != 0)) return e)
  return cudaSuccess;
}

int revolta_argmax_rows(long long* out, const float* x, int rows, int cols, int* ws, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const dim3 grid(chunks_of(cols, kArgmaxChunk), rows);
  const bool vec = cols % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  return vec ? launch(argmax_rows_kernel<true>, grid, kArgmaxThreads, 0, stream, x, out, cols, ws)
             : launch(argmax_rows_kernel<false>, grid, kArgmaxThreads, 0, stream, x, out, cols, ws);
}

int revolta_sigmoid_gate_mul(void* out, const void* x, const void* gate, int rows, int heads, int d,
                             long long gate_row, long long gate_head, int dtype, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const dim3 grid(rows, chunks_of(heads * d, kElementwiseThreads));
  DISPATCH_DTYPE(dtype, if (cudaError_t e = launch(sigmoid_gate_mul_kernel<T>, grid, kElementwiseThreads, 0,
      stream, static_cast<T*>(out), static_cast<const T*>(x), static_cast<const T*>(gate), heads, d, gate_row,
      gate_head)) return e)
  return cudaSuccess;
}

int revolta_silu_and_mul(void* out, const void* x, int rows, int d, int dtype, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const dim3 grid(rows, chunks_of(d, kElementwiseThreads));
  DISPATCH_DTYPE(dtype, if (cudaError_t e = launch(silu_and_mul_kernel<T>, grid, kElementwiseThreads, 0, stream,
      static_cast<T*>(out), static_cast<const T*>(x), d)) return e)
  return cudaSuccess;
}

int revolta_rotary_embedding(void* q_out, void* k_out, const void* q, const void* k, const int64_t* positions,
                             const void* cos_sin, int cos_sin_is_f32, int num_tokens, int num_heads,
                             int num_kv_heads, int head_dim, int rot_dim, long long q_tok_stride,
                             long long q_head_stride, long long k_tok_stride, long long k_head_stride,
                             int neox, int dtype, cudaStream_t stream) {
  if (num_tokens == 0) return cudaSuccess;
  const dim3 grid(num_tokens, chunks_of((num_heads + num_kv_heads) * head_dim, kElementwiseThreads));
#define LAUNCH_ROPE(CS)                                                                              \
  if (cudaError_t e = launch(rotary_kernel<T, CS>, grid, kElementwiseThreads, 0, stream,                   \
      static_cast<T*>(q_out), static_cast<T*>(k_out), static_cast<const T*>(q), static_cast<const T*>(k), \
      positions, static_cast<const CS*>(cos_sin), num_heads, num_kv_heads, head_dim, rot_dim,         \
      q_tok_stride, q_head_stride, k_tok_stride, k_head_stride, neox != 0)) return e
  DISPATCH_DTYPE(dtype, if (cos_sin_is_f32) { LAUNCH_ROPE(float); } else { LAUNCH_ROPE(T); })
#undef LAUNCH_ROPE
  return cudaSuccess;
}

int revolta_reshape_and_cache(const void* key, const void* value, void* key_cache, void* value_cache,
                              float* k_scales, float* v_scales, const int64_t* slots, int num_tokens,
                              int num_kv_heads, int head_dim, int block_size, long long k_tok_stride,
                              long long k_head_stride, long long v_tok_stride, long long v_head_stride,
                              int dtype, int cache_kind, cudaStream_t stream) {
  if (num_tokens == 0) return cudaSuccess;
  const int threads = num_kv_heads >= 4 ? 256 : 64 * num_kv_heads;
#define LAUNCH_CACHE(KIND)                                                                          \
  if (cudaError_t e = launch(reshape_and_cache_kernel<T, KIND>, num_tokens, threads, 0, stream,     \
      static_cast<const T*>(key), static_cast<const T*>(value), key_cache, value_cache, k_scales,    \
      v_scales, slots, num_kv_heads, head_dim, block_size, k_tok_stride, k_head_stride, v_tok_stride, \
      v_head_stride)) return e
  DISPATCH_DTYPE(dtype, switch (cache_kind) {
    case CACHE_SAME: LAUNCH_CACHE(CACHE_SAME); break;
    case CACHE_I8: LAUNCH_CACHE(CACHE_I8); break;
    case CACHE_E4M3: LAUNCH_CACHE(CACHE_E4M3); break;
    case CACHE_E5M2: LAUNCH_CACHE(CACHE_E5M2); break;
    default: return cudaErrorInvalidValue;
  })
#undef LAUNCH_CACHE
  return cudaSuccess;
}

int revolta_rotary_and_cache(void* q_out, const void* q, const void* k, const void* v, const int64_t* positions,
                             const void* cos_sin, int cos_sin_is_f32, void* key_cache, void* value_cache,
                             float* k_scales, float* v_scales, const int64_t* slots, int num_tokens, int num_heads,
                             int num_kv_heads, int head_dim, int rot_dim, int block_size, long long q_tok_stride,
                             long long q_head_stride, long long k_tok_stride, long long k_head_stride,
                             long long v_tok_stride, long long v_head_stride, int neox, const void* q_norm_w,
                             const void* k_norm_w, float eps, int zero_centered, int dtype, int cache_kind,
                             cudaStream_t stream) {
  if (num_tokens == 0) return cudaSuccess;
  if ((q_norm_w != nullptr || k_norm_w != nullptr) && head_dim > kRopeNormMaxDim) return cudaErrorInvalidValue;
  constexpr int kWarps = kRopeCacheWarps;  // one warp per (token, head of q, k or v)
  const dim3 grid(num_tokens, (num_heads + 2 * num_kv_heads + kWarps - 1) / kWarps);
#define LAUNCH_ROPE_CACHE(CS, KIND)                                                                          \
  if (cudaError_t e = launch(rotary_and_cache_kernel<T, CS, KIND>, grid, 32 * kWarps, 0, stream,                \
      static_cast<T*>(q_out), static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),     \
      positions, static_cast<const CS*>(cos_sin), key_cache, value_cache, k_scales, v_scales, slots, num_heads, \
      num_kv_heads, head_dim, rot_dim, block_size, q_tok_stride, q_head_stride, k_tok_stride, k_head_stride,    \
      v_tok_stride, v_head_stride, neox != 0, static_cast<const T*>(q_norm_w), static_cast<const T*>(k_norm_w), \
      eps, zero_centered != 0)) return e
#define LAUNCH_ROPE_CACHE_KINDS(CS)                               \
  switch (cache_kind) {                                            \
    case CACHE_SAME: LAUNCH_ROPE_CACHE(CS, CACHE_SAME); break;    \
    case CACHE_I8: LAUNCH_ROPE_CACHE(CS, CACHE_I8); break;        \
    case CACHE_E4M3: LAUNCH_ROPE_CACHE(CS, CACHE_E4M3); break;    \
    case CACHE_E5M2: LAUNCH_ROPE_CACHE(CS, CACHE_E5M2); break;    \
    default: return cudaErrorInvalidValue;                         \
  }
  DISPATCH_DTYPE(dtype, if (cos_sin_is_f32) { LAUNCH_ROPE_CACHE_KINDS(float) } else { LAUNCH_ROPE_CACHE_KINDS(T) })
#undef LAUNCH_ROPE_CACHE_KINDS
#undef LAUNCH_ROPE_CACHE
  return cudaSuccess;
}

const char* revolta_error_string(int err) { return cudaGetErrorString(static_cast<cudaError_t>(err)); }

const char* revolta_build_archs(void) { return REVOLTA_ARCHS; }

// sizeof the named parameter block that the Python side mirrors with ctypes (-1: not one of them), so a library
// built from other sources is refused at import instead of reading shifted fields.
int revolta_struct_size(const char* name) {
  using namespace revolta;
  struct Entry {
    const char* name;
    int size;
  };
  static const Entry kEntries[] = {
      {"AttnParams", sizeof(AttnParams)},           {"DecodeRope", sizeof(DecodeRope)},
      {"GdnDecodeParams", sizeof(GdnDecodeParams)}, {"GdnFusedParams", sizeof(GdnFusedParams)},
      {"GdnPrefillParams", sizeof(GdnPrefillParams)}, {"GdnConvParams", sizeof(GdnConvParams)},
      {"MoeParams", sizeof(MoeParams)},             {"MoeRouterNormParams", sizeof(MoeRouterNormParams)},
      {"MoeCombineParams", sizeof(MoeCombineParams)}, {"GemvRope", sizeof(GemvRope)},
      {"QuantMoeParams", sizeof(QuantMoeParams)},     {"QuantMoeCombineParams", sizeof(QuantMoeCombineParams)},
  };
  for (const Entry& e : kEntries)
    if (std::strcmp(e.name, name) == 0) return e.size;
  return -1;
}

}  // extern "C"
