/* net_route — see net_route.h. */
#include "sim/net/net_route.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int target;    /* node id the distances lead to */
    int16_t *dist; /* per switch index: hops to target, -1 unreachable */
} dist_entry;

struct net_router {
    const net_graph *g;
    int n_switches;
    int *sw_index;     /* node id -> switch index, -1 for non-switches */
    int *sw_node;      /* switch index -> node id */
    dist_entry *cache; /* open addressing by target */
    int cache_cap, cache_len;
    int *queue;     /* BFS scratch, n_switches + 1 */
    uint64_t ports; /* most non-switch neighbours of any switch (a full leaf's ports) */
    /* Per switch index, its out-links to switches that have a reverse
     * and are up (what the distance search follows; failures are applied
     * before a router is made), adj[adj_off[i] .. adj_off[i+1]): the
     * search then skips the NIC ports of every leaf. */
    int *adj_off;
    int *
        twin; /* open addressing by the adjacency list: a switch whose distances are cached, -1 empty; 2 x n_switches */
    struct {
        int link, sw;
    } * adj;
};

uint64_t net_route_hash(int src, int dst, uint64_t flow_id, int hop)
{
    uint64_t z = (uint64_t)(uint32_t)src * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uint32_t)dst * 0xC2B2AE3D27D4EB4Full ^
                 flow_id * 0x165667B19E3779F9ull ^ (uint64_t)(uint32_t)hop;
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int net_router_new(const net_graph *g, net_router **out, ts_err *err)
{
    if (!g->finished)
        return err_set(err, TS_ESTATE, "net_router_new: graph not finished");
    net_router *r = calloc(1, sizeof *r);
    if (!r)
        return err_set(err, TS_ENOMEM, "net_router: out of memory");
    r->g = g;
    r->sw_index = malloc(sizeof *r->sw_index * (size_t)g->n_nodes);
    r->sw_node = malloc(sizeof *r->sw_node * (size_t)g->n_nodes);
    r->queue = malloc(sizeof *r->queue * ((size_t)g->n_nodes + 1));
    r->cache_cap = 64;
    r->cache = calloc((size_t)r->cache_cap, sizeof *r->cache);
    if (!r->sw_index || !r->sw_node || !r->queue || !r->cache) {
        net_router_free(r);
        return err_set(err, TS_ENOMEM, "net_router: out of memory");
    }
    for (int v = 0; v < g->n_nodes; v++) {
        r->sw_index[v] = -1;
        if (g->nodes[v].kind == NET_NODE_SWITCH) {
            r->sw_index[v] = r->n_switches;
            r->sw_node[r->n_switches++] = v;
        }
    }
    for (int i = 0; i < r->cache_cap; i++)
        r->cache[i].target = -1;
    r->ports = 1;
    for (int i = 0; i < r->n_switches; i++) {
        int v = r->sw_node[i];
        uint64_t c = 0;
        for (int k = g->out_off[v]; k < g->out_off[v + 1]; k++)
            c += r->sw_index[g->links[g->out_link[k]].dst] < 0;
        if (c > r->ports)
            r->ports = c;
    }
    r->adj_off = malloc(sizeof *r->adj_off * ((size_t)r->n_switches + 1));
    size_t n_adj = 0;
    for (int i = 0; r->adj_off && i < r->n_switches; i++)
        for (int k = g->out_off[r->sw_node[i]]; k < g->out_off[r->sw_node[i] + 1]; k++) {
            const net_link *l = &g->links[g->out_link[k]];
            n_adj += r->sw_index[l->dst] >= 0 && l->reverse >= 0 && !l->down;
        }
    r->adj = malloc(sizeof *r->adj * (n_adj ? n_adj : 1));
    if (!r->adj_off || !r->adj) {
        net_router_free(r);
        return err_set(err, TS_ENOMEM, "net_router: out of memory");
    }
    n_adj = 0;
    for (int i = 0; i < r->n_switches; i++) {
        r->adj_off[i] = (int)n_adj;
        for (int k = g->out_off[r->sw_node[i]]; k < g->out_off[r->sw_node[i] + 1]; k++) {
            const net_link *l = &g->links[g->out_link[k]];
            if (r->sw_index[l->dst] >= 0 && l->reverse >= 0 && !l->down) {
                r->adj[n_adj].link = g->out_link[k];
                r->adj[n_adj++].sw = r->sw_index[l->dst];
            }
        }
    }
    r->adj_off[r->n_switches] = (int)n_adj;
    r->twin = malloc(sizeof *r->twin * (2 * (size_t)r->n_switches + 1));
    if (!r->twin) {
        net_router_free(r);
        return err_set(err, TS_ENOMEM, "net_router: out of memory");
    }
    for (int i = 0; i < 2 * r->n_switches + 1; i++)
        r->twin[i] = -1;
    *out = r;
    return TS_OK;
}

