/* commcost — alpha-beta collectives per link class (commcost.h). */
#include "sim/model/commcost.h"

#include <math.h>
#include <string.h>

/* ---- defaults, each with its source (../shared/reference/networks.csv) ----
 *
 * DGX A100 (networks.csv):
 *  - intra-node all-reduce bus bandwidth 230 GB/s: "A100 8-GPU intra-node
 *    all-reduce bus bandwidth, 230 GB/s, measured" (nccl-tests maintainers).
 *    Used for all-gather / reduce-scatter too: the same ring over the same
 *    NVSwitch links (no separate measurement in the reference set).
 *  - p2p over NVLink 240 GB/s: "A100 NVLink effective per GPU (128-byte
 *    payload), 240 GB/s, measured".
 *  - inter-node: 8 compute NICs per node ("DGX A100 compute NICs per node, 8")
 *    of HDR 200 Gb/s; achievable per 200 Gb/s NIC = 2 x "NCCL achievable per
 *    100 Gb/s NIC, 12.2 GB/s" = 24.4 GB/s (linear scaling of the measured
 *    figure to the HDR line rate, 25 GB/s per direction: 97.6% of it). One NIC
 *    per GPU: 24.4 GB/s per GPU.
 * DGX H100 (networks.csv):
 *  - intra-node all-reduce 480 GB/s: "H100 8-GPU intra-node all-reduce bus
 *    bandwidth (NVLink SHARP), 480, NCCL default on NVSwitch systems";
 *    all-gather / reduce-scatter use the ring figure, 370 GB/s ("(ring), 370").
 *  - p2p: 450 GB/s NVLink4 line rate x 240/300 (the A100's measured
 *    effective / line-rate ratio) = 360 GB/s.
 *  - inter-node: 8 x ConnectX-7 400 Gb/s per node ("DGX H100 compute NICs per
 *    node, 8"), "NCCL achievable per 400 Gb/s NIC, 47 GB/s": 47 GB/s per GPU.
 * H200 (gpus.csv: same NVLink4 450 GB/s as H100; HGX H200 nodes carry the same
 *    8 x 400 Gb/s NICs as DGX H100): the H100 figures.
 * B200 and GB200 (Blackwell): NO measurement in the reference set. DERIVED,
 *    stated as such: the H100's measured bus bandwidths scaled by the NVLink
 *    line rates, NVLink 5 900 GB/s over NVLink 4 450 GB/s (gpus.csv), i.e.
 *    960 GB/s NVLS all-reduce, 740 GB/s ring, p2p 900 x 240/300; the NIC as
 *    DGX H100 (8 x ConnectX-7 400 Gb/s on DGX B200; one per GPU on GB200
 *    NVL72): 47 GB/s; NCCL's Blackwell rows of nccl_tuning.md (CC index 3,
 *    NVLink per link SM100 40.1 GB/s, NVLS on NVSwitch gen 4).
 *
 * Latencies (alpha): NOT in the reference set. ASSUMPTION, stated as such:
 * 5 us per step inside a node, 10 us per step across nodes, the order of
 * magnitude NCCL shows for small messages. They matter only for small
 * messages (the pipeline and TP messages of the calibration rows are >= 25 MB,
 * where 7 steps x 5 us is < 5% of the time). A calibration file's measured
 * collective rows replace them (calib.h). */
#define ALPHA_NVLINK_NS 5000.0  /* assumption, see above */
#define ALPHA_NIC_NS    10000.0 /* assumption, see above */

