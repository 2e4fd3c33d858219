/* engine — discrete-event core (see engine.h). */
#include "sim/core/engine.h"

#include "sim/util/ckd.h"

#include <stdlib.h>
#include <string.h>

/* Flags of a task: the first four are static (set while tasks are added;
 * EXTERNAL and MARKED may also be set per copy after engine_replicate), the
 * others are the state of one copy during the run. A copy's own flags share
 * its 16-bit state word with its predecessor count (bits 0..10), so they sit
 * in bits 11..15 and a task's flags use the same bits. */
enum {
    F_JOINED = 1u << 0,    /* ends with its partner (link = partner) */
    F_JOINER = 1u << 1,    /* another task is joined to this one (link = joiner) */
    F_EXTERNAL = 1u << 11, /* duration decided by engine_task_finish */
    F_MARKED = 1u << 12,   /* hooks are called for it (engine_hooks.only_marked) */
    F_STARTED = 1u << 13,
    F_DONE = 1u << 14,
    F_ENDING = 1u << 15 /* an end event is queued */
};

#define TIMER_BIT 0x80000000u
#define MAX_TASKS 0x7fffffffu

/* What every copy of a task shares (engine_replicate makes copies without
 * copying this): ids in it (next, succ0, edges, link) are task indices, and
 * copy c of task index i is the task id i x copies + c, on stream
 * stream + c x copy_streams, of rank sinfo[stream].rank + c x copy_ranks. */
typedef struct {
    int64_t dur_ns;      /* fixed duration */
    uint32_t next;       /* next task in the same stream */
    uint32_t succ0;      /* first successor (most tasks have at most one) */
    uint32_t first_edge; /* further successors (edge list) */
    uint32_t tag;
    int32_t mb;
    uint32_t stream; /* global stream index rank x spr + k, of copy 0 (see sinfo) */
    uint32_t link;   /* join partner / joiner */
    uint16_t npred;  /* predecessors (joins included) */
    uint16_t flags;  /* static flags */
} task;

/* The run state of one copy in 16 bits: predecessors not yet satisfied
 * (NPRED bits) and flags (the copy's own EXTERNAL / MARKED, and STARTED,
 * DONE, ENDING), 32 copies to a cache line. */
typedef uint16_t tstate;
#define NPRED ((uint16_t)ENGINE_MAX_PRED) /* the predecessor count's bits, below the flags */
_Static_assert((ENGINE_MAX_PRED & (ENGINE_MAX_PRED + 1)) == 0 && ENGINE_MAX_PRED < F_EXTERNAL,
               "ENGINE_MAX_PRED is a mask of the bits under the flags");

/* Times of one copy, valid once STARTED / DONE. */
typedef struct {
    int64_t start_ns, end_ns;
} ttime;

typedef struct {
    uint32_t to, next;
} edge;

/* A stream of one copy, during the run, in one word: the task index of the
 * next task to start (S_NONE if none) and S_BUSY while one of its tasks
 * runs. Streams are stored copy-interleaved: stream s of copy 0 (global
 * index rank x spr + k) and its copies sit at s x copies + c, side by side,
 * like the copies' tasks; one word each, 16 to a cache line. */
typedef uint32_t stream;
#define S_BUSY 0x80000000u
#define S_NONE 0x7fffffffu /* task indices are below MAX_TASKS, S_NONE */

static inline stream s_head(uint32_t task_index)
{
    return task_index == ENGINE_NO_TASK ? S_NONE : task_index;
}

/* Rank and index within it of a global stream (of copy 0). */
typedef struct {
    uint32_t rank, k;
} stream_info;

/* The event queue: a radix heap (Ahuja et al.; event times never precede
 * the current time) on base-256 digits. Bucket 0 holds the events at
 * `last`, the time of the latest pop, in push order; bucket 256 L + d
 * (d >= 1) the events whose highest base-256 digit that differs from last's
 * is digit L, of value d there (greater than last's, since times are >=
 * last). Bucket order is time order: a bucket's events all precede those of
 * any later bucket. A pop takes bucket 0's next event or, once bucket 0 is
 * drained, makes the earliest time of the first non-empty bucket the new
 * last and moves that bucket's events, in order, to the buckets below it
 * (all empty). The bucket of a time is a function of the time and last, so
 * the events of one time always share a bucket, in push order: events run in
 * (time, push order). A push is a few instructions; each event moves down at
 * most 7 times (8 digits), in practice about once.
 *
 * Runs: the end of copy c of a task pushed right after the end of copy c - 1
 * of the same task at the same time (no event of that time between them)
 * extends that event into a run of copies, which a pop hands out whole and
 * engine_run ends in copy order: the order the single events would have run
 * in, since whatever ending one of them pushes at that time comes after the
 * rest. Copies in lockstep (the members of a collective, finished together;
 * the compute that follows it) thus take one event through the queue. */
