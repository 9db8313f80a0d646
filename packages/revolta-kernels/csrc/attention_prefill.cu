// Prefill launcher: paged_attention_kernel with 64 packed rows per block (four warps of 16 rows).
#include <cstdlib>

#include "attention_launch.cuh"

namespace revolta {
namespace {

template <int D, int KIND, int WM>
cudaError_t prefill_cfg(const AttnParams& p, int num_seqs, int max_query_len, cudaStream_t stream, int* occ) {
  constexpr int WN = 1, BN = D == 256 ? 32 : 64;
  using C = AttnCfg<D, KIND, WM, WN, BN>;
  static bool configured = false;
  const int group = occ ? 1 : p.num_heads / p.num_kv_heads;  // an occupancy query passes no shapes
  dim3 grid(num_seqs * p.num_kv_heads, (max_query_len * group + C::BM - 1) / C::BM, p.num_splits);
  cudaError_t e = launch_or_query(paged_attention_kernel<D, KIND, WM, WN, BN>, C::NT, C::SMEM_BYTES, configured,
                                  grid, p, stream, occ);
  if (e != cudaSuccess || occ || p.num_splits == 1) return e;
  return reduce_splits(p, D, stream);
}

// Four warps (64 rows, <= 96 KB of shared memory: fits Volta) by default; REVOLTA_PREFILL_WARPS=8 selects
// 128 rows per block (more shared memory than Volta has; for benchmarking on newer GPUs).
template <int D, int KIND>
cudaError_t prefill_one(const AttnParams& p, int num_seqs, int max_query_len, cudaStream_t stream, int* occ) {
  const char* env = std::getenv("REVOLTA_PREFILL_WARPS");
  if (D <= 128 && env && std::atoi(env) == 8) return prefill_cfg<D, KIND, 8>(p, num_seqs, max_query_len, stream, occ);
  return prefill_cfg<D, KIND, 4>(p, num_seqs, max_query_len, stream, occ);
}

}  // namespace

cudaError_t attention_prefill(const AttnParams& p, int head_dim, int kv_kind, int num_seqs, int max_query_len,
                              cudaStream_t stream, int* occupancy) {
  REVOLTA_HEAD_DIMS(prefill_one, p, num_seqs, max_query_len, stream, occupancy)
}

}  // namespace revolta