/* The measured link figures of the node kind (above). */
static int kind_defaults(const gpu_spec *gpu, commcost_params *out, ts_err *err)
{
    memset(out, 0, sizeof *out);
    out->nvlink_alpha_ns = ALPHA_NVLINK_NS;
    out->nic_alpha_ns = ALPHA_NIC_NS;
    if (strncmp(gpu->name, "A100", 4) == 0) {
        out->nvlink_allreduce_busbw_gbps = 230.0; /* networks.csv, measured */
        out->nvlink_busbw_gbps = 230.0;           /* networks.csv, same ring */
        out->nvlink_p2p_gbps = 240.0;             /* networks.csv, measured effective */
        out->nic_gbps_per_gpu = 2.0 * 12.2;       /* networks.csv: 12.2 per 100 Gb/s, HDR 200 Gb/s */
        out->cc = 1;                              /* Ampere (SM80) */
        out->amd_cpu = 1;                         /* DGX A100: 2 x AMD EPYC 7742 (DGX A100 datasheet) */
        out->nvlink_link_gbps = 20.0;             /* nccl_tuning.md: NVLink per link SM80, 20 */
    } else if (strncmp(gpu->name, "H100", 4) == 0 || strncmp(gpu->name, "H200", 4) == 0) {
        out->nvlink_allreduce_busbw_gbps = 480.0;     /* networks.csv, NVLink SHARP, measured */
        out->nvlink_busbw_gbps = 370.0;               /* networks.csv, ring, measured */
        out->nvlink_p2p_gbps = 450.0 * 240.0 / 300.0; /* line rate x A100 effective ratio */
        out->nic_gbps_per_gpu = 47.0;                 /* networks.csv, per 400 Gb/s NIC, measured */
        out->cc = 2;                                  /* Hopper (SM90) */
        out->amd_cpu = 0;                             /* DGX H100: 2 x Intel Xeon 8480C (DGX H100 datasheet) */
        out->nvls = 1;                                /* NVSwitch gen 3 carries NVLink SHARP */
        out->nvlink_link_gbps = 20.6;                 /* nccl_tuning.md: NVLink per link SM90, 20.6 */
    } else if (strncmp(gpu->name, "B200", 4) == 0 || strncmp(gpu->name, "GB200", 5) == 0) {
        out->nvlink_allreduce_busbw_gbps = 480.0 * 900.0 / 450.0; /* derived: H100 measured x NVLink 5/4 */
        out->nvlink_busbw_gbps = 370.0 * 900.0 / 450.0;           /* derived, as above */
        out->nvlink_p2p_gbps = 900.0 * 240.0 / 300.0;             /* line rate x A100 effective ratio */
        out->nic_gbps_per_gpu = 47.0;                             /* networks.csv, per 400 Gb/s NIC */
        out->cc = 3;                                              /* Blackwell (SM100) */
        out->amd_cpu = 0;             /* DGX B200: Intel Xeon 8570; GB200: Grace (Arm), not AMD */
        out->nvls = 1;                /* NVSwitch gen 4 carries NVLink SHARP */
        out->nvlink_link_gbps = 40.1; /* nccl_tuning.md: NVLink per link SM100, 40.1 */
    } else {
        return err_set(err, TS_EINVAL,
                       "no communication defaults for GPU kind '%s' (known: A100*, H100*, "
                       "H200*, B200*, GB200*)",
                       gpu->name);
    }
    return TS_OK;
}

int commcost_params_default(const gpu_spec *gpu, commcost_params *out, ts_err *err)
{
    int rc = kind_defaults(gpu, out, err);
    if (rc)
        return rc;
    topo *t = NULL;
    if ((rc = topo_default_for(gpu, 8, &t, err)))
        return rc;
    rc = commcost_params_topo(gpu, t, 8, out, err);
    topo_free(t);
    return rc;
}

/* Path latency NIC to NIC through 2h - 1 switches (up to level h), us. */
static double path_lat_us(const topo_params *tp, int h)
{
    return 2.0 * tp->nic_latency_us + (2.0 * h - 1.0) * tp->switch_latency_us;
}

static void add_tier(commcost_params *p, double nodes, double oversub, double lat_us)
{
    if (p->tiers >= COMMCOST_MAX_TIERS)
        return;
    p->tier_nodes[p->tiers] = nodes;
    p->tier_oversub[p->tiers] = oversub;
    p->tier_lat_us[p->tiers] = lat_us;
    p->tiers++;
}

/* Blocks of a parametric fabric, as sim/net/net_topo.c builds its graph:
 * leaves of round(ports * o / (1 + o)) downlinks (rail-optimized: NIC k of
 * that many servers; else that many NICs), level-2 groups of ports/2 leaves
 * (3 levels and more), pods of servers/pods servers. Crossing a block's
 * boundary goes through its uplinks, oversubscribed o per level above the
 * leaves (and pod_oversubscription between pods). */