#define RUN_SHIFT    20 /* copies < 2^20 (ranks <= 2^20) */
#define COPY_MASK    ((1u << RUN_SHIFT) - 1)
#define RUN_MORE_MAX ((1u << (32 - RUN_SHIFT)) - 1) /* further copies one event holds */
typedef struct {
    int64_t t_ns;
    uint32_t what; /* task index, or TIMER_BIT | timer index */
    uint32_t copy; /* the task's (first) copy, low RUN_SHIFT bits; further copies of the run above */
} event;

typedef struct {
    event *ev;
    uint32_t n, cap;
} rbucket;

#define RQ_DIGIT_BITS 8
#define RQ_BUCKETS    (64 / RQ_DIGIT_BITS << RQ_DIGIT_BITS) /* 2048 */
#define RQ_WORDS      (RQ_BUCKETS / 64)
#define NONE          UINT32_MAX

typedef struct {
    int64_t last_ns; /* time of the last change of mask */
    uint32_t mask;   /* streams busy now */
} racct;

typedef struct {
    engine_timer_fn fn;
    void *ctx;
    uint32_t next_free; /* free-list link once fired */
} timer;

struct engine {
    int n_ranks, spr;
    engine_hooks hooks;
    uint32_t end_copies;   /* on_end for copies below it (hooks.on_end_copies, 0 -> all) */
    uint32_t start_copies; /* on_start for copies below it, external tasks on all (hooks.on_start_copies) */
    task *tasks;           /* shared by all copies */
    uint32_t n_tasks, cap_tasks;
    uint32_t copies;       /* engine_replicate's copies (1 without it) */
    uint32_t copy_streams; /* streams of one copy: the global stream of copy c is s + c x copy_streams */
    uint32_t copy_ranks;   /* ranks of one copy: copy c's rank is copy 0's + c x copy_ranks */
    stream_info *sinfo;    /* per global stream (n_ranks x spr) */
    uint32_t *tails;       /* per global stream: task index of the last task added (while adding) */
    tstate *state;         /* n_tasks x copies, once replicated or running */
    ttime *times;          /* n_tasks x keep_times (copy c < keep_times of task index i at
                           i x keep_times + c), during the run */
    uint32_t keep_times;   /* copies that keep their times (engine_keep_times) */
    edge *edges;
    uint32_t n_edges, cap_edges;
    stream *streams;
    rbucket rq[RQ_BUCKETS];     /* the event queue (see above) */
    uint32_t rq_head;           /* next event of bucket 0 */
    uint64_t rq_busy[RQ_WORDS]; /* bit k % 64 of word k / 64: bucket k >= 1 is not empty */
    uint64_t rq_words;          /* bit w: rq_busy[w] is not 0 */
    int64_t rq_last_ns;         /* `last` of the queue */
    timer *timers;
    uint32_t n_timers, cap_timers, timer_free;
    int64_t now_ns, makespan_ns;
    uint64_t n_events;
    int64_t *busy_ns; /* n_ranks x (1 << spr) */
    uint32_t n_acct;  /* ranks 0..n_acct-1 are accounted (engine_account_ranks) */
    racct *acct;      /* per rank: busy streams now, since when */
    bool ran;
    int status; /* first error inside hooks/finish during run */
    ts_err *run_err;
};

static int grow(void **p, size_t elem, uint32_t *cap, uint32_t need)
{
    if (need <= *cap)
        return TS_OK;
    size_t nc = *cap ? *cap : 64;
    while (nc < need)
        nc *= 2;
    if (nc > MAX_TASKS)
        nc = MAX_TASKS;
    void *q = realloc(*p, nc * elem);
    if (!q)
        return TS_ENOMEM;
    *p = q;
    *cap = (uint32_t)nc;
    return TS_OK;
}

