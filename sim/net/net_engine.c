/* net_engine — see net_engine.h. */
#include "sim/net/net_engine.h"

#include "sim/util/ckd.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/net/net_rdv.h"
#include "sim/util/grow.h"

/* A collective (or send) in flight: the engine tasks it ends. */
typedef struct {
    engine_task_id *tasks;
    int n, cap, need; /* need: members expected (full mode) */
    int leader;       /* global rank of the group's first member */
    double bytes2;    /* expert-data-parallel bytes still to move after this collective (0: none) */
    int64_t lat2;     /* their NCCL latency */
    int left;         /* expert-data-parallel collectives in flight */
    uint8_t coll2;    /* their kind */
    uint8_t dim;
    uint32_t tag;
    int32_t mb;
    int used;
} inst_t;

/* Plans of the requests a group (or a rank's sends) made, by what varies
 * between them: for a given group the GPUs, flow key and algorithm follow
 * from the kind and the peer. Kept per group (per sending rank), indexed
 * by it: the groups' starts come in group order, so the lookups walk these
 * caches nearly in memory order (a hash table over all of them measured
 * slower: each lookup a cache miss). */
#define PLAN_CACHE 6
typedef struct {
    const net_plan *plan;
    double bytes;
    int peer_pp;
    uint8_t coll;
} plan_ent;
typedef struct {
    plan_ent e[PLAN_CACHE];
    int n;
} plan_cache;

static const net_plan *cache_find(const plan_cache *c, uint8_t coll, int peer_pp, double bytes)
{
    for (int k = 0; k < c->n; k++)
        if (c->e[k].coll == coll && c->e[k].peer_pp == peer_pp && c->e[k].bytes == bytes)
            return c->e[k].plan;
    return NULL;
}

static void cache_put(plan_cache *c, uint8_t coll, int peer_pp, double bytes, const net_plan *plan)
{
    if (c->n < PLAN_CACHE)
        c->e[c->n++] = (plan_ent){plan, bytes, peer_pp, coll};
}

/* Group kinds (net_place.h's NET_PLACE_*): tensor-parallel, data-parallel,
 * expert-parallel, expert-data-parallel (GK_EDP), expert-tensor-parallel,
 * expert tensor-and-model-parallel, and context parallelism's all-to-all
 * and ring levels (the arrays below are indexed by gi(dim)). */
#define NET_GROUPS NET_PLACE_KINDS
#define GK_EDP     NET_PLACE_EDP
static inline int gi(int dim)
{
    return dim == NET_DIM_EP ? NET_PLACE_EP : dim;
}

/* What the hooks need of an engine rank, computed once. */
typedef struct {
    int global, gpu;          /* global rank and its GPU */
    int tp, dp, pp;           /* its coordinates */
    int leader[NET_GROUPS];   /* per group kind: global rank of the group's first member */
    uint64_t key[NET_GROUPS]; /* per group kind: ECMP flow key of the group's communicator */
} rank_info;

struct net_engine {
    const net_graph *g;
    const net_place *pl;
    net_engine_opts opts;
    net_step_fn fn;
    void *fn_ctx;
    net_sim *sim;
    engine *e;
    int n_ranks;
    double *factor;         /* per engine rank */
    rank_info *ri;          /* per engine rank */
    int *rgroup;            /* per engine rank, per group kind: index of its group in open and
                                     gplans[kind] (apart from rank_info: dense, it stays in cache) */
    int gsize[NET_GROUPS];  /* per group kind: members of a group; 0: a kind not in use (TP and DP
                               always, the expert kinds with net_place.experts, the CP ones with cp > 1) */
    int *ggpus[NET_GROUPS]; /* per group kind: every group's GPUs, in group-rank order */
    int *goff[NET_GROUPS];  /* per group kind, per global rank: offset of its group in ggpus */
    int *active_comm;       /* per engine rank: driven comm tasks in flight */
    net_step_desc *desc;    /* per tag */
    uint8_t *have_desc;
    uint32_t n_desc;
    inst_t *inst;
    int n_inst, cap_inst;
    int *free_inst;
    int n_free;
    net_rdv open;                   /* (group, dim, tag, micro-batch) -> the instance some but not
                      all members have started (full mode) */
    plan_cache *gplans[NET_GROUPS]; /* per group kind, per group: its plans */
    plan_cache *splans;             /* per engine rank: its sends' plans */
    int64_t *tq;
    int n_tq, cap_tq; /* pending engine timer times (min-heap) */
    int *gpus;        /* scratch: group GPUs */
    int rc;           /* first hook error */
    ts_err err;
    net_engine_stats st;
};

