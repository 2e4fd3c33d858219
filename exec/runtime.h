/* runtime — runs a schedule IR (sim/sched/sched.h) for real on one rank.
 *
 * The rank's pipeline rank r = comm's COMM_PP rank picks its action list
 * actions[r]; each action is executed exactly as written:
 *   F / B / I / W      forward, fused backward, input-gradient and
 *                      weight-gradient parts of (mb, chunk) on the gpt stage
 *                      the chunk runs (sched_stage_of);
 *   SEND_F / SEND_B    asynchronous send (comm isend) of the stage's output /
 *                      input gradient to the peer pipeline rank;
 *   RECV_F / RECV_B    post the receive (irecv) into a fresh buffer; the
 *                      F / B / I that consumes it waits for it just before it
 *                      starts (outside its span), so a rank is not held up by
 *                      a receive whose data it does not need yet: the
 *                      simulator's separate receive stream;
 *   REDUCE_GRAD        tensor (sp) and data-parallel gradient all-reduce of
 *                      the chunk's stage;
 *   OPTIM              AdamW step on every chunk.
 * Adjacent stages on one rank (ZB-V) hand tensors over locally. A schedule
 * without REDUCE_GRAD / OPTIM gets them after its last action. Messages are
 * matched by tag = (mb * stages + boundary) * 2 + direction, so a
 * mis-ordered schedule fails loudly (wrong data never silently pairs).
 *
 * Micro-batch j of data-parallel rank q is global micro-batch q*m + j of the
 * synthetic stream (data.h); the loss is the mean over the global batch of
 * m*d micro-batches, so every layout computes the same model update.
 *
 * Timing: every action (and, with op_trace, every GEMM / kernel /
 * collective inside it) is recorded as a span with CLOCK_MONOTONIC start and
 * end, in ns since rt_set_origin's origin (0 by default: absolute
 * CLOCK_MONOTONIC times; the backend is synced before each clock read).
 *
 * Ownership: the runtime owns its stages, activations and buffers; the
 * sched, backend and comm are borrowed and must outlive it.
 */
#ifndef TRAINSIM_EXEC_RUNTIME_H
#define TRAINSIM_EXEC_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exec/core/backend.h"
#include "exec/core/comm.h"
#include "exec/core/gpt.h"
#include "sim/sched/sched.h"

typedef struct {
    gpt_dims dims;
    bool sp;       /* --sequence-parallel */
    uint64_t seed; /* weights and data */
    float lr, beta1, beta2, eps, weight_decay;
    bool op_trace; /* record op-level spans too */
    /* The backend runs asynchronously and its collectives block no host
     * call (CUDA with NCCL): each action is then watched whole, from its
     * input wait to the device sync after it, so a peer stuck in a
     * collective turns into a watchdog error naming the action (the MPI
     * backend's blocking calls are watched where they block instead). */
    bool watch_device;
} rt_opts;

/* Fill o with defaults: seed 1234, lr 1e-4, betas 0.9 / 0.95, eps 1e-8,
 * weight decay 0, no sp, no op trace (dims zeroed). */
void rt_opts_default(rt_opts *o);

typedef struct {
    const char *name; /* action token ("F", "SEND_B", ...) or op name ("qkv", ...) */
    bool is_op;       /* false: an IR action; true: an op inside one */
    int iter;
    int mb, chunk, stage, layer; /* -1 where not applicable */
    int64_t t0_ns, t1_ns;
} rt_span;

typedef struct runtime runtime;

/* Build this rank's stages from s (s->p must equal the comm's pipeline
 * size; s->num_layers the model's layers). */
int rt_create(const rt_opts *o, const sched *s, backend *be, comm *cm, runtime **out, ts_err *err);
void rt_free(runtime *rt);

/* Clock origin (CLOCK_MONOTONIC ns) of the spans' times. */
void rt_set_origin(runtime *rt, int64_t origin_ns);
int64_t rt_now_ns(void);

/* Run iteration `iter` (0-based; picks the data and Adam's step iter+1).
 * *loss receives the global-batch mean loss on every rank. */
int rt_iteration(runtime *rt, int iter, double *loss, ts_err *err);

/* The data step of the micro-batches this rank's loading stages (the
 * first and the last) ran since rt_create or rt_data_step_reset: the host
 * generating the batch (data.h) and the copy of its ids to the device
 * (gpt.h GPT_OP_DATA, timed after a device sync), summed, ns; mb counts
 * the forwards. Its figure per micro-batch is what trainsim simulate
 * --data-loader-ns takes. */
typedef struct {
    int64_t gen_ns, copy_ns;
    int64_t mb;
} rt_data_stats;
void rt_data_step(const runtime *rt, rt_data_stats *out);
void rt_data_step_reset(runtime *rt);

/* Recorded spans (owned by rt; valid until the next call into rt). */
const rt_span *rt_spans(const runtime *rt, size_t *n);
void rt_clear_spans(runtime *rt);

/* The chunks' stages (index = local chunk), for export and inspection. */
int rt_num_chunks(const runtime *rt);
gpt_stage *rt_chunk(runtime *rt, int chunk);
/* Global stage id of local chunk c. */
int rt_chunk_stage(const runtime *rt, int chunk);

#endif
