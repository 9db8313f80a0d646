// Host-side launch code shared by the decode and prefill translation units.
#pragma once

#include "revolta_kernels.h"
#include "decode.cuh"
#include "decode_mma.cuh"
#include "prefill.cuh"
#include "prefill_mma.cuh"

namespace revolta {

// Kernel choice (api.cu). Variant 0 picks the best kernel for the case: the mma kernels where
// revolta_mma_layout_probe() succeeded on the device, else the generic ones; 1 forces the generic
// kernels (decode.cuh, prefill.cuh); 2 and up force a frag configuration without consulting the probe,
// for benchmarks that tune the defaults (wrong results on a GPU whose fragments differ, e.g. Volta).
int decode_variant();
int decode_vec_mode();  // paged_decode_vec_kernel: 0 never, 1 small batches (default), 2 wherever it applies
int sm_count();           // of the current device
int prefill_variant();
bool mma_layout_ok();

// Opt a kernel into its dynamic shared memory once, then report/launch. `configured` is per
// instantiation; the race on it is benign (every caller sets the same attribute).
template <typename Kernel>
cudaError_t prepare(Kernel kernel, int smem, bool& configured) {
  if (configured) return cudaSuccess;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e == cudaSuccess) configured = true;
  return e;
}

// Either launches (occupancy == nullptr) or reports blocks per SM. `pdl`: the kernel keeps the contract of
// pdl.cuh and is launched through launch() (programmatic dependent launch on sm_90+).
template <typename Kernel>
cudaError_t launch_or_query(Kernel kernel, int threads, int smem, bool& configured, dim3 grid, const AttnParams& p,
                            cudaStream_t stream, int* occupancy, bool pdl = false) {
  cudaError_t e = prepare(kernel, smem, configured);
  if (e != cudaSuccess) return e;
  if (occupancy) return cudaOccupancyMaxActiveBlocksPerMultiprocessor(occupancy, kernel, threads, smem);
  if (pdl) return launch(kernel, grid, threads, smem, stream, p);
  kernel<<<grid, threads, smem, stream>>>(p);
  return cudaGetLastError();
}

#define REVOLTA_KV_KINDS(FN, D, ...)                       \
  switch (kv_kind) {                                       \
    case KV_F16: return FN<D, KV_F16>(__VA_ARGS__);        \
    case KV_I8: return FN<D, KV_I8>(__VA_ARGS__);          \
    case KV_E4M3: return FN<D, KV_E4M3>(__VA_ARGS__);      \
    case KV_E5M2: return FN<D, KV_E5M2>(__VA_ARGS__);      \
    default: return cudaErrorInvalidValue;                 \
  }

#define REVOLTA_HEAD_DIMS(FN, ...)                               \
  switch (head_dim) {                                            \
    case 64: REVOLTA_KV_KINDS(FN, 64, __VA_ARGS__)               \
    case 128: REVOLTA_KV_KINDS(FN, 128, __VA_ARGS__)             \
    case 256: REVOLTA_KV_KINDS(FN, 256, __VA_ARGS__)             \
    default: return cudaErrorInvalidValue;                       \
  }

}  // namespace revolta