void net_router_free(net_router *r)
{
    if (!r)
        return;
    if (r->cache)
        for (int i = 0; i < r->cache_cap; i++)
            free(r->cache[i].dist);
    free(r->cache);
    free(r->adj_off);
    free(r->twin);
    free(r->adj);
    free(r->sw_index);
    free(r->sw_node);
    free(r->queue);
    free(r);
}

/* Does node v have a link to a switch? */
static int has_switch_link(const net_graph *g, int v)
{
    for (int k = g->out_off[v]; k < g->out_off[v + 1]; k++)
        if (g->nodes[g->links[g->out_link[k]].dst].kind == NET_NODE_SWITCH)
            return 1;
    return 0;
}

/* The node through which v enters the fabric: itself if it has a switch
 * link, else its NIC (GPUs), else -1. */
static int attachment(const net_graph *g, int v)
{
    if (has_switch_link(g, v))
        return v;
    if (g->nodes[v].kind == NET_NODE_GPU) {
        int lo = 0, hi = g->n_gpus - 1;
        while (lo <= hi) {
            int mid = (lo + hi) / 2;
            if (g->gpu_node[mid] == v)
                return net_graph_gpu_nic(g, mid);
            if (g->gpu_node[mid] < v)
                lo = mid + 1;
            else
                hi = mid - 1;
        }
    }
    return -1;
}

static int cache_grow(net_router *r)
{
    int ncap = r->cache_cap * 2;
    dist_entry *nc = calloc((size_t)ncap, sizeof *nc);
    if (!nc)
        return TS_ENOMEM;
    for (int i = 0; i < ncap; i++)
        nc[i].target = -1;
    for (int i = 0; i < r->cache_cap; i++) {
        if (r->cache[i].target < 0)
            continue;
        int h = (int)(((uint64_t)r->cache[i].target * 0x9E3779B97F4A7C15ull) >> 33) & (ncap - 1);
        while (nc[h].target >= 0)
            h = (h + 1) & (ncap - 1);
        nc[h] = r->cache[i];
    }
    free(r->cache);
    r->cache = nc;
    r->cache_cap = ncap;
    return TS_OK;
}

/* The one switch next to non-switch node t (over a link with a reverse),
 * or -1 if t has none or several. */
static int single_switch(const net_router *r, int t)
{
    const net_graph *g = r->g;
    int sw = -1;
    for (int k = g->out_off[t]; k < g->out_off[t + 1]; k++) {
        const net_link *l = &g->links[g->out_link[k]];
        if (r->sw_index[l->dst] < 0 || l->reverse < 0 || l->down || l->dst == sw)
            continue;
        if (sw >= 0)
            return -1;
        sw = l->dst;
    }
    return sw;
}

/* Do switches a and b have the same list of switch links (same order)? */
static int same_adj(const net_router *r, int a, int b)
{
    int n = r->adj_off[a + 1] - r->adj_off[a];
    if (n != r->adj_off[b + 1] - r->adj_off[b])
        return 0;
    for (int k = 0; k < n; k++)
        if (r->adj[r->adj_off[a] + k].sw != r->adj[r->adj_off[b] + k].sw)
            return 0;
    return 1;
}

/* A switch with the same (non-empty) switch neighbours as switch index s
 * whose distances were searched before, or -1 (then s is registered as the
 * one to copy from, as its distances are about to be searched). */
static int twin_of(net_router *r, int s)
{
    int n = r->adj_off[s + 1] - r->adj_off[s];
    if (n == 0)
        return -1;
    uint64_t hsh = 0xCBF29CE484222325ull;
    for (int k = 0; k < n; k++)
        hsh = (hsh ^ (uint64_t)(uint32_t)r->adj[r->adj_off[s] + k].sw) * 0x100000001B3ull;
    int cap = 2 * r->n_switches + 1, h = (int)(hsh % (uint64_t)cap);
    while (r->twin[h] >= 0) {
        if (same_adj(r, r->twin[h], s))
            return r->twin[h] == s ? -1 : r->twin[h];
        h = h + 1 == cap ? 0 : h + 1;
    }
    r->twin[h] = s;
    return -1;
}

