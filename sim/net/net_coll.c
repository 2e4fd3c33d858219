/* net_coll — see net_coll.h. */
#include "sim/net/net_coll.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/net/net_a2a.h"
#include "sim/util/grow.h"

/* ------------------------------------------------------------ plans */

static int plan_xfer(const net_graph *g, net_router *r, net_plan *p, int src, int dst, double bytes, uint64_t key,
                     ts_err *err)
{
    (void)g;
    return net_plan_xfer(r, p, src, dst, bytes, key, err);
}

/* One fused ring phase over gpu indices gs[0..n) (stride apart in gpus):
 * flow i -> i+1 of `bytes`. Does not open or close the phase. */
static int ring_flows(const net_graph *g, net_router *r, net_plan *p, const int *gs, int n, int stride, double bytes,
                      uint64_t key, ts_err *err)
{
    if (n < 2)
        return TS_OK;
    for (int i = 0; i < n; i++) {
        int a = g->gpu_node[gs[i * stride]], b = g->gpu_node[gs[((i + 1) % n) * stride]];
        int rc = plan_xfer(g, r, p, a, b, bytes, key, err);
        if (rc)
            return rc;
    }
    p->cur_bundle++; /* the next ring of the phase is another bundle */
    return TS_OK;
}

/* A phase of its own holding one ring over gs[0..n) (consecutive in gpus),
 * each flow of `bytes`, taking n - 1 steps. */
static int ring_phase(const net_graph *g, net_router *r, net_plan *p, const int *gs, int n, double bytes, uint64_t key,
                      ts_err *err)
{
    int rc = net_plan_phase_begin(p, err);
    if (rc)
        return rc;
    if ((rc = ring_flows(g, r, p, gs, n, 1, bytes, key, err)))
        return rc;
    net_plan_phase_end(g, p, n - 1);
    return TS_OK;
}

static int server_of(const net_graph *g, int gpu)
{
    return g->nodes[g->gpu_node[gpu]].server;
}

/* Hierarchical layout: members grouped by server in order of first
 * appearance; *k members on each of *m servers, or -1 if not uniform.
 * order gets the members server-major (m x k). */
static int hier_layout(const net_graph *g, const int *gpus, int n, int *order, int *k, int *m)
{
    int nm = 0, kk = -1;
    char *used = calloc((size_t)n, 1);
    if (!used)
        return TS_ENOMEM;
    int pos = 0;
    for (int i = 0; i < n; i++) {
        if (used[i])
            continue;
        int s = server_of(g, gpus[i]), cnt = 0;
        for (int j = i; j < n; j++)
            if (!used[j] && server_of(g, gpus[j]) == s) {
                used[j] = 1;
                order[pos++] = gpus[j];
                cnt++;
            }
        if (kk < 0)
            kk = cnt;
        else if (kk != cnt)
            kk = -2;
        nm++;
    }
    free(used);
    *k = kk < 0 ? -1 : kk;
    *m = nm;
    return TS_OK;
}

static int tree_depth(int n)
{
    int d = 0;
    while ((1 << (d + 1)) <= n)
        d++;
    return d > 0 ? d : 1;
}

/* Check request q against g: a known kind, GPUs in range, the group size
 * the kind needs. */
static int check_req(const net_graph *g, const net_coll_req *q, ts_err *err)
{
    int n = q->n;
    double S = q->bytes;
    if (q->kind < 0 || q->kind >= NET_COLL_KIND_COUNT)
        return err_set(err, TS_EINVAL, "net_coll: unknown collective kind %d", (int)q->kind);
    if (n < 1 || !q->gpus || !(S >= 0))
        return err_set(err, TS_EINVAL, "net_coll: group of %d GPUs with %g bytes; need >= 1 GPU and bytes >= 0", n, S);
    for (int i = 0; i < n; i++)
        if (q->gpus[i] < 0 || q->gpus[i] >= g->n_gpus)
            return err_set(err, TS_EINVAL, "net_coll: GPU %d (position %d) not in 0..%d", q->gpus[i], i, g->n_gpus - 1);
    if (q->kind == NET_COLL_P2P && n != 2)
        return err_set(err, TS_EINVAL, "net_coll: p2p needs 2 GPUs (source, destination), got %d", n);
    if (q->kind == NET_COLL_P2P_SCATTER && (n < 2 || n % 2))
        return err_set(err, TS_EINVAL, "net_coll: scatter/gather p2p needs 2t GPUs (t sources, t destinations), got %d",
                       n);
    return TS_OK;
}

