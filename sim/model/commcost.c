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
 *
 * Latencies (alpha): NOT in the reference set. ASSUMPTION, stated as such:
 * 5 us per step inside a node, 10 us per step across nodes, the order of
 * magnitude NCCL shows for small messages. They matter only for small
 * messages (the pipeline and TP messages of the calibration rows are >= 25 MB,
 * where 7 steps x 5 us is < 5% of the time). A calibration file's measured
 * collective rows replace them (calib.h). */
#define ALPHA_NVLINK_NS 5000.0  /* assumption, see above */
#define ALPHA_NIC_NS    10000.0 /* assumption, see above */

int commcost_params_default(const gpu_spec *gpu, commcost_params *out, ts_err *err)
{
    memset(out, 0, sizeof *out);
    out->nvlink_alpha_ns = ALPHA_NVLINK_NS;
    out->nic_alpha_ns = ALPHA_NIC_NS;
    if (strncmp(gpu->name, "A100", 4) == 0) {
        out->nvlink_allreduce_busbw_gbps = 230.0; /* networks.csv, measured */
        out->nvlink_busbw_gbps = 230.0;           /* networks.csv, same ring */
        out->nvlink_p2p_gbps = 240.0;             /* networks.csv, measured effective */
        out->nic_gbps_per_gpu = 2.0 * 12.2;       /* networks.csv: 12.2 per 100 Gb/s, HDR 200 Gb/s */
    } else if (strncmp(gpu->name, "H100", 4) == 0 || strncmp(gpu->name, "H200", 4) == 0) {
        out->nvlink_allreduce_busbw_gbps = 480.0;     /* networks.csv, NVLink SHARP, measured */
        out->nvlink_busbw_gbps = 370.0;               /* networks.csv, ring, measured */
        out->nvlink_p2p_gbps = 450.0 * 240.0 / 300.0; /* line rate x A100 effective ratio */
        out->nic_gbps_per_gpu = 47.0;                 /* networks.csv, per 400 Gb/s NIC, measured */
    } else {
        return err_set(err, TS_EINVAL,
                       "no communication defaults for GPU kind '%s' (known: A100*, H100*, "
                       "H200*)",
                       gpu->name);
    }
    return TS_OK;
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
    case COMM_P2P:
    default:
        return alpha_ns + S / beta_gbps;
    }
}

int64_t commcost_ns(const commcost_params *p, commcost_coll coll, int64_t bytes, const commcost_group *g)
{
    if (g->ranks <= 1 || bytes <= 0)
        return 0;
    double S = (double)bytes;
    int n = g->ranks, k = g->ranks_per_node, N = n / k; /* N nodes */
    double ns;
    if (coll == COMM_P2P) {
        ns = (k == 2) ? p->nvlink_alpha_ns + S / p->nvlink_p2p_gbps : p->nic_alpha_ns + S / p->nic_gbps_per_gpu;
    } else if (N == 1) {
        double bw = coll == COMM_ALL_REDUCE ? p->nvlink_allreduce_busbw_gbps : p->nvlink_busbw_gbps;
        ns = ring_ns(coll, S, n, bw, p->nvlink_alpha_ns);
    } else {
        /* hierarchical: intra-node part over NVLink on S, inter-node part on
         * S/k per rank through its NIC share. */
        double intra_rs = ring_ns(COMM_REDUCE_SCATTER, S, k, p->nvlink_busbw_gbps, p->nvlink_alpha_ns);
        double inter = ring_ns(coll, S / k, N, p->nic_gbps_per_gpu, p->nic_alpha_ns);
        if (coll == COMM_ALL_REDUCE)
            ns = intra_rs + inter + intra_rs; /* RS, AR, AG */
        else
            ns = intra_rs + inter; /* AG: inter then intra; RS: intra then inter */
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
        return f * S;
    case COMM_P2P:
    default:
        return S;
    }
}

const char *commcost_coll_name(commcost_coll coll)
{
    static const char *const names[COMM_COLL_COUNT] = {"all-reduce", "all-gather", "reduce-scatter", "p2p"};
    return (unsigned)coll < COMM_COLL_COUNT ? names[coll] : "?";
}