static void parametric_fabric(const topo_params *tp, int servers, commcost_params *p)
{
    double o = tp->oversubscription >= 1 ? tp->oversubscription : 1;
    int ports = tp->switch_ports > 1 ? tp->switch_ports : (tp->nic_gbps <= 25 ? 40 : 64);
    int leaf_ports = (int)(ports * o / (1 + o) + 0.5);
    if (leaf_ports < 1)
        leaf_ports = 1;
    int K = tp->nics_per_node > 0 ? tp->nics_per_node : 1, L = tp->levels >= 1 ? tp->levels : 1;
    double leaf_nodes = tp->fabric == TOPO_RAIL_OPTIMIZED ? leaf_ports : (double)leaf_ports / K;
    p->lat_leaf_us = path_lat_us(tp, 1);
    if (L >= 2)
        add_tier(p, leaf_nodes, o, path_lat_us(tp, 2));
    if (L >= 3) {
        int group_leaves = ports / 2; /* a level-2 group: ports/2 leaves */
        add_tier(p, (double)leaf_ports * group_leaves / K, o * o, path_lat_us(tp, 3));
    }
    if (tp->pods > 1 && servers >= tp->pods) {
        double po = tp->pod_oversubscription >= 1 ? tp->pod_oversubscription : 1;
        add_tier(p, (double)servers / tp->pods, pow(o, L - 1) * po, path_lat_us(tp, L + 1));
    }
}

/* NVLink per GPU and NIC rate of a link list: the nvlink links of GPU 0 of
 * server 0, the fabric links of server 0's NICs. */
static void link_list_fabric(const topo *t, double *nvlink_gbps, double *nic_gbps, double *lat_us)
{
    double nv = 0, nic = 0, lat = 0;
    for (size_t i = 0; i < t->n_links; i++) {
        const topo_link *l = &t->links[i];
        for (int e = 0; e < 2; e++) {
            const topo_endpoint *x = e ? &l->b : &l->a;
            if (l->kind == TOPO_LINK_NVLINK && x->kind == TOPO_EP_GPU && x->server == 0 && x->index == 0)
                nv += l->bandwidth_gbps;
            if (l->kind == TOPO_LINK_FABRIC && x->kind == TOPO_EP_NIC && x->server == 0) {
                nic += l->bandwidth_gbps;
                if (l->latency_us > lat)
                    lat = l->latency_us;
            }
        }
    }
    *nvlink_gbps = nv;
    *nic_gbps = t->params.nics_per_node > 0 ? nic / t->params.nics_per_node : 0;
    *lat_us = 2.0 * lat;
}

int commcost_params_topo(const gpu_spec *gpu, const topo *t, int gpus, commcost_params *out, ts_err *err)
{
    int rc = kind_defaults(gpu, out, err);
    if (rc)
        return rc;
    const topo_params *tp = &t->params;
    int gpn = tp->gpus_per_node > 0 ? tp->gpus_per_node : 1;
    double nvlink = tp->intra_node_gbps, nic = tp->nic_gbps, lat_us = 0;
    if (t->form == TOPO_LINK_LIST)
        link_list_fabric(t, &nvlink, &nic, &lat_us);
    /* NVLink: the kind's measured figures scale with the topology's rate
     * against the kind's line rate (gpus.csv). */
    if (nvlink > 0 && gpu->nvlink_gbps > 0) {
        double f = nvlink / gpu->nvlink_gbps;
        out->nvlink_allreduce_busbw_gbps *= f;
        out->nvlink_busbw_gbps *= f;
        out->nvlink_p2p_gbps *= f;
    }
    out->model = COMMCOST_NCCL;
    out->gpus_per_node = gpn;
    out->nics_per_node = tp->nics_per_node;
    out->nic_gbps = nic;
    /* every GPU's share of its node's NICs: the other GPUs of the node
     * drive their own groups at the same time */
    out->nic_gbps_per_gpu = tp->nics_per_node * nic * topo_nic_eff(nic) / gpn;
    if (!(out->nic_gbps_per_gpu > 0))
        return err_set(err, TS_EINVAL, "%s: no inter-node bandwidth (NICs %d x %g GB/s)", t->source, tp->nics_per_node,
                       nic);
    int servers = gpus > 0 ? (gpus + gpn - 1) / gpn : tp->nodes;
    if (t->form == TOPO_PARAMETRIC)
        parametric_fabric(tp, servers, out);
    else
        out->lat_leaf_us = lat_us;
    return TS_OK;
}