/* Phases of a p2p (one transfer) or a scatter/gather p2p (t transfers of
 * 1/t, then a ring all-gather among the t destinations). */
static int p2p_phases(const net_graph *g, net_router *r, const net_coll_req *q, net_plan *p, ts_err *err)
{
    int rc, n = q->n;
    double S = q->bytes;
    uint64_t key = q->flow_key;
    if (q->kind == NET_COLL_P2P) {
        if (q->gpus[0] == q->gpus[1])
            return TS_OK;
        if ((rc = net_plan_phase_begin(p, err)))
            return rc;
        if ((rc = plan_xfer(g, r, p, g->gpu_node[q->gpus[0]], g->gpu_node[q->gpus[1]], S, key, err)))
            return rc;
        net_plan_phase_end(g, p, 1);
        p->algo = NET_ALGO_RING;
        return TS_OK;
    }
    int t = n / 2;
    if ((rc = net_plan_phase_begin(p, err)))
        return rc;
    for (int j = 0; j < t; j++)
        if (q->gpus[j] != q->gpus[t + j] &&
            (rc = plan_xfer(g, r, p, g->gpu_node[q->gpus[j]], g->gpu_node[q->gpus[t + j]], S / t, key, err)))
            return rc;
    net_plan_phase_end(g, p, 1);
    if (t > 1 && (rc = ring_phase(g, r, p, q->gpus + t, t, S * (t - 1) / t, key, err)))
        return rc;
    p->algo = NET_ALGO_RING;
    return TS_OK;
}

/* Phases of a broadcast: a chain along the ring from the root, one phase.
 * (All-gather and reduce-scatter run with the all-reduce: grouped_phases.) */
static int broadcast_phases(const net_graph *g, net_router *r, const net_coll_req *q, net_plan *p, ts_err *err)
{
    int rc, n = q->n;
    if (q->root < 0 || q->root >= n)
        return err_set(err, TS_EINVAL, "net_coll: broadcast root %d not in 0..%d", q->root, n - 1);
    if ((rc = net_plan_phase_begin(p, err)))
        return rc;
    for (int i = 0; i < n - 1; i++) {
        int a = q->gpus[(q->root + i) % n], b = q->gpus[(q->root + i + 1) % n];
        if ((rc = plan_xfer(g, r, p, g->gpu_node[a], g->gpu_node[b], q->bytes, q->flow_key, err)))
            return rc;
    }
    net_plan_phase_end(g, p, n - 1);
    p->algo = NET_ALGO_RING;
    return TS_OK;
}

/* Tree all-reduce: two binary trees (the second mirrored), each moving half
 * of the data both ways, in one phase. */
static int allreduce_tree(const net_graph *g, net_router *r, const net_coll_req *q, net_plan *p, ts_err *err)
{
    int rc, n = q->n;
    if ((rc = net_plan_phase_begin(p, err)))
        return rc;
    for (int tr = 0; tr < 2; tr++)
        for (int i = 1; i < n; i++) {
            int c = tr ? n - 1 - i : i, par = tr ? n - 1 - (i - 1) / 2 : (i - 1) / 2;
            int cn = g->gpu_node[q->gpus[c]], pn = g->gpu_node[q->gpus[par]];
            if ((rc = plan_xfer(g, r, p, cn, pn, q->bytes / 2, q->flow_key, err)))
                return rc;
            if ((rc = plan_xfer(g, r, p, pn, cn, q->bytes / 2, q->flow_key, err)))
                return rc;
        }
    net_plan_phase_end(g, p, 2 * tree_depth(n));
    return TS_OK;
}

/* Hierarchical all-reduce over order (m servers x k local ranks): local
 * reduce-scatter, cross-server reduce-scatter and all-gather per local
 * rank, local all-gather. */