static void coll_done(void *ctx, uint64_t tag, int64_t t_ns);
static uint64_t key_hash(int dim, int leader, uint32_t tag, int32_t mb);
static int global_of(const net_engine *ne, int engine_rank);

/* Fill ne->ri, ne->ggpus and ne->goff (ne->n_ranks, ne->gsize and ne->pl
 * set): each group listed once, by its leader. */
static int rank_tables(net_engine *ne)
{
    const net_place *pl = ne->pl;
    int n = pl->n_ranks;
    ne->ri = calloc((size_t)ne->n_ranks, sizeof *ne->ri);
    ne->rgroup = malloc(sizeof *ne->rgroup * NET_GROUPS * (size_t)ne->n_ranks);
    int *ranks = calloc((size_t)n, sizeof *ranks);
    if (!ne->ri || !ne->rgroup || !ranks) {
        free(ranks);
        return TS_ENOMEM;
    }
    for (int k = 0; k < NET_GROUPS; k++) {
        if (!ne->gsize[k])
            continue;
        ne->ggpus[k] = malloc(sizeof *ne->ggpus[k] * (size_t)n);
        ne->goff[k] = malloc(sizeof *ne->goff[k] * (size_t)n);
        if (!ne->ggpus[k] || !ne->goff[k]) {
            free(ranks);
            return TS_ENOMEM;
        }
        int next = 0;
        for (int r = 0; r < n; r++) { /* leaders in rank order */
            if (net_place_group_leader(pl, k, r) != r)
                continue;
            int m = net_place_group_ranks(pl, k, r, ranks);
            ne->goff[k][r] = next;
            for (int i = 0; i < m; i++)
                ne->ggpus[k][next + i] = pl->gpu_of_rank[ranks[i]];
            next += m;
        }
        for (int r = 0; r < n; r++)
            ne->goff[k][r] = ne->goff[k][net_place_group_leader(pl, k, r)];
    }
    for (int er = 0; er < ne->n_ranks; er++) {
        rank_info *ri = &ne->ri[er];
        ri->global = global_of(ne, er);
        ri->gpu = pl->gpu_of_rank[ri->global];
        net_place_coords(pl, ri->global, &ri->tp, &ri->dp, &ri->pp);
        for (int k = 0; k < NET_GROUPS; k++) {
            if (!ne->gsize[k])
                continue;
            ri->leader[k] = net_place_group_leader(pl, k, ri->global);
            ri->key[k] = key_hash(k, ri->leader[k], 0u, 0);
            ne->rgroup[NET_GROUPS * er + k] = ne->goff[k][ri->global] / ne->gsize[k];
        }
    }
    free(ranks);
    return TS_OK;
}

static int fail(net_engine *ne, int rc)
{
    if (ne->rc == TS_OK && rc != TS_OK)
        ne->rc = rc;
    return rc;
}

