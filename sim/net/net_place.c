/* net_place — see net_place.h. */
#include "sim/net/net_place.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int dim_of(const char *s, size_t n)
{
    if (n == 2 && strncmp(s, "tp", 2) == 0)
        return NET_DIM_TP;
    if (n == 2 && strncmp(s, "dp", 2) == 0)
        return NET_DIM_DP;
    if (n == 2 && strncmp(s, "pp", 2) == 0)
        return NET_DIM_PP;
    return -1;
}

int net_place_init(net_place *pl, const net_graph *g, int t, int d, int p, const char *order, ts_err *err)
{
    memset(pl, 0, sizeof *pl);
    if (t < 1 || d < 1 || p < 1)
        return err_set(err, TS_EINVAL, "placement: t %d, d %d, p %d must all be >= 1", t, d, p);
    if (!order)
        order = "tp-dp-pp";
    int seen = 0, k = 0;
    for (const char *s = order; *s;) {
        const char *e = strchr(s, '-');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        int dim = dim_of(s, n);
        if (dim < 0 || (seen >> dim & 1) || k >= NET_DIMS)
            return err_set(err, TS_EINVAL,
                           "placement order '%s': expected a permutation of tp, dp, pp such as tp-dp-pp", order);
        seen |= 1 << dim;
        pl->order[k++] = dim;
        s = e ? e + 1 : s + n;
    }
    if (k != NET_DIMS)
        return err_set(err, TS_EINVAL, "placement order '%s': expected all three of tp, dp, pp (e.g. tp-dp-pp)", order);
    pl->size[NET_DIM_TP] = t;
    pl->size[NET_DIM_DP] = d;
    pl->size[NET_DIM_PP] = p;
    long long n = (long long)t * d * p;
    if (n > g->n_gpus)
        return err_set(err, TS_EINVAL, "placement: t*d*p = %lld ranks but the topology has %d GPUs", n, g->n_gpus);
    pl->n_ranks = (int)n;
    pl->ep = pl->etp = 1;
    pl->cp = pl->cp_a2a = 1;
    int stride = 1;
    for (int i = 0; i < NET_DIMS; i++) {
        pl->stride[pl->order[i]] = stride;
        stride *= pl->size[pl->order[i]];
    }
    pl->gpu_of_rank = malloc(sizeof *pl->gpu_of_rank * (size_t)pl->n_ranks);
    if (!pl->gpu_of_rank)
        return err_set(err, TS_ENOMEM, "placement: out of memory");
    for (int r = 0; r < pl->n_ranks; r++)
        pl->gpu_of_rank[r] = r;
    for (int r = 0; r < pl->n_ranks && !pl->tp_spans_servers; r++) {
        int tp, dp, pp;
        net_place_coords(pl, r, &tp, &dp, &pp);
        if (tp != 0)
            continue;
        int s0 = g->nodes[g->gpu_node[pl->gpu_of_rank[r]]].server;
        for (int j = 1; j < t; j++) {
            int rj = net_place_rank(pl, j, dp, pp); /* < n_ranks: j < t, dp < d, pp < p */
            /* NOLINTNEXTLINE(clang-analyzer-core.uninitialized.ArraySubscript): gpu_of_rank[rj] is set */
            if (g->nodes[g->gpu_node[pl->gpu_of_rank[rj]]].server != s0) {
                pl->tp_spans_servers = true;
                snprintf(pl->note, sizeof pl->note,
                         "tensor group of rank %d spans servers (t = %d, order %s, %d GPUs per server): its "
                         "all-reduces cross the NICs",
                         r, t, order, g->gpus_per_server);
                break;
            }
        }
    }
    return TS_OK;
}

void net_place_free(net_place *pl)
{
    if (!pl)
        return;
    free(pl->gpu_of_rank);
    pl->gpu_of_rank = NULL;
}

int net_place_rank(const net_place *pl, int tp, int dp, int pp)
{
    return tp * pl->stride[NET_DIM_TP] + dp * pl->stride[NET_DIM_DP] + pp * pl->stride[NET_DIM_PP];
}