static int allreduce_hier(const net_graph *g, net_router *r, const net_coll_req *q, const int *order, int k, int m,
                          net_plan *p, ts_err *err)
{
    int rc;
    double S = q->bytes;
    uint64_t key = q->flow_key;
    if ((rc = net_plan_phase_begin(p, err)))
        return rc;
    for (int s = 0; s < m; s++)
        if ((rc = ring_flows(g, r, p, order + s * k, k, 1, S * (k - 1) / k, key, err)))
            return rc;
    net_plan_phase_end(g, p, k - 1);
    for (int ph = 0; ph < 2; ph++) {
        if ((rc = net_plan_phase_begin(p, err)))
            return rc;
        for (int j = 0; j < k; j++)
            if ((rc = ring_flows(g, r, p, order + j, m, k, S / k * (m - 1) / m, key, err)))
                return rc;
        net_plan_phase_end(g, p, m - 1);
    }
    if ((rc = net_plan_phase_begin(p, err)))
        return rc;
    for (int s = 0; s < m; s++)
        if ((rc = ring_flows(g, r, p, order + s * k, k, 1, S * (k - 1) / k, key, err)))
            return rc;
    net_plan_phase_end(g, p, k - 1);
    return TS_OK;
}

/* NCCL's pipelined ring over order (m servers x k local ranks), k channels
 * on k NICs (net_coll.h, PIPE): NVLink and NIC ring bundles in one phase. */
static int pipe_phase(const net_graph *g, net_router *r, const net_coll_req *q, const int *order, int k, int m,
                      net_plan *p, ts_err *err)
{
    int rc, n = k * m;
    double passes = q->kind == NET_COLL_ALLREDUCE ? 2.0 : 1.0, wire = passes * q->bytes * (n - 1) / n;
    if ((rc = net_plan_phase_begin(p, err)))
        return rc;
    for (int s = 0; s < m; s++)
        if ((rc = ring_flows(g, r, p, order + s * k, k, 1, wire * (k - 1) / k, q->flow_key, err)))
            return rc;
    for (int j = 0; j < k; j++)
        if ((rc = ring_flows(g, r, p, order + j, m, k, wire / k, q->flow_key, err)))
            return rc;
    net_plan_phase_end(g, p, (int)passes * (n - 1));
    p->algo = NET_ALGO_PIPE;
    return TS_OK;
}

/* NVLS all-reduce: every GPU sends to and receives from NVSwitch nvs (its
 * NVLink SHARP reduction), one phase. */
static int allreduce_nvls(const net_graph *g, net_router *r, const net_coll_req *q, int nvs, net_plan *p, ts_err *err)
{
    int rc, n = q->n;
    double wire = q->bytes * (n + 1) / n * (NET_NVLINK_EFF / NET_NVLS_EFF);
    if ((rc = net_plan_phase_begin(p, err)))
        return rc;
    for (int i = 0; i < n; i++) {
        int gn = g->gpu_node[q->gpus[i]];
        if ((rc = plan_xfer(g, r, p, gn, nvs, wire, q->flow_key, err)))
            return rc;
        if ((rc = plan_xfer(g, r, p, nvs, gn, wire, q->flow_key, err)))
            return rc;
    }
    net_plan_phase_end(g, p, 2);
    return TS_OK;
}

/* Phases of an all-reduce, all-gather or reduce-scatter: the requested
 * algorithm (auto: NVLS for an all-reduce in one NVLink SHARP domain, PIPE
 * across servers of equal share, else ring) recorded in p->algo; the
 * all-reduce-only ones (tree, hier, NVLS) run the others as a ring. */
