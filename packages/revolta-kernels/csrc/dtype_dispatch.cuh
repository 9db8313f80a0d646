// The C ABI's storage dtype codes (0 = float16, 1 = bfloat16, 2 = float32) to a type T for the statements given;
// an unknown code returns cudaErrorInvalidValue from the calling entry point.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define REVOLTA_STORAGE_DISPATCH(dtype, ...)                 \
  switch (dtype) {                                           \
    case 0: { using T = __half; __VA_ARGS__; break; }        \
    case 1: { using T = __nv_bfloat16; __VA_ARGS__; break; } \
    case 2: { using T = float; __VA_ARGS__; break; }         \
    default: return cudaErrorInvalidValue;                   \
  }
