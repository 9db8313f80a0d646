// The in-kernel timing probe of the skinny GEMV kernels (quant_gemv.cuh, quant_gemv_full.cuh) and the light
// decode attention (decode_light.cuh; its records carry N = -head_dim).
#pragma once

#if defined(REVOLTA_GEMV_PROBE)
#include <cuda_runtime.h>  // the host-side reader below (probe builds only; NVRTC never sees it)
#endif

namespace revolta {

// Timing probe (off unless built with -DREVOLTA_GEMV_PROBE; benchmarks/gemv_probe.py): thread 0 of every block
// records %globaltimer and clock64 at six points (start, before the PDL wait, after it, x staged, compute
// done, exit) and appends one record per block to a device buffer read by revolta_gemv_probe_read().
#if defined(REVOLTA_GEMV_PROBE)
struct GemvProbeRec {
  unsigned long long t[6], c[6];
  int smid, block, n, k;
};
constexpr int kGemvProbeCap = 1 << 17;
__device__ GemvProbeRec g_gemv_probe[kGemvProbeCap];
__device__ unsigned int g_gemv_probe_count;
__device__ __forceinline__ void gemv_probe_mark(unsigned long long* pt, int i) {
  if (threadIdx.x == 0) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    pt[i] = t;
    pt[6 + i] = clock64();
  }
}
__device__ __forceinline__ void gemv_probe_end(unsigned long long* pt, int n, int k) {
  gemv_probe_mark(pt, 5);
  if (threadIdx.x == 0) {
    const unsigned int idx = atomicAdd(&g_gemv_probe_count, 1u);
    if (idx < kGemvProbeCap) {
      GemvProbeRec& r = g_gemv_probe[idx];
      for (int i = 0; i < 6; ++i) {
        r.t[i] = pt[i];
        r.c[i] = pt[6 + i];
      }
      unsigned int sm;
      asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
      r.smid = static_cast<int>(sm);
      r.block = static_cast<int>(blockIdx.x + blockIdx.y * gridDim.x);
      r.n = n;
      r.k = k;
    }
  }
}
// Host side: copies up to `cap` records of this translation unit's buffer to `host`, stores how many were written
// in *count (may exceed cap) and resets the buffer (each .cu file has its own buffer: no relocatable device code).
inline int gemv_probe_read(void* host, int cap, int* count) {
  unsigned int n = 0;
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = cudaMemcpyFromSymbol(&n, g_gemv_probe_count, sizeof(n));
  const unsigned int take = n < static_cast<unsigned int>(cap) ? n : static_cast<unsigned int>(cap);
  const unsigned int lim = take < static_cast<unsigned int>(kGemvProbeCap) ? take : kGemvProbeCap;
  if (e == cudaSuccess && lim > 0) e = cudaMemcpyFromSymbol(host, g_gemv_probe, lim * sizeof(GemvProbeRec));
  const unsigned int zero = 0;
  if (e == cudaSuccess) e = cudaMemcpyToSymbol(g_gemv_probe_count, &zero, sizeof(zero));
  *count = static_cast<int>(n);
  return e;
}
#define GEMV_PROBE_DECL __shared__ unsigned long long gemv_probe_t[12];
#define GEMV_PROBE(i) gemv_probe_mark(gemv_probe_t, i)
#define GEMV_PROBE_END(n, k) gemv_probe_end(gemv_probe_t, n, k)
#else
#define GEMV_PROBE_DECL
#define GEMV_PROBE(i)
#define GEMV_PROBE_END(n, k)
#endif

}  // namespace revolta
