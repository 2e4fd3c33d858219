/* net_graph — see net_graph.h. */
#include "sim/net/net_graph.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/config/topo.h"
#include "sim/util/grow.h"

net_graph *net_graph_new(void)
{
    net_graph *g = calloc(1, sizeof *g);
    if (g)
        g->gpus_per_server = -1;
    return g;
}

void net_graph_free(net_graph *g)
{
    if (!g)
        return;
    free(g->nodes);
    free(g->links);
    free(g->out_off);
    free(g->out_link);
    free(g->gpu_node);
    free(g);
}

int net_graph_add_node(net_graph *g, net_node_kind kind, int level, int server, int local, ts_err *err)
{
    if (g->finished)
        return err_set(err, TS_ESTATE, "net_graph_add_node: graph already finished");
    if (grow_to_int((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, 64, sizeof *g->nodes))
        return err_set(err, TS_ENOMEM, "net_graph: out of memory adding node %d", g->n_nodes);
    int id = g->n_nodes++;
    g->nodes[id] = (net_node){kind, level, server, local};
    if (kind == NET_NODE_GPU) {
        if (grow_to_int((void **)&g->gpu_node, &g->cap_gpus, g->n_gpus + 1, 64, sizeof *g->gpu_node))
            return err_set(err, TS_ENOMEM, "net_graph: out of memory adding GPU %d", g->n_gpus);
        g->gpu_node[g->n_gpus++] = id;
        if (server + 1 > g->n_servers)
            g->n_servers = server + 1;
    }
    return id;
}

int net_graph_add_link1(net_graph *g, int a, int b, net_link_kind kind, double line_gbps, double eff, double lat_us,
                        ts_err *err)
{
    if (g->finished)
        return err_set(err, TS_ESTATE, "net_graph_add_link: graph already finished");
    if (a < 0 || b < 0 || a >= g->n_nodes || b >= g->n_nodes || a == b)
        return err_set(err, TS_EINVAL, "net_graph: link %d -> %d: endpoints must be two distinct nodes in 0..%d", a, b,
                       g->n_nodes - 1);
    if (!(line_gbps > 0) || !(eff > 0 && eff <= 1) || !(lat_us >= 0))
        return err_set(
            err, TS_EINVAL,
            "net_graph: link %d -> %d: bandwidth %g GB/s must be > 0, efficiency %g in (0, 1], latency %g us >= 0", a,
            b, line_gbps, eff, lat_us);
    if (grow_to_int((void **)&g->links, &g->cap_links, g->n_links + 1, 64, sizeof *g->links))
        return err_set(err, TS_ENOMEM, "net_graph: out of memory adding link %d", g->n_links);
    int id = g->n_links++;
    g->links[id] = (net_link){a, b, kind, line_gbps, line_gbps * eff, lat_us, -1, false};
    return id;
}

int net_graph_add_link2(net_graph *g, int a, int b, net_link_kind kind, double line_gbps, double eff, double lat_us,
                        ts_err *err)
{
    int x = net_graph_add_link1(g, a, b, kind, line_gbps, eff, lat_us, err);
    if (x < 0)
        return x;
    int y = net_graph_add_link1(g, b, a, kind, line_gbps, eff, lat_us, err);
    if (y < 0)
        return y;
    g->links[x].reverse = y;
    g->links[y].reverse = x;
    return x;
}

static const net_graph *cmp_graph; /* qsort context; set only inside finish */
static int cmp_out(const void *pa, const void *pb)
{
    const net_link *la = &cmp_graph->links[*(const int *)pa];
    const net_link *lb = &cmp_graph->links[*(const int *)pb];
    if (la->src != lb->src)
        return la->src < lb->src ? -1 : 1;
    if (la->dst != lb->dst)
        return la->dst < lb->dst ? -1 : 1;
    return *(const int *)pa < *(const int *)pb ? -1 : 1;
}

int net_graph_finish(net_graph *g, ts_err *err)
{
    int rc = TS_OK;
    int *queue = NULL;
    char *seen = NULL;
    if (g->finished)
        return TS_OK;
    if (g->n_gpus == 0)
        return err_set(err, TS_EINVAL, "net_graph: no GPUs in the topology");
    g->out_off = calloc((size_t)g->n_nodes + 1, sizeof *g->out_off);
    g->out_link = malloc((size_t)(g->n_links ? g->n_links : 1) * sizeof *g->out_link);
    if (!g->out_off || !g->out_link) {
        rc = err_set(err, TS_ENOMEM, "net_graph: out of memory");
        goto out;
    }
    for (int i = 0; i < g->n_links; i++)
        g->out_link[i] = i;
    cmp_graph = g;
    qsort(g->out_link, (size_t)g->n_links, sizeof *g->out_link, cmp_out);
    cmp_graph = NULL;
    for (int i = 0; i < g->n_links; i++)
        g->out_off[g->links[i].src + 1]++;
    for (int v = 0; v < g->n_nodes; v++)
        g->out_off[v + 1] += g->out_off[v];
    for (int i = 1; i < g->n_links; i++) {
        const net_link *p = &g->links[g->out_link[i - 1]], *q = &g->links[g->out_link[i]];
        if (p->src == q->src && p->dst == q->dst) {
            rc = err_set(err, TS_EINVAL, "net_graph: two links %d -> %d; merge them into one with the summed bandwidth",
                         p->src, p->dst);
            goto out;
        }
    }
    /* Every GPU must reach every other (directed BFS from GPU 0 suffices
     * when links come in pairs; check both ways by requiring pairs). */
    queue = malloc((size_t)g->n_nodes * sizeof *queue);
    seen = calloc((size_t)g->n_nodes, 1);
    if (!queue || !seen) {
        rc = err_set(err, TS_ENOMEM, "net_graph: out of memory");
        goto out;
    }
    int head = 0, tail = 0;
    queue[tail++] = g->gpu_node[0];
    seen[g->gpu_node[0]] = 1;
    while (head < tail) {
        int v = queue[head++];
        for (int k = g->out_off[v]; k < g->out_off[v + 1]; k++) {
            int w = g->links[g->out_link[k]].dst;
            if (!seen[w]) {
                seen[w] = 1;
                queue[tail++] = w;
            }
        }
    }
    for (int i = 0; i < g->n_gpus; i++) {
        if (!seen[g->gpu_node[i]]) {
            char b[32];
            rc = err_set(err, TS_EINVAL, "net_graph: %s cannot be reached from gpu0; the fabric is disconnected",
                         net_graph_node_name(g, g->gpu_node[i], b, sizeof b));
            goto out;
        }
    }
    g->finished = true;
    for (int i = 0; i < g->n_links; i++)
        if (g->links[i].reverse < 0)
            g->links[i].reverse = net_graph_find_link(g, g->links[i].dst, g->links[i].src);
out:
    free(queue);
    free(seen);
    return rc;
}

int net_graph_find_link(const net_graph *g, int a, int b)
{
    if (!g->finished || a < 0 || a >= g->n_nodes)
        return -1;
    int lo = g->out_off[a], hi = g->out_off[a + 1];
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        int d = g->links[g->out_link[mid]].dst;
        if (d == b)
            return g->out_link[mid];
        if (d < b)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

int net_graph_scale_link(net_graph *g, int a, int b, double factor, ts_err *err)
{
    char na[32], nb[32];
    if (!(factor > 0))
        return err_set(err, TS_EINVAL, "link degrade factor %g must be > 0", factor);
    int x = net_graph_find_link(g, a, b), y = net_graph_find_link(g, b, a);
    if (x < 0 && y < 0)
        return err_set(err, TS_EINVAL, "no link between %s and %s in the topology",
                       net_graph_node_name(g, a, na, sizeof na), net_graph_node_name(g, b, nb, sizeof nb));
    if (x >= 0)
        g->links[x].bw_gbps *= factor;
    if (y >= 0)
        g->links[y].bw_gbps *= factor;
    g->bw_version++;
    return TS_OK;
}

int net_graph_fail_link(net_graph *g, int a, int b, ts_err *err)
{
    char na[32], nb[32];
    int x = net_graph_find_link(g, a, b), y = net_graph_find_link(g, b, a);
    if (x < 0 && y < 0)
        return err_set(err, TS_EINVAL, "no link between %s and %s in the topology",
                       net_graph_node_name(g, a, na, sizeof na), net_graph_node_name(g, b, nb, sizeof nb));
    if (x >= 0)
        g->links[x].down = true;
    if (y >= 0)
        g->links[y].down = true;
    return TS_OK;
}

static int gpu_neighbor(const net_graph *g, int gpu, net_node_kind kind)
{
    if (gpu < 0 || gpu >= g->n_gpus)
        return -1;
    int v = g->gpu_node[gpu], first = -1;
    for (int k = g->out_off[v]; k < g->out_off[v + 1]; k++) {
        int w = g->links[g->out_link[k]].dst;
        if (g->nodes[w].kind != kind)
            continue;
        if (first < 0)
            first = w;
        if (g->nodes[w].local == g->nodes[v].local)
            return w;
    }
    return first;
}

int net_graph_gpu_nic(const net_graph *g, int gpu)
{
    return gpu_neighbor(g, gpu, NET_NODE_NIC);
}
int net_graph_gpu_nvswitch(const net_graph *g, int gpu)
{
    return gpu_neighbor(g, gpu, NET_NODE_NVSWITCH);
}

const char *net_graph_node_name(const net_graph *g, int node, char *buf, int cap)
{
    if (node < 0 || node >= g->n_nodes) {
        snprintf(buf, (size_t)cap, "node?%d", node);
        return buf;
    }
    const net_node *n = &g->nodes[node];
    switch (n->kind) {
    case NET_NODE_GPU:
        snprintf(buf, (size_t)cap, "gpu%d.%d", n->server, n->local);
        break;
    case NET_NODE_NVSWITCH:
        snprintf(buf, (size_t)cap, "nvs%d", n->server);
        break;
    case NET_NODE_NIC:
        snprintf(buf, (size_t)cap, "nic%d.%d", n->server, n->local);
        break;
    case NET_NODE_SWITCH:
        snprintf(buf, (size_t)cap, "sw%d.%d", n->level, n->local);
        break;
    }
    return buf;
}

int net_graph_node_by_name(const net_graph *g, const char *name)
{
    char b[32];
    for (int v = 0; v < g->n_nodes; v++)
        if (strcmp(net_graph_node_name(g, v, b, sizeof b), name) == 0)
            return v;
    return -1;
}

/* ------------------------------------------------------------ fabrics */

int net_fabric_defaults(net_fabric_params *p, const char *gpu_kind, int servers, ts_err *err)
{
    memset(p, 0, sizeof *p);
    p->servers = servers;
    p->gpus_per_server = 8; /* DGX A100 / H100 (networks.csv: 8 compute NICs per node) */
    p->nics_per_server = 8;
    p->nvlink_eff = NET_NVLINK_EFF;
    /* Latencies are order-of-magnitude assumptions (not fitted, no published
     * row): they matter only for small messages. */
    p->nvlink_lat_us = 0.5;
    p->pcie_lat_us = 0.5;
    p->nic_lat_us = 1.0;
    p->switch_lat_us = 0.3;
    p->rail_optimized = true;
    p->leaf_ports = 32;
    p->levels = 2;
    p->up[2] = (net_fabric_level){0, 0, 1.0}; /* spines: auto */
    if (strncmp(gpu_kind, "A100", 4) == 0) {
        p->nvlink_gbps = 300; /* networks.csv: NVLink3 12 x 25 GB/s */
        p->nic_gbps = 25;     /* networks.csv: HDR 200 Gb/s */
        p->pcie_gbps = 32;    /* PCIe Gen4 x16, datasheet */
    } else if (strncmp(gpu_kind, "H100", 4) == 0 || strncmp(gpu_kind, "H200", 4) == 0) {
        p->nvlink_gbps = 450; /* networks.csv: NVLink4 18 links */
        p->nic_gbps = 50;     /* networks.csv: NDR 400 Gb/s */
        p->pcie_gbps = 64;    /* PCIe Gen5 x16, datasheet */
        p->nvls = true;       /* networks.csv: NVLS "NCCL default on NVSwitch systems" */
    } else {
        return err_set(err, TS_EINVAL, "unknown GPU kind '%s' for the network defaults; valid: A100*, H100*, H200*",
                       gpu_kind);
    }
    p->net_eff = topo_nic_eff(p->nic_gbps);
    return TS_OK;
}

static int check_params(const net_fabric_params *p, ts_err *err)
{
    if (p->servers < 1 || p->gpus_per_server < 1 || p->nics_per_server < 0)
        return err_set(err, TS_EINVAL,
                       "fabric: servers %d, GPUs per server %d must be >= 1 and NICs per server %d >= 0", p->servers,
                       p->gpus_per_server, p->nics_per_server);
    if (p->servers > 1 && p->nics_per_server < 1)
        return err_set(err, TS_EINVAL, "fabric: %d servers need at least one NIC each", p->servers);
    if (p->levels < 1 || p->levels >= NET_MAX_LEVELS)
        return err_set(err, TS_EINVAL, "fabric: levels %d must be in 1..%d", p->levels, NET_MAX_LEVELS - 1);
    if (p->leaf_ports < 1)
        return err_set(err, TS_EINVAL, "fabric: leaf_ports %d must be >= 1", p->leaf_ports);
    for (int l = 2; l <= p->levels; l++)
        if (p->up[l].group < 0 || p->up[l].switches < 0 || !(p->up[l].oversub >= 1))
            return err_set(
                err, TS_EINVAL,
                "fabric level %d: group %d must be >= 0, switches %d >= 0 (0 = auto), oversubscription %g >= 1", l,
                p->up[l].group, p->up[l].switches, p->up[l].oversub);
    return TS_OK;
}

/* Routes cross the fabric over switches only: every leaf must reach every
 * other leaf without passing through a server. */
static int check_switch_paths(const net_graph *g, ts_err *err)
{
    int *queue = malloc(sizeof *queue * (size_t)g->n_nodes);
    char *seen = calloc((size_t)g->n_nodes, 1);
    int rc = TS_OK, head = 0, tail = 0, leaf0 = -1;
    if (!queue || !seen) {
        rc = err_set(err, TS_ENOMEM, "fabric: out of memory");
        goto out;
    }
    for (int v = 0; v < g->n_nodes && leaf0 < 0; v++)
        if (g->nodes[v].kind == NET_NODE_SWITCH && g->nodes[v].level == 1)
            leaf0 = v;
    queue[tail++] = leaf0;
    seen[leaf0] = 1;
    while (head < tail) {
        int v = queue[head++];
        for (int k = g->out_off[v]; k < g->out_off[v + 1]; k++) {
            int w = g->links[g->out_link[k]].dst;
            if (!seen[w] && g->nodes[w].kind == NET_NODE_SWITCH) {
                seen[w] = 1;
                queue[tail++] = w;
            }
        }
    }
    for (int v = 0; v < g->n_nodes; v++)
        if (g->nodes[v].kind == NET_NODE_SWITCH && g->nodes[v].level == 1 && !seen[v]) {
            rc = err_set(err, TS_EINVAL,
                         "fabric: leaf sw1.%d cannot reach sw1.%d over switches: a switch has fewer uplink ports "
                         "(downlink / oversubscription / NIC rate) than the group has upper switches; use fewer "
                         "switches per group or a lower oversubscription",
                         g->nodes[leaf0].local, g->nodes[v].local);
            break;
        }
out:
    free(queue);
    free(seen);
    return rc;
}

/* The switches of one fabric level while the levels above it are built: their
 * node ids, the unit (group of switches joined as one) each belongs to, and the
 * line rate of the links coming down into each, GB/s. */
typedef struct {
    int *node, *unit;
    double *down_line;
    int n, nunits;
} fabric_tier;

static void fabric_tier_free(fabric_tier *t)
{
    free(t->node);
    free(t->unit);
    free(t->down_line);
    *t = (fabric_tier){0};
}

/* Adds the servers: their GPUs (GPU i = server i/G, local i%G), then the
 * NVSwitches and the NICs, and joins each GPU to its NVSwitch and NIC; the
 * first NIC's node id goes to *nic0. */
static int fabric_add_servers(net_graph *g, const net_fabric_params *p, int *nic0, ts_err *err)
{
    const int S = p->servers, G = p->gpus_per_server, K = p->nics_per_server;
    int rc;
    for (int s = 0; s < S; s++)
        for (int i = 0; i < G; i++)
            if ((rc = net_graph_add_node(g, NET_NODE_GPU, 0, s, i, err)) < 0)
                return rc;
    int nvs0 = g->n_nodes;
    if (G > 1)
        for (int s = 0; s < S; s++)
            if ((rc = net_graph_add_node(g, NET_NODE_NVSWITCH, 0, s, 0, err)) < 0)
                return rc;
    *nic0 = g->n_nodes;
    for (int s = 0; s < S; s++)
        for (int k = 0; k < K; k++)
            if ((rc = net_graph_add_node(g, NET_NODE_NIC, 0, s, k, err)) < 0)
                return rc;
    for (int s = 0; s < S; s++) {
        for (int i = 0; i < G; i++) {
            int gpu = s * G + i;
            if (G > 1 && (rc = net_graph_add_link2(g, gpu, nvs0 + s, NET_LINK_NVLINK, p->nvlink_gbps, p->nvlink_eff,
                                                   p->nvlink_lat_us, err)) < 0)
                return rc;
            if (K > 0 && (rc = net_graph_add_link2(g, gpu, *nic0 + s * K + i % K, NET_LINK_PCIE, p->pcie_gbps, 1.0,
                                                   p->pcie_lat_us, err)) < 0)
                return rc;
        }
    }
    return TS_OK;
}

/* The leaf of NIC k of server s: pods of sp servers hold lpp leaves each;
 * inside a pod, rail-optimized leaf k of a group of leaf_ports servers
 * takes NIC k of each, else NICs fill leaves in order. */
static int fabric_leaf_of(const net_fabric_params *p, int sp, int lpp, int s, int k)
{
    int K = p->nics_per_server, ls = s % sp;
    int in_pod = p->rail_optimized ? (ls / p->leaf_ports) * K + k : (ls * K + k) / p->leaf_ports;
    return (s / sp) * lpp + in_pod;
}

/* Adds the leaf switches and joins every NIC to its leaf (rail-optimized: NIC
 * k of a group of servers to that group's leaf k); *leaves gets the leaves,
 * each its own unit. The caller frees *leaves, also on failure. */
static int fabric_add_leaves(net_graph *g, const net_fabric_params *p, int nic0, fabric_tier *leaves, ts_err *err)
{
    const int S = p->servers, K = p->nics_per_server, sp = p->pod_servers > 0 ? p->pod_servers : S;
    const int lpp = p->rail_optimized ? ((sp + p->leaf_ports - 1) / p->leaf_ports) * K
                                      : (sp * K + p->leaf_ports - 1) / p->leaf_ports;
    int rc, nleaves = 0;
    for (int s = 0; s < S; s++)
        for (int k = 0; k < K; k++)
            if (fabric_leaf_of(p, sp, lpp, s, k) + 1 > nleaves)
                nleaves = fabric_leaf_of(p, sp, lpp, s, k) + 1;
    int cap = nleaves > 1 ? nleaves : 1;
    leaves->node = malloc(sizeof *leaves->node * (size_t)cap);
    leaves->unit = malloc(sizeof *leaves->unit * (size_t)cap);
    leaves->down_line = calloc((size_t)g->n_nodes + (size_t)cap * 2 + 64, sizeof *leaves->down_line);
    if (!leaves->node || !leaves->unit || !leaves->down_line)
        return err_set(err, TS_ENOMEM, "fabric: out of memory");
    leaves->n = leaves->nunits = nleaves;
    int leaf0 = g->n_nodes;
    for (int j = 0; j < nleaves; j++) {
        if ((rc = net_graph_add_node(g, NET_NODE_SWITCH, 1, -1, j, err)) < 0)
            return rc;
        leaves->node[j] = rc;
        leaves->unit[j] = j;
    }
    for (int s = 0; s < S; s++)
        for (int k = 0; k < K; k++) {
            int leaf = fabric_leaf_of(p, sp, lpp, s, k);
            if ((rc = net_graph_add_link2(g, nic0 + s * K + k, leaf0 + leaf, NET_LINK_FABRIC, p->nic_gbps, p->net_eff,
                                          p->nic_lat_us, err)) < 0)
                return rc;
        }
    /* The design, not the population: every leaf has leaf_ports NIC ports
     * (cabled or not), so a partly filled leaf has a full leaf's uplinks. */
    for (int j = 0; j < nleaves; j++)
        leaves->down_line[j] = p->leaf_ports * p->nic_gbps;
    return TS_OK;
}

/* The number of switches in the largest unit of a tier (units are consecutive). */
static int fabric_widest_unit(const fabric_tier *t)
{
    int unit_max = 1;
    for (int w = 0, run = 0; w < t->n; w++) {
        run = (w > 0 && t->unit[w] == t->unit[w - 1]) ? run + 1 : 1;
        if (run > unit_max)
            unit_max = run;
    }
    return unit_max;
}

/* Switches per group when a level asks for them automatically: as many as the
 * widest uplink of the tier below, in ports of the NIC rate (at least 1). */
static int fabric_auto_switches(const net_fabric_params *p, const net_fabric_level *lv, const fabric_tier *t)
{
    double most = 0;
    for (int w = 0; w < t->n; w++)
        if (t->down_line[w] / lv->oversub > most)
            most = t->down_line[w] / lv->oversub;
    int switches = (int)(most / p->nic_gbps + 0.999999);
    return switches < 1 ? 1 : switches;
}

/* Joins switch w of the lower tier to the upper switches of its group grp.
 * Uplink capacity: downlink / oversub, in ports of the NIC rate. With at
 * least one port per upper switch of the group it is spread over all of them;
 * with fewer, the switch takes whole ports to a round-robin subset (if its
 * unit's switches together still reach every upper switch), so one flow on an
 * idle fabric still runs at port rate; else it is spread thin. */
static int fabric_add_uplinks(net_graph *g, const net_fabric_params *p, const net_fabric_level *lv,
                              const fabric_tier *lower, int w, int grp, int unit_max, fabric_tier *upper, ts_err *err)
{
    double up_gbps = lower->down_line[w] / lv->oversub;
    if (!(up_gbps > 0))
        return TS_OK;
    double up_ports = up_gbps / p->nic_gbps;
    int nlinks = lv->switches, first = 0;
    double line = up_gbps / lv->switches;
    if (up_ports < lv->switches && unit_max * (int)(up_ports + 0.5) >= lv->switches) {
        nlinks = (int)(up_ports + 0.5);
        if (nlinks < 1)
            nlinks = 1;
        line = up_gbps / nlinks;
        first = (int)(((long long)w * nlinks) % lv->switches);
    }
    for (int j = 0; j < nlinks; j++) {
        int u = grp * lv->switches + (first + j) % lv->switches;
        int rc = net_graph_add_link2(g, lower->node[w], upper->node[u], NET_LINK_FABRIC, line, p->net_eff,
                                     p->switch_lat_us, err);
        if (rc < 0)
            return rc;
    }
    return TS_OK;
}

/* Adds switch level l (2..levels) above tier *t: groups of its units under
 * groups of new switches, each lower switch joined to its group's switches;
 * on success *t becomes the new level (its units are the groups). */
static int fabric_add_level(net_graph *g, const net_fabric_params *p, int l, fabric_tier *t, ts_err *err)
{
    net_fabric_level lv = p->up[l];
    int gsize = lv.group ? lv.group : t->nunits;
    int ngroups = (t->nunits + gsize - 1) / gsize;
    int unit_max = fabric_widest_unit(t);
    if (lv.switches == 0)
        lv.switches = fabric_auto_switches(p, &lv, t);
    int nupper = ngroups * lv.switches, rc = TS_OK;
    fabric_tier up = {.n = nupper, .nunits = ngroups};
    up.node = calloc((size_t)nupper, sizeof *up.node);
    up.unit = calloc((size_t)nupper, sizeof *up.unit);
    up.down_line = calloc((size_t)nupper, sizeof *up.down_line);
    if (!up.node || !up.unit || !up.down_line) {
        rc = err_set(err, TS_ENOMEM, "fabric: out of memory");
        goto out;
    }
    for (int j = 0; j < nupper; j++) {
        if ((rc = net_graph_add_node(g, NET_NODE_SWITCH, l, -1, j, err)) < 0)
            goto out;
        up.node[j] = rc;
        up.unit[j] = j / lv.switches;
    }
    rc = TS_OK;
    for (int w = 0; w < t->n && !rc; w++)
        rc = fabric_add_uplinks(g, p, &lv, t, w, t->unit[w] / gsize, unit_max, &up, err);
    /* Design downlink of an upper switch: the uplinks of a full group
     * (gsize units of unit_max switches) shared by its switches, whether or
     * not the group is filled. */
    double most = 0;
    for (int w = 0; w < t->n; w++)
        if (t->down_line[w] > most)
            most = t->down_line[w];
    for (int j = 0; j < nupper; j++)
        up.down_line[j] = (double)gsize * unit_max * (most / lv.oversub) / lv.switches;
    if (!rc) { /* the new level becomes the tier; the old one is freed below */
        fabric_tier old = *t;
        *t = up;
        up = old;
    }
out:
    fabric_tier_free(&up);
    return rc;
}

int net_graph_build_fabric(const net_fabric_params *p, net_graph **out, ts_err *err)
{
    int rc = check_params(p, err);
    if (rc)
        return rc;
    net_graph *g = net_graph_new();
    fabric_tier tier = {0};
    if (!g)
        return err_set(err, TS_ENOMEM, "fabric: out of memory");
    g->gpus_per_server = p->gpus_per_server;
    g->nvls = p->nvls;
    int nic0;
    const bool fabric = p->nics_per_server > 0; /* servers joined by a switched fabric */
    rc = fabric_add_servers(g, p, &nic0, err);
    if (!rc && fabric)
        rc = fabric_add_leaves(g, p, nic0, &tier, err);
    for (int l = 2; fabric && l <= p->levels && !rc; l++)
        rc = fabric_add_level(g, p, l, &tier, err);
    fabric_tier_free(&tier);
    if (!rc)
        rc = net_graph_finish(g, err);
    if (!rc && fabric)
        rc = check_switch_paths(g, err);
    if (rc) {
        net_graph_free(g);
        return rc;
    }
    *out = g;
    return TS_OK;
}

int net_graph_build_multipod(const net_fabric_params *base, int pods, int pod_servers, double pod_oversub,
                             net_graph **out, ts_err *err)
{
    if (pods < 1 || pod_servers < 1)
        return err_set(err, TS_EINVAL, "multipod: pods %d and servers per pod %d must be >= 1", pods, pod_servers);
    net_fabric_params p = *base;
    p.servers = pods * pod_servers;
    int K = p.nics_per_server;
    int leaves_per_pod = p.rail_optimized ? ((pod_servers + p.leaf_ports - 1) / p.leaf_ports) * K
                                          : (pod_servers * K + p.leaf_ports - 1) / p.leaf_ports;
    if (p.rail_optimized ? pod_servers % p.leaf_ports : (pod_servers * K) % p.leaf_ports)
        return err_set(err, TS_EINVAL, "multipod: %d servers per pod do not fill whole leaves of %d ports", pod_servers,
                       p.leaf_ports);
    /* Level 2: spines of one pod, full bisection: leaf uplinks = downlinks. */
    p.levels = 3;
    p.up[2] = (net_fabric_level){leaves_per_pod, p.leaf_ports, 1.0};
    p.up[3] = (net_fabric_level){0, p.leaf_ports, pod_oversub};
    return net_graph_build_fabric(&p, out, err);
}

/* ------------------------------------------------------------ link list */

typedef struct {
    net_node_kind kind;
    int level, server, local, gpu;
} parsed_name;

/* s is prefix, a number and, when b is given, '.' and a second number, and
 * nothing else: sscanf(s, "prefix%d.%d%c") == 2, but a number that does not
 * fit an int is refused (sscanf's result would be undefined). */
static bool name_nums(const char *s, const char *prefix, int *a, int *b)
{
    size_t n = strlen(prefix);
    if (strncmp(s, prefix, n))
        return false;
    const char *p = s + n;
    char *end;
    long x = strtol(p, &end, 10);
    if (end == p || x < INT_MIN || x > INT_MAX)
        return false;
    *a = (int)x;
    if (!b)
        return !*end;
    if (*end != '.')
        return false;
    p = end + 1;
    x = strtol(p, &end, 10);
    if (end == p || x < INT_MIN || x > INT_MAX || *end)
        return false;
    *b = (int)x;
    return true;
}

static int parse_name(const char *s, int gpn, parsed_name *pn)
{
    int a, b;
    memset(pn, 0, sizeof *pn);
    pn->gpu = -1;
    if (name_nums(s, "gpu", &a, &b) && a >= 0 && b >= 0 && b < gpn && a <= (INT_MAX - b) / gpn) {
        *pn = (parsed_name){NET_NODE_GPU, 0, a, b, a * gpn + b};
        return 0;
    }
    if (name_nums(s, "nvs", &a, NULL) && a >= 0) {
        *pn = (parsed_name){NET_NODE_NVSWITCH, 0, a, 0, -1};
        return 0;
    }
    if (name_nums(s, "nic", &a, &b) && a >= 0 && b >= 0) {
        *pn = (parsed_name){NET_NODE_NIC, 0, a, b, -1};
        return 0;
    }
    if (name_nums(s, "sw", &a, &b) && a >= 1 && b >= 0) {
        *pn = (parsed_name){NET_NODE_SWITCH, a, -1, b, -1};
        return 0;
    }
    return -1;
}

/* Non-GPU nodes are looked up by (kind, level, server, local) in a sorted
 * array built as they are created (linear probing hash). */
typedef struct {
    uint64_t key;
    int id;
} name_slot;

static uint64_t name_key(const parsed_name *pn)
{
    return ((uint64_t)pn->kind << 60) ^ ((uint64_t)(pn->level & 0xff) << 52) ^
           ((uint64_t)(uint32_t)(pn->server + 1) << 24) ^ (uint64_t)(uint32_t)pn->local;
}

int net_graph_from_links(const net_link_spec *specs, int n, int gpus_per_server, net_graph **out, ts_err *err)
{
    int rc = TS_OK, max_gpu = -1;
    net_graph *g = NULL;
    name_slot *tab = NULL;
    char *gpu_seen = NULL;
    size_t tcap = 16;
    if (n < 1 || gpus_per_server < 1)
        return err_set(err, TS_EINVAL, "link list: %d links and %d GPUs per server; need >= 1 of each", n,
                       gpus_per_server);
    for (int i = 0; i < n; i++) {
        parsed_name pa, pb;
        if (!specs[i].a || !specs[i].b || parse_name(specs[i].a, gpus_per_server, &pa) ||
            parse_name(specs[i].b, gpus_per_server, &pb))
            return err_set(err, TS_EINVAL,
                           "link list entry %d: node names '%s', '%s': expected gpu<server>.<k> (k < GPUs per server), "
                           "nvs<server>, nic<server>.<k> or sw<level>.<i>",
                           i, specs[i].a ? specs[i].a : "(null)", specs[i].b ? specs[i].b : "(null)");
        if (pa.gpu > max_gpu)
            max_gpu = pa.gpu;
        if (pb.gpu > max_gpu)
            max_gpu = pb.gpu;
    }
    if (max_gpu < 0)
        return err_set(err, TS_EINVAL, "link list: no GPU is named (gpu0.0, gpu0.1, ...)");
    max_gpu = (max_gpu / gpus_per_server + 1) * gpus_per_server - 1; /* whole servers */
    while (tcap < (size_t)n * 4)
        tcap *= 2;
    g = net_graph_new();
    tab = calloc(tcap, sizeof *tab);
    gpu_seen = calloc((size_t)max_gpu + 1, 1);
    if (!g || !tab || !gpu_seen) {
        rc = err_set(err, TS_ENOMEM, "link list: out of memory");
        goto out;
    }
    g->gpus_per_server = gpus_per_server;
    for (int i = 0; i <= max_gpu; i++)
        if ((rc = net_graph_add_node(g, NET_NODE_GPU, 0, i / gpus_per_server, i % gpus_per_server, err)) < 0)
            goto out;
    for (int i = 0; i < n; i++) {
        int ends[2];
        parsed_name pn[2];
        parse_name(specs[i].a, gpus_per_server, &pn[0]);
        parse_name(specs[i].b, gpus_per_server, &pn[1]);
        for (int e = 0; e < 2; e++) {
            if (pn[e].kind == NET_NODE_GPU) {
                ends[e] = pn[e].gpu;
                gpu_seen[pn[e].gpu] = 1;
                continue;
            }
            uint64_t key = name_key(&pn[e]) | 1ull << 63;
            size_t h = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & (tcap - 1);
            while (tab[h].key && tab[h].key != key)
                h = (h + 1) & (tcap - 1);
            if (!tab[h].key) {
                if ((rc = net_graph_add_node(g, pn[e].kind, pn[e].level, pn[e].server, pn[e].local, err)) < 0)
                    goto out;
                tab[h] = (name_slot){key, rc};
            }
            ends[e] = tab[h].id;
        }
        net_link_kind kind = NET_LINK_FABRIC;
        net_node_kind ka = pn[0].kind, kb = pn[1].kind;
        if ((ka == NET_NODE_GPU && (kb == NET_NODE_GPU || kb == NET_NODE_NVSWITCH)) ||
            (kb == NET_NODE_GPU && ka == NET_NODE_NVSWITCH))
            kind = NET_LINK_NVLINK;
        else if (ka == NET_NODE_GPU || kb == NET_NODE_GPU)
            kind = NET_LINK_PCIE;
        double eff = specs[i].eff > 0          ? specs[i].eff
                     : kind == NET_LINK_NVLINK ? NET_NVLINK_EFF
                     : kind == NET_LINK_FABRIC ? topo_nic_eff(specs[i].gbps)
                                               : 1.0;
        if ((rc = net_graph_add_link2(g, ends[0], ends[1], kind, specs[i].gbps, eff, specs[i].lat_us, err)) < 0) {
            err_prefix(err, "link list entry %d (%s - %s)", i, specs[i].a, specs[i].b);
            goto out;
        }
    }
    for (int i = 0; i <= max_gpu; i++)
        if (!gpu_seen[i]) {
            rc = err_set(err, TS_EINVAL, "link list: gpu%d.%d has no link, but every server must hold GPUs 0..%d",
                         i / gpus_per_server, i % gpus_per_server, gpus_per_server - 1);
            goto out;
        }
    rc = net_graph_finish(g, err);
out:
    free(tab);
    free(gpu_seen);
    if (rc < 0) {
        net_graph_free(g);
        return rc;
    }
    *out = g;
    return TS_OK;
}
