// Decode / speculative verification launchers: paged_decode_mma_kernel (one-byte KV on GPUs with the
// known fragment layout) or paged_decode_kernel (everything else, and every GPU's fp16 KV). Both split the
// context in the kernel (split_len) and merge the splits in the same launch (merge_splits), launched with
// PDL. paged_decode_vec_kernel (decode_vec.cuh) takes fp16 KV with one query token per sequence when
// the batch is small (decode_vec_mode()).
#include "attention_launch.cuh"
#include "decode_vec.cuh"

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
cudaError_t decode_mma_cfg(const AttnParams& p, int num_seqs, int max_query_len, cudaStream_t stream, int* occ) {
  using C = DecodeMmaCfg<D, NW, ROWS8>;
  static bool configured = false;
  const int group = occ ? 1 : p.num_heads / p.num_kv_heads;
  dim3 grid(num_seqs * p.num_kv_heads, (max_query_len * group + 15) / 16, p.num_splits);
  return launch_or_query(paged_decode_mma_kernel<D, KIND, NW, STAGES, MINB, ROWS8, PF>, C::NT, C::SMEM_BYTES,
                         configured, grid, p, stream, occ, true);
}

// Frag decode (decode_mma.cuh): one-byte KV, head_dim 64/128.
template <int D, int KIND>
cudaError_t decode_mma(const AttnParams& p, int num_seqs, int max_query_len, int rows, cudaStream_t stream,
                        int* occ) {
  const bool rows8 = rows <= 8;
  if constexpr (D == 128 && KIND == KV_I8) {  // alternatives for tuning (32 x 4K int8 benchmark)
    if (rows8) switch (decode_variant()) {
        case 2: return decode_mma_cfg<D, KIND, 4, 2, 2, true, false>(p, num_seqs, max_query_len, stream, occ);
        case 3: return decode_mma_cfg<D, KIND, 4, 3, 2, true, false>(p, num_seqs, max_query_len, stream, occ);
        case 4: return decode_mma_cfg<D, KIND, 4, 1, 3, true, true>(p, num_seqs, max_query_len, stream, occ);
        case 5: return decode_mma_cfg<D, KIND, 8, 2, 1, true, true>(p, num_seqs, max_query_len, stream, occ);
        case 6: return decode_mma_cfg<D, KIND, 2, 3, 4, true, true>(p, num_seqs, max_query_len, stream, occ);
        case 7: return decode_mma_cfg<D, KIND, 4, 3, 2, true, true>(p, num_seqs, max_query_len, stream, occ);
        case 8: return decode_mma_cfg<D, KIND, 4, 2, 2, true, true>(p, num_seqs, max_query_len, stream, occ);
        default: break;
      }
  }
  return rows8 ? decode_mma_cfg<D, KIND, 4, 2, 2, true, true>(p, num_seqs, max_query_len, stream, occ)
               : decode_mma_cfg<D, KIND, 4, 2, 2, false, true>(p, num_seqs, max_query_len, stream, occ);
}

template <int D, int GC, bool ROPE, int NT>
cudaError_t decode_vec_nt(const AttnParams& p, const DecodeRope& r, int num_seqs, cudaStream_t stream) {
  using C = VecDecodeCfg<D, GC, NT>;
  static bool configured = false;
  cudaError_t e = prepare(paged_decode_vec_kernel<D, GC, ROPE, NT>, C::SMEM_BYTES, configured);
  if (e != cudaSuccess) return e;
  dim3 grid(num_seqs * p.num_kv_heads, 1, p.num_splits);
  return launch(paged_decode_vec_kernel<D, GC, ROPE, NT>, grid, C::NT, C::SMEM_BYTES, stream, p, r);
}

// The wide variant (256 threads, tiles of twice the keys) without the fused rotary, where its splits that can get
// keys are at most one block per SM (batch 1 of 8 KV heads with <= 16 of them on 132 SMs). There a split of 128
// keys is one tile whose K/V all load before the PDL wait, at the same work per thread, and nothing waits for a
// second wave: H200, Llama-3.1-8B AWQ batch 1 (512-767 keys), 508.8 -> 513.4 tok/s. Head_dim 256 takes it too
// (32-key tiles instead of 16, half the serial per-tile chains): H100, Qwen3.5's attention (16 / 2 heads) at batch
// 1 and 600 / 1000 / 1900 keys 15.5 / 18.4 / 27.8 -> 11.0 / 11.5 / 16.9 us.
template <int D, int GC, bool ROPE>
cudaError_t decode_vec_cfg(const AttnParams& p, const DecodeRope& r, int num_seqs, cudaStream_t stream) {
  if constexpr (!ROPE) {
    // Splits past the context exit at once, so count those the table could fill with this variant's one-tile
    // splits (KT keys: 128, or 64 for GQA groups of 8): counting the table's width instead would keep batch 1 off
    // it whenever a CUDA graph's bucket is wider than the context (H200, AWQ Llama-3.1-8B batch 1, 1024-1280 keys
    // in a 2048-key table: 499.0 -> 513.3 tok/s with the wide variant).
    constexpr int kt = VecDecodeCfg<D, GC, 256>::KT;
    const int fillable = (p.max_blocks * p.block_size + kt - 1) / kt;
    const int fill = p.split_tokens > 0 || fillable > p.num_splits ? p.num_splits : fillable;
    if (num_seqs * p.num_kv_heads * fill <= sm_count())
      return decode_vec_nt<D, GC, ROPE, 256>(p, r, num_seqs, stream);
  }
  return decode_vec_nt<D, GC, ROPE, 128>(p, r, num_seqs, stream);
}