int engine_create(int n_ranks, int streams_per_rank, const engine_hooks *hooks, engine **out, ts_err *err)
{
    *out = NULL;
    if (n_ranks < 1 || n_ranks > (1 << 20))
        return err_set(err, TS_EINVAL, "engine: %d ranks; valid: 1..%d", n_ranks, 1 << 20);
    if (streams_per_rank < 1 || streams_per_rank > ENGINE_MAX_STREAMS_PER_RANK)
        return err_set(err, TS_EINVAL, "engine: %d streams per rank; valid: 1..%d", streams_per_rank,
                       ENGINE_MAX_STREAMS_PER_RANK);
    engine *e = calloc(1, sizeof *e);
    if (!e)
        return err_set(err, TS_ENOMEM, "engine: out of memory");
    e->n_ranks = n_ranks;
    e->n_acct = (uint32_t)n_ranks;
    e->timer_free = NONE;
    e->copies = 1;
    e->keep_times = 1;
    e->spr = streams_per_rank;
    if (hooks)
        e->hooks = *hooks;
    e->end_copies = e->hooks.on_end_copies ? e->hooks.on_end_copies : UINT32_MAX;
    e->start_copies = e->hooks.on_start_copies ? e->hooks.on_start_copies : UINT32_MAX;
    size_t ns = (size_t)n_ranks * (size_t)streams_per_rank;
    e->streams = malloc(ns * sizeof *e->streams);
    e->sinfo = malloc(ns * sizeof *e->sinfo);
    e->tails = malloc(ns * sizeof *e->tails);
    e->busy_ns = calloc((size_t)n_ranks << streams_per_rank, sizeof *e->busy_ns);
    e->acct = calloc((size_t)n_ranks, sizeof *e->acct);
    if (!e->streams || !e->sinfo || !e->tails || !e->busy_ns || !e->acct) {
        engine_free(e);
        return err_set(err, TS_ENOMEM, "engine: out of memory for %d ranks", n_ranks);
    }
    for (size_t i = 0; i < ns; i++) {
        e->streams[i] = S_NONE;
        e->tails[i] = ENGINE_NO_TASK;
        e->sinfo[i] = (stream_info){(uint32_t)(i / (size_t)streams_per_rank), (uint32_t)(i % (size_t)streams_per_rank)};
    }
    e->copy_streams = (uint32_t)ns;
    e->copy_ranks = (uint32_t)n_ranks;
    *out = e;
    return TS_OK;
}

void engine_free(engine *e)
{
    if (!e)
        return;
    free(e->tasks);
    free(e->state);
    free(e->times);
    free(e->edges);
    free(e->streams);
    free(e->sinfo);
    free(e->tails);
    for (int k = 0; k < RQ_BUCKETS; k++)
        free(e->rq[k].ev);
    free(e->timers);
    free(e->busy_ns);
    free(e->acct);
    free(e);
}

int engine_reserve(engine *e, uint32_t n_tasks, uint32_t n_edges, ts_err *err)
{
    if (grow((void **)&e->tasks, sizeof *e->tasks, &e->cap_tasks, n_tasks) ||
        grow((void **)&e->edges, sizeof *e->edges, &e->cap_edges, n_edges))
        return err_set(err, TS_ENOMEM, "engine: out of memory reserving %u tasks", n_tasks);
    return TS_OK;
}

int engine_task_add(engine *e, int rank, int stream_idx, int64_t dur_ns, uint32_t tag, int32_t mb, engine_task_id *out,
                    ts_err *err)
{
    if (e->ran || e->copies > 1)
        return err_set(err, TS_ESTATE, "engine: task added after engine_%s", e->ran ? "run" : "replicate");
    if (rank < 0 || rank >= e->n_ranks || stream_idx < 0 || stream_idx >= e->spr)
        return err_set(err, TS_EINVAL, "engine: task on rank %d stream %d; valid: rank 0..%d, stream 0..%d", rank,
                       stream_idx, e->n_ranks - 1, e->spr - 1);
    if (dur_ns < 0)
        return err_set(err, TS_EINVAL, "engine: negative duration %lld ns (tag %u)", (long long)dur_ns, tag);
    if (dur_ns > CKD_MAX_NS)
        return err_set(err, TS_EINVAL,
                       "engine: task (tag %u, micro-batch %d) lasts past 2^62 ns (146 years); valid "
                       "durations are 0 to 2^62 ns (check the bandwidths and TFLOP/s of the inputs)",
                       tag, (int)mb);
    if (e->n_tasks >= MAX_TASKS)
        return err_set(err, TS_ENOMEM, "engine: more than %u tasks", MAX_TASKS);
    if (e->n_tasks == e->cap_tasks && grow((void **)&e->tasks, sizeof *e->tasks, &e->cap_tasks, e->n_tasks + 1))
        return err_set(err, TS_ENOMEM, "engine: out of memory at %u tasks", e->n_tasks);
    uint32_t id = e->n_tasks++;
    uint32_t s = (uint32_t)rank * (uint32_t)e->spr + (uint32_t)stream_idx;
    e->tasks[id] = (task){.dur_ns = dur_ns,
                          .next = ENGINE_NO_TASK,
                          .succ0 = ENGINE_NO_TASK,
                          .first_edge = ENGINE_NO_TASK,
                          .tag = tag,
                          .mb = mb,
                          .stream = s,
                          .npred = 0,
                          .link = ENGINE_NO_TASK,
                          .flags = 0};
    if (e->tails[s] == ENGINE_NO_TASK)
        e->streams[s] = s_head(id);
    else
        e->tasks[e->tails[s]].next = id;
    e->tails[s] = id;
    if (out)
        *out = id;
    return TS_OK;
}