/* Hop distances from every switch to attachment node t (BFS over switch
 * nodes; links are bidirectional in every builder, so BFS follows the
 * reverse of each out-link). A node behind a single switch L (a NIC on its
 * leaf) gets L's distances, each one less than its own: net_route only
 * compares the distances of switches (t itself counts 0 and is a neighbour
 * of L alone), so the shift changes no choice, and the NICs of one leaf
 * share one search. */
static const int16_t *dist_to(net_router *r, int t)
{
    const net_graph *g = r->g;
    if (r->sw_index[t] < 0) {
        int L = single_switch(r, t);
        if (L >= 0)
            return dist_to(r, L);
    }
    int h = (int)(((uint64_t)t * 0x9E3779B97F4A7C15ull) >> 33) & (r->cache_cap - 1);
    while (r->cache[h].target >= 0) {
        if (r->cache[h].target == t)
            return r->cache[h].dist;
        h = (h + 1) & (r->cache_cap - 1);
    }
    if (2 * (r->cache_len + 1) > r->cache_cap) {
        if (cache_grow(r))
            return NULL;
        return dist_to(r, t);
    }
    int16_t *d = malloc(sizeof *d * (size_t)(r->n_switches ? r->n_switches : 1));
    if (!d)
        return NULL;
    /* A switch with the same switch neighbours N as one searched before
     * (the leaves of a rail under the same spines): every other switch w
     * reaches either only through N, so both have w's distance 1 + min over
     * N; each is 2 from the other (through N) and 0 from itself. */
    int tw = r->sw_index[t] >= 0 ? twin_of(r, r->sw_index[t]) : -1;
    if (tw >= 0) {
        const int16_t *dt = dist_to(r, r->sw_node[tw]);
        if (!dt) {
            free(d);
            return NULL;
        }
        memcpy(d, dt, sizeof *d * (size_t)r->n_switches);
        d[tw] = 2;
        d[r->sw_index[t]] = 0;
        r->cache[h].target = t;
        r->cache[h].dist = d;
        r->cache_len++;
        return d;
    }
    for (int i = 0; i < r->n_switches; i++)
        d[i] = -1;
    int head = 0, tail = 0;
    if (r->sw_index[t] >= 0) {
        d[r->sw_index[t]] = 0;
        r->queue[tail++] = r->sw_index[t];
    } else
        for (int k = g->out_off[t]; k < g->out_off[t + 1]; k++) {
            const net_link *l = &g->links[g->out_link[k]];
            int s = r->sw_index[l->dst];
            if (s >= 0 && l->reverse >= 0 && !l->down && d[s] < 0) {
                d[s] = 1;
                r->queue[tail++] = s;
            }
        }
    while (head < tail) {
        int s = r->queue[head++];
        for (int k = r->adj_off[s]; k < r->adj_off[s + 1]; k++) {
            int w = r->adj[k].sw;
            if (d[w] < 0) {
                d[w] = (int16_t)(d[s] + 1);
                r->queue[tail++] = w;
            }
        }
    }
    r->cache[h].target = t;
    r->cache[h].dist = d;
    r->cache_len++;
    return d;
}

/* The destination's key for destination-mod-k routing: attachment t's
 * position among the non-switch neighbours of its one switch L (ports in
 * node id order), plus L's index within its level times L's count of such
 * ports; a switch's own index; t itself when t has several switches. */
static uint64_t dest_key(const net_router *r, int t)
{
    const net_graph *g = r->g;
    if (r->sw_index[t] >= 0)
        return (uint64_t)g->nodes[t].local;
    int L = single_switch(r, t);
    if (L < 0)
        return (uint64_t)t;
    uint64_t pos = 0, ports = 0;
    for (int k = g->out_off[L]; k < g->out_off[L + 1]; k++) {
        int w = g->links[g->out_link[k]].dst;
        if (r->sw_index[w] >= 0)
            continue;
        if (w == t)
            pos = ports;
        ports++;
    }
    return (uint64_t)g->nodes[L].local * r->ports + pos;
}

