// Loads of data a decode kernel reads exactly once per step: the GEMVs' weights, scales and zero points, and the
// decode attention's cached keys and values. Self-contained for NVRTC; sm_70 has every form used here.
//
// ld.global.cs.nc ("cache streaming": allocated evict-first) leaves L1 to what a block's warps and the blocks
// sharing an SM do read again (the staged activations, the residual and norm weight of the fused add + RMSNorm,
// the split-K partials). H200, Llama-3.1-8B AWQ batch 1: 516.3-517.3 tok/s with __ldg (which allocates every
// line in L1), 522.3-522.8 with ld.global.nc.L1::no_allocate, 523.3-524.4 with .cs.nc on the weights and
// 524.6-524.8 with the attention's K/V under it too; the gate/up projection is 0.7 us per layer faster.
#pragma once

namespace revolta {

__device__ __forceinline__ uint4 load_once(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.cs.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

__device__ __forceinline__ uint2 load_once(const uint2* p) {
  uint2 v;
  asm volatile("ld.global.cs.nc.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

__device__ __forceinline__ unsigned int load_once(const unsigned int* p) {
  unsigned int v;
  asm volatile("ld.global.cs.nc.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}

// A cached key or value row segment (16 bytes) for the decode attention: read once per step, as the weights.
__device__ __forceinline__ uint4 load_kv(const uint4* p) { return load_once(p); }

}  // namespace revolta
