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

// paged_prefill_kernel: four warps of 2 x 16 rows (d64/d128) or 1 x 16 rows (d256, register budget).
template <int D, int KIND, bool PREFETCH>
cudaError_t prefill_rf(const AttnParams& p, int num_seqs, int max_query_len, cudaStream_t stream, int* occ) {
  constexpr int WM = 4, RF = D == 256 ? 1 : 2, BN = D == 64 ? 64 : 32;
  using C = PrefillCfg<D, KIND, WM, RF, BN>;
  static bool configured = false;
  const int group = occ ? 1 : p.num_heads / p.num_kv_heads;  // an occupancy query passes no shapes
  dim3 grid(num_seqs * p.num_kv_heads, (max_query_len * group + C::BM - 1) / C::BM, 1);
  return launch_or_query(paged_prefill_kernel<D, KIND, WM, RF, BN, PREFETCH>, C::NT, C::SMEM_BYTES, configured, grid, p,
                         stream, occ);
}

// REVOLTA_PREFILL_LEGACY=1 selects the first kernel (16 rows per warp), kept for comparison;
// REVOLTA_PREFILL_PREFETCH=0 loads each key tile when it is needed instead of one tile ahead.
template <int D, int KIND>
cudaError_t prefill_one(const AttnParams& p, int num_seqs, int max_query_len, cudaStream_t stream, int* occ) {
  const char* env = std::getenv("REVOLTA_PREFILL_LEGACY");
  if (env && std::atoi(env) == 1) return prefill_cfg<D, KIND, 4>(p, num_seqs, max_query_len, stream, occ);
  const char* pf = std::getenv("REVOLTA_PREFILL_PREFETCH");
  if (pf && std::atoi(pf) == 0) return prefill_rf<D, KIND, false>(p, num_seqs, max_query_len, stream, occ);
  return prefill_rf<D, KIND, true>(p, num_seqs, max_query_len, stream, occ);
}

}  // namespace

cudaError_t attention_prefill(const AttnParams& p, int head_dim, int kv_kind, int num_seqs, int max_query_len,
                              cudaStream_t stream, int* occupancy) {
  REVOLTA_HEAD_DIMS(prefill_one, p, num_seqs, max_query_len, stream, occupancy)
}

}  // namespace revolta