int net_engine_new(const net_graph *g, const net_place *pl, const net_engine_opts *opts, net_step_fn fn, void *fn_ctx,
                   net_engine **out, ts_err *err)
{
    int rc;
    if (!(opts->comm_compute_slowdown >= 0))
        return err_set(err, TS_EINVAL, "comm/compute slowdown %g must be >= 0", opts->comm_compute_slowdown);
    net_engine *ne = calloc(1, sizeof *ne);
    if (!ne)
        return err_set(err, TS_ENOMEM, "net_engine: out of memory");
    ne->g = g;
    ne->pl = pl;
    ne->opts = *opts;
    ne->fn = fn;
    ne->fn_ctx = fn_ctx;
    ne->n_ranks = opts->full ? pl->n_ranks : pl->size[NET_DIM_PP];
    ne->gsize[0] = pl->size[NET_DIM_TP];
    ne->gsize[1] = pl->size[NET_DIM_DP];
    for (int k = 0; k < NET_GROUPS; k++) { /* a dense model: no expert groups to build; no CP ones without CP */
        bool expert = k == NET_PLACE_EP || k == NET_PLACE_EDP || k == NET_PLACE_ETP || k == NET_PLACE_TPEP;
        bool cp = k == NET_PLACE_CPA || k == NET_PLACE_CPR;
        if ((!expert || pl->experts) && (!cp || pl->cp > 1))
            ne->gsize[k] = net_place_group_size(pl, k);
    }
    int most = 1;
    bool plans = true;
    for (int k = 0; k < NET_GROUPS; k++) {
        if (!ne->gsize[k])
            continue;
        most = ne->gsize[k] > most ? ne->gsize[k] : most;
        ne->gplans[k] = calloc((size_t)(pl->n_ranks / ne->gsize[k]), sizeof *ne->gplans[k]);
        plans = plans && ne->gplans[k];
    }
    ne->factor = malloc(sizeof *ne->factor * (size_t)ne->n_ranks);
    ne->active_comm = calloc((size_t)ne->n_ranks, sizeof *ne->active_comm);
    ne->gpus = malloc(sizeof *ne->gpus * (size_t)(2 * most + 2));
    ne->splans = calloc((size_t)ne->n_ranks, sizeof *ne->splans);
    net_rdv_init(&ne->open);
    if (!ne->factor || !ne->active_comm || !ne->gpus || !plans || !ne->splans) {
        net_engine_free(ne);
        return err_set(err, TS_ENOMEM, "net_engine: out of memory");
    }
    for (int r = 0; r < ne->n_ranks; r++)
        ne->factor[r] = 1.0;
    if (rank_tables(ne)) {
        net_engine_free(ne);
        return err_set(err, TS_ENOMEM, "net_engine: out of memory");
    }
    if ((rc = net_sim_new(g, coll_done, ne, &ne->sim, err))) {
        net_engine_free(ne);
        return rc;
    }
    *out = ne;
    return TS_OK;
}

void net_engine_free(net_engine *ne)
{
    if (!ne)
        return;
    for (int i = 0; i < ne->n_inst; i++)
        free(ne->inst[i].tasks);
    free(ne->inst);
    free(ne->free_inst);
    net_rdv_free(&ne->open);
    for (int k = 0; k < NET_GROUPS; k++)
        free(ne->gplans[k]);
    free(ne->splans);
    free(ne->tq);
    free(ne->gpus);
    free(ne->desc);
    free(ne->have_desc);
    free(ne->factor);
    free(ne->ri);
    free(ne->rgroup);
    for (int k = 0; k < NET_GROUPS; k++) {
        free(ne->ggpus[k]);
        free(ne->goff[k]);
    }
    free(ne->active_comm);
    net_sim_free(ne->sim);
    free(ne);
}

int net_engine_n_ranks(const net_engine *ne)
{
    return ne->n_ranks;
}

int net_engine_set_compute_factor(net_engine *ne, int engine_rank, double factor, ts_err *err)
{
    if (engine_rank < 0 || engine_rank >= ne->n_ranks)
        return err_set(err, TS_EINVAL, "rank %d not in 0..%d", engine_rank, ne->n_ranks - 1);
    if (!(factor > 0))
        return err_set(err, TS_EINVAL, "compute factor %g of rank %d must be > 0", factor, engine_rank);
    if (!ne->opts.full && factor != 1.0)
        return err_set(err, TS_EINVAL,
                       "a slow rank (rank %d x %g) needs --full: the default mode simulates "
                       "interchangeable ranks once",
                       engine_rank, factor);
    ne->factor[engine_rank] = factor;
    return TS_OK;
}

