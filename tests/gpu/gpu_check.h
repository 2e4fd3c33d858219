/* gpu_check — helpers shared by the GPU test programs (header-only).
 *
 * Each program: gpu_check_start() (prints "SKIPPED: no CUDA device ..." plus
 * "0 passed, 0 failed" and exits 0 when no device answers), then CHECKs,
 * then gpu_check_finish() ("N passed, N failed", exit status 1 on failure).
 *
 * Tolerances are stated where used; the comparison everywhere is
 * |got - want| <= atol + rtol * |want|, reporting the worst element.
 */
#ifndef TRAINSIM_GPU_CHECK_H
#define TRAINSIM_GPU_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

static int gc_pass, gc_fail;

static inline void gpu_check_start(const char *prog)
{
    int n = 0;
    cudaError_t st = cudaGetDeviceCount(&n);
    if (st != cudaSuccess || n == 0) {
        printf("%s: SKIPPED: no CUDA device (%s)\n", prog, st != cudaSuccess ? cudaGetErrorString(st) : "0 devices");
        printf("0 passed, 0 failed\n");
        exit(0);
    }
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) == cudaSuccess)
        printf("%s: device 0: %s (sm_%d%d)\n", prog, p.name, p.major, p.minor);
}

static inline int gpu_check_finish(void)
{
    printf("%d passed, %d failed\n", gc_pass, gc_fail);
    return gc_fail ? 1 : 0;
}

static inline void gc_result(int ok, const char *what, const char *detail)
{
    if (ok)
        gc_pass++;
    else
        gc_fail++;
    printf("%s %s%s%s\n", ok ? "PASS" : "FAIL", what, detail[0] ? ": " : "", detail);
}

/* Compare n floats. */
static inline int gc_close(const char *what, const float *got, const float *want, size_t n, double atol, double rtol)
{
    size_t worst = 0;
    double worst_excess = -INFINITY;
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        double lim = atol + rtol * fabs((double)want[i]);
        double ex = (isnan(got[i]) || isnan(want[i])) ? INFINITY : d - lim;
        if (ex > worst_excess) {
            worst_excess = ex;
            worst = i;
        }
        if (!(ex <= 0.0))
            ok = 0;
    }
    char msg[256];
    snprintf(msg, sizeof msg, "n=%zu, worst [%zu] got %.6g want %.6g (atol %.1e, rtol %.1e)", n, worst,
             n ? got[worst] : 0.0, n ? want[worst] : 0.0, atol, rtol);
    gc_result(ok, what, msg);
    return ok;
}

#define GC_CUDA(expr)                                                                                                  \
    do {                                                                                                               \
        cudaError_t gc_st_ = (expr);                                                                                   \
        if (gc_st_ != cudaSuccess) {                                                                                   \
            printf("FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(gc_st_));                     \
            gc_fail++;                                                                                                 \
            return;                                                                                                    \
        }                                                                                                              \
    } while (0)

/* bf16 <-> float on the host, round to nearest even (as the kernels do). */
static inline uint16_t gc_f2bf(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float gc_bf2f(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Deterministic values in [-scale, scale), already representable in bf16. */
static inline float *gc_rand(size_t n, uint32_t seed, float scale)
{
    float *v = malloc((n ? n : 1) * sizeof *v);
    uint64_t s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float u = (float)((s >> 40) & 0xffffff) / 16777216.0f;
        v[i] = gc_bf2f(gc_f2bf(scale * (2.0f * u - 1.0f)));
    }
    return v;
}

/* Device copies: fp32 as is, or converted to bf16. Caller cudaFree()s. */
static inline float *gc_dev_f32(const float *h, size_t n)
{
    float *d = NULL;
    if (cudaMalloc((void **)&d, (n ? n : 1) * sizeof *d) != cudaSuccess)
        return NULL;
    cudaMemcpy(d, h, n * sizeof *d, cudaMemcpyHostToDevice);
    return d;
}

static inline uint16_t *gc_dev_bf16(const float *h, size_t n)
{
    uint16_t *t = malloc((n ? n : 1) * sizeof *t), *d = NULL;
    for (size_t i = 0; i < n; i++)
        t[i] = gc_f2bf(h[i]);
    if (cudaMalloc((void **)&d, (n ? n : 1) * sizeof *d) == cudaSuccess)
        cudaMemcpy(d, t, n * sizeof *d, cudaMemcpyHostToDevice);
    free(t);
    return d;
}

/* Read back n elements as float (caller frees). */
static inline float *gc_host_f32(const float *d, size_t n)
{
    float *h = malloc((n ? n : 1) * sizeof *h);
    cudaMemcpy(h, d, n * sizeof *h, cudaMemcpyDeviceToHost);
    return h;
}

static inline float *gc_host_bf16(const uint16_t *d, size_t n)
{
    uint16_t *t = malloc((n ? n : 1) * sizeof *t);
    float *h = malloc((n ? n : 1) * sizeof *h);
    cudaMemcpy(t, d, n * sizeof *t, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < n; i++)
        h[i] = gc_bf2f(t[i]);
    free(t);
    return h;
}

#endif
