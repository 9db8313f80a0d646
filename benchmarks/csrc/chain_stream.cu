// Benchmark-only probe (not part of revolta-kernels): the fastest a chain of DEPENDENT kernels can stream bytes on
// this GPU. Each launch reads `bytes` of its own buffer (16-byte non-coherent loads, U per thread in flight, a
// grid-stride loop), and its result depends on one float the previous launch wrote, read after the programmatic
// dependent launch (PDL) wait. The first U loads of every thread are issued before that wait, as the engine's
// GEMV kernels issue their weight loads, so a resident block streams during the previous kernel's tail.
//
// benchmarks/chain_ceiling.py builds this with nvcc on the GPU machine (sm_90: griddepcontrol needs it) and times
// 32-deep chains of it in CUDA graphs: per-kernel time against the copy bandwidth is the ceiling that any kernel
// of that byte size reaches in a dependent chain, which the GEMV chains are compared against.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

__device__ __forceinline__ void wait_previous() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void release_next() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// What a thread's loads are consumed into: they must not be dead code.
template <int U>
__device__ __forceinline__ uint32_t fold(const uint4 (&v)[U]) {
  uint32_t acc = 0;
#pragma unroll
  for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  return acc;
}

// A link's end: a store that depends on the loads (practically never taken), and block 0's thread 0 passes the
// chain's value on.
__device__ __forceinline__ void pass_on(uint32_t acc, float x, float* out) {
  if (acc == 0x9e3779b9u) out[1 + (threadIdx.x & 31)] = static_cast<float>(acc);
  if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = x + 1.0f;
}

// A link's body over a read order: its first U loads per thread before the PDL wait, the previous link's value
// after it, then batches of U loads until the order ends. Order: valid(u) / at(u) for load u of the current
// batch, next() to move to the following batch (false at the end).
template <int U, typename Order>
__device__ __forceinline__ void stream_link(Order order, const float* in, float* out) {
  uint4 v[U];
  auto load = [&] {
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = order.valid(u) ? load_stream(order.at(u)) : make_uint4(0, 0, 0, 0);
  };
  load();
  wait_previous();
  release_next();
  const float x = in[0];
  uint32_t acc = 0;
  for (;;) {
    acc ^= fold(v);
    if (!order.next()) break;
    load();
  }
  pass_on(acc, x, out);
}

// Contiguous: thread t reads elements t, t + T, t + 2T, ... (T = the grid's threads), U at a time.
template <int U>
struct ContiguousOrder {
  const uint4* w;
  long long n16, stride, i;
  __device__ __forceinline__ bool valid(int u) const { return i + u * stride < n16; }
  __device__ __forceinline__ const uint4* at(int u) const { return w + i + u * stride; }
  __device__ __forceinline__ bool next() {
    i += U * stride;
    return i < n16;
  }
};

template <int U>
__global__ void __launch_bounds__(256) stream_chain_kernel(const uint4* __restrict__ w, long long n16,
                                                           const float* in, float* out) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  stream_link<U>(ContiguousOrder<U>{w, n16, stride, i}, in, out);
}

// The skinny GEMV's order: the buffer is `rows` rows of `row_bytes`, a block reads one 512-byte column slice
// (32 lanes x 16 bytes) of rows [split * rows_per_block, ...), its 8 warps taking U rows at a time (warp w: rows
// w * U .. w * U + U - 1, then + 8 U ...), as quant_gemv_kernel's tiles and steps do.
template <int U>
struct StridedOrder {
  const uint4* col;
  size_t stride16;
  int r, r1;
  __device__ __forceinline__ bool valid(int u) const { return r + u < r1; }
  __device__ __forceinline__ const uint4* at(int u) const { return col + (r + u) * stride16; }
  __device__ __forceinline__ bool next() {
    r += 8 * U;
    return r < r1;
  }
};

template <int U>
__global__ void __launch_bounds__(256) strided_chain_kernel(const uint4* __restrict__ w, int rows, int row_bytes,
                                                            int rows_per_block, const float* in, float* out) {
  const int tiles = row_bytes / 512, tile = blockIdx.x % tiles, split = blockIdx.x / tiles;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int r0 = split * rows_per_block, r1 = min(rows, r0 + rows_per_block);
  const uint4* col = w + static_cast<size_t>(tile) * 32 + lane;
  stream_link<U>(StridedOrder<U>{col, static_cast<size_t>(row_bytes) / 16, r0 + warp * U, r1}, in, out);
}

// One launch of 256-thread blocks on `stream`, with programmatic dependent launch if `pdl`.
template <typename... Params, typename... Args>
cudaError_t launch_link(void (*kernel)(Params...), int blocks, int pdl, cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(256);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

// The kernels for 4, 8 or 16 loads in flight per thread (nullptr for another count).
auto stream_kernel(int unroll) -> decltype(&stream_chain_kernel<4>) {
  return unroll == 4 ? &stream_chain_kernel<4> : unroll == 8 ? &stream_chain_kernel<8>
                                              : unroll == 16 ? &stream_chain_kernel<16> : nullptr;
}
auto strided_kernel(int unroll) -> decltype(&strided_chain_kernel<4>) {
  return unroll == 4 ? &strided_chain_kernel<4> : unroll == 8 ? &strided_chain_kernel<8>
                                               : unroll == 16 ? &strided_chain_kernel<16> : nullptr;
}

}  // namespace

// One link of the chain on `stream`: read `bytes` (a multiple of 16) at `w`, then out[0] = in[0] + 1.
// `unroll` is 4, 8 or 16 loads of 16 bytes in flight per thread; blocks of 256 threads.
extern "C" int chain_stream_launch(const void* w, long long bytes, const float* in, float* out, int blocks,
                                   int unroll, int pdl, void* stream) {
  const auto kernel = stream_kernel(unroll);
  if (kernel == nullptr || bytes % 16 != 0 || blocks < 1) return cudaErrorInvalidValue;
  return launch_link(kernel, blocks, pdl, static_cast<cudaStream_t>(stream), static_cast<const uint4*>(w), bytes / 16,
                     in, out);
}

// The strided variant: `rows` x `row_bytes` (a multiple of 512) at `w`, `splits` blocks per 512-byte column slice.
extern "C" int chain_strided_launch(const void* w, int rows, int row_bytes, int splits, const float* in, float* out,
                                    int unroll, int pdl, void* stream) {
  const auto kernel = strided_kernel(unroll);
  if (kernel == nullptr || row_bytes % 512 != 0 || rows < 1 || splits < 1) return cudaErrorInvalidValue;
  const int rows_per_block = (rows + splits - 1) / splits;
  return launch_link(kernel, (row_bytes / 512) * splits, pdl, static_cast<cudaStream_t>(stream),
                     static_cast<const uint4*>(w), rows, row_bytes, rows_per_block, in, out);
}
