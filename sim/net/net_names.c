/* net_names — see net_names.h. */
#include "sim/net/net_names.h"

#include <stdarg.h>
#include <stdbool.h>
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
