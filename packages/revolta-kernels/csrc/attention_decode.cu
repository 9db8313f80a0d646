// Decode / speculative verification: 16 packed rows per block, four warps split each key tile.
#include "attention_launch.cuh"

namespace revolta {
cudaError_t attention_decode(const AttnParams& p, int head_dim, int kv_kind, int num_seqs, int max_query_len,
                             cudaStream_t stream) {
  return dispatch_attention<1, 4, 64, 64>(p, head_dim, kv_kind, num_seqs, max_query_len, stream);
}
}  // namespace revolta
