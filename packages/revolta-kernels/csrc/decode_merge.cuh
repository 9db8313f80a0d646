// Merge of the split partials inside the decode kernels (decode.cuh, decode_mma.cuh, decode_vec.cuh): no
// second launch. Every non-empty split of a row tile has written its rows' partials (o already divided by its
// own sum l, plus max m and l) when it calls merge_splits; the barrier orders those stores before thread 0's
// acquire-release arrival (split_arrive, as in quant_gemv.cuh). The last of the n_active splits to arrive
// re-arms the counter and merges: out = sum_s w_s o_s / sum_s w_s, w_s = l_s 2^(m_s - max m), in split order
// (deterministic).
//
// Two passes, so that no load waits on another. The first loads every (row, split) max and sum at once into
// the kernel's shared memory (free by now), and one warp per row turns them into weights. The second sums
// each output float4 over the splits with two batches of kMergeBatch loads in flight per thread. A one-pass
// merge keeps a running maximum, so each batch of loads waited on the previous one: at 32 splits x 8 query
// heads x head_dim 256 (Qwen3.5's attention at batch 1, 1K keys) that was 32 dependent L2 round trips per
// thread. Up to kMergeRunningMax splits, or where the weights would not fit the shared memory, it keeps the
// one-pass merge.
#pragma once

#include "attention.cuh"
#include "split_arrive.cuh"

namespace revolta {

constexpr int kMergeBatch = 8;  // partial float4s per batch of the second pass (two batches in flight)
// Up to this many splits the one-pass merge takes two rounds of loads at most, where the two passes' extra round
// trip and barriers cost more (H200: batch 1 x 600 keys, d128, 5 splits: 6.1 us one-pass against 6.7 us two-pass).
constexpr int kMergeRunningMax = 8;

// Output row (token x head) of the row tile's row r.
__device__ __forceinline__ size_t merge_out_row(const AttnParams& p, int row0, int r, int q0, int kvh, int group) {
  const int gr = row0 + r;
  return static_cast<size_t>(q0 + gr / group) * p.num_heads + kvh * group + gr % group;
}

// The one-pass merge: a running maximum, four splits' loads in flight at a time.
template <int D, int NT>
__device__ __forceinline__ void merge_splits_running(const AttnParams& p, int n_active, int row0, int nrows, int q0,
                                                     int kvh, int group) {
  const size_t sstride = static_cast<size_t>(p.num_tokens) * p.num_heads;
  const float2* ml = reinterpret_cast<const float2*>(p.part_ml);
  for (int i = threadIdx.x; i < nrows * (D / 4); i += NT) {
    const int r = i / (D / 4), d = (i % (D / 4)) * 4;
    const size_t orow = merge_out_row(p, row0, r, q0, kvh, group);
    float M = -INFINITY, wsum = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s0 = 0; s0 < n_active; s0 += 4) {
      float2 x[4];
      float4 o[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const size_t pr = static_cast<size_t>(s0 + j) * sstride + orow;
        x[j] = s0 + j < n_active ? __ldcg(ml + pr) : make_float2(-INFINITY, 0.f);
        o[j] = s0 + j < n_active ? __ldcg(reinterpret_cast<const float4*>(p.part_o + pr * D + d))
                                 : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (x[j].x == -INFINITY || x[j].y <= 0.f) continue;
        const float Mn = fmaxf(M, x[j].x);
        const float a = exp2f(M - Mn), w = x[j].y * exp2f(x[j].x - Mn);  // exp2(-inf) = 0 on the first
        acc.x = acc.x * a + w * o[j].x; acc.y = acc.y * a + w * o[j].y;
        acc.z = acc.z * a + w * o[j].z; acc.w = acc.w * a + w * o[j].w;
        wsum = wsum * a + w;
        M = Mn;
      }
    }
    const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
    __half2* dst = reinterpret_cast<__half2*>(p.out + orow * D + d);
    dst[0] = __floats2half2_rn(acc.x * inv, acc.y * inv);
    dst[1] = __floats2half2_rn(acc.z * inv, acc.w * inv);
  }
}