void net_place_coords(const net_place *pl, int rank, int *tp, int *dp, int *pp)
{
    *tp = rank / pl->stride[NET_DIM_TP] % pl->size[NET_DIM_TP];
    *dp = rank / pl->stride[NET_DIM_DP] % pl->size[NET_DIM_DP];
    *pp = rank / pl->stride[NET_DIM_PP] % pl->size[NET_DIM_PP];
}

int net_place_group_gpus(const net_place *pl, net_dim dim, int rank, int *gpus)
{
    int c[NET_DIMS];
    net_place_coords(pl, rank, &c[NET_DIM_TP], &c[NET_DIM_DP], &c[NET_DIM_PP]);
    for (int i = 0; i < pl->size[dim]; i++) {
        c[dim] = i;
        gpus[i] = pl->gpu_of_rank[net_place_rank(pl, c[NET_DIM_TP], c[NET_DIM_DP], c[NET_DIM_PP])];
    }
    return pl->size[dim];
}

int net_place_set_experts(net_place *pl, int ep, int etp, ts_err *err)
{
    int td = pl->size[NET_DIM_TP] * pl->size[NET_DIM_DP];
    if (ep < 1 || etp < 1 || td % ((long long)ep * etp))
        return err_set(err, TS_EINVAL,
                       "placement: expert-parallel size %d x expert-tensor-parallel size %d must divide t x d = %d "
                       "(Megatron-core folds the experts over a stage's tensor and data-parallel ranks)",
                       ep, etp, td);
    pl->ep = ep;
    pl->etp = etp;
    pl->experts = true;
    return TS_OK;
}

int net_place_set_cp(net_place *pl, int cp, int cp_a2a, ts_err *err)
{
    if (cp < 1 || cp_a2a < 1 || pl->size[NET_DIM_DP] % cp || cp % cp_a2a)
        return err_set(err, TS_EINVAL,
                       "placement: context-parallel size %d (all-to-all level %d) must divide the data-parallel "
                       "dimension's %d ranks (cp x d), and its all-to-all level cp",
                       cp, cp_a2a, pl->size[NET_DIM_DP]);
    pl->cp = cp;
    pl->cp_a2a = cp_a2a;
    return TS_OK;
}

/* The ranks of rank's context-parallel group at one level: all-to-all
 * (kind NET_PLACE_CPA) or ring. */
static int cp_ranks(const net_place *pl, int kind, int rank, int *ranks)
{
    int tp, dp, pp, ca = pl->cp_a2a, n = kind == NET_PLACE_CPA ? ca : pl->cp / ca;
    net_place_coords(pl, rank, &tp, &dp, &pp);
    int c = dp % pl->cp, base = dp - c;
    for (int j = 0; j < n; j++) {
        int cj = kind == NET_PLACE_CPA ? c / ca * ca + j : c % ca + ca * j;
        ranks[j] = net_place_rank(pl, tp, base + cj, pp);
    }
    return n;
}

int net_place_ep_ranks(const net_place *pl, int rank, int *ranks)
{
    int tp, dp, pp, t = pl->size[NET_DIM_TP], span = pl->etp * pl->ep;
    net_place_coords(pl, rank, &tp, &dp, &pp);
    int s = tp + t * dp, base = s % pl->etp + s / span * span;
    for (int j = 0; j < pl->ep; j++) {
        int m = base + pl->etp * j;
        ranks[j] = net_place_rank(pl, m % t, m / t, pp);
    }
    return pl->ep;
}

int net_place_edp_ranks(const net_place *pl, int rank, int *ranks)
{
    int tp, dp, pp, t = pl->size[NET_DIM_TP], span = pl->etp * pl->ep;
    int edp = t * pl->size[NET_DIM_DP] / span;
    net_place_coords(pl, rank, &tp, &dp, &pp);
    int s = tp + t * dp;
    for (int j = 0; j < edp; j++) {
        int m = s % span + span * j;
        ranks[j] = net_place_rank(pl, m % t, m / t, pp);
    }
    return edp;
}