int commcost_gcd(int a, int b)
{
    while (b) {
        int r = a % b;
        a = b;
        b = r;
    }
    return a;
}

commcost_group commcost_group_strided(int n, int stride, int gpn)
{
    int k = 1;
    if (n > 1 && stride < gpn && gpn % stride == 0)
        k = commcost_gcd(n, gpn / stride);
    return (commcost_group){n, k};
}

int commcost_group_check(commcost_coll coll, const commcost_group *g, ts_err *err)
{
    if ((unsigned)coll >= COMM_COLL_COUNT)
        return err_set(err, TS_EINVAL, "unknown collective %d", (int)coll);
    if (g->ranks < 1)
        return err_set(err, TS_EINVAL, "%s: group of %d ranks (expected >= 1)", commcost_coll_name(coll), g->ranks);
    if (g->ranks_per_node < 1 || g->ranks_per_node > g->ranks || g->ranks % g->ranks_per_node)
        return err_set(err, TS_EINVAL, "%s: %d ranks per node in a group of %d (expected a divisor of %d)",
                       commcost_coll_name(coll), g->ranks_per_node, g->ranks, g->ranks);
    if (coll == COMM_P2P && g->ranks != 2)
        return err_set(err, TS_EINVAL, "p2p: group of %d ranks (expected 2)", g->ranks);
    return TS_OK;
}

/* Ring time of one collective over n ranks at per-rank bandwidth beta (GB/s =
 * bytes/ns) and step latency alpha: the closed forms of formulas.md. */
static double ring_ns(commcost_coll coll, double S, int n, double beta_gbps, double alpha_ns)
{
    if (n <= 1)
        return 0.0;
    double f = (double)(n - 1) / n;
    switch (coll) {
    case COMM_ALL_REDUCE:
        return 2.0 * (n - 1) * alpha_ns + 2.0 * f * S / beta_gbps;
    case COMM_ALL_GATHER:
    case COMM_REDUCE_SCATTER:
        return (n - 1) * alpha_ns + f * S / beta_gbps;
    case COMM_ALL_TO_ALL:
        return (n - 1) * (alpha_ns + S / n / beta_gbps);
    case COMM_P2P:
    default:
        return alpha_ns + S / beta_gbps;
    }
}

/* ---- NCCL's tuning model (../shared/reference/nccl_tuning.md) ----
 * Tables indexed [algo][proto] with algo in commcost_algo order (tree, ring,
 * nvls, pat) and proto LL, LL128, Simple. */
static const double BASE_LAT_US[COMMCOST_ALGO_COUNT][COMMCOST_PROTO_COUNT] = {
    {6.8, 14.0, 8.4}, /* Tree: section 2, base latency */
    {6.6, 14.0, 8.4}, /* Ring */
    {0, 0, 0},        /* NVLS */
    {8.0, 8.0, 8.0},  /* PAT */
};
/* Hardware latency per step, NVLINK and NET classes (section 2). */
static const double HW_NVLINK_US[COMMCOST_ALGO_COUNT][COMMCOST_PROTO_COUNT] = {
    {0.6, 1.25, 4.0}, {0.6, 1.9, 3.4}, {0, 0, 25.0}, {0, 0, 4.0}};
static const double HW_NET_US[COMMCOST_ALGO_COUNT][COMMCOST_PROTO_COUNT] = {
    {5.0, 8.5, 14.0}, {2.7, 4.0, 14.0}, {0, 0, 18.0}, {0, 0, 14.0}};