int engine_dep_add(engine *e, engine_task_id before, engine_task_id after, ts_err *err)
{
    if (e->ran || e->copies > 1)
        return err_set(err, TS_ESTATE, "engine: dependency added after engine_%s", e->ran ? "run" : "replicate");
    if (before >= e->n_tasks || after >= e->n_tasks || before == after)
        return err_set(err, TS_EINVAL, "engine: dependency %u -> %u; valid: two distinct tasks < %u", before, after,
                       e->n_tasks);
    if (e->tasks[after].npred == ENGINE_MAX_PRED)
        return err_set(err, TS_EINVAL, "engine: task %u has more than %u predecessors", after, ENGINE_MAX_PRED);
    if (e->tasks[before].succ0 == ENGINE_NO_TASK) {
        e->tasks[before].succ0 = after;
    } else {
        if (e->n_edges == e->cap_edges && grow((void **)&e->edges, sizeof *e->edges, &e->cap_edges, e->n_edges + 1))
            return err_set(err, TS_ENOMEM, "engine: out of memory at %u edges", e->n_edges);
        uint32_t k = e->n_edges++;
        e->edges[k] = (edge){after, e->tasks[before].first_edge};
        e->tasks[before].first_edge = k;
    }
    e->tasks[after].npred++;
    return TS_OK;
}

/* Is id a task (a copy, after engine_replicate)? */
static inline bool valid_id(const engine *e, engine_task_id id)
{
    return (uint64_t)id < (uint64_t)e->n_tasks * e->copies;
}

/* Give every copy its run state: the predecessor count of its task and no
 * flag of its own. */
static int state_alloc(engine *e)
{
    size_t n = (size_t)e->n_tasks * e->copies;
    e->state = malloc((n ? n : 1) * sizeof *e->state);
    if (!e->state)
        return TS_ENOMEM;
    for (uint32_t i = 0; i < e->n_tasks; i++)
        for (uint32_t c = 0; c < e->copies; c++)
            e->state[(size_t)i * e->copies + c] = e->tasks[i].npred;
    return TS_OK;
}

int engine_replicate(engine *e, uint32_t copies, int rank_stride, ts_err *err)
{
    if (e->ran || e->copies > 1)
        return err_set(err, TS_ESTATE, "engine: replicate after engine_%s", e->ran ? "run" : "replicate");
    if (copies < 1 || rank_stride < 1 || (uint64_t)copies * (uint64_t)rank_stride > (uint64_t)e->n_ranks)
        return err_set(err, TS_EINVAL, "engine: %u copies of %d ranks; the engine has %d ranks", copies, rank_stride,
                       e->n_ranks);
    uint32_t n = e->n_tasks, ss = (uint32_t)rank_stride * (uint32_t)e->spr;
    for (uint32_t i = 0; i < n; i++)
        if (e->tasks[i].stream >= ss)
            return err_set(err, TS_EINVAL, "engine: task %u is on rank %u, outside the %d ranks to replicate", i,
                           e->sinfo[e->tasks[i].stream].rank, rank_stride);
    if ((uint64_t)n * copies > MAX_TASKS)
        return err_set(err, TS_ENOMEM, "engine: %u copies of %u tasks exceed %u tasks", copies, n, MAX_TASKS);
    if (copies == 1) /* the tasks are their own single copy: nothing to lay out */
        return TS_OK;
    /* the tasks stay as they are (every copy reads them); copies get
     * streams (copy-interleaved) and run state */
    stream *st = malloc((size_t)ss * copies * sizeof *st);
    if (!st)
        return err_set(err, TS_ENOMEM, "engine: out of memory for %u copies of %u streams", copies, ss);
    for (uint32_t s = 0; s < ss; s++)
        for (uint32_t c = 0; c < copies; c++)
            st[(size_t)s * copies + c] = e->streams[s];
    e->copies = copies;
    if (state_alloc(e)) {
        e->copies = 1;
        free(st);
        return err_set(err, TS_ENOMEM, "engine: out of memory for %u copies of %u tasks", copies, n);
    }
    free(e->streams);
    e->streams = st;
    e->copy_streams = ss;
    e->copy_ranks = (uint32_t)rank_stride;
    e->keep_times = copies;
    return TS_OK;
}

/* Set static flags on task id's task (no copies yet), or own flags on the
 * copy id (after engine_replicate). */
static int set_flags(engine *e, engine_task_id id, uint16_t f, const char *what, ts_err *err)
{
    if (!valid_id(e, id) || e->ran)
        return err_set(err, TS_EINVAL, "engine: cannot %s task %u", what, id);
    if (e->state)
        e->state[id] |= f;
    else
        e->tasks[id].flags |= f;
    return TS_OK;
}

int engine_task_set_external(engine *e, engine_task_id id, ts_err *err)
{
    return set_flags(e, id, F_EXTERNAL | F_MARKED, "make external", err);
}

int engine_task_set_external_copies(engine *e, engine_task_id id, ts_err *err)
{
    if (!valid_id(e, id) || e->ran)
        return err_set(err, TS_EINVAL, "engine: cannot make task %u external", id);
    e->tasks[id / e->copies].flags |= F_EXTERNAL | F_MARKED;
    return TS_OK;
}

