/* common.cuh — device helpers shared by the kernels (bf16 conversion, warp
 * and block reductions, launch arithmetic). Internal to the kernels. */
#ifndef TRAINSIM_KERNELS_COMMON_CUH
#define TRAINSIM_KERNELS_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/cuk.h"

typedef __nv_bfloat16 bf16;

#define CUK_WARP 32

/* Raw bf16 bits <-> float. */
__device__ __forceinline__ float bf2f(uint16_t x)
{
    return __uint_as_float(((uint32_t)x) << 16);
}

/* Round to nearest even; NaN stays NaN. */
__device__ __forceinline__ uint16_t f2bf(float f)
{
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

/* Storage-generic load/store: kernels are templates over the storage type S
 * (uint16_t = bf16 bits, or float); math is always fp32. */
__device__ __forceinline__ float ld(uint16_t x)
{
    return bf2f(x);
}
__device__ __forceinline__ float ld(float x)
{
    return x;
}
template <typename S> __device__ __forceinline__ S st(float f);
template <> __device__ __forceinline__ uint16_t st<uint16_t>(float f)
{
    return f2bf(f);
}
template <> __device__ __forceinline__ float st<float>(float f)
{
    return f;
}
/* *p = v, or *p += v when acc (gradients that accumulate). */
template <typename S> __device__ __forceinline__ void put(S *p, float v, bool acc)
{
    *p = st<S>(acc ? ld(*p) + v : v);
}

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = CUK_WARP / 2; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = CUK_WARP / 2; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread
 * gets the result. `shared` holds 32 floats. Fixed order: deterministic. */
__device__ __forceinline__ float block_sum(float v, float *shared)
{
    int lane = threadIdx.x % CUK_WARP, warp = threadIdx.x / CUK_WARP;
    int nwarps = blockDim.x / CUK_WARP;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0)
        shared[warp] = v;
    __syncthreads();
    v = lane < nwarps ? shared[lane] : 0.0f;
    return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float *shared)
{
    int lane = threadIdx.x % CUK_WARP, warp = threadIdx.x / CUK_WARP;
    int nwarps = blockDim.x / CUK_WARP;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0)
        shared[warp] = v;
    __syncthreads();
    v = lane < nwarps ? shared[lane] : -INFINITY;
    return warp_max(v);
}

/* kern<<<grid, block, 0, stream>>>(...). The host emulation of tests/emu
 * redefines both to run a launch's threads one after another on the CPU;
 * CUK_LAUNCH_WARPS marks a kernel whose warps meet at a warp reduction
 * (there, a warp's 32 lanes run as threads). Used by llama.cu and flash.cu. */
#define CUK_LAUNCH(kern, grid, block, stream, ...)       kern<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#define CUK_LAUNCH_WARPS(kern, grid, block, stream, ...) kern<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)

static inline unsigned cuk_blocks(size_t n, unsigned threads)
{
    size_t b = (n + threads - 1) / threads;
    return (unsigned)(b > 0x7fffffffu ? 0x7fffffffu : (b ? b : 1));
}

/* Launch status of the last launch on this thread. */
static inline cudaError_t cuk_status(void)
{
    return cudaGetLastError();
}

#endif