// The two-pass merge; `scratch` holds 2 * nrows * n_active + nrows floats.
template <int D, int NT>
__device__ __forceinline__ void merge_splits_weighted(const AttnParams& p, int n_active, int row0, int nrows, int q0,
                                                      int kvh, int group, float* scratch) {
  const int tid = threadIdx.x, lane = tid & 31, pairs = nrows * n_active;
  const size_t sstride = static_cast<size_t>(p.num_tokens) * p.num_heads;
  float* sW = scratch;           // [nrows][n_active]: the splits' maxima, then their weights
  float* sL = sW + pairs;        // [nrows][n_active]: the splits' sums
  float* sInv = sL + pairs;      // [nrows]: 1 / the weights' sum
  const float2* ml = reinterpret_cast<const float2*>(p.part_ml);
  for (int i = tid; i < pairs; i += NT) {
    const int r = i / n_active, s = i % n_active;
    const float2 x = __ldcg(ml + static_cast<size_t>(s) * sstride + merge_out_row(p, row0, r, q0, kvh, group));
    sW[i] = x.y > 0.f ? x.x : -INFINITY;  // an empty split weighs nothing
    sL[i] = x.y;
  }
  __syncthreads();
  for (int r = tid >> 5; r < nrows; r += NT / 32) {
    float M = -INFINITY;
    for (int s = lane; s < n_active; s += 32) M = fmaxf(M, sW[r * n_active + s]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
    float sum = 0.f;
    for (int s = lane; s < n_active; s += 32) {
      const float m = sW[r * n_active + s];
      const float w = m == -INFINITY ? 0.f : sL[r * n_active + s] * exp2f(m - M);
      sW[r * n_active + s] = w;
      sum += w;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (lane == 0) sInv[r] = sum > 0.f ? 1.f / sum : 0.f;
  }
  __syncthreads();

  // Jobs of this thread: its output float4s (items tid, tid + NT, ...) x batches of kMergeBatch splits, in
  // order; the next job's loads are issued before this one's sums (two register sets, ping-pong).
  constexpr int B = kMergeBatch;
  const int batches = (n_active + B - 1) / B;
  const int items = nrows * (D / 4);
  const int my_items = tid < items ? (items - tid + NT - 1) / NT : 0;
  const int jobs = my_items * batches;
  auto fetch = [&](float4 (&buf)[B], int job) {
    const int item = tid + (job / batches) * NT, s0 = (job % batches) * B;
    const int r = item / (D / 4), d = (item % (D / 4)) * 4;
    const size_t orow = merge_out_row(p, row0, r, q0, kvh, group);
#pragma unroll
    for (int j = 0; j < B; ++j)
      buf[j] = s0 + j < n_active
                   ? __ldcg(reinterpret_cast<const float4*>(p.part_o + (static_cast<size_t>(s0 + j) * sstride + orow) *
                                                                           D + d))
                   : make_float4(0.f, 0.f, 0.f, 0.f);
  };
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  auto consume = [&](const float4 (&buf)[B], int job) {
    const int item = tid + (job / batches) * NT, b = job % batches;
    const int r = item / (D / 4), d = (item % (D / 4)) * 4;
#pragma unroll
    for (int j = 0; j < B; ++j) {
      const int s = b * B + j;
      const float w = s < n_active ? sW[r * n_active + s] : 0.f;
      acc.x = fmaf(w, buf[j].x, acc.x); acc.y = fmaf(w, buf[j].y, acc.y);
      acc.z = fmaf(w, buf[j].z, acc.z); acc.w = fmaf(w, buf[j].w, acc.w);
    }
    if (b == batches - 1) {
      const float inv = sInv[r];
      __half2* dst = reinterpret_cast<__half2*>(p.out + merge_out_row(p, row0, r, q0, kvh, group) * D + d);
      dst[0] = __floats2half2_rn(acc.x * inv, acc.y * inv);
      dst[1] = __floats2half2_rn(acc.z * inv, acc.w * inv);
      acc = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  };
  float4 ping[B], pong[B];
  if (jobs > 0) fetch(ping, 0);
  for (int job = 0; job < jobs; job += 2) {
    if (job + 1 < jobs) fetch(pong, job + 1);
    consume(ping, job);
    if (job + 2 < jobs) fetch(ping, job + 2);
    if (job + 1 < jobs) consume(pong, job + 1);
  }
}

// The merge, called by every block of a split row tile after its partial stores; `scratch` is the kernel's
// dynamic shared memory (scratch_floats of it), which the block no longer uses.
template <int D, int NT>
__device__ __forceinline__ void merge_splits(const AttnParams& p, int tile, int n_active, int row0, int nrows, int q0,
                                             int kvh, int group, float* scratch, int scratch_floats) {
  __shared__ int s_last;
  __syncthreads();
  if (threadIdx.x == 0) {
    const bool last = split_arrive(p.counters + tile) == n_active - 1;
    if (last) p.counters[tile] = 0;  // every split has arrived: nothing reads it again in this launch
    s_last = last;
  }
  __syncthreads();
  if (!s_last) return;
  if (n_active > kMergeRunningMax && nrows * (2 * n_active + 1) <= scratch_floats)
    merge_splits_weighted<D, NT>(p, n_active, row0, nrows, q0, kvh, group, scratch);
  else
    merge_splits_running<D, NT>(p, n_active, row0, nrows, q0, kvh, group);
}

}  // namespace revolta
