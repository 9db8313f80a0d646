// Decode / speculative verification launchers: paged_decode_frag_kernel (one-byte KV on GPUs with the
// known fragment layout) or paged_decode_kernel (everything else, and every GPU's fp16 KV). Both split the
// context in the kernel (split_len) and merge the splits in the same launch (merge_splits), launched with
// PDL.
#include "attention_launch.cuh"

namespace revolta {
namespace {

constexpr int kDecodeWarps = 4;

template <int D, int KIND, int MINB, int ROWS, int BN>
cudaError_t decode_cfg(const AttnParams& p, int num_seqs, int max_query_len, cudaStream_t stream, int* occ) {
  constexpr int ESZ = KIND == KV_F16 ? 2 : 1;
  constexpr int CPR = D * ESZ / 16;
  constexpr int NCH = BN * CPR / (32 * kDecodeWarps);
  // Keep about 8 sixteen-byte loads per thread per tensor in flight: narrow KV gets more tiles ahead.
  constexpr int STAGES = NCH >= 8 ? 1 : 8 / NCH;
  using C = DecodeCfg<D, KIND, kDecodeWarps, BN, STAGES, ROWS>;
  static bool configured = false;
  const int group = occ ? 1 : p.num_heads / p.num_kv_heads;  // an occupancy query passes no shapes
  dim3 grid(num_seqs * p.num_kv_heads, (max_query_len * group + ROWS - 1) / ROWS, p.num_splits);
  return launch_or_query(paged_decode_kernel<D, KIND, kDecodeWarps, BN, STAGES, MINB, ROWS>, C::NT, C::SMEM_BYTES,
                         configured, grid, p, stream, occ, true);
}

template <int D, int KIND, int NW, int STAGES, int MINB, bool ROWS8, bool PF>
cudaError_t decode_frag_cfg(const AttnParams& p, int num_seqs, int max_query_len, cudaStream_t stream, int* occ) {
  using C = DecodeFragCfg<D, NW, ROWS8>;
  static bool configured = false;
  const int group = occ ? 1 : p.num_heads / p.num_kv_heads;
  dim3 grid(num_seqs * p.num_kv_heads, (max_query_len * group + 15) / 16, p.num_splits);
  return launch_or_query(paged_decode_frag_kernel<D, KIND, NW, STAGES, MINB, ROWS8, PF>, C::NT, C::SMEM_BYTES,
                         configured, grid, p, stream, occ, true);
}

// Frag decode (decode_frag.cuh): one-byte KV, head_dim 64/128.
template <int D, int KIND>
cudaError_t decode_frag(const AttnParams& p, int num_seqs, int max_query_len, int rows, cudaStream_t stream,
                        int* occ) {
  const bool rows8 = rows <= 8;
  if constexpr (D == 128 && KIND == KV_I8) {  // alternatives for tuning (32 x 4K int8 benchmark)
    if (rows8) switch (decode_variant()) {
        case 2: return decode_frag_cfg<D, KIND, 4, 2, 2, true, false>(p, num_seqs, max_query_len, stream, occ);
        case 3: return decode_frag_cfg<D, KIND, 4, 3, 2, true, false>(p, num_seqs, max_query_len, stream, occ);
        case 4: return decode_frag_cfg<D, KIND, 4, 1, 3, true, true>(p, num_seqs, max_query_len, stream, occ);
        case 5: return decode_frag_cfg<D, KIND, 8, 2, 1, true, true>(p, num_seqs, max_query_len, stream, occ);
        case 6: return decode_frag_cfg<D, KIND, 2, 3, 4, true, true>(p, num_seqs, max_query_len, stream, occ);
        case 7: return decode_frag_cfg<D, KIND, 4, 3, 2, true, true>(p, num_seqs, max_query_len, stream, occ);
        case 8: return decode_frag_cfg<D, KIND, 4, 2, 2, true, true>(p, num_seqs, max_query_len, stream, occ);
        default: break;
      }
  }
  return rows8 ? decode_frag_cfg<D, KIND, 4, 2, 2, true, true>(p, num_seqs, max_query_len, stream, occ)
               : decode_frag_cfg<D, KIND, 4, 2, 2, false, true>(p, num_seqs, max_query_len, stream, occ);
}

// 16 packed rows per block with 16x16x16 WMMA and 64-key tiles by default. One-byte KV (int8/fp8), d128, with
// at most 8 rows (GQA group x query tokens) uses 8x32x16 WMMA and 128-key tiles instead: half the
// tensor-core and softmax work per key, which is what bounds those kernels once the bytes are halved.
// Register budget: 3 blocks per SM of the 16-row kernel fit without spills (4 spilled and measured
// slower on an H200).
template <int D, int KIND>
cudaError_t decode_one(const AttnParams& p, int num_seqs, int max_query_len, cudaStream_t stream, int* occ) {
  const int rows = max_query_len * (occ ? 1 : p.num_heads / p.num_kv_heads);
  if constexpr (KIND != KV_F16 && (D == 64 || D == 128)) {
    // An occupancy query carries no block size; it answers for the kernel that block sizes >= 16 get.
    // Its 16-key steps must not cross a page: block_size >= 16 (splits are whole rounds of steps).
    const int v = decode_variant();
    if ((v >= 2 || (v == 0 && frag_layout_ok())) && (occ || p.block_size >= 16))
      return decode_frag<D, KIND>(p, num_seqs, max_query_len, rows, stream, occ);
  }
  if constexpr (KIND != KV_F16 && D == 128) {  // d256 would need 146 KB of shared memory (Volta: 96)
    if (rows <= 8) return decode_cfg<D, KIND, 2, 8, 128>(p, num_seqs, max_query_len, stream, occ);
  }
  return decode_cfg<D, KIND, D <= 128 ? 3 : 2, 16, 64>(p, num_seqs, max_query_len, stream, occ);
}

}  // namespace

cudaError_t attention_decode(const AttnParams& p, int head_dim, int kv_kind, int num_seqs, int max_query_len,
                             cudaStream_t stream, int* occupancy) {
  REVOLTA_HEAD_DIMS(decode_one, p, num_seqs, max_query_len, stream, occupancy)
}

}  // namespace revolta
