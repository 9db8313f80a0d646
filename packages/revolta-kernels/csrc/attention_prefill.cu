// Prefill launcher: paged_prefill_kernel (prefill.cuh).
#include "attention_launch.cuh"

namespace revolta {
namespace {

// paged_prefill_kernel: four warps of 2 x 16 rows (d64/d128) or 1 x 16 rows (d256, register budget).
template <int D, int KIND>
cudaError_t prefill_one(const AttnParams& p, int num_seqs, int max_query_len, cudaStream_t stream, int* occ) {
  constexpr int WM = 4, RF = D == 256 ? 1 : 2, BN = D == 64 ? 64 : 32;
  using C = PrefillCfg<D, KIND, WM, RF, BN>;
  static bool configured = false;
  const int group = occ ? 1 : p.num_heads / p.num_kv_heads;  // an occupancy query passes no shapes
  dim3 grid(num_seqs * p.num_kv_heads, (max_query_len * group + C::BM - 1) / C::BM, 1);
  return launch_or_query(paged_prefill_kernel<D, KIND, WM, RF, BN, true>, C::NT, C::SMEM_BYTES, configured, grid, p,
                         stream, occ);
}

}  // namespace

cudaError_t attention_prefill(const AttnParams& p, int head_dim, int kv_kind, int num_seqs, int max_query_len,
                              cudaStream_t stream, int* occupancy) {
  REVOLTA_HEAD_DIMS(prefill_one, p, num_seqs, max_query_len, stream, occupancy)
}

}  // namespace revolta