/* get_desc's slow path: grow the table, ask fn, check the answer. */
static const net_step_desc *fill_desc(net_engine *ne, uint32_t tag, ts_err *err)
{
    if (tag >= ne->n_desc) {
        uint32_t n = ne->n_desc ? ne->n_desc : 256;
        while (n <= tag)
            n *= 2;
        net_step_desc *d = realloc(ne->desc, sizeof *d * n);
        if (!d) {
            err_set(err, TS_ENOMEM, "net_engine: out of memory");
            return NULL;
        }
        ne->desc = d;
        uint8_t *h = realloc(ne->have_desc, n);
        if (!h) {
            err_set(err, TS_ENOMEM, "net_engine: out of memory");
            return NULL;
        }
        memset(h + ne->n_desc, 0, n - ne->n_desc);
        ne->have_desc = h;
        ne->n_desc = n;
    }
    if (!ne->have_desc[tag]) {
        memset(&ne->desc[tag], 0, sizeof ne->desc[tag]);
        if (ne->fn(ne->fn_ctx, tag, &ne->desc[tag], err))
            return NULL;
        const net_step_desc *d = &ne->desc[tag];
        if (d->role == NET_STEP_COLL && (d->dim == NET_DIM_PP || d->dim >= NET_GROUPS)) {
            err_set(err, TS_EINVAL,
                    "net_engine: step %u: collective along dimension %d (valid: tp, dp, ep, etp, tp-ep, cp levels, "
                    "tp-cp, stage)",
                    tag, d->dim);
            return NULL;
        }
        if (d->role == NET_STEP_COLL && !ne->gsize[gi(d->dim)]) {
            err_set(err, TS_EINVAL,
                    "net_engine: step %u: a collective along dimension %d, whose groups the placement lacks (%s)", tag,
                    d->dim,
                    d->dim == NET_DIM_CPA || d->dim == NET_DIM_CPR ? "context parallelism: net_place_set_cp"
                                                                   : "without expert groups: net_place_set_experts");
            return NULL;
        }
        bool a2a = d->role == NET_STEP_COLL && (d->coll == NET_COLL_ALLTOALL || d->coll == NET_COLL_DEEPEP);
        bool a2a_dim = d->dim == NET_DIM_EP || (d->dim == NET_DIM_CPA && d->coll == NET_COLL_ALLTOALL);
        bool ring_step = d->role == NET_STEP_COLL && d->coll == NET_COLL_RING_STEP;
        if (d->role == NET_STEP_COLL && (a2a != a2a_dim || (ring_step && d->dim != NET_DIM_CPR))) {
            err_set(err, TS_EINVAL,
                    "net_engine: step %u: collective kind %d along dimension %d (all-to-alls run over the "
                    "expert-parallel group or context parallelism's all-to-all level, ring steps over its ring "
                    "level, nothing else does)",
                    tag, d->coll, d->dim);
            return NULL;
        }
        if ((d->role == NET_STEP_SEND || (d->role == NET_STEP_COLL && d->coll == NET_COLL_P2P_SCATTER)) &&
            (d->peer_pp < 0 || d->peer_pp >= ne->pl->size[NET_DIM_PP])) {
            err_set(err, TS_EINVAL, "net_engine: step %u: send to pipeline rank %d (valid 0..%d)", tag, d->peer_pp,
                    ne->pl->size[NET_DIM_PP] - 1);
            return NULL;
        }
        ne->have_desc[tag] = 1;
    }
    return &ne->desc[tag];
}

/* The descriptor of tag, asking fn the first time; NULL (err set) on error. */
static inline const net_step_desc *get_desc(net_engine *ne, uint32_t tag, ts_err *err)
{
    return tag < ne->n_desc && ne->have_desc[tag] ? &ne->desc[tag] : fill_desc(ne, tag, err);
}

int net_engine_attach(net_engine *ne, engine *e, ts_err *err)
{
    if (engine_n_ranks(e) != ne->n_ranks)
        return err_set(err, TS_EINVAL, "net_engine: engine has %d ranks, the %s mode needs %d", engine_n_ranks(e),
                       ne->opts.full ? "full" : "symmetric", ne->n_ranks);
    ne->e = e;
    /* copy 0 of each task (engine_replicate) stands for all its copies,
     * but for compute whose scaling differs from rank to rank */
    uint32_t n = engine_task_count(e), C = engine_copies(e);
    bool scaled = false; /* some rank's compute is scaled */
    for (int r = 0; r < ne->n_ranks && !scaled; r++)
        scaled = ne->factor[r] != 1.0;
    for (uint32_t id = 0; id < n; id += C) {
        uint32_t tag = engine_task_tag(e, id);
        const net_step_desc *d = get_desc(ne, tag, err);
        if (!d)
            return err->code ? err->code : TS_ESTATE;
        int rc = TS_OK;
        bool all = d->role == NET_STEP_COLL || d->role == NET_STEP_SEND ||
                   (d->role == NET_STEP_COMPUTE && ne->opts.comm_compute_slowdown > 0);
        if (all) {
            rc = engine_task_set_external_copies(e, id, err);
        } else if (d->role == NET_STEP_COMPUTE && scaled) {
            for (uint32_t c = 0; c < C && !rc; c++)
                if (ne->factor[engine_task_rank(e, id + c)] != 1.0)
                    rc = engine_task_set_external(e, id + c, err);
        }
        if (rc)
            return rc;
    }
    return TS_OK;
}