static int grouped_phases(const net_graph *g, net_router *r, const net_coll_req *q, net_plan *p, ts_err *err)
{
    int rc = TS_OK, n = q->n;
    int *order = malloc(sizeof *order * (size_t)n);
    if (!order)
        return err_set(err, TS_ENOMEM, "net_coll: out of memory");
    int k, m;
    if ((rc = hier_layout(g, q->gpus, n, order, &k, &m))) {
        rc = err_set(err, rc, "net_coll: out of memory");
        goto out;
    }
    int nvs = net_graph_gpu_nvswitch(g, q->gpus[0]);
    int one_domain = nvs >= 0;
    for (int i = 1; i < n && one_domain; i++)
        one_domain = net_graph_gpu_nvswitch(g, q->gpus[i]) == nvs;
    net_coll_algo algo = q->algo;
    int ar = q->kind == NET_COLL_ALLREDUCE;
    if (algo == NET_ALGO_AUTO)
        algo = ar && one_domain && g->nvls ? NET_ALGO_NVLS : (m > 1 && k > 1) ? NET_ALGO_PIPE : NET_ALGO_RING;
    if ((algo == NET_ALGO_HIER || algo == NET_ALGO_PIPE) && (k < 1 || m == 1 || k == 1))
        algo = NET_ALGO_RING;
    if (!ar && algo != NET_ALGO_PIPE)
        algo = NET_ALGO_RING;
    p->algo = algo;
    switch (algo) {
    case NET_ALGO_RING:
        for (int ph = 0; ph < (ar ? 2 : 1) && !rc; ph++) /* all-reduce: reduce-scatter + all-gather */
            rc = ring_phase(g, r, p, q->gpus, n, q->bytes * (n - 1) / n, q->flow_key, err);
        break;
    case NET_ALGO_TREE:
        rc = allreduce_tree(g, r, q, p, err);
        break;
    case NET_ALGO_HIER:
        rc = allreduce_hier(g, r, q, order, k, m, p, err);
        break;
    case NET_ALGO_PIPE:
        rc = pipe_phase(g, r, q, order, k, m, p, err);
        break;
    case NET_ALGO_NVLS:
        if (!one_domain || !g->nvls)
            rc = err_set(err, TS_EINVAL,
                         "net_coll: NVLS all-reduce needs every GPU of the group in one NVLink domain "
                         "with NVLink SHARP (H100/H200 NVSwitch); use ring or hier");
        else
            rc = allreduce_nvls(g, r, q, nvs, p, err);
        break;
    default:
        rc = err_set(err, TS_EINVAL, "net_coll: unknown algorithm %d", (int)algo);
        break;
    }
out:
    free(order);
    return rc;
}

/* Reset p and fill its phases and their transfers for request q
 * (net_plan_bundles then groups the transfers into bundles). */
static int plan_phases(const net_graph *g, net_router *r, const net_coll_req *q, net_plan *p, ts_err *err)
{
    p->nx = 0;
    p->nph = 0;
    p->lat_ns = 0;
    p->algo = q->algo;
    int rc = check_req(g, q, err);
    if (rc)
        return rc;
    if (q->n == 1 && q->kind != NET_COLL_P2P)
        return TS_OK; /* nothing to move */
    switch (q->kind) {
    case NET_COLL_P2P:
    case NET_COLL_P2P_SCATTER:
        return p2p_phases(g, r, q, p, err);
    case NET_COLL_BROADCAST:
        return broadcast_phases(g, r, q, p, err);
    case NET_COLL_ALLTOALL:
    case NET_COLL_DEEPEP:
        return net_a2a_phases(g, r, q, p, err);
    case NET_COLL_RING_STEP: /* one step of a ring: n transfers of S in lockstep, one step latency */
        if ((rc = net_plan_phase_begin(p, err)) ||
            (rc = ring_flows(g, r, p, q->gpus, q->n, 1, q->bytes, q->flow_key, err)))
            return rc;
        net_plan_phase_end(g, p, 1);
        return TS_OK;
    case NET_COLL_ALLGATHER:
    case NET_COLL_REDUCE_SCATTER:
    case NET_COLL_ALLREDUCE:
        return grouped_phases(g, r, q, p, err);
    default:
        return err_set(err, TS_EINVAL, "net_coll: unknown collective kind %d", (int)q->kind);
    }
}

int net_coll_plan(const net_graph *g, net_router *r, const net_coll_req *q, net_plan *p, ts_err *err)
{
    p->nb = 0;
    p->nbl = 0;
    int rc = plan_phases(g, r, q, p, err);
    return rc ? rc : net_plan_bundles(p, err);
}

