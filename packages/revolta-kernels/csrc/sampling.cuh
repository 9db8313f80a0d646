// Row-wise argmax of float32 logits (greedy sampling): torch.argmax(dim=-1) semantics, i.e. the first index
// of the maximum, NaN counting as larger than every number (the first NaN wins), -0.0 equal to +0.0.
//
// A 128K-entry vocabulary is 0.5 MB per row: one block per row would be latency-bound, so a grid of
// (chunks, rows) blocks each reduces a chunk to one 64-bit key that orders like (value, -index); the blocks
// of a row combine with atomicMax on a zeroed slot, and the last to arrive (arrival counter, as the split
// merges in attention.cuh) writes the index and re-arms slot and counter for the next launch.
#pragma once

#include "common.cuh"

namespace revolta {

constexpr int kArgmaxThreads = 256;
constexpr int kArgmaxLoads = 8;  // float4 loads in flight per thread
constexpr int kArgmaxChunk = kArgmaxThreads * kArgmaxLoads * 4;

// Order-preserving map of a float to 32 bits (NaN above +inf; -0.0 folded onto +0.0), then the index
// complemented so that among equal values the smaller index has the larger key. Key 0 is never produced.
__device__ __forceinline__ unsigned long long argmax_key(float v, int i) {
  unsigned int ord;
  if (v != v) {
    ord = 0xffffffffu;
  } else {
    const unsigned int bits = __float_as_uint(v == 0.f ? 0.f : v);
    ord = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  }
  return (static_cast<unsigned long long>(ord) << 32) | static_cast<unsigned int>(~i);
}

__device__ __forceinline__ unsigned long long max_key(unsigned long long a, unsigned long long b) {
  return a > b ? a : b;
}

// ws: per row 4 ints (a 64-bit key slot, an arrival counter, padding), all zero between launches.
template <bool VEC>
__global__ void __launch_bounds__(kArgmaxThreads)
argmax_rows_kernel(const float* __restrict__ x, long long* __restrict__ out, int cols, int* __restrict__ ws) {
  pdl_wait();  // launched with PDL (pdl.cuh): the logits come from the previous kernel
  pdl_trigger();
  __shared__ unsigned long long s_best[kArgmaxThreads / 32];
  const int row = blockIdx.y;
  const float* xr = x + static_cast<size_t>(row) * cols;
  const int begin = blockIdx.x * kArgmaxChunk;
  unsigned long long best = 0;
  if (VEC) {
    float4 v[kArgmaxLoads];
#pragma unroll
    for (int j = 0; j < kArgmaxLoads; ++j) {
      const int i = begin + (j * kArgmaxThreads + threadIdx.x) * 4;
      v[j] = i < cols ? __ldg(reinterpret_cast<const float4*>(xr + i)) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int j = 0; j < kArgmaxLoads; ++j) {
      const int i = begin + (j * kArgmaxThreads + threadIdx.x) * 4;
      if (i < cols) {
        best = max_key(best, argmax_key(v[j].x, i));
        best = max_key(best, argmax_key(v[j].y, i + 1));
        best = max_key(best, argmax_key(v[j].z, i + 2));
        best = max_key(best, argmax_key(v[j].w, i + 3));
      }
    }
  } else {
    const int end = min(cols, begin + kArgmaxChunk);
    for (int i = begin + threadIdx.x; i < end; i += kArgmaxThreads) best = max_key(best, argmax_key(__ldg(xr + i), i));
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) best = max_key(best, __shfl_xor_sync(0xffffffffu, best, o));
  if ((threadIdx.x & 31) == 0) s_best[threadIdx.x >> 5] = best;
  __syncthreads();
  if (threadIdx.x != 0) return;
#pragma unroll
  for (int w = 1; w < kArgmaxThreads / 32; ++w) best = max_key(best, s_best[w]);
  unsigned long long* slot = reinterpret_cast<unsigned long long*>(ws + 4 * row);
  int* counter = ws + 4 * row + 2;
  atomicMax(slot, best);
  __threadfence();
  if (atomicAdd(counter, 1) == static_cast<int>(gridDim.x) - 1) {
    __threadfence();
    const unsigned long long key = atomicExch(slot, 0ull);  // every block's atomicMax is in: the row's max
    *counter = 0;
    out[row] = static_cast<long long>(~static_cast<unsigned int>(key & 0xffffffffu));
  }
}

}  // namespace revolta