template <int D, bool ROPE>
cudaError_t decode_vec_groups(const AttnParams& p, const DecodeRope& r, int num_seqs, cudaStream_t stream) {
  const int group = p.num_heads / p.num_kv_heads;
  return group <= 1   ? decode_vec_cfg<D, 1, ROPE>(p, r, num_seqs, stream)
         : group <= 2 ? decode_vec_cfg<D, 2, ROPE>(p, r, num_seqs, stream)
         : group <= 4 ? decode_vec_cfg<D, 4, ROPE>(p, r, num_seqs, stream)
                      : decode_vec_cfg<D, 8, ROPE>(p, r, num_seqs, stream);
}

// The vec kernel where it applies: fp16 KV, one query token per sequence, GQA group <= 8; mode 1 (the
// default) also asks for a block table of <= 8192 keys and at most half as many (sequence, KV head) pairs as
// SMs: where latency rather than bandwidth bounds the call (H200: batch 1 x 600 keys 7.7 -> 6.4 us, batch 8
// 11.6 -> 11.2; batch 16 and 32K keys measured slower), and head_dim <= 128, or 256 for one sequence (H200,
// Qwen3.5-27B / 35B-A3B shapes at batch 1: 16 layers 306 -> 267 us, 10 layers 204 -> 166 us on the step's
// path at 512 keys, 441 -> 432 / 311 -> 291 us at 1900 keys; larger batches of head_dim 256 were measured slower
// before and not since). Mode 2 takes every case it can (tests), 0 none. The generic-kernels variant (1) never
// takes it.
bool vec_takes(const AttnParams& p, int head_dim, int kv_kind, int num_seqs, int max_query_len) {
  const int group = p.num_heads / p.num_kv_heads, mode = decode_vec_mode();
  if (mode == 0 || decode_variant() == 1 || kv_kind != KV_F16 || max_query_len != 1 || group > 8) return false;
  return mode == 2 || ((head_dim <= 128 || (head_dim == 256 && num_seqs == 1)) &&
                       p.max_blocks * p.block_size <= 8192 && 2 * num_seqs * p.num_kv_heads <= sm_count());
}

// 16 packed rows per block with 16x16x16 WMMA and 64-key tiles by default. One-byte KV (int8/fp8), d128, with
// at most 8 rows (GQA group x query tokens) uses 8x32x16 WMMA and 128-key tiles instead: half the
// tensor-core and softmax work per key, which is what bounds those kernels once the bytes are halved.
// Register budget: 3 blocks per SM of the 16-row kernel fit without spills (4 spilled and measured
// slower on an H200).
template <int D, int KIND>
cudaError_t decode_one(const AttnParams& p, int num_seqs, int max_query_len, cudaStream_t stream, int* occ) {
  const int rows = max_query_len * (occ ? 1 : p.num_heads / p.num_kv_heads);
  if constexpr (KIND == KV_F16) {
    if (!occ && vec_takes(p, D, KIND, num_seqs, max_query_len))
      return decode_vec_groups<D, false>(p, DecodeRope{}, num_seqs, stream);
  }
  if constexpr (KIND != KV_F16 && (D == 64 || D == 128)) {
    // An occupancy query carries no block size; it answers for the kernel that block sizes >= 16 get.
    // Its 16-key steps must not cross a page: block_size >= 16 (splits are whole rounds of steps).
    const int v = decode_variant();
    if ((v >= 2 || (v == 0 && mma_layout_ok())) && (occ || p.block_size >= 16))
      return decode_mma<D, KIND>(p, num_seqs, max_query_len, rows, stream, occ);
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

// Rotary + cache write + decode in one launch (the vec kernel's ROPE variant), where vec_takes() says
// the vec kernel runs; *taken = 0 otherwise (the caller runs the two ops).
cudaError_t attention_rope_decode(const AttnParams& p, const DecodeRope& r, int head_dim, int num_seqs,
                                  cudaStream_t stream, int* taken) {
  *taken = 0;
  if (!vec_takes(p, head_dim, KV_F16, num_seqs, 1)) return cudaSuccess;
  *taken = 1;
  switch (head_dim) {
    case 64: return decode_vec_groups<64, true>(p, r, num_seqs, stream);
    case 128: return decode_vec_groups<128, true>(p, r, num_seqs, stream);
    case 256: return decode_vec_groups<256, true>(p, r, num_seqs, stream);
    default: *taken = 0; return cudaErrorInvalidValue;
  }
}

}  // namespace revolta
