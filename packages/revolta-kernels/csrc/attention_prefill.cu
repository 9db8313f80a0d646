// Prefill launchers: paged_prefill_mma_kernel (head_dim 64/128 on GPUs with the known fragment layout)
// or paged_prefill_kernel (prefill.cuh) everywhere else.
#include "attention_launch.cuh"

namespace revolta {
namespace {

// launch_or_query (attention_launch.cuh) with the launch through revolta::launch (programmatic dependent
// launch on sm_90+; both prefill kernels call pdl_wait() before anything else).
template <typename Kernel>
cudaError_t prefill_launch_or_query(Kernel kernel, int threads, int smem, bool& configured, dim3 grid,
                                    const AttnParams& p, cudaStream_t stream, int* occupancy) {
  cudaError_t e = prepare(kernel, smem, configured);
  if (e != cudaSuccess) return e;
  if (occupancy) return cudaOccupancyMaxActiveBlocksPerMultiprocessor(occupancy, kernel, threads, smem);
  return launch(kernel, grid, dim3(threads), smem, stream, p);
}

template <int D, int KIND, int WM, int RF, int BN, bool DBUF, int MINB, bool QREG = false, int SPLIT = 0>
cudaError_t prefill_mma_cfg(const AttnParams& p, int num_seqs, int max_query_len, cudaStream_t stream, int* occ) {
  using C = PrefillMmaCfg<D, KIND, WM, RF, BN, DBUF>;
  static bool configured = false;
  const int group = occ ? 1 : p.num_heads / p.num_kv_heads;
  dim3 grid(num_seqs * p.num_kv_heads, (max_query_len * group + C::BM - 1) / C::BM, 1);
  return prefill_launch_or_query(paged_prefill_mma_kernel<D, KIND, WM, RF, BN, DBUF, MINB, QREG, SPLIT>, C::NT, C::SMEM_BYTES,
                         configured, grid, p, stream, occ);
}

// MMA prefill configurations. fp16 KV at d128 (the 8K benchmark): 8 warps x 2 x 16 rows, 48-key tiles, K and
// V staged separately (variant 13 of the sweep: 300 / 292 TFLOP/s on an H200 in two sweep passes, against 274
// for 8 warps x 32-key tiles, variant 22). Everything else keeps 4 warps x 2 x 16 rows with two buffers (the configuration the GPU
// tests ran; 8 warps would leave one-byte d64 tiles smaller than one 16-byte chunk per thread).
template <int D, int KIND>
cudaError_t prefill_mma(const AttnParams& p, int num_seqs, int max_query_len, cudaStream_t stream, int* occ) {
  if constexpr (D == 128 && KIND == KV_F16) {
    switch (prefill_variant()) {  // alternatives for tuning (8K causal benchmark)
      case 2: return prefill_mma_cfg<D, KIND, 4, 2, 32, true, 1>(p, num_seqs, max_query_len, stream, occ);
      case 3: return prefill_mma_cfg<D, KIND, 8, 1, 64, false, 1>(p, num_seqs, max_query_len, stream, occ);
      case 4: return prefill_mma_cfg<D, KIND, 8, 1, 32, true, 1>(p, num_seqs, max_query_len, stream, occ);
      case 5: return prefill_mma_cfg<D, KIND, 4, 1, 64, true, 2>(p, num_seqs, max_query_len, stream, occ);
      case 7: return prefill_mma_cfg<D, KIND, 4, 1, 32, true, 2>(p, num_seqs, max_query_len, stream, occ);
      case 8: return prefill_mma_cfg<D, KIND, 8, 1, 64, false, 1, true>(p, num_seqs, max_query_len, stream, occ);
      case 9: return prefill_mma_cfg<D, KIND, 8, 1, 32, true, 1, true>(p, num_seqs, max_query_len, stream, occ);
      case 10: return prefill_mma_cfg<D, KIND, 4, 1, 32, true, 2, true>(p, num_seqs, max_query_len, stream, occ);
      // K and V staged separately (SPLIT): V_i loaded during Q K_i^T, K_{i+1} during the softmax and P V_i
      case 11: return prefill_mma_cfg<D, KIND, 8, 2, 32, false, 1, false, 1>(p, num_seqs, max_query_len, stream, occ);
      case 12: return prefill_mma_cfg<D, KIND, 8, 2, 48, false, 1>(p, num_seqs, max_query_len, stream, occ);
      case 13: return prefill_mma_cfg<D, KIND, 8, 2, 48, false, 1, false, 1>(p, num_seqs, max_query_len, stream, occ);
      case 14: return prefill_mma_cfg<D, KIND, 4, 2, 64, false, 2, false, 1>(p, num_seqs, max_query_len, stream, occ);
      case 15: return prefill_mma_cfg<D, KIND, 4, 2, 48, false, 2, false, 1>(p, num_seqs, max_query_len, stream, occ);
      case 16: return prefill_mma_cfg<D, KIND, 4, 2, 32, false, 2, false, 1>(p, num_seqs, max_query_len, stream, occ);
      case 17: return prefill_mma_cfg<D, KIND, 4, 2, 32, false, 2>(p, num_seqs, max_query_len, stream, occ);
      // SPLIT 2: K and V each staged in two halves
      case 18: return prefill_mma_cfg<D, KIND, 4, 2, 64, false, 2, false, 2>(p, num_seqs, max_query_len, stream, occ);
      case 19: return prefill_mma_cfg<D, KIND, 4, 2, 48, false, 2, false, 2>(p, num_seqs, max_query_len, stream, occ);
      case 20: return prefill_mma_cfg<D, KIND, 4, 2, 32, false, 2, false, 2>(p, num_seqs, max_query_len, stream, occ);
      case 21: return prefill_mma_cfg<D, KIND, 8, 2, 32, false, 1, false, 2>(p, num_seqs, max_query_len, stream, occ);
      case 22: return prefill_mma_cfg<D, KIND, 8, 2, 32, false, 1>(p, num_seqs, max_query_len, stream, occ);
      default: return prefill_mma_cfg<D, KIND, 8, 2, 48, false, 1, false, 1>(p, num_seqs, max_query_len, stream, occ);
    }
  }
  return prefill_mma_cfg<D, KIND, 4, 2, 32, true, 1>(p, num_seqs, max_query_len, stream, occ);
}

// Generic: four warps of 2 x 16 rows (d64/d128) or 1 x 16 rows (d256, register budget).
template <int D, int KIND>
cudaError_t prefill_one(const AttnParams& p, int num_seqs, int max_query_len, cudaStream_t stream, int* occ) {
  if constexpr (D <= 128) {
    const int v = prefill_variant();
    if (v >= 2 || (v == 0 && mma_layout_ok())) return prefill_mma<D, KIND>(p, num_seqs, max_query_len, stream, occ);
  }
  constexpr int WM = 4, RF = D == 256 ? 1 : 2, BN = D == 64 ? 64 : 32;
  using C = PrefillCfg<D, KIND, WM, RF, BN>;
  static bool configured = false;
  const int group = occ ? 1 : p.num_heads / p.num_kv_heads;  // an occupancy query passes no shapes
  dim3 grid(num_seqs * p.num_kv_heads, (max_query_len * group + C::BM - 1) / C::BM, 1);
  return prefill_launch_or_query(paged_prefill_kernel<D, KIND, WM, RF, BN, true>, C::NT, C::SMEM_BYTES, configured, grid, p,
                         stream, occ);
}

}  // namespace

cudaError_t attention_prefill(const AttnParams& p, int head_dim, int kv_kind, int num_seqs, int max_query_len,
                              cudaStream_t stream, int* occupancy) {
  REVOLTA_HEAD_DIMS(prefill_one, p, num_seqs, max_query_len, stream, occupancy)
}

}  // namespace revolta
