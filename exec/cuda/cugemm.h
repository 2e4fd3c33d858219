/* cugemm — GEMMs through cuBLASLt with a per-shape plan cache.
 *
 * Row-major, as exec/core/backend.h: C[M,N] = alpha op(A)[M,K] op(B)[K,N] + beta C,
 * optionally strided-batched (batch > 1: matrix i of X at X + i * stride_x
 * elements). Accumulation is always fp32. Storage kinds:
 *   CUGEMM_F32       A, B, C fp32; bf16 tensor-core math with fp32 accumulation
 *                    (CUBLAS_COMPUTE_32F_FAST_16BF) — the executor's backend,
 *                    whose tensors are fp32 (fp32 master weights)
 *   CUGEMM_BF16      A, B, C bf16 (Megatron's bf16 layer GEMMs)
 *   CUGEMM_BF16_F32C A, B bf16, C fp32 (weight gradients accumulated into fp32
 *                    main grads with beta = 1: gradient-accumulation fusion)
 *
 * Plan cache: the matmul descriptor, the four layouts and the heuristic's
 * algorithm are built once per (kind, transposes, M, N, K, leading dims,
 * batch and strides, beta == 0, pointer alignment) and kept in an
 * open-addressing hash table, so a cached call costs one hash lookup and one
 * cublasLtMatmul: host overhead stays out of measured op times. With
 * autotune on, a miss whose beta is 0 (output overwritten, so the call can be
 * repeated) times the heuristic's top candidates (up to CUGEMM_TUNE_ALGOS, 3
 * runs each, CUDA events) and keeps the fastest; other misses keep the
 * heuristic's first choice.
 *
 * Ownership: cugemm_create returns a handle the caller releases with
 * cugemm_destroy (which frees the cached plans and the workspace).
 */
#ifndef TRAINSIM_CUGEMM_H
#define TRAINSIM_CUGEMM_H

#include <stdbool.h>
#include <stddef.h>

#include <cuda_runtime_api.h>

#include "sim/util/err.h"

#define CUGEMM_WORKSPACE_BYTES (32u << 20)
#define CUGEMM_TUNE_ALGOS      8

typedef enum { CUGEMM_F32 = 0, CUGEMM_BF16, CUGEMM_BF16_F32C } cugemm_kind;

typedef struct cugemm cugemm;

/* One GEMM's shape and operands (row-major; strides in elements, used when
 * batch > 1). */
typedef struct {
    cugemm_kind kind;
    bool trans_a, trans_b;
    int M, N, K;
    float alpha, beta;
    const void *A;
    int lda;
    long long stride_a;
    const void *B;
    int ldb;
    long long stride_b;
    void *C;
    int ldc;
    long long stride_c;
    int batch; /* >= 1 */
} cugemm_args;

/* Create a cuBLASLt handle and a CUGEMM_WORKSPACE_BYTES workspace on the
 * current device. TS_ENOTSUP (with the CUDA/cuBLAS message) when no device
 * or library is usable. */
int cugemm_create(bool autotune, cugemm **out, ts_err *err);
void cugemm_destroy(cugemm *g);

/* Enqueue one GEMM on stream. TS_EINVAL for a bad shape (names the field),
 * TS_ESTATE with cuBLAS's status string when cuBLASLt refuses. */
int cugemm_run(cugemm *g, const cugemm_args *a, cudaStream_t stream, ts_err *err);

/* Plans built so far and cache hits (for tests and the microbenchmark). */
size_t cugemm_plans(const cugemm *g);
size_t cugemm_hits(const cugemm *g);

#endif
