/* common.cuh, host emulation (tests/emu): stands in for kernels/common.cuh
 * when kernels/llama.cu, flash.cu and moe.cu are compiled as host C++
 * (-Itests/emu ahead of -I.), so that their kernels run on the CPU without
 * a GPU. A launch runs its threads one after another (blockIdx, threadIdx
 * set per thread); a CUK_LAUNCH_WARPS kernel runs each warp's 32 lanes as
 * threads that meet at every warp_sum (fixed lane order), so a warp that
 * does not reach the reduction together deadlocks instead of passing. What
 * it checks: the index arithmetic, masks, bounds and reductions of the
 * kernel bodies; not the device's memory model, occupancy or launch limits. */
#ifndef TRAINSIM_EMU_COMMON_CUH
#define TRAINSIM_EMU_COMMON_CUH

#include <barrier>
#include <climits>
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

#include "kernels/cuk.h"

#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline

#define CUK_WARP 32

struct emu_dim3 {
    unsigned x;
};
static thread_local emu_dim3 blockIdx, threadIdx;
static emu_dim3 blockDim, gridDim;

static float emu_lanes[CUK_WARP];
static std::barrier<> *emu_warp_barrier;

/* The sum over the warp's lanes, in lane order, on every lane. */
static inline float warp_sum(float v)
{
    emu_lanes[threadIdx.x % CUK_WARP] = v;
    emu_warp_barrier->arrive_and_wait();
    float s = 0.0f;
    for (int i = 0; i < CUK_WARP; i++)
        s += emu_lanes[i];
    emu_warp_barrier->arrive_and_wait();
    return s;
}

/* *p += v, returning the old value (int counts: atomic, as lanes may run
 * as threads). */
static inline int atomicAdd(int *p, int v)
{
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

static inline unsigned cuk_blocks(size_t n, unsigned threads)
{
    size_t b = (n + threads - 1) / threads;
    return (unsigned)(b > 0x7fffffffu ? 0x7fffffffu : (b ? b : 1));
}

static inline cudaError_t cuk_status(void)
{
    return cudaSuccess;
}

#define CUK_LAUNCH(kern, grid, block, stream, ...)                                                                     \
    do {                                                                                                               \
        (void)(stream);                                                                                                \
        gridDim.x = (grid);                                                                                            \
        blockDim.x = (block);                                                                                          \
        for (unsigned eb = 0; eb < gridDim.x; eb++)                                                                    \
            for (unsigned et = 0; et < blockDim.x; et++) {                                                             \
                blockIdx.x = eb;                                                                                       \
                threadIdx.x = et;                                                                                      \
                kern(__VA_ARGS__);                                                                                     \
            }                                                                                                          \
    } while (0)

#define CUK_LAUNCH_WARPS(kern, grid, block, stream, ...)                                                               \
    do {                                                                                                               \
        (void)(stream);                                                                                                \
        gridDim.x = (grid);                                                                                            \
        blockDim.x = (block);                                                                                          \
        for (unsigned eb = 0; eb < gridDim.x; eb++)                                                                    \
            for (unsigned w0 = 0; w0 < blockDim.x; w0 += CUK_WARP) {                                                   \
                std::barrier<> bar(CUK_WARP);                                                                          \
                emu_warp_barrier = &bar;                                                                               \
                std::vector<std::thread> lanes;                                                                        \
                for (unsigned l = 0; l < CUK_WARP; l++)                                                                \
                    lanes.emplace_back([&, eb, w0, l] {                                                                \
                        blockIdx.x = eb;                                                                               \
                        threadIdx.x = w0 + l;                                                                          \
                        kern(__VA_ARGS__);                                                                             \
                    });                                                                                                \
                for (auto &t : lanes)                                                                                  \
                    t.join();                                                                                          \
            }                                                                                                          \
    } while (0)

#endif
