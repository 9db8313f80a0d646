// Loads of data a decode kernel reads exactly once per step: the GEMVs' weights, scales and zero points, and the
// decode attention's cached keys and values. Self-contained for NVRTC; sm_70 has every form used here.
//
// REVOLTA_WEIGHT_LOAD picks the cache policy at build time (kept selectable for A/B builds on one GPU):
//   0: ld.global.nc (__ldg), which allocates the line in L1;
//   1: ld.global.nc.L1::no_allocate: the line bypasses L1;
//   2 (default): ld.global.cs.nc, "cache streaming": allocated evict-first.
// Either of 1 and 2 leaves L1 to what a block's warps and the blocks sharing an SM do read again (the staged
// activations, the residual and norm weight of the fused add + RMSNorm, the split-K partials). H200, Llama-3.1-8B
// AWQ batch 1 (benchmarks/results/h200_session21): 0 516.3-517.3, 1 522.3-522.8, 2 523.3-524.4 tok/s, and 2 with
// the attention's K/V too (REVOLTA_KV_LOAD=1) 524.6-524.8; the gate/up projection is 0.7 us per layer faster.
#pragma once

#ifndef REVOLTA_WEIGHT_LOAD
#define REVOLTA_WEIGHT_LOAD 2
#endif

// REVOLTA_KV_LOAD: the decode attention's K/V reads take REVOLTA_WEIGHT_LOAD's policy (1, default) or __ldg (0).
#ifndef REVOLTA_KV_LOAD
#define REVOLTA_KV_LOAD 1
#endif

namespace revolta {

#if REVOLTA_WEIGHT_LOAD == 1
#define REVOLTA_WLD_OP "ld.global.nc.L1::no_allocate"
#elif REVOLTA_WEIGHT_LOAD == 2
#define REVOLTA_WLD_OP "ld.global.cs.nc"
#endif

__device__ __forceinline__ uint4 load_once(const uint4* p) {
#if REVOLTA_WEIGHT_LOAD == 0
  return __ldg(p);
#else
  uint4 v;
  asm volatile(REVOLTA_WLD_OP ".v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
#endif
}

__device__ __forceinline__ uint2 load_once(const uint2* p) {
#if REVOLTA_WEIGHT_LOAD == 0
  return __ldg(p);
#else
  uint2 v;
  asm volatile(REVOLTA_WLD_OP ".v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
#endif
}

__device__ __forceinline__ unsigned int load_once(const unsigned int* p) {
#if REVOLTA_WEIGHT_LOAD == 0
  return __ldg(p);
#else
  unsigned int v;
  asm volatile(REVOLTA_WLD_OP ".u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
#endif
}

// A cached key or value row segment (16 bytes) for the decode attention, under REVOLTA_KV_LOAD.
__device__ __forceinline__ uint4 load_kv(const uint4* p) {
#if REVOLTA_KV_LOAD == 0
  return __ldg(p);
#else
  return load_once(p);
#endif
}

}  // namespace revolta