int engine_task_mark(engine *e, engine_task_id id, ts_err *err)
{
    return set_flags(e, id, F_MARKED, "mark", err);
}

uint32_t engine_copies(const engine *e)
{
    return e->copies;
}

int engine_account_ranks(engine *e, int n_ranks, ts_err *err)
{
    if (e->ran || n_ranks < 0 || n_ranks > e->n_ranks)
        return err_set(err, e->ran ? TS_ESTATE : TS_EINVAL, "engine: account %d ranks; valid: 0..%d, before engine_run",
                       n_ranks, e->n_ranks);
    e->n_acct = (uint32_t)n_ranks;
    return TS_OK;
}

int engine_keep_times(engine *e, uint32_t copies, ts_err *err)
{
    if (e->ran || copies < 1 || copies > e->copies)
        return err_set(err, e->ran ? TS_ESTATE : TS_EINVAL,
                       "engine: keep the times of %u copies; valid: 1..%u, before engine_run", copies, e->copies);
    e->keep_times = copies;
    return TS_OK;
}

int engine_task_join(engine *e, engine_task_id t, engine_task_id partner, ts_err *err)
{
    if (t >= e->n_tasks || partner >= e->n_tasks || t == partner || e->ran || e->copies > 1)
        return err_set(err, TS_EINVAL, "engine: cannot join task %u to %u", t, partner);
    task *a = &e->tasks[t], *p = &e->tasks[partner];
    if ((a->flags & (F_JOINED | F_JOINER)) || (p->flags & (F_JOINED | F_JOINER)))
        return err_set(err, TS_EINVAL, "engine: task %u or %u is already joined", t, partner);
    if (a->npred == ENGINE_MAX_PRED)
        return err_set(err, TS_EINVAL, "engine: task %u has more than %u predecessors", t, ENGINE_MAX_PRED);
    a->flags |= F_JOINED;
    a->link = partner;
    p->flags |= F_JOINER;
    p->link = t;
    a->npred++; /* released when the partner starts */
    return TS_OK;
}

/* ---------------------------------------------------------------- events */
static void fail(engine *e, int code, const char *what)
{
    if (e->status == TS_OK) {
        e->status = code;
        err_set(e->run_err, code, "engine: %s", what);
    }
}

/* Bucket of time t_ns (>= last >= 0, so bit 63 never differs): 0, or
 * 256 L + d with L the highest differing digit, d >= 1 its value. */
static inline unsigned rq_bucket(const engine *e, int64_t t_ns)
{
    uint64_t x = (uint64_t)t_ns ^ (uint64_t)e->rq_last_ns;
    if (!x)
        return 0;
    unsigned L = (63u - (unsigned)__builtin_clzll(x)) / RQ_DIGIT_BITS, sh = L * RQ_DIGIT_BITS;
    return L << RQ_DIGIT_BITS | (unsigned)((uint64_t)t_ns >> sh & ((1u << RQ_DIGIT_BITS) - 1));
}

/* Append v to bucket k, or extend the run of its last (unpopped) event
 * (see Runs above); bucket 0 has no busy bit (pops look at it first). */
static inline __attribute__((always_inline)) int rq_append(engine *e, unsigned k, event v)
{
    rbucket *B = &e->rq[k];
    if (B->n > (k ? 0 : e->rq_head) && !(v.what & TIMER_BIT)) {
        event *l = &B->ev[B->n - 1];
        uint32_t more = l->copy >> RUN_SHIFT, vmore = v.copy >> RUN_SHIFT;
        if (l->t_ns == v.t_ns && l->what == v.what && (l->copy & COPY_MASK) + more + 1 == (v.copy & COPY_MASK) &&
            more + vmore + 1 <= RUN_MORE_MAX) {
            l->copy += (vmore + 1) << RUN_SHIFT;
            return TS_OK;
        }
    }
    if (B->n == B->cap && grow((void **)&B->ev, sizeof *B->ev, &B->cap, B->n + 1))
        return TS_ENOMEM;
    B->ev[B->n++] = v;
    if (k) {
        e->rq_busy[k / 64] |= 1ull << (k % 64);
        e->rq_words |= 1ull << (k / 64);
    }
    return TS_OK;
}

/* TS_ENOMEM, or TS_EINVAL for a time before the queue's last (an end time
 * that overflowed int64: the radix heap needs times >= last >= 0). */
static inline __attribute__((always_inline)) int event_push(engine *e, int64_t t_ns, uint32_t what, uint32_t copy)
{
    if (t_ns < e->rq_last_ns)
        return TS_EINVAL;
    return rq_append(e, rq_bucket(e, t_ns), (event){t_ns, what, copy});
}

/* Take the next event: *v, and its time into now_ns; false if none is
 * left. */
