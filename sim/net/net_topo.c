/* net_topo — see net_topo.h. */
#include "sim/net/net_topo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool nvls_kind(const char *kind)
{
    return kind && (strncmp(kind, "H100", 4) == 0 || strncmp(kind, "H200", 4) == 0 || strncmp(kind, "B200", 4) == 0 ||
                    strncmp(kind, "GB200", 5) == 0);
}

int net_topo_fabric_params(const struct topo *t, int gpus, net_fabric_params *p, int *pods, ts_err *err)
{
    const topo_params *tp = &t->params;
    memset(p, 0, sizeof *p);
    if (t->form != TOPO_PARAMETRIC)
        return err_set(err, TS_EINVAL, "%s: not a parametric topology", t->source);
    if (tp->gpus_per_node < 1 || tp->nodes < 1)
        return err_set(err, TS_EINVAL, "%s: nodes %d and gpus_per_node %d must be >= 1", t->source, tp->nodes,
                       tp->gpus_per_node);
    int servers = gpus > 0 ? (gpus + tp->gpus_per_node - 1) / tp->gpus_per_node : tp->nodes;
    if (servers > tp->nodes)
        return err_set(err, TS_EINVAL, "%s: %d GPUs need %d servers but the topology has %d", t->source, gpus, servers,
                       tp->nodes);
    double o = tp->oversubscription >= 1 ? tp->oversubscription : 1;
    int ports = tp->switch_ports > 1 ? tp->switch_ports : (tp->nic_gbps <= 25 ? 40 : 64);
    p->servers = servers;
    p->gpus_per_server = tp->gpus_per_node;
    p->nics_per_server = tp->nics_per_node;
    p->nvlink_gbps = tp->intra_node_gbps;
    p->nvlink_eff = NET_NVLINK_EFF;
    p->nvlink_lat_us = tp->intra_node_latency_us / 2;
    p->pcie_gbps = tp->nic_gbps <= 25 ? 32 : 64; /* PCIe Gen4 / Gen5 x16, datasheets */
    p->pcie_lat_us = 0;                          /* counted in nic_latency_us */
    p->nic_gbps = tp->nic_gbps;
    p->net_eff = topo_nic_eff(tp->nic_gbps);
    p->nic_lat_us = tp->nic_latency_us;
    p->switch_lat_us = tp->switch_latency_us;
    p->rail_optimized = tp->fabric == TOPO_RAIL_OPTIMIZED;
    p->nvls = nvls_kind(tp->gpu);
    p->levels = tp->levels >= 1 ? tp->levels : 1;
    if (p->levels + 1 >= NET_MAX_LEVELS)
        return err_set(err, TS_EINVAL, "%s: levels %d; at most %d are supported", t->source, tp->levels,
                       NET_MAX_LEVELS - 2);
    /* Whole ports: a switch below the top has `down` ports down and
     * ports - down up; the ratio of the two is the level's oversubscription
     * (o rounded to whole ports). */
    int down = p->levels == 1 ? ports : (int)(ports * o / (1 + o) + 0.5);
    if (down > ports - 1 && p->levels > 1)
        down = ports - 1;
    if (down < 1)
        down = 1;
    double ow = p->levels > 1 ? (double)down / (ports - down) : 1;
    if (ow < 1)
        ow = 1;
    p->leaf_ports = down;
    for (int l = 2; l <= p->levels; l++)
        p->up[l] = (net_fabric_level){(l == 2 && p->levels >= 3) ? down : 0, 0, ow};
    int np = tp->pods > 1 ? tp->pods : 1;
    if (np > 1) {
        if (tp->nodes % np)
            return err_set(err, TS_EINVAL, "%s: %d nodes do not split into %d equal pods", t->source, tp->nodes, np);
        if (p->levels == 1)
            return err_set(err, TS_EINVAL, "%s: pods need at least 2 switch levels inside a pod", t->source);
        /* Pods by the design (nodes / pods servers each); the run fills
         * them in order, the last one perhaps partly. */
        int sp = tp->nodes / np, K = p->nics_per_server > 0 ? p->nics_per_server : 1;
        p->pod_servers = sp;
        int units = p->rail_optimized ? ((sp + p->leaf_ports - 1) / p->leaf_ports) * K
                                      : (int)(((long)sp * K + p->leaf_ports - 1) / p->leaf_ports);
        for (int l = 2; l < p->levels; l++) {
            if (!p->up[l].group)
                p->up[l].group = units; /* "joins all": all of its pod's units */
            units = (units + p->up[l].group - 1) / p->up[l].group;
        }
        p->up[p->levels].group = units;
        p->levels++;
        double po = tp->pod_oversubscription >= 1 ? tp->pod_oversubscription : 1;
        p->up[p->levels] = (net_fabric_level){0, 0, po};
        np = (servers + sp - 1) / sp;
    }
    if (pods)
        *pods = np;
    return TS_OK;
}

static int from_links(const struct topo *t, const char *gpu_kind, net_graph **out, ts_err *err)
{
    int rc;
    int G = t->params.gpus_per_node;
    size_t n = t->n_links;
    net_link_spec *specs = calloc(n ? n : 1, sizeof *specs);
    char(*names)[2][32] = calloc(n ? n : 1, sizeof *names);
    if (!specs || !names) {
        free(specs);
        free(names);
        return err_set(err, TS_ENOMEM, "net_topo: out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        const topo_link *l = &t->links[i];
        topo_endpoint_name(&l->a, names[i][0], sizeof names[i][0]);
        topo_endpoint_name(&l->b, names[i][1], sizeof names[i][1]);
        specs[i] = (net_link_spec){names[i][0], names[i][1], l->bandwidth_gbps, 0, l->latency_us};
    }
    rc = net_graph_from_links(specs, (int)n, G > 0 ? G : 1, out, err);
    if (rc)
        err_prefix(err, "%s", t->source);
    else
        (*out)->nvls = nvls_kind(gpu_kind);
    free(specs);
    free(names);
    return rc;
}

int net_graph_from_topo(const struct topo *t, int gpus, const char *gpu_kind, net_graph **out, ts_err *err)
{
    if (t->form == TOPO_LINK_LIST)
        return from_links(t, gpu_kind, out, err);
    net_fabric_params p;
    int rc = net_topo_fabric_params(t, gpus, &p, NULL, err);
    if (rc)
        return rc;
    if (gpu_kind && t->params.gpu[0] == 0)
        p.nvls = nvls_kind(gpu_kind);
    rc = net_graph_build_fabric(&p, out, err);
    if (rc)
        err_prefix(err, "%s", t->source);
    return rc;
}