/* ------------------------------------------------------------ timers */

static void on_timer(void *ctx, engine *e, int64_t now);

static void tq_push(net_engine *ne, int64_t t)
{
    if (ne->n_tq == ne->cap_tq && grow_to_int((void **)&ne->tq, &ne->cap_tq, ne->n_tq + 1, 64, sizeof *ne->tq)) {
        fail(ne, err_set(&ne->err, TS_ENOMEM, "net_engine: out of memory"));
        return;
    }
    int i = ne->n_tq++;
    while (i > 0 && ne->tq[(i - 1) / 2] > t) {
        ne->tq[i] = ne->tq[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    ne->tq[i] = t;
}

static void tq_pop(net_engine *ne)
{
    int64_t x = ne->tq[--ne->n_tq];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= ne->n_tq)
            break;
        if (c + 1 < ne->n_tq && ne->tq[c + 1] < ne->tq[c])
            c++;
        if (ne->tq[c] >= x)
            break;
        ne->tq[i] = ne->tq[c];
        i = c;
    }
    if (ne->n_tq > 0)
        ne->tq[i] = x;
}

/* Make sure an engine timer fires at the network's next event. */
static void schedule(net_engine *ne, engine *e)
{
    int64_t t = net_sim_next_ns(ne->sim);
    if (t == NET_TIME_NEVER)
        return;
    if (ne->n_tq > 0 && ne->tq[0] <= t)
        return;
    if (fail(ne, engine_timer_at(e, t, on_timer, ne, &ne->err)))
        return;
    tq_push(ne, t);
}

static void on_timer(void *ctx, engine *e, int64_t now)
{
    net_engine *ne = ctx;
    while (ne->n_tq > 0 && ne->tq[0] <= now)
        tq_pop(ne);
    if (ne->rc)
        return;
    if (fail(ne, net_sim_advance(ne->sim, now, &ne->err)))
        return;
    schedule(ne, e);
}

/* ------------------------------------------------------------ instances */

static int inst_new(net_engine *ne)
{
    int i;
    if (ne->n_free > 0) {
        i = ne->free_inst[--ne->n_free];
    } else {
        if (ne->n_inst == ne->cap_inst) {
            int nc = ne->cap_inst ? ne->cap_inst * 2 : 64;
            inst_t *q = realloc(ne->inst, sizeof *q * (size_t)nc);
            if (!q)
                return -1;
            ne->inst = q;
            memset(ne->inst + ne->cap_inst, 0, sizeof *q * (size_t)(nc - ne->cap_inst));
            int *f = realloc(ne->free_inst, sizeof *f * (size_t)nc);
            if (!f)
                return -1;
            ne->free_inst = f;
            ne->cap_inst = nc;
        }
        i = ne->n_inst++;
    }
    ne->inst[i].n = 0;
    ne->inst[i].used = 1;
    return i;
}

static int inst_add(inst_t *in, engine_task_id id)
{
    if (in->n == in->cap && grow_to_int((void **)&in->tasks, &in->cap, in->n + 1, 4, sizeof *in->tasks))
        return TS_ENOMEM;
    in->tasks[in->n++] = id;
    return TS_OK;
}