static bool event_pop(engine *e, event *out)
{
    rbucket *B0 = &e->rq[0];
    if (e->rq_head == B0->n) { /* bucket 0 drained: refill it from the first non-empty bucket */
        B0->n = e->rq_head = 0;
        if (!e->rq_words)
            return false;
        unsigned w = (unsigned)__builtin_ctzll(e->rq_words);
        unsigned k = w * 64 + (unsigned)__builtin_ctzll(e->rq_busy[w]);
        rbucket *B = &e->rq[k];
        int64_t last = B->ev[0].t_ns;
        for (uint32_t j = 1; j < B->n; j++)
            if (B->ev[j].t_ns < last)
                last = B->ev[j].t_ns;
        e->rq_last_ns = last;
        uint32_t n = B->n;
        B->n = 0;
        if (!(e->rq_busy[w] &= ~(1ull << (k % 64))))
            e->rq_words &= ~(1ull << w);
        for (uint32_t j = 0; j < n; j++) /* in order, to the (empty) buckets below k */
            if (rq_append(e, rq_bucket(e, B->ev[j].t_ns), B->ev[j])) {
                fail(e, TS_ENOMEM, "out of memory for events");
                return false;
            }
    }
    event v = B0->ev[e->rq_head++];
    *out = v;
    e->now_ns = v.t_ns;
    return true;
}

/* ---------------------------------------------------------------- run */
/* Rank of copy c of copy 0's stream s. */
static inline uint32_t rank_of(const engine *e, uint32_t s, uint32_t c)
{
    return e->sinfo[s].rank + c * e->copy_ranks;
}

/* Add [last change, now) to the current mask of an accounted rank (nothing
 * if it is empty: a task that starts where the last one ended). */
static inline void mask_close(engine *e, uint32_t rank, int64_t now_ns)
{
    racct *a = &e->acct[rank];
    if (now_ns != a->last_ns) {
        e->busy_ns[((size_t)rank << e->spr) + a->mask] += now_ns - a->last_ns;
        a->last_ns = now_ns;
    }
}

/* Stream s (copy 0's index) of copy c starts or stops: close its rank's
 * mask interval and flip the stream's bit. */
static inline void mask_flip(engine *e, uint32_t s, uint32_t c)
{
    uint32_t rank = rank_of(e, s, c);
    if (rank >= e->n_acct)
        return;
    mask_close(e, rank, e->now_ns);
    e->acct[rank].mask ^= 1u << e->sinfo[s].k;
}

/* What the hooks are told of copy c of task t, on copy 0's stream s, with
 * flags f (the task's and the copy's). */
static inline engine_task_info task_info(const engine *e, const task *t, uint32_t s, uint32_t c, uint32_t f)
{
    return (engine_task_info){t->tag, t->mb, (int)rank_of(e, s, c), c, (f & F_EXTERNAL) != 0};
}

/* Queue the end of copy c of task index i (id `id`) at at_ns. */
static void push_end(engine *e, uint32_t i, uint32_t c, uint32_t id, int64_t at_ns)
{
    e->state[id] |= F_ENDING;
    int rc = event_push(e, at_ns, i, c);
    if (rc)
        fail(e, rc, rc == TS_ENOMEM ? "out of memory for events" : "a task's end time overflows 2^63 ns");
}

static inline void try_start(engine *e, uint32_t s, uint32_t c);

/* Start copy c of task index i, on its stream s (copy 0's index). */
static __attribute__((noinline)) void start(engine *e, uint32_t i, uint32_t s, uint32_t c)
{
    const task *t = &e->tasks[i];
    uint32_t C = e->copies, id = i * C + c;
    e->streams[s * C + c] = s_head(t->next) | S_BUSY;
    if (c < e->keep_times)
        e->times[i * e->keep_times + c].start_ns = e->now_ns;
    e->state[id] |= F_STARTED;
    /* what end() will touch: the state of the stream's next task and of
     * the first successor (copies of one task sit side by side) */
    if (t->next != ENGINE_NO_TASK)
        __builtin_prefetch(&e->state[t->next * C + c]);
    if (t->succ0 != ENGINE_NO_TASK)
        __builtin_prefetch(&e->state[t->succ0 * C + c]);
    mask_flip(e, s, c);
    uint32_t f = t->flags | e->state[id];
    if (e->hooks.on_start && (!e->hooks.only_marked || (f & F_MARKED)) && (c < e->start_copies || (f & F_EXTERNAL))) {
        engine_task_info ti = task_info(e, t, s, c, f);
        e->hooks.on_start(e->hooks.ctx, e, id, &ti, e->now_ns);
    }
    if (f & F_JOINED) {
        if (e->state[t->link * C + c] & F_DONE)
            push_end(e, i, c, id, e->now_ns);
    } else if (!(f & F_EXTERNAL)) {
        if (t->dur_ns > CKD_MAX_NS - e->now_ns)
            fail(e, TS_EINVAL,
                 "a task would end past 2^62 ns (146 years of simulated time); check the bandwidths, "
                 "TFLOP/s and --straggler factors against the ranges of docs/inputs.md");
        else
            push_end(e, i, c, id, e->now_ns + t->dur_ns);
    }
    if (f & F_JOINER) {
        uint32_t j = t->link * C + c;
        if ((--e->state[j] & NPRED) == 0)
            try_start(e, e->tasks[t->link].stream, c);
    }
}

