/* net_names — see net_names.h. */
#include "sim/net/net_names.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sim/util/csvio.h"

/* Appends printf-style text at *len in buf (cap bytes); stops at the end of
 * buf, which stays NUL-terminated. */
static void append(char *buf, size_t cap, size_t *len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void append(char *buf, size_t cap, size_t *len, const char *fmt, ...)
{
    if (*len + 1 >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (n > 0)
        *len = *len + (size_t)n < cap ? *len + (size_t)n : cap - 1;
}

typedef struct {
    bool any;
    int lo_s, hi_s, lo_k, hi_k; /* server (or level) and index ranges */
} span;

static void span_add(span *sp, int s, int k)
{
    if (!sp->any) {
        *sp = (span){true, s, s, k, k};
        return;
    }
    sp->lo_s = s < sp->lo_s ? s : sp->lo_s;
    sp->hi_s = s > sp->hi_s ? s : sp->hi_s;
    sp->lo_k = k < sp->lo_k ? k : sp->lo_k;
    sp->hi_k = k > sp->hi_k ? k : sp->hi_k;
}

const char *net_names_ranges(const net_graph *g, char *buf, size_t cap)
{
    size_t len = 0;
    if (cap == 0)
        return buf;
    buf[0] = '\0';
    span gpu = {0}, nvs = {0}, nic = {0};
    int top = 0;
    for (int v = 0; v < g->n_nodes; v++) {
        const net_node *n = &g->nodes[v];
        if (n->kind == NET_NODE_GPU)
            span_add(&gpu, n->server, n->local);
        else if (n->kind == NET_NODE_NVSWITCH)
            span_add(&nvs, n->server, 0);
        else if (n->kind == NET_NODE_NIC)
            span_add(&nic, n->server, n->local);
        else if (n->level > top)
            top = n->level;
    }
    const char *sep = "";
    if (gpu.any) {
        append(buf, cap, &len, "gpu<s>.<k> with s in %d..%d, k in %d..%d", gpu.lo_s, gpu.hi_s, gpu.lo_k, gpu.hi_k);
        sep = "; ";
    }
    if (nvs.any) {
        append(buf, cap, &len, "%snvs<s> with s in %d..%d", sep, nvs.lo_s, nvs.hi_s);
        sep = "; ";
    }
    if (nic.any) {
        append(buf, cap, &len, "%snic<s>.<k> with s in %d..%d, k in %d..%d", sep, nic.lo_s, nic.hi_s, nic.lo_k,
               nic.hi_k);
        sep = "; ";
    }
    /* switches level by level: each level numbers its own switches */
    for (int level = 0; level <= top; level++) {
        span sw = {0};
        for (int v = 0; v < g->n_nodes; v++)
            if (g->nodes[v].kind == NET_NODE_SWITCH && g->nodes[v].level == level)
                span_add(&sw, level, g->nodes[v].local);
        if (sw.any) {
            append(buf, cap, &len, "%ssw%d.<i> with i in %d..%d", sep, level, sw.lo_k, sw.hi_k);
            sep = "; ";
        }
    }
    return buf;
}

const char *net_names_neighbors(const net_graph *g, int v, char *buf, size_t cap)
{
    size_t len = 0;
    if (cap == 0)
        return buf;
    buf[0] = '\0';
    if (v < 0 || v >= g->n_nodes || !g->finished)
        return buf;
    char name[32];
    for (int k = g->out_off[v]; k < g->out_off[v + 1]; k++) {
        const char *sep = k > g->out_off[v] ? ", " : "";
        bool more = k + 1 < g->out_off[v + 1];
        net_graph_node_name(g, g->links[g->out_link[k]].dst, name, sizeof name);
        /* this name, and room for ", ..." if more follow, and the NUL */
        if (len + strlen(sep) + strlen(name) + (more ? 5 : 0) + 1 > cap) {
            append(buf, cap, &len, "%s...", sep);
            break;
        }
        append(buf, cap, &len, "%s%s", sep, name);
    }
    return buf;
}

static const char *kind_name(net_node_kind k)
{
    switch (k) {
    case NET_NODE_GPU:
        return "gpu";
    case NET_NODE_NVSWITCH:
        return "nvswitch";
    case NET_NODE_NIC:
        return "nic";
    case NET_NODE_SWITCH:
        return "switch";
    }
    return "?";
}

static const char *link_kind_name(net_link_kind k)
{
    switch (k) {
    case NET_LINK_NVLINK:
        return "nvlink";
    case NET_LINK_PCIE:
        return "pcie";
    case NET_LINK_FABRIC:
        return "fabric";
    }
    return "?";
}

int net_names_list(const net_graph *g, FILE *f, ts_err *err)
{
    char ranges[1024], a[32], b[32], gbps[CSVIO_NUM_BYTES], lat[CSVIO_NUM_BYTES];
    fprintf(f, "# nodes: %s\nnode,kind\n", net_names_ranges(g, ranges, sizeof ranges));
    for (int v = 0; v < g->n_nodes; v++)
        fprintf(f, "%s,%s\n", net_graph_node_name(g, v, a, sizeof a), kind_name(g->nodes[v].kind));
    fprintf(f, "\nlink,kind,line_gbps,latency_us\n");
    for (int i = 0; i < g->n_links; i++) {
        const net_link *l = &g->links[i];
        /* a pair of directions once: from the direction with the lower id */
        if (l->reverse >= 0 && l->reverse < i)
            continue;
        fprintf(f, "%s-%s,%s,%s,%s\n", net_graph_node_name(g, l->src, a, sizeof a),
                net_graph_node_name(g, l->dst, b, sizeof b), link_kind_name(l->kind),
                csvio_fmt_double(gbps, sizeof gbps, l->line_gbps), csvio_fmt_double(lat, sizeof lat, l->lat_us));
    }
    if (ferror(f))
        return err_set(err, TS_EIO, "node list: write error");
    return TS_OK;
}

int net_names_summary(const net_graph *g, FILE *f, ts_err *err)
{
    int top = 0, nics = 0, nvs = 0;
    double nic_line = 0;
    for (int v = 0; v < g->n_nodes; v++) {
        const net_node *n = &g->nodes[v];
        nics += n->kind == NET_NODE_NIC;
        nvs += n->kind == NET_NODE_NVSWITCH;
        if (n->kind == NET_NODE_SWITCH && n->level > top)
            top = n->level;
    }
    int sw[NET_MAX_LEVELS + 2] = {0};
    double down[NET_MAX_LEVELS + 2] = {0}, up[NET_MAX_LEVELS + 2] = {0};
    double *sd = calloc((size_t)g->n_nodes, sizeof *sd), *su = calloc((size_t)g->n_nodes, sizeof *su);
    if (!sd || !su) {
        free(sd);
        free(su);
        return err_set(err, TS_ENOMEM, "topology summary: out of memory");
    }
    for (int v = 0; v < g->n_nodes; v++)
        if (g->nodes[v].kind == NET_NODE_SWITCH && g->nodes[v].level <= NET_MAX_LEVELS)
            sw[g->nodes[v].level]++;
    for (int i = 0; i < g->n_links; i++) {
        const net_link *l = &g->links[i];
        const net_node *a = &g->nodes[l->src], *b = &g->nodes[l->dst];
        if (a->kind == NET_NODE_NIC && b->kind == NET_NODE_SWITCH)
            nic_line += l->line_gbps;
        if (b->kind != NET_NODE_SWITCH || b->level > NET_MAX_LEVELS)
            continue;
        int la = a->kind == NET_NODE_SWITCH ? a->level : 0;
        if (la < b->level) { /* into level b from below: b's downlinks, a's uplinks */
            down[b->level] += l->line_gbps;
            sd[l->dst] += l->line_gbps;
            if (la > 0) {
                up[la] += l->line_gbps;
                su[l->src] += l->line_gbps;
            }
        }
    }
    /* Oversubscription as built: the fullest switch of each level (a partly
     * filled one has its design uplinks for fewer downlinks). */
    double full_down[NET_MAX_LEVELS + 2] = {0}, full_up[NET_MAX_LEVELS + 2] = {0};
    for (int v = 0; v < g->n_nodes; v++) {
        const net_node *n = &g->nodes[v];
        if (n->kind == NET_NODE_SWITCH && n->level <= NET_MAX_LEVELS && sd[v] > full_down[n->level]) {
            full_down[n->level] = sd[v];
            full_up[n->level] = su[v];
        }
    }
    free(sd);
    free(su);
    int domain = g->gpus_per_server > 0 ? g->gpus_per_server : 1;
    fprintf(f, "GPUs                 %d (%d servers x %d; %d NVLink domains of %d GPUs)\n", g->n_gpus, g->n_servers,
            domain, nvs ? nvs : g->n_gpus, nvs ? domain : 1);
    fprintf(f, "NICs                 %d (%g GB/s line rate into the fabric in all)\n", nics, nic_line);
    fprintf(f, "switch levels        %d\n", top);
    double bis = nic_line;
    for (int l = 1; l <= top && l <= NET_MAX_LEVELS; l++) {
        if (l < top) {
            fprintf(f,
                    "  level %d            %d switches, %g GB/s down, %g GB/s up in all; oversubscription %g:1 "
                    "(fullest switch: %g GB/s down in use, %g up)\n",
                    l, sw[l], down[l], up[l], full_up[l] > 0 ? full_down[l] / full_up[l] : 0, full_down[l], full_up[l]);
            if (up[l] < bis)
                bis = up[l];
        } else {
            fprintf(f, "  level %d (top)      %d switches, %g GB/s down\n", l, sw[l], down[l]);
        }
    }
    fprintf(f,
            "bisection bandwidth  %g GB/s per direction (%g GB/s per GPU; tree estimate: half the smallest of the "
            "NIC total and each level's uplink total)\n",
            bis / 2, g->n_gpus > 0 ? bis / g->n_gpus : 0);
    if (ferror(f))
        return err_set(err, TS_EIO, "topology summary: write error");
    return TS_OK;
}

int net_names_route(const net_graph *g, int a, int b, FILE *f, ts_err *err)
{
    net_router *r = NULL;
    int rc = net_router_new(g, &r, err), l[NET_MAX_PATH];
    if (rc)
        return rc;
    int n = net_route(r, a, b, 0, l, err);
    net_router_free(r);
    if (n < 0)
        return n;
    char na[32], nb[32], gb[CSVIO_NUM_BYTES], la[CSVIO_NUM_BYTES];
    double lat = 0, narrow = 0;
    for (int h = 0; h < n; h++) {
        const net_link *k = &g->links[l[h]];
        fprintf(f, "%-10s -> %-10s %-7s %s GB/s  %s us\n", net_graph_node_name(g, k->src, na, sizeof na),
                net_graph_node_name(g, k->dst, nb, sizeof nb), link_kind_name(k->kind),
                csvio_fmt_double(gb, sizeof gb, k->line_gbps), csvio_fmt_double(la, sizeof la, k->lat_us));
        lat += k->lat_us;
        if (h == 0 || k->line_gbps < narrow)
            narrow = k->line_gbps;
    }
    fprintf(f, "%d hops, latency %s us, narrowest line rate %s GB/s\n", n, csvio_fmt_double(la, sizeof la, lat),
            csvio_fmt_double(gb, sizeof gb, narrow));
    if (ferror(f))
        return err_set(err, TS_EIO, "route: write error");
    return TS_OK;
}

/* The box a node is drawn in (see net_names_dot): 0 = itself, 1 = its
 * server / switch level. */
static void dot_box(const net_graph *g, int v, int servers, int levels, char *buf, size_t cap)
{
    const net_node *n = &g->nodes[v];
    if (n->kind != NET_NODE_SWITCH && levels)
        snprintf(buf, cap, "servers");
    else if (n->kind != NET_NODE_SWITCH && servers)
        snprintf(buf, cap, "server%d", n->server);
    else if (n->kind == NET_NODE_SWITCH && levels)
        snprintf(buf, cap, "level%d", n->level);
    else
        net_graph_node_name(g, v, buf, (int)cap);
}

typedef struct {
    char a[40], b[40];
    int count;
    double gbps;
} dot_edge;

static int cmp_edge(const void *x, const void *y)
{
    const dot_edge *p = x, *q = y;
    int c = strcmp(p->a, q->a);
    return c ? c : strcmp(p->b, q->b);
}

int net_names_dot(const net_graph *g, const char *title, FILE *f, ts_err *err)
{
    int nsw = 0;
    for (int v = 0; v < g->n_nodes; v++)
        nsw += g->nodes[v].kind == NET_NODE_SWITCH;
    int servers = g->n_nodes > NET_NAMES_DOT_NODES, levels = nsw > NET_NAMES_DOT_NODES;
    dot_edge *e = calloc((size_t)(g->n_links ? g->n_links : 1), sizeof *e);
    if (!e)
        return err_set(err, TS_ENOMEM, "dot: out of memory");
    size_t ne = 0;
    for (int i = 0; i < g->n_links; i++) {
        const net_link *l = &g->links[i];
        if (l->reverse >= 0 && l->reverse < i)
            continue;
        char a[40], b[40];
        dot_box(g, l->src, servers, levels, a, sizeof a);
        dot_box(g, l->dst, servers, levels, b, sizeof b);
        int c = strcmp(a, b);
        if (c == 0)
            continue; /* inside one box */
        dot_edge *d = &e[ne++];
        snprintf(d->a, sizeof d->a, "%s", c < 0 ? a : b);
        snprintf(d->b, sizeof d->b, "%s", c < 0 ? b : a);
        d->count = 1;
        d->gbps = l->line_gbps;
    }
    qsort(e, ne, sizeof *e, cmp_edge);
    size_t m = 0;
    for (size_t i = 0; i < ne; i++) {
        if (m && !cmp_edge(&e[m - 1], &e[i])) {
            e[m - 1].count++;
            e[m - 1].gbps += e[i].gbps;
        } else {
            e[m++] = e[i];
        }
    }
    fprintf(f, "graph trainsim {\n  label=\"%s%s\";\n  node [shape=box, fontsize=10];\n  edge [fontsize=8];\n",
            title ? title : "",
            levels    ? " (servers and each switch level collapsed)"
            : servers ? " (servers collapsed)"
                      : "");
    char gb[CSVIO_NUM_BYTES];
    if (levels) { /* the boxes' contents */
        int top = 0, cnt[NET_MAX_LEVELS + 2] = {0};
        for (int v = 0; v < g->n_nodes; v++)
            if (g->nodes[v].kind == NET_NODE_SWITCH && g->nodes[v].level <= NET_MAX_LEVELS) {
                cnt[g->nodes[v].level]++;
                top = g->nodes[v].level > top ? g->nodes[v].level : top;
            }
        fprintf(f, "  \"servers\" [label=\"%d servers x %d GPUs\"];\n", g->n_servers, g->gpus_per_server);
        for (int l = 1; l <= top; l++)
            fprintf(f, "  \"level%d\" [label=\"level %d: %d switches\"];\n", l, l, cnt[l]);
    }
    for (size_t i = 0; i < m; i++) {
        if (e[i].count > 1)
            fprintf(f, "  \"%s\" -- \"%s\" [label=\"%d x, %s GB/s\"];\n", e[i].a, e[i].b, e[i].count,
                    csvio_fmt_double(gb, sizeof gb, e[i].gbps));
        else
            fprintf(f, "  \"%s\" -- \"%s\" [label=\"%s\"];\n", e[i].a, e[i].b,
                    csvio_fmt_double(gb, sizeof gb, e[i].gbps));
    }
    fprintf(f, "}\n");
    free(e);
    if (ferror(f))
        return err_set(err, TS_EIO, "dot: write error");
    return TS_OK;
}