static uint64_t key_hash(int dim, int leader, uint32_t tag, int32_t mb)
{
    uint64_t z = ((uint64_t)(uint32_t)leader << 32 | tag) ^ ((uint64_t)(uint32_t)mb * 0x9E3779B97F4A7C15ull) ^
                 (uint64_t)dim << 62;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Find (or create) the pending instance of engine rank `rank`'s group's
 * collective; *open gets its rendezvous slot when it waits for others
 * (need > 1; else NULL), to remove once every member has joined, with no
 * put or remove on the table in between (the slot stays valid until then,
 * and a second lookup is saved). */
static int pending(net_engine *ne, int rank, int dim, uint32_t tag, int32_t mb, int need, net_rdv_slot **open)
{
    net_rdv_slot *sl = NULL;
    net_rdv_key k;
    *open = NULL;
    if (need > 1) {
        k = (net_rdv_key){(uint64_t)(uint32_t)(NET_GROUPS * ne->rgroup[NET_GROUPS * rank + gi(dim)] + gi(dim)) << 32 |
                              tag,
                          (uint32_t)mb};
        if ((sl = net_rdv_find(&ne->open, k))) {
            *open = sl;
            return (int)sl->v.i;
        }
    }
    int i = inst_new(ne);
    if (i < 0)
        return -1;
    inst_t *in = &ne->inst[i];
    in->dim = (uint8_t)dim;
    in->leader = ne->ri[rank].leader[gi(dim)];
    in->tag = tag;
    in->mb = mb;
    in->need = need;
    if (need > 1) {
        if (net_rdv_put(&ne->open, k, &sl))
            return -1;
        sl->v.i = i;
        *open = sl;
    }
    return i;
}

static int start_edp(net_engine *ne, int ii, int64_t t_ns);

static void coll_done(void *ctx, uint64_t tag, int64_t t_ns)
{
    net_engine *ne = ctx;
    inst_t *in = &ne->inst[(int)tag];
    if (in->left > 0 && --in->left > 0)
        return;           /* other expert-data-parallel groups still move */
    if (in->bytes2 > 0) { /* the data-parallel part ended: the experts' part next */
        if (fail(ne, start_edp(ne, (int)tag, t_ns)))
            return;
        if (ne->inst[(int)tag].left > 0)
            return;
        in = &ne->inst[(int)tag];
    }
    for (int k = 0; k < in->n; k++)
        if (fail(ne, engine_task_finish(ne->e, in->tasks[k], t_ns, &ne->err)))
            break;
    in->used = 0;
    ne->free_inst[ne->n_free++] = (int)tag;
}

/* ------------------------------------------------------------ hooks */

static int global_of(const net_engine *ne, int engine_rank)
{
    int p = ne->pl->size[NET_DIM_PP], t = ne->pl->size[NET_DIM_TP];
    if (!ne->opts.full)
        return net_place_rank(ne->pl, 0, 0, engine_rank);
    int rep = engine_rank / p;
    return net_place_rank(ne->pl, rep % t, rep / t, engine_rank % p);
}

int net_engine_rank(const net_engine *ne, int tp, int dp, int pp)
{
    if (!ne->opts.full)
        return tp == 0 && dp == 0 ? pp : -1;
    return pp + ne->pl->size[NET_DIM_PP] * (tp + ne->pl->size[NET_DIM_TP] * dp);
}

/* The expert-data-parallel part of instance ii at t_ns: one collective of
 * in->bytes2 over each expert-data-parallel group of its members. */
static int start_edp(net_engine *ne, int ii, int64_t t_ns)
{
    inst_t *in = &ne->inst[ii];
    double bytes = in->bytes2;
    int64_t lat = in->lat2;
    uint8_t coll = in->coll2;
    in->bytes2 = 0;
    int n = in->n, groups = 0;
    for (int pass = 0; pass < 2; pass++) { /* count the distinct groups, then start them */
        for (int k = 0; k < n; k++) {
            in = &ne->inst[ii];
            int rank = engine_task_rank(ne->e, in->tasks[k]), g = ne->rgroup[NET_GROUPS * rank + GK_EDP], dup = 0;
            for (int j = 0; j < k && !dup; j++)
                dup = ne->rgroup[NET_GROUPS * engine_task_rank(ne->e, in->tasks[j]) + GK_EDP] == g;
            if (dup)
                continue;
            if (pass == 0) {
                groups++;
                continue;
            }
            plan_cache *pc = &ne->gplans[GK_EDP][g];
            const net_plan *plan = cache_find(pc, coll, -1, bytes);
            if (!plan) {
                const rank_info *ri = &ne->ri[rank];
                net_coll_req q = {.kind = (net_coll_kind)coll,
                                  .algo = coll == NET_COLL_ALLREDUCE ? ne->opts.algo : NET_ALGO_AUTO,
                                  .gpus = ne->ggpus[GK_EDP] + ne->goff[GK_EDP][ri->global],
                                  .n = ne->gsize[GK_EDP],
                                  .bytes = bytes,
                                  .flow_key = ri->key[GK_EDP]};
                int rc = net_sim_plan(ne->sim, &q, &plan, &ne->err);
                if (rc)
                    return rc;
                cache_put(pc, coll, -1, bytes, plan);
            }
            ne->st.collectives++;
            int rc = net_sim_start_plan(ne->sim, t_ns, plan, lat > 0 ? lat : -1, (uint64_t)ii, &ne->err);
            if (rc)
                return rc;
        }
        if (pass == 0)
            ne->inst[ii].left = groups;
    }
    return TS_OK;
}

static void start_coll(net_engine *ne, engine *e, int ii, const net_step_desc *d, int rank, int64_t now)
{
    inst_t *in = &ne->inst[ii];
    in->left = 0;
    in->bytes2 = d->dim == NET_DIM_DP && ne->gsize[GK_EDP] > 1 ? d->bytes_edp : 0;
    in->lat2 = d->lat_edp_ns;
    in->coll2 = d->coll;
    int k = gi(d->dim), peer_pp = d->coll == NET_COLL_P2P_SCATTER ? d->peer_pp : -1;
    if (d->coll == NET_COLL_ALLTOALL || d->coll == NET_COLL_DEEPEP) /* dispatch or combine: one plan each */
        peer_pp = d->hot_sends;
    plan_cache *pc = &ne->gplans[k][ne->rgroup[NET_GROUPS * rank + k]];
    const net_plan *plan = cache_find(pc, d->coll, peer_pp, d->bytes);
    if (!plan) {
        const rank_info *ri = &ne->ri[rank];
        int n = ne->gsize[k];
        const int *gpus = ne->ggpus[k] + ne->goff[k][ri->global];
        uint64_t key = ri->key[k];
        if (d->coll == NET_COLL_P2P_SCATTER) { /* the peer stage's group receives */
            int peer = net_place_rank(ne->pl, ri->tp, ri->dp, d->peer_pp);
            memcpy(ne->gpus, gpus, sizeof *gpus * (size_t)n);
            memcpy(ne->gpus + n, ne->ggpus[k] + ne->goff[k][peer], sizeof *gpus * (size_t)n);
            gpus = ne->gpus;
            n *= 2;
            key = key_hash(in->dim, in->leader, 1u + (uint32_t)d->peer_pp, 0);
        }
        /* ECMP key: the communicator (group, and the peer group of a scatter), the same on every call */
        net_coll_req q = {.kind = (net_coll_kind)d->coll,
                          .algo = ne->opts.algo,
                          .gpus = gpus,
                          .n = n,
                          .bytes = d->bytes,
                          .flow_key = key,
                          .hot = d->hot,
                          .hot_sends = d->hot_sends,
                          .rdma_bytes = d->rdma_bytes,
                          /* symmetric: the peers of the simulated rank (root) move alike */
                          .merge_peers = !ne->opts.full};
        if (d->coll != NET_COLL_ALLREDUCE)
            q.algo = NET_ALGO_AUTO;
        if (fail(ne, net_sim_plan(ne->sim, &q, &plan, &ne->err)))
            return;
        cache_put(pc, d->coll, peer_pp, d->bytes, plan);
    }
    ne->st.collectives++;
    if (fail(ne, net_sim_start_plan(ne->sim, now, plan, d->lat_ns > 0 ? d->lat_ns : -1, (uint64_t)ii, &ne->err)))
        return;
    schedule(ne, e);
}

void net_engine_task_started(net_engine *ne, engine *e, engine_task_id id, const engine_task_info *ti, int64_t now)
{
    if (ne->rc || !ti->external)
        return; /* attach() made external every task it drives */
    uint32_t tag = ti->tag;
    int rank = ti->rank;
    const net_step_desc *d = get_desc(ne, tag, &ne->err);
    if (!d) {
        fail(ne, ne->err.code ? ne->err.code : TS_ESTATE);
        return;
    }
    switch (d->role) {
    case NET_STEP_COMPUTE: {
        double f = ne->factor[rank];
        if (ne->opts.comm_compute_slowdown > 0 && ne->active_comm[rank] > 0)
            f *= 1 + ne->opts.comm_compute_slowdown;
        fail(ne, engine_task_finish(e, id, ckd_add_ns(now, ckd_ns((double)d->dur_ns * f)), &ne->err));
        return;
    }
    case NET_STEP_COLL: {
        if (ne->opts.comm_compute_slowdown > 0)
            ne->active_comm[rank]++;
        int need = ne->opts.full ? ne->gsize[gi(d->dim)] : 1;
        net_rdv_slot *open;
        int ii = pending(ne, rank, d->dim, tag, ti->mb, need, &open);
        if (ii < 0) {
            fail(ne, err_set(&ne->err, TS_ENOMEM, "net_engine: out of memory"));
            return;
        }
        if (fail(ne, inst_add(&ne->inst[ii], id)))
            return;
        if (ne->inst[ii].n < ne->inst[ii].need)
            return;
        if (need > 1) /* started: no longer pending */
            net_rdv_remove(&ne->open, open);
        start_coll(ne, e, ii, d, rank, now);
        return;
    }
    case NET_STEP_SEND: {
        if (ne->opts.comm_compute_slowdown > 0)
            ne->active_comm[rank]++;
        const rank_info *ri = &ne->ri[rank];
        int global = ri->global;
        int ii = inst_new(ne);
        if (ii < 0 || fail(ne, inst_add(&ne->inst[ii], id))) {
            fail(ne, err_set(&ne->err, TS_ENOMEM, "net_engine: out of memory"));
            return;
        }
        ne->inst[ii].leader = global;
        const net_plan *plan = cache_find(&ne->splans[rank], NET_COLL_P2P, d->peer_pp, d->bytes);
        if (!plan) {
            int pair[2] = {ri->gpu, ne->pl->gpu_of_rank[net_place_rank(ne->pl, ri->tp, ri->dp, d->peer_pp)]};
            net_coll_req q = {.kind = NET_COLL_P2P,
                              .algo = NET_ALGO_AUTO,
                              .gpus = pair,
                              .n = 2,
                              .bytes = d->bytes,
                              .flow_key = key_hash(3, global, (uint32_t)d->peer_pp, 0)};
            if (fail(ne, net_sim_plan(ne->sim, &q, &plan, &ne->err)))
                return;
            cache_put(&ne->splans[rank], NET_COLL_P2P, d->peer_pp, d->bytes, plan);
        }
        ne->st.p2p++;
        if (fail(ne, net_sim_start_plan(ne->sim, now, plan, -1, (uint64_t)ii, &ne->err)))
            return;
        schedule(ne, e);
        return;
    }
    default:
        return;
    }
}

void net_engine_task_ended(net_engine *ne, engine *e, engine_task_id id, const engine_task_info *ti, int64_t now)
{
    (void)e;
    (void)id;
    (void)now;
    /* active_comm is read only with a slowdown; it counts driven (external) comm */
    if (ne->opts.comm_compute_slowdown == 0 || !ti->external)
        return;
    uint32_t tag = ti->tag;
    int rank = ti->rank;
    if (tag < ne->n_desc && ne->have_desc[tag]) {
        uint8_t role = ne->desc[tag].role;
        if (role == NET_STEP_COLL || role == NET_STEP_SEND)
            ne->active_comm[rank]--;
    }
}

static void on_start(void *ctx, engine *e, engine_task_id id, const engine_task_info *ti, int64_t now)
{
    net_engine_task_started(ctx, e, id, ti, now);
}

static void on_end(void *ctx, engine *e, engine_task_id id, const engine_task_info *ti, int64_t now)
{
    net_engine_task_ended(ctx, e, id, ti, now);
}

engine_hooks net_engine_hooks(net_engine *ne)
{
    /* Only the tasks attach() marks (driven communication, scaled compute). */
    return (engine_hooks){.on_start = on_start, .on_end = on_end, .ctx = ne, .only_marked = true};
}

int net_engine_error(const net_engine *ne, ts_err *err)
{
    if (ne->rc && err)
        *err = ne->err;
    return ne->rc;
}

net_engine_stats net_engine_get_stats(const net_engine *ne)
{
    net_engine_stats s = ne->st;
    s.flows = net_sim_flow_stats(ne->sim);
    return s;
}

int net_engine_track_links(net_engine *ne, ts_err *err)
{
    return net_flows_track_links(net_sim_flows(ne->sim), err);
}

net_link_usage net_engine_link_usage(const net_engine *ne, int l)
{
    return net_flows_link_usage(net_sim_flows(ne->sim), l);
}