/* Start the head of stream s (copy 0's index) of copy c if it can. */
static inline void try_start(engine *e, uint32_t s, uint32_t c)
{
    stream w = e->streams[s * e->copies + c];
    if (w < S_NONE /* not busy, a task next */ && (e->state[w * e->copies + c] & NPRED) == 0)
        start(e, w, s, c);
}

/* A successor (task index i, copy c) has one predecessor less. */
static inline void release(engine *e, uint32_t i, uint32_t c)
{
    if ((--e->state[i * e->copies + c] & NPRED) == 0)
        try_start(e, e->tasks[i].stream, c);
}

/* Copy c of task index i ends now. */
static void end(engine *e, uint32_t i, uint32_t c)
{
    const uint32_t C = e->copies, id = i * C + c; /* locals: the stores below could alias e's fields */
    const int64_t now = e->now_ns;
    const task *t = &e->tasks[i];
    const uint32_t s = t->stream;
    if (c < e->keep_times)
        e->times[i * e->keep_times + c].end_ns = now;
    tstate own = (tstate)((e->state[id] | F_DONE) & ~F_ENDING);
    e->state[id] = own;
    if (now > e->makespan_ns)
        e->makespan_ns = now;
    e->streams[s * C + c] &= ~S_BUSY;
    mask_flip(e, s, c);
    if (c < e->end_copies && e->hooks.on_end && (!e->hooks.only_marked || ((t->flags | own) & F_MARKED))) {
        engine_task_info ti = task_info(e, t, s, c, t->flags | own);
        e->hooks.on_end(e->hooks.ctx, e, id, &ti, now);
    }
    if (t->flags & F_JOINER) {
        uint32_t j = t->link * C + c;
        if ((e->state[j] & F_STARTED) && !(e->state[j] & (F_DONE | F_ENDING)))
            push_end(e, t->link, c, j, now);
    }
    if (t->succ0 != ENGINE_NO_TASK)
        release(e, t->succ0, c);
    for (uint32_t k = t->first_edge; k != ENGINE_NO_TASK; k = e->edges[k].next)
        release(e, e->edges[k].to, c);
    try_start(e, s, c);
}

int engine_task_finish(engine *e, engine_task_id id, int64_t at_ns, ts_err *err)
{
    if (!e->state || !valid_id(e, id))
        return err_set(err, TS_ESTATE, "engine: finish of unknown task %u", id);
    uint32_t i = id / e->copies, c = id - i * e->copies; /* one division: finishes come by the million */
    uint32_t f = e->tasks[i].flags | e->state[id];
    if (!(f & F_EXTERNAL) || !(f & F_STARTED) || (f & (F_DONE | F_ENDING)))
        return err_set(err, TS_ESTATE, "engine: task %u (tag %u) is not a running external task", id, e->tasks[i].tag);
    if (at_ns < e->now_ns)
        return err_set(err, TS_EINVAL, "engine: finish of task %u at %lld ns, before now (%lld ns)", id,
                       (long long)at_ns, (long long)e->now_ns);
    if (at_ns > CKD_MAX_NS)
        return err_set(err, TS_EINVAL,
                       "engine: task %u (tag %u, micro-batch %d) would end past 2^62 ns (146 years of "
                       "simulated time); such a duration comes from an extreme bandwidth, "
                       "--degrade-link or --straggler factor (see docs/inputs.md for the valid ranges)",
                       id, e->tasks[i].tag, (int)e->tasks[i].mb);
    push_end(e, i, c, id, at_ns);
    return e->status == TS_OK ? TS_OK : err_set(err, e->status, "engine: task %u: no room for its end event", id);
}

int engine_timer_at(engine *e, int64_t at_ns, engine_timer_fn fn, void *ctx, ts_err *err)
{
    if (at_ns < e->now_ns || !fn)
        return err_set(err, TS_EINVAL, "engine: timer at %lld ns, before now (%lld ns) or without a function",
                       (long long)at_ns, (long long)e->now_ns);
    uint32_t k = e->timer_free;
    if (k != NONE) {
        e->timer_free = e->timers[k].next_free;
    } else {
        if (e->n_timers >= MAX_TASKS || grow((void **)&e->timers, sizeof *e->timers, &e->cap_timers, e->n_timers + 1))
            return err_set(err, TS_ENOMEM, "engine: out of memory for timers");
        k = e->n_timers++;
    }
    e->timers[k] = (timer){fn, ctx, NONE};
    if (event_push(e, at_ns, TIMER_BIT | k, 0)) {
        e->timers[k].next_free = e->timer_free;
        e->timer_free = k;
        return err_set(err, TS_ENOMEM, "engine: out of memory for events");
    }
    return TS_OK;
}

