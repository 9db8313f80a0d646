// L2 prefetch of read-only data (weights) that kernels later on the stream will read.
//
// A batch-1 decode step leaves DRAM idle through its latency-bound kernels (rotary, attention, the
// activation staging of each GEMV), while the GEMVs after them are bandwidth-bound. Launched on a side
// stream (a parallel branch of the decode CUDA graph) this kernel asks the memory system to pull the
// leading bytes of upcoming weights into L2 during those idle microseconds, so the GEMVs find part of
// their stream already on chip. It only issues hints: nothing is written, nothing waits for the data,
// and a prefetch that is evicted before use only costs the DRAM bandwidth it took.
//
// sm_90 and later: one TMA bulk prefetch (cp.async.bulk.prefetch.L2) per chunk of `chunk` bytes. A TMA unit
// issues about 190 GB/s of them (H200: 30 MB from 8 SMs took 20 us), so the chunks are spread one per thread over
// many one-warp blocks (SMs). Earlier GPUs (Volta): chunk = 128 and one prefetch.global.L2 per line.
// With delay_ns > 0 every thread first waits that long (%globaltimer): the kernel is forked beside a rotary +
// attention pair whose own (latency-critical) loads should reach DRAM first.
#pragma once

#if !defined(__CUDACC_RTC__)
#include <cuda_runtime.h>
#endif

namespace revolta {

constexpr int kPrefetchMaxRanges = 8;
constexpr long long kPrefetchBulkChunk = 16 * 1024;  // bytes per bulk prefetch on sm_90+ (a multiple of 16)
constexpr int kPrefetchThreads = 32;
constexpr int kPrefetchMaxBlocks = 256;

struct PrefetchRanges {
  const char* ptr[kPrefetchMaxRanges];  // 16-byte aligned
  long long bytes[kPrefetchMaxRanges];  // multiples of 16
  long long first_chunk[kPrefetchMaxRanges + 1];  // chunk index where range i starts; [n] = all chunks
  long long chunk;                                // bytes per chunk
  int n;
  unsigned long long delay_ns;
};

__device__ __forceinline__ unsigned long long prefetch_clock_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void __launch_bounds__(kPrefetchThreads) l2_prefetch_kernel(PrefetchRanges r) {
  if (r.delay_ns > 0) {
    const unsigned long long until = prefetch_clock_ns() + r.delay_ns;
    while (prefetch_clock_ns() < until) {
    }
  }
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  int i = 0;
  for (long long c = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; c < r.first_chunk[r.n];
       c += stride) {
    while (c >= r.first_chunk[i + 1]) ++i;  // c only grows, so the range index only moves forward
    const long long off = (c - r.first_chunk[i]) * r.chunk, left = r.bytes[i] - off;
    const char* p = r.ptr[i] + off;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const unsigned size = static_cast<unsigned>(left < r.chunk ? left : r.chunk);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(size) : "memory");
#else
    (void)left;
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#endif
  }
}

}  // namespace revolta
