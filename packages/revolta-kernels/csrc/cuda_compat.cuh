// Device functions spelt alike by every CUDA toolkit the library is built with (11.8 for sm_70/75, 13 for sm_80+).
// Self-contained for NVRTC (CUDA headers only).
#pragma once

#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace revolta {

// One element loaded past L1 (ld.global.cg), for values other blocks of the same launch stored. CUDA 11.8 has no
// __ldcg overloads for __half / __nv_bfloat16 pointers, so the 2-byte types load their bits as unsigned short and
// reinterpret them (the same ld.global.cg.u16 CUDA 13's overloads emit).
__device__ __forceinline__ float ldcg(const float* p) { return __ldcg(p); }
__device__ __forceinline__ __half ldcg(const __half* p) {
  return __ushort_as_half(__ldcg(reinterpret_cast<const unsigned short*>(p)));
}
__device__ __forceinline__ __nv_bfloat16 ldcg(const __nv_bfloat16* p) {
  __nv_bfloat16_raw raw;
  raw.x = __ldcg(reinterpret_cast<const unsigned short*>(p));
  return __nv_bfloat16(raw);
}

}  // namespace revolta