int net_place_group_size(const net_place *pl, int kind)
{
    switch (kind) {
    case NET_PLACE_EP:
        return pl->ep;
    case NET_PLACE_EDP:
        return pl->size[NET_DIM_TP] * pl->size[NET_DIM_DP] / (pl->etp * pl->ep);
    case NET_PLACE_ETP:
        return pl->etp;
    case NET_PLACE_TPEP:
        return pl->etp * pl->ep;
    case NET_PLACE_CPA:
        return pl->cp_a2a;
    case NET_PLACE_CPR:
        return pl->cp / pl->cp_a2a;
    case NET_PLACE_TCP:
        return pl->size[NET_DIM_TP] * pl->cp;
    case NET_PLACE_STAGE:
        return pl->size[NET_DIM_TP] * pl->size[NET_DIM_DP];
    default:
        return pl->size[kind];
    }
}

/* The first member of the block of `span` consecutive fold ranks holding
 * rank (coordinates tp, dp of t). */
static int block_first(int tp, int dp, int t, int span)
{
    int s = tp + t * dp;
    return s / span * span;
}

int net_place_group_ranks(const net_place *pl, int kind, int rank, int *ranks)
{
    if (kind == NET_PLACE_EP)
        return net_place_ep_ranks(pl, rank, ranks);
    if (kind == NET_PLACE_EDP)
        return net_place_edp_ranks(pl, rank, ranks);
    if (kind == NET_PLACE_CPA || kind == NET_PLACE_CPR)
        return cp_ranks(pl, kind, rank, ranks);
    if (kind == NET_PLACE_ETP || kind == NET_PLACE_TPEP || kind == NET_PLACE_TCP || kind == NET_PLACE_STAGE) {
        int tp, dp, pp, t = pl->size[NET_DIM_TP], n = net_place_group_size(pl, kind);
        net_place_coords(pl, rank, &tp, &dp, &pp);
        int base = block_first(tp, dp, t, n);
        for (int j = 0; j < n; j++)
            ranks[j] = net_place_rank(pl, (base + j) % t, (base + j) / t, pp);
        return n;
    }
    int c[NET_DIMS];
    net_place_coords(pl, rank, &c[NET_DIM_TP], &c[NET_DIM_DP], &c[NET_DIM_PP]);
    for (int i = 0; i < pl->size[kind]; i++) {
        c[kind] = i;
        ranks[i] = net_place_rank(pl, c[NET_DIM_TP], c[NET_DIM_DP], c[NET_DIM_PP]);
    }
    return pl->size[kind];
}

int net_place_group_leader(const net_place *pl, int kind, int rank)
{
    int c[NET_DIMS];
    net_place_coords(pl, rank, &c[NET_DIM_TP], &c[NET_DIM_DP], &c[NET_DIM_PP]);
    if (kind == NET_PLACE_TP || kind == NET_PLACE_DP) {
        c[kind] = 0;
        return net_place_rank(pl, c[NET_DIM_TP], c[NET_DIM_DP], c[NET_DIM_PP]);
    }
    if (kind == NET_PLACE_CPA || kind == NET_PLACE_CPR) {
        int ca = pl->cp_a2a, k = c[NET_DIM_DP] % pl->cp;
        c[NET_DIM_DP] -= kind == NET_PLACE_CPA ? k % ca : k - k % ca;
        return net_place_rank(pl, c[NET_DIM_TP], c[NET_DIM_DP], c[NET_DIM_PP]);
    }
    int t = pl->size[NET_DIM_TP], span = pl->etp * pl->ep, s = c[NET_DIM_TP] + t * c[NET_DIM_DP];
    int m = kind == NET_PLACE_EP    ? s % pl->etp + s / span * span
            : kind == NET_PLACE_EDP ? s % span
                                    : block_first(c[NET_DIM_TP], c[NET_DIM_DP], t, net_place_group_size(pl, kind));
    return net_place_rank(pl, m % t, m / t, c[NET_DIM_PP]);
}
