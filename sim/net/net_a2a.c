/* net_a2a — see net_a2a.h. */
#include "sim/net/net_a2a.h"

#include <stdlib.h>

/* Where each position of the group sits: its server's slot (servers in
 * order of first appearance) and its index among the group's GPUs of that
 * server. *k: the group's GPUs per server, -1 when servers differ. */
typedef struct {
    int *slot, *local;
    int k, m;
} a2a_layout;

static int layout_of(const net_graph *g, const int *gpus, int n, a2a_layout *L)
{
    int *srv = malloc(sizeof *srv * (size_t)n), *cnt = calloc((size_t)n, sizeof *cnt);
    L->slot = malloc(sizeof *L->slot * (size_t)n);
    L->local = malloc(sizeof *L->local * (size_t)n);
    L->m = 0;
    if (!srv || !cnt || !L->slot || !L->local) {
        free(srv);
        free(cnt);
        return TS_ENOMEM;
    }
    for (int i = 0; i < n; i++) {
        int s = g->nodes[g->gpu_node[gpus[i]]].server, j = 0;
        while (j < L->m && srv[j] != s)
            j++;
        if (j == L->m)
            srv[L->m++] = s;
        L->slot[i] = j;
        L->local[i] = cnt[j]++;
    }
    L->k = cnt[0];
    for (int j = 1; j < L->m; j++)
        if (cnt[j] != L->k)
            L->k = -1;
    free(srv);
    free(cnt);
    return TS_OK;
}

/* Bytes of the transfer from position a to position b before routing skew
 * (0: none). */
static double pair_bytes(const net_coll_req *q, const a2a_layout *L, int a, int b)
{
    if (a == b || q->gpus[a] == q->gpus[b])
        return 0;
    if (q->kind == NET_COLL_ALLTOALL || L->m == 1)
        return q->bytes / (q->n - 1);
    if (L->slot[a] == L->slot[b])
        return L->k > 1 ? q->bytes / (L->k - 1) : 0;
    return L->local[a] == L->local[b] ? q->rdma_bytes / (L->m - 1) : 0;
}

/* One bundle: the transfers into (hot_sends: out of) positions o0 ..
 * o1 - 1 but position skip (-1: none), from (to) their own servers'
 * positions or (remote) the other servers'; none if they move nothing. */
static int add_bundle(const net_graph *g, net_router *r, const net_coll_req *q, const a2a_layout *L, net_plan *p,
                      const int *idx, int o0, int o1, int skip, int remote, ts_err *err)
{
    double hot = q->hot == 0 ? 1 : q->hot;
    int n = q->n, added = 0, rc;
    for (int o = o0; o < o1; o++) {
        if (o == skip)
            continue;
        for (int v = 0; v < n; v++) {
            int a = q->hot_sends ? o : v, b = q->hot_sends ? v : o;
            double S = pair_bytes(q, L, a, b);
            if (!(S > 0) || (L->slot[a] != L->slot[b]) != remote)
                continue;
            if (o == q->root)
                S *= hot;
            if ((rc = net_plan_xfer_at(r, p, g->gpu_node[q->gpus[a]], g->gpu_node[q->gpus[b]], S, q->flow_key,
                                       idx[a * n + b], err)))
                return rc;
            added = 1;
        }
    }
    p->cur_bundle += added;
    return TS_OK;
}

int net_a2a_phases(const net_graph *g, net_router *r, const net_coll_req *q, net_plan *p, ts_err *err)
{
    int n = q->n, rc = TS_OK;
    double hot = q->hot == 0 ? 1 : q->hot;
    if (q->root < 0 || q->root >= n || !(hot >= 1) || !(q->rdma_bytes >= 0))
        return err_set(err, TS_EINVAL,
                       "net_coll: all-to-all with busiest position %d (valid 0..%d), factor %g (valid >= 1) and RDMA "
                       "bytes %g (valid >= 0)",
                       q->root, n - 1, hot, q->rdma_bytes);
    a2a_layout L = {0};
    int *idx = NULL;
    if (layout_of(g, q->gpus, n, &L)) {
        rc = err_set(err, TS_ENOMEM, "net_coll: out of memory");
        goto out;
    }
    if (q->kind == NET_COLL_DEEPEP && L.m > 1 && L.k < 1) {
        rc = err_set(err, TS_EINVAL,
                     "net_coll: DeepEP over %d GPUs on %d servers with unequal GPUs per server: its RDMA copies go "
                     "to the GPU of the same local index on every other server (give a group of equal shares)",
                     n, L.m);
        goto out;
    }
    if (!(q->bytes > 0) && !(q->rdma_bytes > 0))
        goto out; /* nothing to move: no phase */
    /* every transfer's index in the order of the plan without merging (its
     * ECMP route), a -> b at idx[a n + b] */
    if (!(idx = calloc((size_t)n * (size_t)n, sizeof *idx))) {
        rc = err_set(err, TS_ENOMEM, "net_coll: out of memory");
        goto out;
    }
    int nx = p->nx;
    for (int o = 0; o < n; o++)
        for (int remote = 0; remote < 2; remote++)
            for (int v = 0; v < n; v++) {
                int a = q->hot_sends ? o : v, b = q->hot_sends ? v : o;
                if (pair_bytes(q, &L, a, b) > 0 && (L.slot[a] != L.slot[b]) == remote)
                    idx[a * n + b] = nx++;
            }
    if ((rc = net_plan_phase_begin(p, err)))
        goto out;
    /* bundles of position o: the transfers into it (hot_sends: out of it)
     * from its server's peers, then those from the other servers; merged:
     * root's two (under skew: without, root is one of the peers), then the
     * others' local transfers and their remote ones */
    if (!q->merge_peers) {
        for (int o = 0; o < n; o++)
            for (int remote = 0; remote < 2; remote++)
                if ((rc = add_bundle(g, r, q, &L, p, idx, o, o + 1, -1, remote, err)))
                    goto out;
    } else {
        int apart = hot != 1; /* root's bundles apart */
        for (int pass = apart ? 0 : 2; pass < 4; pass++) {
            int remote = pass & 1, o0 = pass < 2 ? q->root : 0, o1 = pass < 2 ? q->root + 1 : n;
            if ((rc = add_bundle(g, r, q, &L, p, idx, o0, o1, pass < 2 || !apart ? -1 : q->root, remote, err)))
                goto out;
        }
    }
    net_plan_phase_end(g, p, 1);
out:
    free(idx);
    free(L.slot);
    free(L.local);
    return rc;
}