int net_route(net_router *r, int src, int dst, uint64_t flow_id, int *links, ts_err *err)
{
    (void)flow_id;
    const net_graph *g = r->g;
    if (src < 0 || dst < 0 || src >= g->n_nodes || dst >= g->n_nodes || src == dst)
        return err_set(err, TS_EINVAL, "net_route: endpoints %d -> %d must be distinct nodes in 0..%d", src, dst,
                       g->n_nodes - 1);
    int direct = net_graph_find_link(g, src, dst);
    if (direct >= 0 && !g->links[direct].down) {
        links[0] = direct;
        return 1;
    }
    /* Shared NVSwitch (or any shared non-switch neighbor such as one NIC). */
    for (int k = g->out_off[src]; k < g->out_off[src + 1]; k++) {
        const net_link *l = &g->links[g->out_link[k]];
        net_node_kind kind = g->nodes[l->dst].kind;
        if ((kind != NET_NODE_NVSWITCH && kind != NET_NODE_NIC) || l->down)
            continue;
        int back = net_graph_find_link(g, l->dst, dst);
        if (back >= 0 && !g->links[back].down) {
            links[0] = g->out_link[k];
            links[1] = back;
            return 2;
        }
    }
    int a = attachment(g, src), b = attachment(g, dst);
    char n1[32], n2[32];
    if (a < 0 || b < 0)
        return err_set(err, TS_EINVAL, "net_route: no path from %s to %s (no NIC or switch link)",
                       net_graph_node_name(g, src, n1, sizeof n1), net_graph_node_name(g, dst, n2, sizeof n2));
    int n = 0;
    if (a != src)
        links[n++] = net_graph_find_link(g, src, a);
    const int16_t *d = dist_to(r, b);
    if (!d)
        return err_set(err, TS_ENOMEM, "net_route: out of memory");
    uint64_t key = dest_key(r, b), div[NET_MAX_LEVELS + 2];
    for (int i = 0; i < NET_MAX_LEVELS + 2; i++)
        div[i] = 0;
    div[0] = 1;
    int v = a;
    while (v != b) {
        int best = -1, cands[64], nc = 0;
        for (int k = g->out_off[v]; k < g->out_off[v + 1]; k++) {
            const net_link *l = &g->links[g->out_link[k]];
            int w = l->dst, s = r->sw_index[w];
            int dw = w == b ? 0 : s >= 0 ? d[s] : -1;
            if (dw < 0 || l->down)
                continue;
            if (best < 0 || dw < best) {
                best = dw;
                nc = 0;
            }
            if (dw == best && nc < 64)
                cands[nc++] = g->out_link[k];
        }
        if (nc == 0 || n >= NET_MAX_PATH - 1)
            return err_set(err, TS_EINVAL, "net_route: no path from %s to %s through the fabric",
                           net_graph_node_name(g, src, n1, sizeof n1), net_graph_node_name(g, dst, n2, sizeof n2));
        int pick = cands[0];
        if (nc > 1) {
            /* Destination-mod-k: the digit of the hop between levels m and
             * m+1 (up) or m+1 and m (down) picks among the candidates. */
            int lv = g->nodes[v].level, lw = g->nodes[g->links[cands[0]].dst].level;
            int m = lw > lv ? lv : lw - 1;
            if (m < 0)
                m = 0;
            if (m > NET_MAX_LEVELS)
                m = NET_MAX_LEVELS;
            uint64_t dv = div[m] ? div[m] : 1;
            pick = cands[(key / dv) % (uint64_t)nc];
            if (lw > lv && !div[m + 1])
                div[m + 1] = dv * (uint64_t)nc;
        }
        links[n++] = pick;
        v = g->links[pick].dst;
    }
    if (b != dst) {
        int l = net_graph_find_link(g, b, dst);
        if (l < 0)
            return err_set(err, TS_ESTATE, "net_route: attachment of %s has no link to it",
                           net_graph_node_name(g, dst, n2, sizeof n2));
        links[n++] = l;
    }
    return n;
}

int net_route_check_gpus(const net_graph *g, ts_err *err)
{
    net_router *r = NULL;
    int rc = net_router_new(g, &r, err);
    if (rc)
        return rc;
    int n = g->n_gpus, G = g->gpus_per_server > 0 ? g->gpus_per_server : 1;
    for (int i = 0; i < n && !rc; i++) {
        int next = ((i / G + 1) * G) % n; /* the next server's first GPU */
        int peers[3] = {(i + G) % n, (i / G) * G + (i % G + 1) % G, next + (i % G + 1) % G};
        for (int k = 0; k < 3 && !rc; k++) {
            int j = peers[k];
            if (j == i || j >= n)
                continue;
            for (int dir = 0; dir < 2 && !rc; dir++) {
                int a = dir ? j : i, b = dir ? i : j, l[NET_MAX_PATH];
                ts_err e2;
                if (net_route(r, g->gpu_node[a], g->gpu_node[b], 0, l, &e2) < 0) {
                    char na[32], nb[32];
                    rc = err_set(err, TS_EINVAL,
                                 "%s cannot reach %s: the failed links or nodes disconnect them (fail fewer links, "
                                 "or run on GPUs that stay connected)",
                                 net_graph_node_name(g, g->gpu_node[a], na, sizeof na),
                                 net_graph_node_name(g, g->gpu_node[b], nb, sizeof nb));
                }
            }
        }
    }
    net_router_free(r);
    return rc;
}

