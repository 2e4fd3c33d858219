/* cubench — GPU microbenchmarks for calibration: bf16 GEMMs, memory
 * bandwidth, kernel launch overhead, the bf16 layer shard (culayer) and
 * NCCL collectives (comm_nccl). Each measurement is timed with CUDA events
 * around single runs after warm-up runs and reported as the median, in ns.
 *
 * Ownership: nothing is kept between calls; buffers are allocated and freed
 * inside each function.
 */
#ifndef TRAINSIM_CUBENCH_H
#define TRAINSIM_CUBENCH_H

#include <stdbool.h>
#include <stddef.h>

#include <cuda_runtime_api.h>
#include <mpi.h>

#include "exec/core/comm.h"
#include "exec/cuda/cugemm.h"
#include "exec/cuda/culayer.h"
#include "sim/util/err.h"

#define CUBENCH_WARMUP 3

/* Median time of one bf16 GEMM C[M,N] = A[M,K] B[K,N] (row-major, batch
 * strided copies when batch > 1) over `reps` runs, with the plans of g. */
int cubench_gemm(cugemm *g, cudaStream_t s, int M, int N, int K, int batch, int reps, double *median_ns, ts_err *err);

/* Median time of a device-to-device copy of `bytes` bytes (the kernel reads
 * and writes bytes each: 2 * bytes of traffic). */
int cubench_memory(cudaStream_t s, size_t bytes, int reps, double *median_ns, ts_err *err);

/* Median time of an empty kernel launch, ns (the launch overhead). */
int cubench_launch(cudaStream_t s, int reps, double *median_ns, ts_err *err);

/* Median forward and backward times of one layer shard (each pass timed on
 * its own, `reps` iterations after CUBENCH_WARMUP). */
int cubench_layer(const culayer_dims *d, cugemm *g, cudaStream_t s, int reps, double *fwd_ns, double *bwd_ns,
                  ts_err *err);

typedef enum { CUBENCH_ALLREDUCE = 0, CUBENCH_ALLGATHER, CUBENCH_REDUCESCATTER, CUBENCH_SENDRECV } cubench_coll;

const char *cubench_coll_name(cubench_coll op);

/* Median time of one collective over every rank of c's COMM_TP group (for
 * SENDRECV: pipeline ranks 0 -> 1 of c's COMM_PP group, the other ranks
 * idle), `bytes` the per-rank buffer (all-reduce), the gathered output
 * (all-gather) or the scattered input (reduce-scatter), fp32 elements. The
 * result is checked (every rank contributes rank + 1): *correct says whether
 * every element came out right. Collective over the group's MPI ranks:
 * `world` is the communicator c was built on (the median is agreed over it).
 * compute: the stream c's collectives are ordered with. */
int cubench_coll_run(comm *c, MPI_Comm world, cudaStream_t compute, cubench_coll op, size_t bytes, int reps,
                     double *median_ns, bool *correct, ts_err *err);

/* nccl-tests' bus bandwidth factor for op over n ranks (2(n-1)/n for
 * all-reduce, (n-1)/n for all-gather and reduce-scatter, 1 for send/recv). */
double cubench_busbw_factor(cubench_coll op, int n);

#endif
