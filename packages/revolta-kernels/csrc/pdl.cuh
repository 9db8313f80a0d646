// Programmatic dependent launch (PDL, sm_90 and later): a kernel launched through revolta::launch() may
// start while the kernel before it on the stream is still finishing, so its launch latency, its prologue
// (e.g. streaming weights that no earlier kernel writes) and the previous kernel's tail overlap.
//
// The contract every kernel launched through launch() must keep:
//   * call pdl_wait() on every path before it reads memory an earlier kernel writes, before it writes
//     memory an earlier kernel may still read, and before it exits (an early return that skips the wait
//     would let the grid finish before its predecessor, breaking the stream's order for what follows);
//   * call pdl_trigger() where the next kernel may start its own prologue (anywhere is safe: the next
//     kernel still waits for this grid's completion and memory flush in its pdl_wait()).
// On GPUs before sm_90 both are no-ops and launch() is a plain launch, so Volta behaves as before.
// revolta_set_pdl(0) turns PDL off (the Python side calls it at load for REVOLTA_PDL=0).
#pragma once

#if !defined(__CUDACC_RTC__)
#include <cuda_runtime.h>
#endif

namespace revolta {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

#if !defined(__CUDACC_RTC__)
// True when the current device supports PDL (compute capability >= 9.0) and revolta_set_pdl has not turned it off.
// Defined in api.cu; cached per device.
bool pdl_enabled();

// Launch `kernel` on `stream`, with programmatic stream serialization where pdl_enabled().
template <typename... KernelArgs, typename... Args>
cudaError_t launch(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<KernelArgs>(args)...);
}
#endif

}  // namespace revolta