/* The node named by s[0..n) (copied, NUL-terminated); -1 if none. */
static int node_named(const net_graph *g, const char *s, size_t n, char *buf, size_t cap)
{
    if (n >= cap)
        n = cap - 1;
    memcpy(buf, s, n);
    buf[n] = 0;
    return net_graph_node_by_name(g, buf);
}

static int fail_links(net_graph *g, const char *spec, ts_err *err)
{
    const char *p = spec;
    while (*p) {
        size_t len = strcspn(p, ",");
        size_t cut = strcspn(p, ":-");
        char na[64], nb[64];
        if (cut >= len)
            return err_set(err, TS_EINVAL,
                           "--fail-link '%s': expected A:B (two node names, e.g. sw1.0:sw2.3; several separated "
                           "by commas; `trainsim topology FILE --list-links` lists them)",
                           spec);
        int a = node_named(g, p, cut, na, sizeof na), b = node_named(g, p + cut + 1, len - cut - 1, nb, sizeof nb);
        if (a < 0 || b < 0)
            return err_set(err, TS_EINVAL,
                           "--fail-link '%s': no node named '%s' in this topology (`trainsim topology FILE "
                           "--list-nodes` lists them)",
                           spec, a < 0 ? na : nb);
        if (net_graph_fail_link(g, a, b, err))
            return err_prefix(err, "--fail-link '%s': ", spec);
        p += len;
        if (*p == ',')
            p++;
    }
    return TS_OK;
}

/* Servers that lose a GPU when node v fails (v itself a GPU, or linked to
 * GPUs that have no other NIC or NVSwitch); -1 if none, else the first. */
static int lost_server(const net_graph *g, int v)
{
    const net_node *n = &g->nodes[v];
    if (n->kind == NET_NODE_GPU || n->kind == NET_NODE_NIC || n->kind == NET_NODE_NVSWITCH)
        return n->server;
    return -1;
}

static int fail_nodes(net_graph *g, const char *spec, int tp, int pp, ts_err *err)
{
    const char *p = spec;
    int lost = 0, first_lost = -1;
    while (*p) {
        size_t len = strcspn(p, ",");
        char nm[64];
        int v = node_named(g, p, len, nm, sizeof nm);
        if (v < 0)
            return err_set(err, TS_EINVAL,
                           "--fail-node '%s': no node named '%s' in this topology (`trainsim topology FILE "
                           "--list-nodes` lists them)",
                           spec, nm);
        for (int k = g->out_off[v]; k < g->out_off[v + 1]; k++) {
            net_link *l = &g->links[g->out_link[k]];
            l->down = true;
            if (l->reverse >= 0)
                g->links[l->reverse].down = true;
        }
        int s = lost_server(g, v);
        if (s >= 0) {
            lost++;
            if (first_lost < 0)
                first_lost = s;
        }
        p += len;
        if (*p == ',')
            p++;
    }
    if (lost) {
        int G = g->gpus_per_server > 0 ? g->gpus_per_server : 1, S = g->n_servers;
        int left = (S - lost) * G, tpp = (tp > 0 ? tp : 1) * (pp > 0 ? pp : 1);
        int d = left / tpp;
        if (d < 1)
            return err_set(err, TS_EINVAL,
                           "--fail-node '%s': server %d loses GPUs, and the %d GPUs of the other servers cannot hold "
                           "one replica of tp x pp = %d",
                           spec, first_lost, left, tpp);
        return err_set(err, TS_EINVAL,
                       "--fail-node '%s': server %d loses GPUs (trainsim does not run a job around a broken "
                       "server); shrink the job as a user would: run on the other servers with --gpus %d "
                       "(data-parallel size %d with tp %d x pp %d; a global batch divisible by %d)",
                       spec, first_lost, d * tpp, d, tp, pp, d);
    }
    return TS_OK;
}

int net_route_apply_failures(net_graph *g, const char *links, const char *nodes, int tp, int pp, ts_err *err)
{
    int rc;
    if (links && (rc = fail_links(g, links, err)))
        return rc;
    if (nodes && (rc = fail_nodes(g, nodes, tp, pp, err)))
        return rc;
    if ((links || nodes) && (rc = net_route_check_gpus(g, err)))
        return err_prefix(err, "%s%s%s%s: ", links ? "--fail-link " : "", links ? links : "",
                          nodes ? (links ? ", --fail-node " : "--fail-node ") : "", nodes ? nodes : "");
    return TS_OK;
}
