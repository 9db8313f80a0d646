// Prefill: 64 packed rows per block (four warps of 16 rows), whole key tiles per warp.
#include "attention_launch.cuh"

namespace revolta {
cudaError_t attention_prefill(const AttnParams& p, int head_dim, int kv_kind, int num_seqs, int max_query_len,
                              cudaStream_t stream) {
  return dispatch_attention<4, 1, 64, 32>(p, head_dim, kv_kind, num_seqs, max_query_len, stream);
}
}  // namespace revolta