/* ------------------------------------------------------------ runner */

typedef struct {
    const net_plan *pp; /* the plan (owned by the cache) */
    int phase;          /* current phase */
    int outstanding;    /* flows of the phase not yet finished */
    uint64_t tag;
    int active;
    double lat_scale;  /* factor on each phase's latency */
    int64_t lat_first; /* waited before the first phase besides (a plan without latencies) */
} run_coll;

typedef struct {
    int64_t t_ns;
    uint64_t seq;
    int coll;
} timer_t_;

/* A planned request: the same group, kind, algorithm, size and flow key
 * (NCCL: the same communicator, so the same connections and routes) always
 * gives the same plan, so each is computed once. */
typedef struct {
    int used;
    uint64_t hash;
    net_coll_kind kind;
    net_coll_algo algo;
    int n, root;
    double bytes;
    uint64_t flow_key;
    double hot, rdma_bytes;
    int hot_sends, merge_peers;
    int *gpus;
    net_plan *plan; /* packed (net_plan_pack), allocated apart: running collectives point
                          to it across rehashes */
} plan_entry;

struct net_sim {
    const net_graph *g;
    net_router *r;
    net_flows *f;
    net_coll_done_fn done;
    void *ctx;
    run_coll *c;
    int nc, capc;
    int *freec;
    int nfree;
    timer_t_ *tm;
    int ntm, captm;
    uint64_t seq;
    int in_flight;
    plan_entry *cache;
    int cache_cap, cache_len; /* plans by request */
    int cb_rc;                /* first error inside a callback */
    ts_err *cb_err;
};

int net_sim_new(const net_graph *g, net_coll_done_fn done, void *ctx, net_sim **out, ts_err *err)
{
    int rc;
    net_sim *s = calloc(1, sizeof *s);
    if (!s)
        return err_set(err, TS_ENOMEM, "net_sim: out of memory");
    s->g = g;
    s->done = done;
    s->ctx = ctx;
    if ((rc = net_router_new(g, &s->r, err)) || (rc = net_flows_new(g, &s->f, err))) {
        net_sim_free(s);
        return rc;
    }
    *out = s;
    return TS_OK;
}

void net_sim_free(net_sim *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->cache_cap; i++)
        if (s->cache[i].used) {
            free(s->cache[i].plan); /* packed: one block */
            free(s->cache[i].gpus);
        }
    free(s->cache);
    free(s->c);
    free(s->freec);
    free(s->tm);
    net_flows_free(s->f);
    net_router_free(s->r);
    free(s);
}

static int tm_before(const timer_t_ *a, const timer_t_ *b)
{
    return a->t_ns < b->t_ns || (a->t_ns == b->t_ns && a->seq < b->seq);
}

static int tm_push(net_sim *s, int64_t t, int coll)
{
    if (s->ntm == s->captm && grow_to_int((void **)&s->tm, &s->captm, s->ntm + 1, 64, sizeof *s->tm))
        return TS_ENOMEM;
    timer_t_ e = {t, s->seq++, coll};
    int i = s->ntm++;
    while (i > 0 && tm_before(&e, &s->tm[(i - 1) / 2])) {
        s->tm[i] = s->tm[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->tm[i] = e;
    return TS_OK;
}

static timer_t_ tm_pop(net_sim *s)
{
    timer_t_ top = s->tm[0], e = s->tm[--s->ntm];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= s->ntm)
            break;
        if (c + 1 < s->ntm && tm_before(&s->tm[c + 1], &s->tm[c]))
            c++;
        if (!tm_before(&s->tm[c], &e))
            break;
        s->tm[i] = s->tm[c];
        i = c;
    }
    if (s->ntm > 0)
        s->tm[i] = e;
    return top;
}

static int begin_phase(net_sim *s, int ci, int64_t t);

/* Phase `phase` of collective ci ended at t: go on or finish. */
static int end_phase(net_sim *s, int ci, int64_t t)
{
    run_coll *c = &s->c[ci];
    c->phase++;
    if (c->phase < c->pp->nph)
        return begin_phase(s, ci, t);
    c->active = 0;
    s->freec[s->nfree++] = ci;
    s->in_flight--;
    if (s->done)
        s->done(s->ctx, c->tag, t);
    return TS_OK;
}

