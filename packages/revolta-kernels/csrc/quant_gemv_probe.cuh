// The skinny GEMV kernels' timing probe (quant_gemv.cuh, quant_gemv_full.cuh).
#pragma once


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
#define GEMV_PROBE_DECL __shared__ unsigned long long gemv_probe_t[12];
#define GEMV_PROBE(i) gemv_probe_mark(gemv_probe_t, i)
#define GEMV_PROBE_END(n, k) gemv_probe_end(gemv_probe_t, n, k)
#else
#define GEMV_PROBE_DECL
#define GEMV_PROBE(i)
#define GEMV_PROBE_END(n, k)
#endif

}  // namespace revolta
