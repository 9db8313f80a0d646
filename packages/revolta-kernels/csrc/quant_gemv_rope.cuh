// The rotary + KV-cache epilogue of the split-K-free q/k/v GEMV (quant_gemv_whole_k_kernel<MT, 16, true>): the
// projection's outputs are rotated and stored where the decode attention reads them (queries to q_out, keys
// and values into the paged cache), so no rotary kernel sits between the projection and the attention - one
// kernel boundary fewer per layer of a decode step (see GemvRope in quant_common.cuh for the operands).
//
// Column ownership: the 16-column block of a q or k head holds both channels of 8 rotary pairs. With neox that
// is channels [8j, 8j + 8) and [rot/2 + 8j, rot/2 + 8j + 8) of its head for j < rot/16, then plain 16-channel
// runs past rot_dim; gpt-j pairs (2i, 2i + 1) are adjacent, so the plain order holds them. The weight layout is
// unchanged - only the block -> column map differs, and lanes still read 4-column runs. A pair's two sums meet
// in warp 0's epilogue through one shuffle.
#pragma once

#include "quant_common.cuh"
#include "rope_math.cuh"

namespace revolta {

// Output column of column c (0..15) of 16-column tile t.
__device__ __forceinline__ int gemv_rope_col(const GemvRope& r, int t, int c) {
  const int per_head = r.head_dim / 16, head = t / per_head, j = t - head * per_head;
  const int base = head * r.head_dim;
  if (r.neox && head < r.num_heads + r.num_kv_heads && j < r.rot_dim / 16)
    return base + j * 8 + (c < 8 ? c : r.rot_dim / 2 + c - 8);
  return base + j * 16 + c;
}

// What warp 0's lane (m = lane / 16, column lane % 16) needs in the epilogue: its channel's cos and sin and its
// token's cache slot, loaded before the PDL wait (step inputs) so that no load waits after the dot products.
struct GemvRopeStage {
  float cs[32], sn[32];
  long long slot[32];
};
template <bool ROPE>
struct GemvRopeShared {
  GemvRopeStage st;
};
template <>
struct GemvRopeShared<false> {};

__device__ __forceinline__ void gemv_rope_prefetch(const QuantGemmParams& p, GemvRopeStage& st, int lane) {
  const GemvRope& r = p.rope;
  const int m = lane / 16;
  float c = 1.f, s = 0.f;
  long long slot = -1;
  if (m < p.M) {
    const int n = gemv_rope_col(r, blockIdx.x, lane % 16), head = n / r.head_dim, d = n - head * r.head_dim;
    slot = r.slots[m];
    if (head < r.num_heads + r.num_kv_heads && d < r.rot_dim) {
      const int half = r.rot_dim / 2, i = r.neox ? (d < half ? d : d - half) : d >> 1;
      const float* row = r.cos_sin + r.positions[m] * r.rot_dim;
      c = row[i];
      s = row[half + i];
    }
  }
  st.cs[lane] = c;
  st.sn[lane] = s;
  st.slot[lane] = slot;
}

// Warp 0, every lane: `v` is the fp32 sum of the lane's (row, column) (0 for rows past MT). The value is rounded
// to fp16 first, as the separate rotary kernel reads the projection's output, then rotated in fp32 with the
// rotary kernel's arithmetic (rotate_pair) and rounded again.
__device__ __forceinline__ void gemv_rope_store(const QuantGemmParams& p, const GemvRopeStage& st, float v, int lane) {
  const GemvRope& r = p.rope;
  const int m = lane / 16, col = lane % 16;
  const int n = gemv_rope_col(r, blockIdx.x, col), head = n / r.head_dim, d = n - head * r.head_dim;
  const __half hv = __float2half_rn(v);
  const float x = __half2float(hv);
  const float xp = __shfl_xor_sync(0xffffffffu, x, r.neox ? 8 : 1);  // the pair's other channel
  if (m >= p.M) return;
  const bool first = r.neox ? col < 8 : (col & 1) == 0;
  const bool rotated = head < r.num_heads + r.num_kv_heads && d < r.rot_dim;
  const __half out =
      rotated ? __float2half_rn(rotate_pair(first ? x : xp, first ? xp : x, st.cs[lane], st.sn[lane], first)) : hv;
  if (head < r.num_heads) {
    r.q_out[static_cast<size_t>(m) * r.num_heads * r.head_dim + n] = out;
    return;
  }
  const long long slot = st.slot[lane];
  if (slot < 0) return;  // a padding token: nothing is cached (as the separate cache write)
  const bool is_v = head >= r.num_heads + r.num_kv_heads;
  const int h = head - r.num_heads - (is_v ? r.num_kv_heads : 0);
  const size_t tok = (static_cast<size_t>(slot / r.block_size) * r.num_kv_heads + h) * r.block_size +
                     static_cast<size_t>(slot % r.block_size);
  (is_v ? r.v_cache : r.k_cache)[tok * r.head_dim + d] = out;
}

}  // namespace revolta
