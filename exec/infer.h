/* infer — `trainexec --inference`: greedy autoregressive decoding of the GPT
 * model (exec/core/gpt_infer.h) on every rank, measured.
 *
 * Each iteration (--warmup ones first, not measured) empties the KV cache
 * and runs the prefill of a deterministic prompt (B sequences of I tokens:
 * the executor's synthetic stream, exec/core/data.h, seeded by --seed and
 * the data-parallel rank) and then O decode steps, each feeding every
 * sequence's greedy (argmax) token back. The t ranks of a tensor-parallel
 * group decode together; d data-parallel groups decode their own prompts.
 * Times are taken on the host after the backend's sync(), per rank, and the
 * slowest rank's is kept (MPI_MAX after the run, so no collective is added
 * to a step).
 *
 * Outputs (rank 0; atomic, sim/util/afile.h):
 *   --output FILE, one row (csvio):
 *     backend,ranks,tp,dp,batch,input_len,output_len,iterations,
 *     prefill_ns,decode_step_mean_ns,decode_step_p50_ns,decode_step_p99_ns,
 *     decode_tokens_per_s,tokens_per_s,kv_cache_bytes,peak_bytes
 *     (prefill_ns: mean over the measured iterations; the decode step
 *     statistics over every measured step (p50, p99: nearest rank);
 *     decode_tokens_per_s = d * B / mean step; tokens_per_s = d * B * O /
 *     (prefill + O steps), both mean times; kv_cache_bytes: rank 0's cache
 *     (capacity: --seq-length positions); peak_bytes: rank 0's peak).
 *   --decode-samples FILE: per-op times of the measured decode steps in the
 *     sample format `trainsim calibrate` reads (exec/microbench.h):
 *       kind,name,dtype,m,n,k,batch,bytes,ranks,rep,time_ns
 *     kind = decode, name = the op (gpt_infer.h's names; collectives are
 *     left out), dtype = fp32, m = B, n = cached positions after the step,
 *     k = the layer (-1 outside layers: empty), bytes = what the op reads
 *     and writes on the rank (gpt_infer_op_bytes), ranks = t, rep = the
 *     step's index over the measured iterations, time_ns = its duration.
 *     Ops are timed with a backend sync() at each boundary (as
 *     --op-trace does), which the step times then include.
 *
 * Ownership: borrows everything; allocates and frees its own model.
 */
#ifndef TRAINSIM_EXEC_INFER_H
#define TRAINSIM_EXEC_INFER_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "exec/core/backend.h"
#include "exec/core/comm.h"
#include "exec/core/gpt.h"
#include "sim/util/err.h"
#include "sim/util/opt.h"

/* The command-line flags of --inference (added to trainexec's table). */
typedef struct {
    bool inference;
    int batch_size;            /* --batch-size; 0 = --micro-batch-size */
    int input_len, output_len; /* --input-len, --output-len */
    const char *output;        /* --output */
    const char *samples;       /* --decode-samples */
} infer_args;

/* Defaults: off, I = O = 8. */
void infer_args_default(infer_args *a);
/* Add the "Inference" section of flags to t, writing into a (which must
 * outlive the parse). */
int infer_add_flags(opt_table *t, infer_args *a, ts_err *err);
/* The combinations allowed: the --inference flags need --inference;
 * --inference takes no training flag (training_flag: the first one given,
 * or NULL). TS_EINVAL naming the flag. */
int infer_check_flags(const infer_args *a, const char *training_flag, ts_err *err);
/* With --inference, --batch-size B stands for --micro-batch-size B (the
 * sequences decoded together), which the flag resolution requires: appends
 * "--micro-batch-size=B" (held in buf) to av, which has room for one more
 * pointer, when --micro-batch-size is not given; *ac grows by one then. */
void infer_batch_arg(char **av, int *ac, char *buf, size_t bytes);

typedef struct {
    gpt_dims dims; /* batch: sequences decoded together (B) */
    bool sp;       /* the stage's sequence parallelism (inference keeps all rows) */
    uint64_t seed;
    int input_len, output_len; /* I, O: I + O <= dims.seq */
    int warmup, iterations;
    const char *output;  /* summary CSV, or NULL */
    const char *samples; /* per-op decode samples, or NULL */
    const char *backend_name;
} infer_opts;

/* Check o against its dims and layout (p must be 1); TS_EINVAL/TS_ENOTSUP
 * naming the flag. Needs no collective. */
int infer_check(const infer_opts *o, int tp, int pp, ts_err *err);

/* Run and write the outputs (collective over world; every rank gets the
 * status). progress: rank 0's lines (NULL = silent). */
int infer_run(MPI_Comm world, const infer_opts *o, backend *be, comm *cm, FILE *progress, ts_err *err);

#endif
