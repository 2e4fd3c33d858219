/* xout — the executor's measured outputs, gathered from every rank and
 * written by rank 0 atomically (sim/util/afile.h):
 *
 *   trace (--trace FILE): Chrome / Perfetto JSON in the simulator's schema
 *     (sim/core/trace.h): pid = rank, tid = stream (0 compute, 1 tp, 2 pp-send,
 *     3 pp-recv, 4 dp, as sim/core/plan.h numbers them), ph "X" events with
 *     name, cat (forward, backward, optimizer, tp, pp, dp), ts/dur in
 *     microseconds and args {mb, stage}; ops nest inside their action.
 *   ops CSV (--ops-csv FILE), one row per span, via libcsv:
 *     rank,tp,pp,dp,iter,level,name,mb,chunk,stage,layer,start_ns,end_ns,dur_ns
 *     (level "action" for IR actions, "op" for GEMMs/kernels/collectives).
 *   report CSV (--report-csv FILE), one row per rank:
 *     rank,tp,pp,dp,iterations,iteration_ns,compute_ns,bubble_ns,
 *     peak_bytes,weights_bytes,gradients_bytes,optimizer_bytes,
 *     activations_bytes,buffers_bytes,cpu_ns
 *     (iteration_ns: mean over measured iterations of the slowest rank's
 *     time; compute_ns: this rank's F/B/I/W/OPTIM/REDUCE_GRAD time per
 *     iteration; bubble_ns = iteration_ns - compute_ns; the bytes are the
 *     categories at this rank's peak of their sum; cpu_ns: CPU time the
 *     process got per iteration: cpu_ns / iteration_ns below 1 measures how
 *     much of the machine other work took).
 *
 * Ownership: functions borrow their arguments; nothing is kept.
 */
#ifndef TRAINSIM_EXEC_XOUT_H
#define TRAINSIM_EXEC_XOUT_H

#include <mpi.h>
#include <stdint.h>

#include "exec/core/backend.h"
#include "exec/core/comm.h"
#include "exec/runtime.h"
#include "sim/util/err.h"

typedef struct {
    int rank, tp, pp, dp, cp; /* dp: the data-parallel replica; cp: the context-parallel rank */
    int iterations;           /* measured iterations */
    double iteration_ns;      /* mean, slowest rank */
    double compute_ns;        /* mean per iteration, this rank */
    int64_t peak_bytes;
    int64_t cat_bytes[XMEM_NCAT];
    double cpu_ns; /* mean per iteration: this process's CPU time
                               (CLOCK_PROCESS_CPUTIME_ID; MPI waits spin, so
                               on an idle machine it is close to iteration_ns) */
    /* the data step per micro-batch of the rank's loading stages (runtime.h
     * rt_data_step; mb 0 on a rank with none): host generation, device copy */
    double data_gen_ns, data_copy_ns;
    int64_t data_mb;
} xout_rank;

/* Fill r's rank, groups and memory from cm and be. */
void xout_rank_init(xout_rank *r, int rank, const comm *cm, const backend *be);

/* Sum of the compute actions' durations (F, B, I, W, OPTIM, REDUCE_GRAD)
 * among spans of iteration iter. */
int64_t xout_compute_ns(const rt_span *sp, size_t n, int iter);

/* Collective over world: write the spans of iteration iter, shifted so that
 * t = 0 is origin_ns[iter] (CLOCK_MONOTONIC is machine-wide), to the trace
 * and/or ops CSV (NULL paths are skipped). Every rank gets the status. */
int xout_write_spans(MPI_Comm world, const comm *cm, const rt_span *sp, size_t n, int iter, int64_t shift_ns,
                     const char *trace_path, const char *ops_path, ts_err *err);

/* Collective over world: gather every rank's r and write the report CSV
 * (path may be NULL: then only *all on rank 0 is filled). On rank 0, *all
 * (may be NULL) receives a malloc'd array of size entries the caller frees. */
int xout_write_report(MPI_Comm world, const xout_rank *r, const char *path, xout_rank **all, ts_err *err);

#endif