/* Start the flows of the current phase of ci at t (its latency has passed). */
static int start_flows(net_sim *s, int ci, int64_t t)
{
    run_coll *c = &s->c[ci];
    const net_phase *ph = &c->pp->ph[c->phase];
    if (ph->count == 0)
        return end_phase(s, ci, t);
    c->outstanding = ph->nbundles;
    /* the plan is the cache's (allocated, not const): its bundles keep their hints */
    net_plan *p = (net_plan *)c->pp;
    for (int k = ph->first_bundle; k < ph->first_bundle + ph->nbundles; k++) {
        net_bundle *b = &p->b[k];
        int rc = net_flow_start_hint(s->f, t, p->bl + b->first_link, p->blw + b->first_link, b->nlinks, b->bytes,
                                     (uint64_t)ci, &b->hint, s->cb_err);
        if (rc < 0)
            return rc;
    }
    return TS_OK;
}

static int begin_phase(net_sim *s, int ci, int64_t t)
{
    run_coll *c = &s->c[ci];
    int64_t lat = c->pp->ph[c->phase].lat_ns;
    if (c->lat_scale != 1.0)
        lat = (int64_t)llround((double)lat * c->lat_scale);
    if (c->phase == 0)
        lat += c->lat_first;
    if (lat == 0)
        return start_flows(s, ci, t);
    return tm_push(s, t + lat, ci) ? err_set(s->cb_err, TS_ENOMEM, "net_sim: out of memory") : TS_OK;
}

static void on_flow_done(void *ctx, int flow, uint64_t tag, int64_t t)
{
    (void)flow;
    net_sim *s = ctx;
    run_coll *c = &s->c[(int)tag];
    if (--c->outstanding == 0) {
        int rc = end_phase(s, (int)tag, t);
        if (rc && !s->cb_rc)
            s->cb_rc = rc;
    }
}

