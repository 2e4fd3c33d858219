/* microbench — measure this machine for the simulator's cost model
 * (`trainexec --microbench FILE`).
 *
 * Every rank runs the compute sweeps at the same time (so the measurement
 * sees the same sharing of cores, caches and memory bandwidth as a training
 * run with that many ranks); rank 0's samples are written. Then rank 0 and
 * 1 ping-pong point-to-point messages and all ranks all-reduce.
 *
 *   gemm       C[m,n] = A[m,k] B[k,n] through the backend's GEMM, over the
 *              shapes a GPT layer runs (tokens x features, both transposes
 *              the passes use) and a square sweep;
 *   memory     element-wise kernels (GELU, bias + residual, LayerNorm,
 *              causal softmax, Adam, copy) over sizes; bytes = bytes read +
 *              written by the kernel;
 *   launch     the smallest kernel call (n = 1): the per-op overhead;
 *   p2p        half the round trip of a message of `bytes` between ranks
 *              0 and 1 (needs >= 2 ranks; skipped otherwise);
 *   allreduce  MPI_Allreduce (sum, fp32) of `bytes` over all ranks.
 *
 * Each sample repeats the op for >= 40 ms (messages: 4 ms), so that on a
 * machine shared with other work it measures the share a training run gets.
 *
 * Output CSV (libcsv), one row per sample (repeats are separate rows; the
 * fit takes medians):
 *   kind,name,dtype,m,n,k,batch,bytes,ranks,rep,time_ns
 * with empty cells where a column does not apply. Written atomically by
 * rank 0; progress lines go to `progress` (NULL = silent).
 */
#ifndef TRAINSIM_EXEC_MICROBENCH_H
#define TRAINSIM_EXEC_MICROBENCH_H

#include <mpi.h>
#include <stdio.h>

#include "sim/util/err.h"

/* Collective over world. threads: OpenBLAS threads per rank (0 = default). */
int microbench_run(MPI_Comm world, const char *path, int threads, FILE *progress, ts_err *err);

#endif