/* llMaxBws [row][1 node, 2 nodes, >= 3 nodes], GB/s (section 2). */
static const double LL_MAX_GBPS[4][3] = {
    {39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {141.0, 45.0, 35.0}, {282.0, 90.0, 70.0}};
/* Per-channel caps [cc][scale], GB/s (section 2), cc 0 Volta .. 3 Blackwell. */
static const double RING_LL128_CAP[4][3] = {{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 36.7}, {40, 40, 40}};
static const double TREE_LL128_CAP[4][3] = {{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20.0}};
static const double TREE_CAP[4][3] = {{26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0}};
/* Tree correction factor [proto][L], L = floor(log2(bytes / 64)) (section 2). */
static const double TREE_CORR[COMMCOST_PROTO_COUNT][23] = {
    {1, 1, 1, 1, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1, 1, 1, 1},
    {1, 1, 1, 1, 1, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1, 1},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9}};
#define RING_LL_FACTOR    0.5  /* section 3.2 step 4: Ring LL */
#define RING_LL128_FACTOR 0.92 /* Ring LL128 */
#define TREE_AR_FACTOR    0.92 /* Tree AllReduce */
#define TREE_LL_DIV       3.8  /* Tree LL */
#define PAT_FACTOR        0.75 /* PAT */
#define RING_PLATEAU      1.4  /* section 2, Ring plateau (minimum CC >= 80) */
#define PAT_PER_RANK_US   2.8  /* section 2, PAT linear term */
#define PAT_LOG_DIV       3.5  /* PAT log term divisor */

static const char *const ALGO_NAMES[COMMCOST_ALGO_COUNT] = {"tree", "ring", "nvls", "pat"};
static const char *const PROTO_NAMES[COMMCOST_PROTO_COUNT] = {"LL", "LL128", "Simple"};

const char *commcost_algo_name(commcost_algo a)
{
    return (unsigned)a < COMMCOST_ALGO_COUNT ? ALGO_NAMES[a] : "?";
}

const char *commcost_proto_name(commcost_proto p)
{
    return (unsigned)p < COMMCOST_PROTO_COUNT ? PROTO_NAMES[p] : "?";
}

/* NCCL rings (and trees) visit consecutive nodes in order: a block of B
 * nodes sends one channel's traffic out per ring, while its NICs inject B
 * times that, so its uplinks (1/oversub of the downlinks) limit the group
 * only when oversub > B. The factor is the tightest block the group spans. */
double commcost_net_factor(const commcost_params *p, int nodes)
{
    double f = 1.0;
    if (p->model != COMMCOST_NCCL)
        return f;
    for (int i = 0; i < p->tiers; i++)
        if (nodes > p->tier_nodes[i]) {
            double b = p->tier_nodes[i] > 1.0 ? p->tier_nodes[i] : 1.0;
            double x = b / p->tier_oversub[i];
            if (x < f)
                f = x;
        }
    return f;
}

/* NIC-to-NIC path latency for a group spanning `nodes` nodes, us: the
 * highest block boundary it crosses. */
static double span_lat_us(const commcost_params *p, int nodes)
{
    double l = p->lat_leaf_us;
    for (int i = 0; i < p->tiers; i++)
        if (nodes > p->tier_nodes[i] && p->tier_lat_us[i] > l)
            l = p->tier_lat_us[i];
    return l;
}

static int ilog2(double x)
{
    int l = 0;
    while (x >= 2.0) {
        x /= 2.0;
        l++;
    }
    return l;
}

/* NCCL's time for (algo, proto) in ns, < 0 if unavailable; *lat_ns and
 * *busbw_gbps get its latency and bus bandwidth. */
