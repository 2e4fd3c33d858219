/* engine — the discrete-event core of the simulator.
 *
 * Time is an integer number of nanoseconds, so runs are deterministic and
 * exact. The engine owns a set of ranks (simulated GPUs); each rank has the
 * same number of streams (lowering uses seven, plan.h's PLAN_STREAM_*: compute,
 * tensor-parallel comm, pipeline send, pipeline receive of activations,
 * pipeline receive of gradients, data-parallel comm, an overlapped pair's
 * all-to-alls). A stream runs its
 * tasks one at a time, in the order they were added (CUDA stream semantics).
 * A task starts when it is at the head of its stream, the stream is idle and
 * every predecessor has finished; it then runs for its duration.
 *
 * Extension points for a flow-level network model (sim/net):
 *  - an EXTERNAL task has no fixed duration: when it starts, the on_start
 *    hook is called and the task ends when somebody calls engine_task_finish()
 *    (a network model starts a flow there and finishes the task when the flow
 *    completes; a collective waits until all its participants have started);
 *  - engine_timer_at() schedules a callback at a time (for flow-rate updates);
 *  - a task can be JOINED to another (engine_task_join): it cannot start
 *    before its partner has started, and it ends when the partner ends (or at
 *    its own start if the partner already ended) — a receive matched with its
 *    send.
 *
 * Events are processed in (time, push order): equal times in the order they
 * were pushed, the same on every run. (Internally a radix heap: events
 * never precede the current time, so a push is an append to the bucket of
 * the highest base-256 digit in which its time differs from the current one;
 * the ends of copies in lockstep travel as one event, see engine.c.)
 *
 * Accounting: for every rank the engine accumulates how long each subset of
 * its streams was busy (a bit mask of busy streams -> ns), which the report
 * turns into busy, idle and exposed-communication times.
 *
 * Ownership: engine_create() returns an engine the caller frees with
 * engine_free(); tasks, edges and events live in arrays the engine owns and
 * grows geometrically (memory is proportional to the tasks added).
 */
#ifndef TRAINSIM_ENGINE_H
#define TRAINSIM_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/util/err.h"

#define ENGINE_MAX_STREAMS_PER_RANK 8
#define ENGINE_MAX_PRED             2047 /* a copy's predecessor count shares 16 bits with its flags */

typedef uint32_t engine_task_id;
#define ENGINE_NO_TASK UINT32_MAX

typedef struct engine engine;

/* What a hook learns of the task it is called for (the engine_task_tag,
 * _mb and _rank of the id, without the queries). */
typedef struct {
    uint32_t tag;  /* as given to engine_task_add */
    int32_t mb;    /* as given to engine_task_add */
    int rank;      /* engine rank of this copy (engine_replicate) */
    uint32_t copy; /* engine_replicate's copy (0 without it) */
    bool external; /* EXTERNAL: its end is up to engine_task_finish */
} engine_task_info;

/* Called when a task starts or ends (now_ns is the simulated time); ti is
 * valid during the call only. An EXTERNAL task's on_start
 * must arrange for engine_task_finish() to be called (possibly from a later
 * timer). Hooks may add timers; they must not add tasks. With only_marked,
 * hooks are called only for tasks marked with engine_task_mark (and for
 * external ones, whose on_start must run), which keeps the event loop tight
 * when few tasks need them. */
typedef struct {
    void (*on_start)(void *ctx, engine *e, engine_task_id id, const engine_task_info *ti, int64_t now_ns);
    void (*on_end)(void *ctx, engine *e, engine_task_id id, const engine_task_info *ti, int64_t now_ns);
    void *ctx;
    bool only_marked;
    /* > 0: on_end is called for copies 0..on_end_copies-1 only
     * (engine_replicate); 0: for every copy */
    uint32_t on_end_copies;
    /* > 0: on_start is called for copies 0..on_start_copies-1, and on the
     * others for external tasks only (whose start must be seen); 0: for
     * every copy */
    uint32_t on_start_copies;
} engine_hooks;

typedef void (*engine_timer_fn)(void *ctx, engine *e, int64_t now_ns);

/* Create an engine for n_ranks ranks of streams_per_rank streams each
 * (1..ENGINE_MAX_STREAMS_PER_RANK). hooks may be NULL. *out is owned by the
 * caller (engine_free). TS_EINVAL on bad sizes, TS_ENOMEM. */
int engine_create(int n_ranks, int streams_per_rank, const engine_hooks *hooks, engine **out, ts_err *err);

/* Free e and everything it owns. NULL is allowed. */
void engine_free(engine *e);

/* Reserve room for n_tasks tasks and n_edges edges (an optimisation only). */
int engine_reserve(engine *e, uint32_t n_tasks, uint32_t n_edges, ts_err *err);

/* Append a task of dur_ns (>= 0) to stream `stream` of `rank`. tag and mb are
 * opaque to the engine (given back to hooks and by engine_task_tag/mb). */
int engine_task_add(engine *e, int rank, int stream, int64_t dur_ns, uint32_t tag, int32_t mb, engine_task_id *out,
                    ts_err *err);

/* Make `after` wait until `before` has finished. Both must exist; a task may
 * not depend on itself; a task waits for ENGINE_MAX_PRED predecessors at most
 * (a join counts as one; TS_EINVAL past it). Must be called before
 * engine_run and engine_replicate. */
