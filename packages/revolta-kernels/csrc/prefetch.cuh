// L2 prefetch of read-only data (weights) that kernels later on the stream will read.
//
// A batch-1 decode step leaves DRAM idle through its latency-bound kernels (rotary, attention, the
// activation staging of each GEMV), while the GEMVs after them are bandwidth-bound. Launched on a side
// stream (a parallel branch of the decode CUDA graph) this kernel asks the memory system to pull the
// leading bytes of upcoming weights into L2 during those idle microseconds, so the GEMVs find part of
// their stream already on chip. It only issues hints: nothing is written, nothing waits for the data,
// and a prefetch that is evicted before use only costs the DRAM bandwidth it took.
//
// sm_90 and later: one TMA bulk prefetch (cp.async.bulk.prefetch.L2) per chunk of kPrefetchChunk bytes.
// Earlier GPUs (Volta): one prefetch.global.L2 per 128-byte line.
// Grid (blocks, ranges): blockIdx.y picks the range, the x blocks share its chunks.
#pragma once

#if !defined(__CUDACC_RTC__)
#include <cuda_runtime.h>
#endif

namespace revolta {

constexpr int kPrefetchMaxRanges = 8;
constexpr long long kPrefetchChunk = 32 * 1024;  // bytes per bulk prefetch (a multiple of 16)
constexpr int kPrefetchThreads = 128;

struct PrefetchRanges {
  const char* ptr[kPrefetchMaxRanges];  // 16-byte aligned
  long long bytes[kPrefetchMaxRanges];  // multiples of 16
};

__global__ void __launch_bounds__(kPrefetchThreads) l2_prefetch_kernel(PrefetchRanges r) {
  const char* base = r.ptr[blockIdx.y];
  const long long bytes = r.bytes[blockIdx.y];
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  const long long first = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  for (long long c = first * kPrefetchChunk; c < bytes; c += stride * kPrefetchChunk) {
    const long long left = bytes - c;
    const unsigned size = static_cast<unsigned>(left < kPrefetchChunk ? left : kPrefetchChunk);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(base + c), "r"(size) : "memory");
  }
#else
  for (long long c = first * 128; c < bytes; c += stride * 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(base + c));
#endif
}

}  // namespace revolta