static double nccl_eval(const commcost_params *p, commcost_coll coll, int64_t bytes, const commcost_group *g,
                        commcost_algo algo, commcost_proto proto, double *lat_ns, double *busbw_gbps)
{
    *lat_ns = 0;
    *busbw_gbps = 0;
    if (coll == COMM_P2P || (unsigned)algo >= COMMCOST_ALGO_COUNT || (unsigned)proto >= COMMCOST_PROTO_COUNT)
        return -1;
    int n = g->ranks, k = g->ranks_per_node, N = n / k;
    if (n <= 1 || bytes <= 0)
        return algo == COMMCOST_ALGO_RING && proto == COMMCOST_PROTO_SIMPLE ? 0.0 : -1;
    int ar = coll == COMM_ALL_REDUCE, simple = proto == COMMCOST_PROTO_SIMPLE;
    int cc = p->cc >= 0 && p->cc <= 3 ? p->cc : 1, scale = N == 1 ? 0 : N == 2 ? 1 : 2;
    double S = (double)bytes;
    /* availability (section 3.5): tree for all-reduce; NVLS inside one
     * NVLink SHARP node (multi-node NVLS needs SHARP switches, which no
     * topology column describes); PAT with one GPU per node; Simple only
     * for NVLS and PAT */
    if ((algo == COMMCOST_ALGO_TREE && !ar) || (algo == COMMCOST_ALGO_NVLS && (!p->nvls || N > 1)) ||
        (algo == COMMCOST_ALGO_PAT && (ar || k != 1 || N < 2)) ||
        ((algo == COMMCOST_ALGO_NVLS || algo == COMMCOST_ALGO_PAT) && !simple))
        return -1;
    /* ---- bus bandwidth: the Simple rate the fabric sustains ---- */
    double intra = p->nvlink_busbw_gbps, net = k * p->nic_gbps_per_gpu * commcost_net_factor(p, N);
    double bw = N == 1 ? intra : (k > 1 && intra < net ? intra : net);
    /* search channels: NVLink links at NCCL's per-link speed inside a node;
     * two per NIC the group's ranks use across nodes (channel duplication) */
    double nch = p->nvlink_link_gbps > 0 ? floor(intra / p->nvlink_link_gbps + 0.5) : 8;
    if (N > 1) {
        double nics =
            p->nics_per_node > 0 && p->gpus_per_node > 0 ? (double)k * p->nics_per_node / p->gpus_per_node : k;
        nch = 2.0 * (nics > 1 ? nics : 1);
    }
    if (nch < 1)
        nch = 1;
    int row = N == 1 ? cc : (p->amd_cpu ? 1 : 0);
    double ll_max = LL_MAX_GBPS[row][scale];
    if (algo == COMMCOST_ALGO_NVLS)
        bw = ar ? p->nvlink_allreduce_busbw_gbps : p->nvlink_allreduce_busbw_gbps * (k - 1) / (2.0 * k);
    else if (algo == COMMCOST_ALGO_RING) {
        if (proto == COMMCOST_PROTO_LL)
            bw = fmin(ll_max, RING_LL_FACTOR * bw);
        else if (proto == COMMCOST_PROTO_LL128)
            bw = fmin(RING_LL128_FACTOR * bw, nch * RING_LL128_CAP[cc][scale]);
    } else if (algo == COMMCOST_ALGO_TREE) {
        bw = fmin(TREE_AR_FACTOR * bw, nch * TREE_CAP[cc][scale]);
        if (proto == COMMCOST_PROTO_LL)
            bw = fmin(bw / TREE_LL_DIV, ll_max);
        else if (proto == COMMCOST_PROTO_LL128)
            bw = fmin(bw * (N == 1 ? 7.0 / 9.0 : 120.0 / 128.0), nch * TREE_LL128_CAP[cc][scale]);
    } else
        bw *= PAT_FACTOR;
    double busbw = bw;
    /* algorithm bandwidth (step 5) */
    double nsteps = ar ? 2.0 * (n - 1) : (double)(n - 1);
    double algbw = algo == COMMCOST_ALGO_RING || (algo == COMMCOST_ALGO_NVLS && ar) ? bw * n / nsteps
                   : algo == COMMCOST_ALGO_TREE                                     ? bw * 0.5
                                                                                    : bw;
    /* ---- latency (section 3.3), us ---- */
    double base = BASE_LAT_US[algo][proto], intra_lat = HW_NVLINK_US[algo][proto];
    commcost_algo a_net = k == 1 ? COMMCOST_ALGO_TREE : algo;
    double lat_inter = span_lat_us(p, N);
    double inter_lat = HW_NET_US[a_net][proto] + lat_inter * (simple ? 2.0 : 1.0);
    /* network overhead: 1 us Intel, 2 us AMD, x3 for Simple (section 2) */
    double ovh = N > 1 ? (p->amd_cpu ? 2.0 : 1.0) * (simple ? 3.0 : 1.0) : 0.0;
    double lat;
    int lg = ilog2((double)N);
    switch (algo) {
    case COMMCOST_ALGO_RING: {
        double n_inter = N == 1 ? 0 : (ar ? 2.0 * (N - 1) : (double)(N - 1));
        lat = base + (nsteps - n_inter) * fmax(intra_lat, ovh) + n_inter * inter_lat;
        break;
    }
    case COMMCOST_ALGO_TREE:
        lat = base + 2.0 * ((k - 1) * intra_lat + lg * inter_lat);
        break;
    case COMMCOST_ALGO_NVLS:
        lat = intra_lat;
        break;
    case COMMCOST_ALGO_PAT:
    default:
        lat = base + lg * inter_lat / PAT_LOG_DIV + PAT_PER_RANK_US * n;
        break;
    }
    /* ---- time (section 3.4) ---- */
    if (algo == COMMCOST_ALGO_TREE && S >= 64.0) {
        int L = ilog2(S / 64.0);
        if (L < 23)
            algbw *= TREE_CORR[proto][L];
    }
    if (algo == COMMCOST_ALGO_RING && simple && ar && N > 1 && S / (2.0 * nch * n) >= 64.0)
        lat *= RING_PLATEAU; /* comm.nChannels = 2 x search channels (section 3.7) */
    *lat_ns = lat * 1000.0;
    *busbw_gbps = busbw;
    return lat * 1000.0 + S / algbw;
}