static uint64_t req_hash(const net_coll_req *q)
{
    uint64_t h = 1469598103934665603ull, b, hb, rb;
    memcpy(&b, &q->bytes, sizeof b);
    memcpy(&hb, &q->hot, sizeof hb);
    memcpy(&rb, &q->rdma_bytes, sizeof rb);
    uint64_t parts[6] = {(uint64_t)q->kind << 32 | (uint64_t)q->algo,
                         (uint64_t)(uint32_t)q->n << 32 | (uint32_t)q->root,
                         b,
                         q->flow_key,
                         hb ^ (uint64_t)q->hot_sends ^ (uint64_t)q->merge_peers << 1,
                         rb};
    for (int i = 0; i < 6; i++)
        h = (h ^ parts[i]) * 1099511628211ull;
    for (int i = 0; i < q->n; i++)
        h = (h ^ (uint64_t)(uint32_t)q->gpus[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static int entry_matches(const plan_entry *e, uint64_t h, const net_coll_req *q)
{
    return e->hash == h && e->kind == q->kind && e->algo == q->algo && e->n == q->n && e->root == q->root &&
           e->bytes == q->bytes && e->flow_key == q->flow_key && e->hot == q->hot && e->hot_sends == q->hot_sends &&
           e->merge_peers == q->merge_peers && e->rdma_bytes == q->rdma_bytes &&
           memcmp(e->gpus, q->gpus, sizeof *q->gpus * (size_t)q->n) == 0;
}

/* The plan of q, from the cache or computed (and cached). */
static int plan_lookup(net_sim *s, const net_coll_req *q, const net_plan **out, ts_err *err)
{
    if (q->n < 1 || !q->gpus)
        return err_set(err, TS_EINVAL, "net_coll: group of %d GPUs; need >= 1", q->n);
    if (2 * (s->cache_len + 1) > s->cache_cap) {
        int ncap = s->cache_cap ? s->cache_cap * 2 : 256;
        plan_entry *nc = calloc((size_t)ncap, sizeof *nc);
        if (!nc)
            return err_set(err, TS_ENOMEM, "net_sim: out of memory");
        for (int i = 0; i < s->cache_cap; i++) {
            if (!s->cache[i].used)
                continue;
            int h = (int)(s->cache[i].hash & (uint64_t)(ncap - 1));
            while (nc[h].used)
                h = (h + 1) & (ncap - 1);
            nc[h] = s->cache[i];
        }
        free(s->cache);
        s->cache = nc;
        s->cache_cap = ncap;
    }
    uint64_t hh = req_hash(q);
    int h = (int)(hh & (uint64_t)(s->cache_cap - 1));
    while (s->cache[h].used) {
        if (entry_matches(&s->cache[h], hh, q)) {
            *out = s->cache[h].plan;
            return TS_OK;
        }
        h = (h + 1) & (s->cache_cap - 1);
    }
    plan_entry *e = &s->cache[h];
    memset(e, 0, sizeof *e);
    net_plan built = {0};
    e->gpus = malloc(sizeof *e->gpus * (size_t)q->n);
    int rc = e->gpus ? net_coll_plan(s->g, s->r, q, &built, err) : err_set(err, TS_ENOMEM, "net_sim: out of memory");
    if (!rc && !(e->plan = net_plan_pack(&built)))
        rc = err_set(err, TS_ENOMEM, "net_sim: out of memory");
    net_plan_free(&built);
    if (rc) {
        /* NOLINTNEXTLINE(clang-analyzer-unix.Malloc): net_plan_free freed built's arrays just above */
        free(e->gpus);
        memset(e, 0, sizeof *e);
        return rc;
    }
    memcpy(e->gpus, q->gpus, sizeof *e->gpus * (size_t)q->n);
    e->used = 1;
    e->hash = hh;
    e->kind = q->kind;
    e->algo = q->algo;
    e->n = q->n;
    e->root = q->root;
    e->bytes = q->bytes;
    e->flow_key = q->flow_key;
    e->hot = q->hot;
    e->hot_sends = q->hot_sends;
    e->merge_peers = q->merge_peers;
    e->rdma_bytes = q->rdma_bytes;
    s->cache_len++;
    *out = e->plan;
    return TS_OK;
}

int net_sim_plan(net_sim *s, const net_coll_req *req, const net_plan **out, ts_err *err)
{
    return plan_lookup(s, req, out, err);
}

/* TS_EINVAL if now_ns precedes the network's current time. */
static int check_start_time(const net_sim *s, int64_t now_ns, ts_err *err)
{
    if (now_ns < net_flows_now_ns(s->f))
        return err_set(err, TS_EINVAL, "net_sim_start: time %lld ns is before the current time %lld ns",
                       (long long)now_ns, (long long)net_flows_now_ns(s->f));
    return TS_OK;
}

int net_sim_start(net_sim *s, int64_t now_ns, const net_coll_req *req, uint64_t tag, ts_err *err)
{
    const net_plan *p;
    int rc = check_start_time(s, now_ns, err); /* before a plan is built for nothing */
    if (!rc)
        rc = plan_lookup(s, req, &p, err);
    return rc ? rc : net_sim_start_plan(s, now_ns, p, -1, tag, err);
}

int net_sim_start_plan(net_sim *s, int64_t now_ns, const net_plan *plan, int64_t lat_ns, uint64_t tag, ts_err *err)
{
    int rc, ci;
    if ((rc = check_start_time(s, now_ns, err)))
        return rc;
    if (s->nfree > 0) {
        ci = s->freec[--s->nfree];
    } else {
        if (s->nc == s->capc) {
            int ncap = s->capc ? s->capc * 2 : 16;
            run_coll *n = realloc(s->c, sizeof *n * (size_t)ncap);
            int *fr = n ? realloc(s->freec, sizeof *fr * (size_t)ncap) : NULL;
            if (n)
                s->c = n;
            if (!n || !fr)
                return err_set(err, TS_ENOMEM, "net_sim: out of memory");
            s->freec = fr;
            memset(s->c + s->capc, 0, sizeof *n * (size_t)(ncap - s->capc));
            s->capc = ncap;
        }
        ci = s->nc++;
    }
    run_coll *c = &s->c[ci];
    c->pp = plan;
    c->phase = 0;
    c->outstanding = 0;
    c->tag = tag;
    c->active = 1;
    int64_t own = plan->lat_ns;
    c->lat_scale = lat_ns >= 0 && own > 0 ? (double)lat_ns / (double)own : 1.0;
    c->lat_first = lat_ns >= 0 && own == 0 ? lat_ns : 0;
    s->in_flight++;
    ts_err *outer_err = s->cb_err; /* a start from a done callback: the advance's */
    int outer_rc = s->cb_rc;
    s->cb_err = err;
    s->cb_rc = TS_OK;
    if (c->pp->nph == 0) {
        /* Nothing to move: finishes at once. */
        c->phase = -1;
        rc = end_phase(s, ci, now_ns);
    } else {
        rc = begin_phase(s, ci, now_ns);
    }
    s->cb_err = outer_err;
    s->cb_rc = outer_rc;
    return rc;
}

int64_t net_sim_next_ns(net_sim *s)
{
    int64_t a = net_flows_next_ns(s->f), b = s->ntm ? s->tm[0].t_ns : NET_TIME_NEVER;
    return a < b ? a : b;
}

int net_sim_advance(net_sim *s, int64_t t_ns, ts_err *err)
{
    int rc = TS_OK;
    s->cb_err = err;
    s->cb_rc = TS_OK;
    for (;;) {
        int64_t tf = net_flows_next_ns(s->f), tt = s->ntm ? s->tm[0].t_ns : NET_TIME_NEVER;
        int64_t t = tf < tt ? tf : tt;
        if (t > t_ns || t == NET_TIME_NEVER)
            break;
        if (tt <= tf) {
            /* Bring flows to time tt first (none finishes before it). */
            if ((rc = net_flows_advance(s->f, tt, on_flow_done, s, err)))
                break;
            while (s->ntm && s->tm[0].t_ns == tt) {
                timer_t_ e = tm_pop(s);
                if ((rc = start_flows(s, e.coll, tt)))
                    break;
            }
        } else {
            rc = net_flows_advance(s->f, tf, on_flow_done, s, err);
        }
        if (!rc)
            rc = s->cb_rc;
        if (rc)
            break;
    }
    if (!rc && t_ns != NET_TIME_NEVER && t_ns > net_flows_now_ns(s->f))
        rc = net_flows_advance(s->f, t_ns, on_flow_done, s, err);
    s->cb_err = NULL;
    return rc;
}

int net_sim_run(net_sim *s, int64_t *end_ns, ts_err *err)
{
    int64_t last = net_flows_now_ns(s->f);
    while (s->in_flight > 0) {
        int64_t t = net_sim_next_ns(s);
        if (t == NET_TIME_NEVER)
            return err_set(err, TS_ESTATE,
                           "net_sim: %d collectives in flight but no event left (a flow with zero rate)", s->in_flight);
        int rc = net_sim_advance(s, t, err);
        if (rc)
            return rc;
        last = t;
    }
    if (end_ns)
        *end_ns = last;
    return TS_OK;
}

int net_sim_in_flight(const net_sim *s)
{
    return s->in_flight;
}
net_flow_stats net_sim_flow_stats(const net_sim *s)
{
    return net_flows_stats(s->f);
}
net_router *net_sim_router(net_sim *s)
{
    return s->r;
}
net_flows *net_sim_flows(net_sim *s)
{
    return s->f;
}

static void record_end(void *ctx, uint64_t tag, int64_t t)
{
    (void)tag;
    *(int64_t *)ctx = t;
}

int net_coll_time_ns(const net_graph *g, const net_coll_req *req, int64_t *out_ns, ts_err *err)
{
    net_sim *s = NULL;
    int64_t end = 0;
    int rc = net_sim_new(g, record_end, &end, &s, err);
    if (!rc)
        rc = net_sim_start(s, 0, req, 0, err);
    if (!rc)
        rc = net_sim_run(s, NULL, err);
    if (!rc)
        *out_ns = end;
    net_sim_free(s);
    return rc;
}