int engine_dep_add(engine *e, engine_task_id before, engine_task_id after, ts_err *err);

/* Turn the tasks added so far, all on ranks 0..rank_stride-1, into `copies`
 * copies: copy c runs on ranks c x rank_stride .. c x rank_stride +
 * rank_stride-1 with the same streams, durations, tags, micro-batches,
 * dependencies, joins and marks. Ids are interleaved: copy c of the i-th
 * task added gets id i x copies + c (engine_copies), so the copies of one
 * task sit side by side in memory (interchangeable ranks progress together,
 * and the event loop then walks memory almost in order). The copies share
 * one description of the tasks; each has only its own run state (2 bytes
 * of counters and flags, and 16 of times unless engine_keep_times leaves
 * them out).
 * Ids returned before this call are invalid after it (but for copy 0: task
 * i keeps id i x copies). After it no task, dependency or join may be
 * added (TS_ESTATE); external marks may be set per copy or for all copies.
 * Used for --full networks: one pipeline is lowered, then copied to every
 * tensor/data-parallel replica. TS_EINVAL if a task lies outside ranks
 * 0..rank_stride-1 or copies x rank_stride exceeds the engine's ranks;
 * TS_ESTATE if the engine has run or was replicated already; TS_ENOMEM. */
int engine_replicate(engine *e, uint32_t copies, int rank_stride, ts_err *err);

/* Copies made by engine_replicate (1 without it). */
uint32_t engine_copies(const engine *e);

/* Keep the busy-mask accounting (engine_busy_mask_ns) of ranks
 * 0..n_ranks-1 only; the others' queries return -1. By default every rank
 * is accounted. The accounting is the engine's one scattered write per
 * stream start and end (a rank's table spans eight cache lines), so a
 * caller that reports only some ranks saves it for the others: --full
 * networks report the pipeline of replica (0, 0), and accounting only its
 * ranks made the 405B-shape run about 18% faster. TS_EINVAL if n_ranks is
 * not in 0..the engine's ranks, TS_ESTATE after engine_run. */
int engine_account_ranks(engine *e, int n_ranks, ts_err *err);

/* Keep the start and end times (engine_task_start_ns / _end_ns) of copies
 * 0..copies-1 of each task only (engine_replicate); the others' queries
 * return -1. By default every copy keeps them. The times take 16 bytes per
 * copy: the 1T --full case's 66 M tasks need 1 GB for them, of which its
 * report reads copy 0 only. TS_EINVAL if copies is not in 1..the engine's
 * copies, TS_ESTATE after engine_run. */
int engine_keep_times(engine *e, uint32_t copies, ts_err *err);

/* Mark task id as external (its duration is ignored; see above); after
 * engine_replicate, only that copy. */
int engine_task_set_external(engine *e, engine_task_id id, ts_err *err);

/* Mark task id and all its copies (engine_replicate) as external: one call
 * per task of the replicated pipeline instead of one per copy. */
int engine_task_set_external_copies(engine *e, engine_task_id id, ts_err *err);

/* Have the hooks called for task id (see engine_hooks.only_marked); after
 * engine_replicate, only that copy. */
int engine_task_mark(engine *e, engine_task_id id, ts_err *err);

/* Join `task` to `partner` (see above); task's duration is ignored. */
int engine_task_join(engine *e, engine_task_id task, engine_task_id partner, ts_err *err);

/* End a running EXTERNAL task at at_ns (>= now). Called from hooks or timers
 * during engine_run. TS_ESTATE if the task is not a running external task. */
int engine_task_finish(engine *e, engine_task_id id, int64_t at_ns, ts_err *err);

/* Call fn(ctx, e, at_ns) at at_ns (>= now). */
int engine_timer_at(engine *e, int64_t at_ns, engine_timer_fn fn, void *ctx, ts_err *err);

/* Run until no event is left. TS_ESTATE if some task never ran (a dependency
 * cycle or a schedule that deadlocks), naming the first stuck task's rank,
 * stream and tag. */
int engine_run(engine *e, ts_err *err);

/* Queries (valid after engine_run for times). */
uint32_t engine_task_count(const engine *e);
int engine_n_ranks(const engine *e);
int engine_streams_per_rank(const engine *e);
/* -1 if never started / not finished, or a copy engine_keep_times left out */
int64_t engine_task_start_ns(const engine *e, engine_task_id id);
int64_t engine_task_end_ns(const engine *e, engine_task_id id);
uint32_t engine_task_tag(const engine *e, engine_task_id id);
int32_t engine_task_mb(const engine *e, engine_task_id id);
int engine_task_rank(const engine *e, engine_task_id id);
int engine_task_stream(const engine *e, engine_task_id id);
int64_t engine_now_ns(const engine *e);
/* Time of the last task end (0 if none). */
int64_t engine_makespan_ns(const engine *e);
/* Events processed by engine_run (task ends + timers). */
uint64_t engine_events(const engine *e);
/* ns during which exactly the streams in `mask` (bit s = stream s) of rank
 * were busy, over [0, makespan]; mask 0 is idle time. -1 for a rank left
 * out by engine_account_ranks. */
int64_t engine_busy_mask_ns(const engine *e, int rank, unsigned mask);

#endif