double commcost_nccl_time_ns(const commcost_params *p, commcost_coll coll, int64_t bytes, const commcost_group *g,
                             commcost_algo algo, commcost_proto proto)
{
    double lat, bw;
    return nccl_eval(p, coll, bytes, g, algo, proto, &lat, &bw);
}

/* The alpha-beta model's time (the closed forms at the top of commcost.h). */
static double alpha_beta_ns(const commcost_params *p, commcost_coll coll, double S, int n, int k)
{
    int N = n / k;
    if (N == 1) {
        double bw = coll == COMM_ALL_REDUCE ? p->nvlink_allreduce_busbw_gbps : p->nvlink_busbw_gbps;
        return ring_ns(coll, S, n, bw, p->nvlink_alpha_ns);
    }
    /* hierarchical: intra-node part over NVLink on S, inter-node part on
     * S/k per rank through its NIC share. */
    double intra_rs = ring_ns(COMM_REDUCE_SCATTER, S, k, p->nvlink_busbw_gbps, p->nvlink_alpha_ns);
    double inter = ring_ns(coll, S / k, N, p->nic_gbps_per_gpu, p->nic_alpha_ns);
    if (coll == COMM_ALL_REDUCE)
        return intra_rs + inter + intra_rs; /* RS, AR, AG */
    return intra_rs + inter;                /* AG: inter then intra; RS: intra then inter */
}

int commcost_nccl_choose(const commcost_params *p, commcost_coll coll, int64_t bytes, const commcost_group *g,
                         commcost_choice *out, ts_err *err)
{
    memset(out, 0, sizeof *out);
    if (coll == COMM_P2P || coll == COMM_ALL_TO_ALL || (unsigned)coll >= COMM_COLL_COUNT)
        return err_set(err, TS_EINVAL, "%s: NCCL's tuning model covers all-reduce, all-gather and reduce-scatter",
                       commcost_coll_name(coll));
    int n = g->ranks, k = g->ranks_per_node;
    out->algo = COMMCOST_ALGO_RING;
    out->proto = COMMCOST_PROTO_SIMPLE;
    out->net_factor = commcost_net_factor(p, n / k);
    if (n <= 1 || bytes <= 0)
        return TS_OK;
    if (p->model != COMMCOST_NCCL) {
        out->time_ns = alpha_beta_ns(p, coll, (double)bytes, n, k);
    } else {
        double best = -1;
        /* scan order of section 3.6: algorithms, then LL, LL128, Simple;
         * only a strictly smaller time wins */
        for (int a = 0; a < COMMCOST_ALGO_COUNT; a++)
            for (int q = 0; q < COMMCOST_PROTO_COUNT; q++) {
                double lat, bw;
                double t = nccl_eval(p, coll, bytes, g, (commcost_algo)a, (commcost_proto)q, &lat, &bw);
                if (t >= 0 && (best < 0 || t < best)) {
                    best = t;
                    out->lat_ns = lat;
                    out->algo = (commcost_algo)a;
                    out->proto = (commcost_proto)q;
                }
            }
        out->time_ns = best;
    }
    /* nccl-tests' bus bandwidth of the whole call (section 4) */
    double f = coll == COMM_ALL_REDUCE ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
    out->busbw_gbps = out->time_ns > 0 ? (double)bytes / out->time_ns * f : 0;
    return TS_OK;
}