int engine_run(engine *e, ts_err *err)
{
    if (e->ran)
        return err_set(err, TS_ESTATE, "engine: engine_run called twice");
    size_t n = (size_t)e->n_tasks * e->copies, nt = (size_t)e->n_tasks * e->keep_times;
    if ((!e->state && state_alloc(e)) || !(e->times = malloc((nt ? nt : 1) * sizeof *e->times)))
        return err_set(err, TS_ENOMEM, "engine: out of memory for the run state of %zu tasks", n);
    e->ran = true;
    e->status = TS_OK;
    e->run_err = err;
    /* in global stream order (ranks past the copies have no task) */
    for (uint32_t c = 0; c < e->copies; c++)
        for (uint32_t s = 0; s < e->copy_streams && e->status == TS_OK; s++)
            try_start(e, s, c);
    event v;
    while (e->status == TS_OK && event_pop(e, &v)) {
        uint32_t what = v.what;
        if (what & TIMER_BIT) {
            e->n_events++;
            uint32_t k = what & ~TIMER_BIT;
            timer tm = e->timers[k];
            e->timers[k].next_free = e->timer_free; /* free before it runs: it may add timers */
            e->timer_free = k;
            tm.fn(tm.ctx, e, e->now_ns);
        } else { /* a run of copies (one event each in the count) */
            uint32_t c = v.copy & COPY_MASK, last = c + (v.copy >> RUN_SHIFT);
            for (; c <= last && e->status == TS_OK; c++) {
                e->n_events++;
                end(e, what, c);
            }
        }
    }
    e->run_err = NULL;
    if (e->status != TS_OK)
        return e->status;
    e->now_ns = e->makespan_ns;
    for (uint32_t r = 0; r < e->n_acct; r++)
        mask_close(e, r, e->makespan_ns);
    for (size_t id = 0; id < n; id++) {
        if (e->state[id] & F_DONE)
            continue;
        uint32_t i = (uint32_t)(id / e->copies), c = (uint32_t)(id % e->copies), s = e->tasks[i].stream;
        return err_set(err, TS_ESTATE,
                       "engine: task %zu (rank %u, stream %u, tag %u, micro-batch %d) never %s: "
                       "a dependency cycle or a schedule whose sends and receives do not match",
                       id, rank_of(e, s, c), e->sinfo[s].k, e->tasks[i].tag, e->tasks[i].mb,
                       (e->state[id] & F_STARTED) ? "finished" : "started");
    }
    return TS_OK;
}

/* ---------------------------------------------------------------- queries */
uint32_t engine_task_count(const engine *e)
{
    return e->n_tasks * e->copies;
}
int engine_n_ranks(const engine *e)
{
    return e->n_ranks;
}
int engine_streams_per_rank(const engine *e)
{
    return e->spr;
}
int64_t engine_now_ns(const engine *e)
{
    return e->now_ns;
}
int64_t engine_makespan_ns(const engine *e)
{
    return e->makespan_ns;
}
uint64_t engine_events(const engine *e)
{
    return e->n_events;
}

/* The kept times of copy id, NULL if it has none. */
static const ttime *times_of(const engine *e, engine_task_id id)
{
    uint32_t i = id / e->copies, c = id - i * e->copies;
    return c < e->keep_times ? &e->times[(size_t)i * e->keep_times + c] : NULL;
}

int64_t engine_task_start_ns(const engine *e, engine_task_id id)
{
    const ttime *tt = e->ran && valid_id(e, id) && (e->state[id] & F_STARTED) ? times_of(e, id) : NULL;
    return tt ? tt->start_ns : -1;
}

int64_t engine_task_end_ns(const engine *e, engine_task_id id)
{
    const ttime *tt = e->ran && valid_id(e, id) && (e->state[id] & F_DONE) ? times_of(e, id) : NULL;
    return tt ? tt->end_ns : -1;
}

uint32_t engine_task_tag(const engine *e, engine_task_id id)
{
    return e->tasks[id / e->copies].tag;
}
int32_t engine_task_mb(const engine *e, engine_task_id id)
{
    return e->tasks[id / e->copies].mb;
}
int engine_task_rank(const engine *e, engine_task_id id)
{
    uint32_t i = id / e->copies;
    return (int)rank_of(e, e->tasks[i].stream, id - i * e->copies);
}
int engine_task_stream(const engine *e, engine_task_id id)
{
    return (int)e->sinfo[e->tasks[id / e->copies].stream].k;
}

int64_t engine_busy_mask_ns(const engine *e, int rank, unsigned mask)
{
    if (rank < 0 || rank >= e->n_ranks || mask >= (1u << e->spr))
        return 0;
    if ((uint32_t)rank >= e->n_acct)
        return -1;
    return e->busy_ns[((size_t)rank << e->spr) + mask];
}
