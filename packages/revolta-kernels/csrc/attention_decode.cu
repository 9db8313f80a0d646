// Decode / speculative verification launcher: paged_decode_kernel with 16 packed rows per block.
#include <cstdlib>

#include "attention_launch.cuh"

namespace revolta {
namespace {

constexpr int kDecodeWarps = 4, kDecodeTile = 64;

template <int D, int KIND, int MINB>
cudaError_t decode_cfg(const AttnParams& p, int num_seqs, int max_query_len, cudaStream_t stream, int* occ) {
  constexpr int ESZ = KIND == KV_F16 ? 2 : 1;
  constexpr int CPR = D * ESZ / 16;
  constexpr int NCH = kDecodeTile * CPR / (32 * kDecodeWarps);
  // Keep about 8 sixteen-byte loads per thread per tensor in flight: narrow KV gets more tiles ahead.
  constexpr int STAGES = NCH >= 8 ? 1 : 8 / NCH;
  using C = DecodeCfg<D, KIND, kDecodeWarps, kDecodeTile, STAGES>;
  static bool configured = false;
  const int group = occ ? 1 : p.num_heads / p.num_kv_heads;  // an occupancy query passes no shapes
  dim3 grid(num_seqs * p.num_kv_heads, (max_query_len * group + 15) / 16, p.num_splits);
  cudaError_t e = launch_or_query(paged_decode_kernel<D, KIND, kDecodeWarps, kDecodeTile, STAGES, MINB>, C::NT,
                                  C::SMEM_BYTES, configured, grid, p, stream, occ);
  if (e != cudaSuccess || occ || p.num_splits == 1) return e;
  return reduce_splits(p, D, stream);
}

// Blocks per SM the register budget is sized for: 3 fits without spills; 4 keeps more loads in flight
// but spills a little. REVOLTA_DECODE_MINB=4 selects the latter (for benchmarking).
template <int D, int KIND>
cudaError_t decode_one(const AttnParams& p, int num_seqs, int max_query_len, cudaStream_t stream, int* occ) {
  const char* env = std::getenv("REVOLTA_DECODE_MINB");
  if (env && std::atoi(env) == 4 && D <= 128) return decode_cfg<D, KIND, 4>(p, num_seqs, max_query_len, stream, occ);
  return decode_cfg<D, KIND, D <= 128 ? 3 : 2>(p, num_seqs, max_query_len, stream, occ);
}

}  // namespace

cudaError_t attention_decode(const AttnParams& p, int head_dim, int kv_kind, int num_seqs, int max_query_len,
                             cudaStream_t stream, int* occupancy) {
  REVOLTA_HEAD_DIMS(decode_one, p, num_seqs, max_query_len, stream, occupancy)
}

}  // namespace revolta