void commcost_flow_terms(const commcost_params *p, commcost_coll coll, int64_t bytes, const commcost_group *g,
                         double *bw_factor, int64_t *lat_ns)
{
    *bw_factor = 1.0;
    *lat_ns = 0;
    if (p->model != COMMCOST_NCCL || bytes <= 0 || g->ranks <= 1 || coll == COMM_P2P || coll == COMM_ALL_TO_ALL ||
        (unsigned)coll >= COMM_COLL_COUNT)
        return;
    commcost_choice at;
    ts_err e;
    if (commcost_nccl_choose(p, coll, bytes, g, &at, &e) != TS_OK || !(at.time_ns > 0))
        return;
    /* what the flows run (net_coll.h, NET_ALGO_AUTO): NVLS for an all-reduce
     * inside one NVLink SHARP node, a ring otherwise, at Simple's rate */
    commcost_algo flows =
        coll == COMM_ALL_REDUCE && p->nvls && g->ranks == g->ranks_per_node ? COMMCOST_ALGO_NVLS : COMMCOST_ALGO_RING;
    double lat, bw;
    double ref = nccl_eval(p, coll, bytes, g, flows, COMMCOST_PROTO_SIMPLE, &lat, &bw);
    if (ref > lat && at.time_ns > at.lat_ns)
        *bw_factor = (at.time_ns - at.lat_ns) / (ref - lat);
    *lat_ns = (int64_t)llround(at.lat_ns);
}

int64_t commcost_ns(const commcost_params *p, commcost_coll coll, int64_t bytes, const commcost_group *g)
{
    if (g->ranks <= 1 || bytes <= 0)
        return 0;
    double S = (double)bytes;
    int n = g->ranks, k = g->ranks_per_node;
    double ns;
    if (coll == COMM_ALL_TO_ALL) { /* (n-1) p2p sends of S/n (commcost.h) */
        double piece = S / n;
        double one = k == n ? p->nvlink_alpha_ns + piece / p->nvlink_p2p_gbps
                            : p->nic_alpha_ns + (p->model == COMMCOST_NCCL ? p->lat_leaf_us * 1000.0 : 0.0) +
                                  piece / p->nic_gbps_per_gpu;
        ns = (n - 1) * one;
    } else if (coll == COMM_P2P) {
        if (k == 2)
            ns = p->nvlink_alpha_ns + S / p->nvlink_p2p_gbps;
        else /* across nodes: the fabric's path latency on top in the NCCL model */
            ns =
                p->nic_alpha_ns + (p->model == COMMCOST_NCCL ? p->lat_leaf_us * 1000.0 : 0.0) + S / p->nic_gbps_per_gpu;
    } else if (p->model != COMMCOST_NCCL) {
        ns = alpha_beta_ns(p, coll, S, n, k);
    } else {
        commcost_choice c;
        commcost_nccl_choose(p, coll, bytes, g, &c, NULL);
        ns = c.time_ns;
    }
    return (int64_t)llround(ns);
}

double commcost_wire_bytes(commcost_coll coll, int64_t bytes, int ranks)
{
    if (ranks <= 1 && coll != COMM_P2P)
        return 0.0;
    double S = (double)bytes, f = (double)(ranks - 1) / ranks;
    switch (coll) {
    case COMM_ALL_REDUCE:
        return 2.0 * f * S;
    case COMM_ALL_GATHER:
    case COMM_REDUCE_SCATTER:
    case COMM_ALL_TO_ALL:
        return f * S;
    case COMM_P2P:
    default:
        return S;
    }
}

const char *commcost_coll_name(commcost_coll coll)
{
    static const char *const names[COMM_COLL_COUNT] = {"all-reduce", "all-gather", "reduce-scatter", "p2p",
                                                       "all-to-all"};
    return (unsigned)coll < COMM_COLL_COUNT ? names[coll] : "?";
}
