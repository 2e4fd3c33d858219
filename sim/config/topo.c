#include "sim/config/topo.h"

#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sim/config/catalog.h"
#include "sim/util/csvio.h"

const char *const TOPO_FABRIC_NAMES[] = {"fat-tree", "rail-optimized", "custom", NULL};
const char *const TOPO_LINK_KIND_NAMES[] = {"nvlink", "pcie", "fabric", NULL};

/* Default figures (documented in topo.h and the shipped CSVs' comment rows). */
#define DEF_SWITCH_LAT_US 0.13 /* NVIDIA Quantum QM8700 HDR switch: 130 ns port to port */
#define DEF_PORTS_HDR     40   /* QM8700: 40 x HDR 200 Gb/s ports */
#define DEF_PORTS_NDR     64   /* QM9700: 64 x NDR 400 Gb/s ports */

/* Limits that keep every index small (and messages useful). */
#define MAX_SERVERS      1000000
#define MAX_LOCAL        4096
#define MAX_SWITCH_INDEX 10000000
#define MAX_LEVELS       8

void topo_free(topo *t)
{
    if (!t)
        return;
    free(t->links);
    free(t);
}

int topo_gpu_capacity(const topo *t)
{
    long cap = (long)t->params.nodes * t->params.gpus_per_node;
    return cap > INT32_MAX ? INT32_MAX : (int)cap;
}

int topo_check_gpus(const topo *t, int gpus, ts_err *err)
{
    int cap = topo_gpu_capacity(t);
    if (gpus < 1 || gpus > cap)
        return err_set(err, TS_EINVAL, "--gpus %d does not fit the %d GPUs of %s (%d nodes x %d GPUs; valid: 1 to %d)",
                       gpus, cap, t->source, t->params.nodes, t->params.gpus_per_node, cap);
    return TS_OK;
}

/* ---------------------------------------------------------------- endpoints */

/* Parse a decimal number without sign at *p; advance. false if none. */
static bool num(const char **p, long max, long *out)
{
    const char *s = *p;
    long v = 0;
    if (!isdigit((unsigned char)*s))
        return false;
    while (isdigit((unsigned char)*s)) {
        v = v * 10 + (*s - '0');
        if (v > max)
            return false;
        s++;
    }
    *p = s;
    *out = v;
    return true;
}

int topo_endpoint_parse(const char *name, topo_endpoint *out, ts_err *err)
{
    const char *p = name;
    long a = 0, b = 0;
    topo_endpoint e = {0};
    bool ok = false;
    if (!strncmp(p, "gpu", 3) || !strncmp(p, "nic", 3)) {
        e.kind = name[0] == 'g' ? TOPO_EP_GPU : TOPO_EP_NIC;
        p += 3;
        ok = num(&p, MAX_SERVERS - 1, &a) && *p++ == '.' && num(&p, MAX_LOCAL - 1, &b) && !*p;
        e.server = (int)a;
        e.index = (int)b;
    } else if (!strncmp(p, "nvs", 3)) {
        e.kind = TOPO_EP_NVSWITCH;
        p += 3;
        ok = num(&p, MAX_SERVERS - 1, &a) && !*p;
        e.server = (int)a;
    } else if (!strncmp(p, "sw", 2)) {
        e.kind = TOPO_EP_SWITCH;
        p += 2;
        ok = num(&p, MAX_LEVELS, &a) && a >= 1 && *p++ == '.' && num(&p, MAX_SWITCH_INDEX, &b) && !*p;
        e.server = -1;
        e.level = (int)a;
        e.index = (int)b;
    }
    if (!ok)
        return err_set(err, TS_EINVAL,
                       "'%s' is not a valid endpoint (expected gpu<server>.<gpu>, nvs<server>, nic<server>.<nic> "
                       "or sw<level 1-%d>.<index>, e.g. gpu0.3, nvs0, nic1.7, sw2.0; servers < %d, GPUs/NICs per "
                       "server < %d)",
                       name, MAX_LEVELS, MAX_SERVERS, MAX_LOCAL);
    *out = e;
    return TS_OK;
}

const char *topo_endpoint_name(const topo_endpoint *e, char *buf, size_t cap)
{
    switch (e->kind) {
    case TOPO_EP_GPU:
        snprintf(buf, cap, "gpu%d.%d", e->server, e->index);
        break;
    case TOPO_EP_NVSWITCH:
        snprintf(buf, cap, "nvs%d", e->server);
        break;
    case TOPO_EP_NIC:
        snprintf(buf, cap, "nic%d.%d", e->server, e->index);
        break;
    case TOPO_EP_SWITCH:
        snprintf(buf, cap, "sw%d.%d", e->level, e->index);
        break;
    }
    return buf;
}

int topo_gpu_index(const topo *t, const topo_endpoint *e)
{
    return e->server * t->params.gpus_per_node + e->index;
}

static uint64_t ep_key(const topo_endpoint *e)
{
    return ((uint64_t)e->kind << 60) | ((uint64_t)e->level << 56) | ((uint64_t)(uint32_t)(e->server + 1) << 24) |
           (uint64_t)e->index;
}

/* ---------------------------------------------------------------- parametric */

/* The fabrics a parametric file may name ("custom" is the link list's). */
static const char *const PARAM_FABRICS[] = {"fat-tree", "rail-optimized", NULL};

static const char *const PARAM_COLS[] = {
    "nodes",    "gpus_per_node",  "gpu",    "intra_node_gbps", "intra_node_latency_us", "nics_per_node",
    "nic_gbps", "nic_latency_us", "fabric", "levels",          "oversubscription",      NULL};

static int load_params(const csvio_table *t, topo *tp, ts_err *err)
{
    topo_params *p = &tp->params;
    if (t->nrows != 1)
        return csvio_errf(t, 1, NULL, err,
                          "a parametric topology has exactly one data row (this is row 2); describe a mixed "
                          "cluster with the link-list form (endpoint_a,endpoint_b,bandwidth_gbps,latency_us,kind)");
    const char *kind;
    int rc, fabric = 0;
    if ((rc = csvio_get_int(t, 0, "nodes", 1, MAX_SERVERS, &p->nodes, err)) ||
        (rc = csvio_get_int(t, 0, "gpus_per_node", 1, MAX_LOCAL, &p->gpus_per_node, err)) ||
        (rc = csvio_get_str(t, 0, "gpu", &kind, err)))
        return rc;
    catalog_gpus *cat = NULL;
    if ((rc = catalog_gpus_load(NULL, &cat, err)))
        return rc;
    gpu_spec g;
    rc = catalog_gpus_lookup(cat, kind, &g, err);
    catalog_gpus_free(cat);
    if (rc)
        return err_prefix(err, "%s:%d: column 'gpu': ", t->path, t->rows[0].line);
    snprintf(p->gpu, sizeof p->gpu, "%s", g.name);
    if ((rc = csvio_get_double(t, 0, "intra_node_gbps", TOPO_MIN_GBPS, TOPO_MAX_GBPS, &p->intra_node_gbps, err)) ||
        (rc = csvio_get_double(t, 0, "intra_node_latency_us", 0, 1e6, &p->intra_node_latency_us, err)) ||
        (rc = csvio_get_int(t, 0, "nics_per_node", 0, MAX_LOCAL, &p->nics_per_node, err)) ||
        (rc = csvio_get_double(t, 0, "nic_gbps", TOPO_MIN_GBPS, TOPO_MAX_GBPS, &p->nic_gbps, err)) ||
        (rc = csvio_get_double(t, 0, "nic_latency_us", 0, 1e6, &p->nic_latency_us, err)) ||
        (rc = csvio_get_enum(t, 0, "fabric", PARAM_FABRICS, &fabric, err)) ||
        (rc = csvio_get_int(t, 0, "levels", 1, MAX_LEVELS, &p->levels, err)) ||
        (rc = csvio_get_double(t, 0, "oversubscription", 1, 1e6, &p->oversubscription, err)))
        return rc;
    p->fabric = (topo_fabric)fabric;
    p->switch_latency_us = DEF_SWITCH_LAT_US;
    p->switch_ports = p->nic_gbps <= 25 ? DEF_PORTS_HDR : DEF_PORTS_NDR;
    p->pods = 0;
    p->pod_oversubscription = 1;
    if ((!csvio_empty(t, 0, "switch_latency_us") &&
         (rc = csvio_get_double(t, 0, "switch_latency_us", 0, 1e6, &p->switch_latency_us, err))) ||
        (!csvio_empty(t, 0, "switch_ports") &&
         (rc = csvio_get_int(t, 0, "switch_ports", 2, 100000, &p->switch_ports, err))) ||
        (!csvio_empty(t, 0, "pods") && (rc = csvio_get_int(t, 0, "pods", 0, p->nodes, &p->pods, err))) ||
        (!csvio_empty(t, 0, "pod_oversubscription") &&
         (rc = csvio_get_double(t, 0, "pod_oversubscription", 1, 1e6, &p->pod_oversubscription, err))))
        return rc;
    if (p->nics_per_node == 0 && p->nodes > 1)
        return csvio_errf(t, 0, "nics_per_node", err, "0 NICs cannot join %d nodes (use at least 1)", p->nodes);
    if (p->pods > 0 && p->nodes % p->pods)
        return csvio_errf(t, 0, "pods", err, "%d pods do not split %d nodes evenly (use a divisor of %d)", p->pods,
                          p->nodes, p->nodes);
    return TS_OK;
}

/* ---------------------------------------------------------------- link list */

static const char *const LINK_COLS[] = {"endpoint_a", "endpoint_b", "bandwidth_gbps", "latency_us", "kind", NULL};

typedef struct {
    uint64_t key;
    size_t row; /* first row naming it */
    int parent; /* union-find */
    bool has_pcie;
} ep_node;

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    uint64_t lo, hi;
    size_t row;
} pair_key;

static int cmp_pair(const void *a, const void *b)
{
    const pair_key *x = a, *y = b;
    if (x->lo != y->lo)
        return x->lo < y->lo ? -1 : 1;
    if (x->hi != y->hi)
        return x->hi < y->hi ? -1 : 1;
    return x->row < y->row ? -1 : x->row > y->row;
}

static int find_root(ep_node *v, int i)
{
    while (v[i].parent != i) {
        v[i].parent = v[v[i].parent].parent;
        i = v[i].parent;
    }
    return i;
}

static int ep_index(const ep_node *v, size_t n, uint64_t key)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (v[mid].key < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (int)lo;
}

/* Kinds of endpoints a link kind may join. */
static int check_link_kind(const csvio_table *t, size_t r, const topo_link *l, ts_err *err)
{
    topo_ep_kind a = l->a.kind, b = l->b.kind;
    if (a > b) {
        topo_ep_kind x = a;
        a = b;
        b = x;
    }
    bool same_server = l->a.server == l->b.server;
    bool ok = false;
    const char *want = "";
    switch (l->kind) {
    case TOPO_LINK_NVLINK:
        ok = a == TOPO_EP_GPU && (b == TOPO_EP_GPU || b == TOPO_EP_NVSWITCH) && same_server;
        want = "a GPU and a GPU or NVSwitch of the same server";
        break;
    case TOPO_LINK_PCIE:
        ok = a == TOPO_EP_GPU && b == TOPO_EP_NIC && same_server;
        want = "a GPU and a NIC of the same server";
        break;
    case TOPO_LINK_FABRIC:
        ok = b == TOPO_EP_SWITCH && a != TOPO_EP_NVSWITCH;
        want = "a NIC, GPU or switch and a switch";
        break;
    }
    if (ok)
        return TS_OK;
    char na[32], nb[32];
    return csvio_errf(t, r, "kind", err, "a %s link joins %s (got %s - %s)", TOPO_LINK_KIND_NAMES[l->kind], want,
                      topo_endpoint_name(&l->a, na, sizeof na), topo_endpoint_name(&l->b, nb, sizeof nb));
}

static int parse_links(const csvio_table *t, topo *tp, ts_err *err)
{
    tp->links = calloc(t->nrows, sizeof *tp->links);
    if (!tp->links)
        return err_set(err, TS_ENOMEM, "%s: out of memory", t->path);
    tp->n_links = t->nrows;
    for (size_t r = 0; r < t->nrows; r++) {
        topo_link *l = &tp->links[r];
        const char *a, *b;
        int rc, kind = 0;
        l->line = t->rows[r].line;
        if ((rc = csvio_get_str(t, r, "endpoint_a", &a, err)))
            return rc;
        if (topo_endpoint_parse(a, &l->a, err))
            return err_prefix(err, "%s:%d: column 'endpoint_a': ", t->path, l->line);
        if ((rc = csvio_get_str(t, r, "endpoint_b", &b, err)))
            return rc;
        if (topo_endpoint_parse(b, &l->b, err))
            return err_prefix(err, "%s:%d: column 'endpoint_b': ", t->path, l->line);
        if ((rc = csvio_get_double(t, r, "bandwidth_gbps", TOPO_MIN_GBPS, TOPO_MAX_GBPS, &l->bandwidth_gbps, err)) ||
            (rc = csvio_get_double(t, r, "latency_us", 0, 1e6, &l->latency_us, err)) ||
            (rc = csvio_get_enum(t, r, "kind", TOPO_LINK_KIND_NAMES, &kind, err)))
            return rc;
        l->kind = (topo_link_kind)kind;
        if (ep_key(&l->a) == ep_key(&l->b))
            return csvio_errf(t, r, "endpoint_b", err, "'%s' links to itself", b);
        if ((rc = check_link_kind(t, r, l, err)))
            return rc;
    }
    return TS_OK;
}

static int check_duplicates(const csvio_table *t, const topo *tp, ts_err *err)
{
    size_t n = tp->n_links;
    pair_key *pk = malloc(n * sizeof *pk);
    if (!pk)
        return err_set(err, TS_ENOMEM, "%s: out of memory", t->path);
    for (size_t i = 0; i < n; i++) {
        uint64_t a = ep_key(&tp->links[i].a), b = ep_key(&tp->links[i].b);
        pk[i] = (pair_key){a < b ? a : b, a < b ? b : a, i};
    }
    qsort(pk, n, sizeof *pk, cmp_pair);
    int rc = TS_OK;
    for (size_t i = 1; i < n && !rc; i++)
        if (pk[i].lo == pk[i - 1].lo && pk[i].hi == pk[i - 1].hi) {
            const topo_link *l = &tp->links[pk[i].row];
            char na[32], nb[32];
            rc = csvio_errf(t, pk[i].row, NULL, err,
                            "duplicate link %s - %s (first at line %d; give one row per pair of endpoints, with the "
                            "summed bandwidth)",
                            topo_endpoint_name(&l->a, na, sizeof na), topo_endpoint_name(&l->b, nb, sizeof nb),
                            tp->links[pk[i - 1].row].line);
        }
    free(pk);
    return rc;
}

/* Servers, GPUs per server, NICs per server; every GPU slot present. */
static int check_grid(const csvio_table *t, topo *tp, ts_err *err)
{
    int servers = 0, gpn = 0, nics = 0;
    for (size_t i = 0; i < tp->n_links; i++)
        for (int s = 0; s < 2; s++) {
            const topo_endpoint *e = s ? &tp->links[i].b : &tp->links[i].a;
            if (e->kind == TOPO_EP_GPU) {
                if (e->server + 1 > servers)
                    servers = e->server + 1;
                if (e->index + 1 > gpn)
                    gpn = e->index + 1;
            } else if (e->kind == TOPO_EP_NIC && e->index + 1 > nics) {
                nics = e->index + 1;
            }
        }
    if (servers == 0)
        return err_set(err, TS_EINVAL, "%s: no GPU endpoints (gpu<server>.<gpu>) in the link list", t->path);
    if ((long)servers * gpn > 64L * 1024 * 1024)
        return err_set(err, TS_EINVAL, "%s: %d servers x %d GPUs is too large for a link list", t->path, servers, gpn);
    unsigned char *seen = calloc((size_t)servers * (size_t)gpn, 1);
    if (!seen)
        return err_set(err, TS_ENOMEM, "%s: out of memory", t->path);
    int rc = TS_OK;
    for (size_t i = 0; i < tp->n_links && !rc; i++)
        for (int s = 0; s < 2 && !rc; s++) {
            const topo_endpoint *e = s ? &tp->links[i].b : &tp->links[i].a;
            const char *col = s ? "endpoint_b" : "endpoint_a";
            char nm[32];
            if (e->kind == TOPO_EP_GPU) /* NOLINTNEXTLINE(clang-analyzer-unix.Malloc): a GPU makes gpn >= 1 */
                seen[(size_t)e->server * gpn + e->index] = 1;
            else if ((e->kind == TOPO_EP_NIC || e->kind == TOPO_EP_NVSWITCH) && e->server >= servers)
                rc = csvio_errf(t, i, col, err,
                                "%s is a dangling link end: server %d holds no GPU (the GPUs are on servers 0..%d)",
                                topo_endpoint_name(e, nm, sizeof nm), e->server, servers - 1);
        }
    for (int s = 0; s < servers && !rc; s++)
        for (int k = 0; k < gpn && !rc; k++)
            if (!seen[(size_t)s * gpn + k])
                rc = err_set(err, TS_EINVAL,
                             "%s: gpu%d.%d is not connected: every server 0..%d must hold gpu<s>.0 .. gpu<s>.%d "
                             "(give it its links, or renumber the GPUs)",
                             t->path, s, k, servers - 1, gpn - 1);
    free(seen);
    tp->params.nodes = servers;
    tp->params.gpus_per_node = gpn;
    tp->params.nics_per_node = nics;
    return rc;
}

/* Every endpoint joined to gpu0.0; every NIC has a PCIe link. */
static int check_connected(const csvio_table *t, const topo *tp, ts_err *err)
{
    size_t n = tp->n_links, nk = 0;
    uint64_t *keys = malloc(2 * n * sizeof *keys);
    ep_node *v = calloc(2 * n, sizeof *v);
    int rc = TS_OK;
    if (!keys || !v) {
        rc = err_set(err, TS_ENOMEM, "%s: out of memory", t->path);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        keys[2 * i] = ep_key(&tp->links[i].a);
        keys[2 * i + 1] = ep_key(&tp->links[i].b);
    }
    qsort(keys, 2 * n, sizeof *keys, cmp_u64);
    for (size_t i = 0; i < 2 * n; i++)
        if (!nk || keys[i] != v[nk - 1].key) {
            v[nk] = (ep_node){.key = keys[i], .row = (size_t)-1, .parent = (int)nk};
            nk++;
        }
    for (size_t i = 0; i < n; i++) {
        const topo_link *l = &tp->links[i];
        int a = ep_index(v, nk, ep_key(&l->a)), b = ep_index(v, nk, ep_key(&l->b));
        if (v[a].row == (size_t)-1)
            v[a].row = i;
        if (v[b].row == (size_t)-1)
            v[b].row = i;
        if (l->kind == TOPO_LINK_PCIE)
            v[a].has_pcie = v[b].has_pcie = true;
        int ra = find_root(v, a), rb = find_root(v, b);
        if (ra != rb)
            v[ra].parent = rb;
    }
    topo_endpoint g0 = {.kind = TOPO_EP_GPU, .server = 0, .index = 0};
    int root = find_root(v, ep_index(v, nk, ep_key(&g0)));
    for (size_t i = 0; i < nk && !rc; i++) {
        const topo_link *l = &tp->links[v[i].row];
        const topo_endpoint *e = ep_key(&l->a) == v[i].key ? &l->a : &l->b;
        char nm[32];
        if (find_root(v, (int)i) != root)
            rc = csvio_errf(t, v[i].row, NULL, err,
                            "dangling link: %s (first named here) is not connected to gpu0.0 and the other GPUs",
                            topo_endpoint_name(e, nm, sizeof nm));
        else if (e->kind == TOPO_EP_NIC && !v[i].has_pcie)
            rc = csvio_errf(t, v[i].row, NULL, err,
                            "dangling link: %s (first named here) has no pcie link to a GPU of server %d",
                            topo_endpoint_name(e, nm, sizeof nm), e->server);
    }
out:
    free(keys);
    free(v);
    return rc;
}

/* Missing cables in a file that is otherwise consistent: every GPU has as
 * many NVLink and PCIe links as the GPU with the most; every NIC named has
 * a fabric link when any NIC has one; the switches are joined to each
 * other over switch-switch links (routes do not pass through servers). */
static int check_cabling(const csvio_table *t, const topo *tp, ts_err *err)
{
    const int S = tp->params.nodes, G = tp->params.gpus_per_node, K = tp->params.nics_per_node;
    size_t ng = (size_t)S * (size_t)G, nn = (size_t)S * (size_t)(K > 0 ? K : 1), n = tp->n_links;
    int *nv = calloc(ng, sizeof *nv), *pc = calloc(ng, sizeof *pc);
    unsigned char *nic_named = calloc(nn, 1), *nic_fab = calloc(nn, 1);
    uint64_t *sw = malloc((2 * n + 1) * sizeof *sw);
    ep_node *v = calloc(2 * n + 1, sizeof *v);
    int rc = TS_OK, nvmax = 0, pcmax = 0;
    size_t nvrow = 0, pcrow = 0, fabrow = (size_t)-1, nsw = 0, k = 0;
    char na[32], nb[32], nc[32];
    if (!nv || !pc || !nic_named || !nic_fab || !sw || !v) {
        rc = err_set(err, TS_ENOMEM, "%s: out of memory", t->path);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        for (int e = 0; e < 2; e++) {
            const topo_link *l = &tp->links[i];
            const topo_endpoint *x = e ? &l->b : &l->a, *y = e ? &l->a : &l->b;
            if (x->kind == TOPO_EP_GPU) {
                size_t gi = (size_t)x->server * G + x->index;
                if (l->kind == TOPO_LINK_NVLINK && ++nv[gi] > nvmax) {
                    nvmax = nv[gi];
                    nvrow = i;
                }
                if (l->kind == TOPO_LINK_PCIE && ++pc[gi] > pcmax) {
                    pcmax = pc[gi];
                    pcrow = i;
                }
            } else if (x->kind == TOPO_EP_NIC && x->server < S && x->index < K) {
                size_t ni = (size_t)x->server * K + x->index;
                nic_named[ni] = 1;
                if (y->kind == TOPO_EP_SWITCH) {
                    nic_fab[ni] = 1;
                    if (fabrow == (size_t)-1)
                        fabrow = i;
                }
            } else if (x->kind == TOPO_EP_SWITCH) {
                sw[nsw++] = ep_key(x);
            }
        }
    for (size_t gi = 0; gi < ng && !rc; gi++) {
        const topo_endpoint ge = {.kind = TOPO_EP_GPU, .server = (int)(gi / (size_t)G), .index = (int)(gi % (size_t)G)};
        const topo_link *ref = nv[gi] < nvmax ? &tp->links[nvrow] : pc[gi] < pcmax ? &tp->links[pcrow] : NULL;
        if (ref)
            rc = err_set(err, TS_EINVAL,
                         "%s: %s has %d %s links where other GPUs have %d (e.g. %s - %s, line %d): a missing cable? "
                         "give every GPU the same links",
                         t->path, topo_endpoint_name(&ge, na, sizeof na), nv[gi] < nvmax ? nv[gi] : pc[gi],
                         nv[gi] < nvmax ? "nvlink" : "pcie", nv[gi] < nvmax ? nvmax : pcmax,
                         topo_endpoint_name(&ref->a, nb, sizeof nb), topo_endpoint_name(&ref->b, nc, sizeof nc),
                         ref->line);
    }
    for (size_t ni = 0; ni < nn && !rc && fabrow != (size_t)-1 && K > 0; ni++)
        if (nic_named[ni] && !nic_fab[ni]) {
            const topo_endpoint ne = {
                .kind = TOPO_EP_NIC, .server = (int)(ni / (size_t)K), .index = (int)(ni % (size_t)K)};
            rc = err_set(err, TS_EINVAL,
                         "%s: %s has no fabric link to a switch, where other NICs have one (e.g. line %d): a missing "
                         "cable?",
                         t->path, topo_endpoint_name(&ne, na, sizeof na), tp->links[fabrow].line);
        }
    if (rc || nsw == 0)
        goto out;
    qsort(sw, nsw, sizeof *sw, cmp_u64);
    for (size_t i = 0; i < nsw; i++)
        if (!k || sw[i] != v[k - 1].key) {
            v[k] = (ep_node){.key = sw[i], .row = (size_t)-1, .parent = (int)k};
            k++;
        }
    for (size_t i = 0; i < n; i++) {
        const topo_link *l = &tp->links[i];
        if (l->a.kind != TOPO_EP_SWITCH || l->b.kind != TOPO_EP_SWITCH)
            continue;
        int a = find_root(v, ep_index(v, k, ep_key(&l->a))), b = find_root(v, ep_index(v, k, ep_key(&l->b)));
        if (a != b)
            v[a].parent = b;
    }
    for (size_t i = 1; i < k && !rc; i++)
        if (find_root(v, (int)i) != find_root(v, 0)) {
            topo_endpoint x = {0}, y = {0};
            for (size_t j = 0; j < n; j++)
                for (int e = 0; e < 2; e++) {
                    const topo_endpoint *q = e ? &tp->links[j].b : &tp->links[j].a;
                    if (q->kind == TOPO_EP_SWITCH && ep_key(q) == v[i].key)
                        x = *q;
                    if (q->kind == TOPO_EP_SWITCH && ep_key(q) == v[0].key)
                        y = *q;
                }
            rc = err_set(err, TS_EINVAL,
                         "%s: %s and %s are not joined by switch-to-switch links (routes cross the fabric over "
                         "switches only): a missing cable?",
                         t->path, topo_endpoint_name(&y, na, sizeof na), topo_endpoint_name(&x, nb, sizeof nb));
        }
out:
    free(nv);
    free(pc);
    free(nic_named);
    free(nic_fab);
    free(sw);
    free(v);
    return rc;
}

static int load_links(const csvio_table *t, topo *tp, ts_err *err)
{
    int rc;
    tp->form = TOPO_LINK_LIST;
    tp->params.fabric = TOPO_FABRIC_CUSTOM;
    tp->params.oversubscription = 1;
    tp->params.pod_oversubscription = 1;
    if ((rc = parse_links(t, tp, err)) || (rc = check_duplicates(t, tp, err)) || (rc = check_grid(t, tp, err)) ||
        (rc = check_connected(t, tp, err)) || (rc = check_cabling(t, tp, err)))
        return rc;
    int maxlevel = 0;
    for (size_t i = 0; i < tp->n_links; i++) {
        if (tp->links[i].a.level > maxlevel)
            maxlevel = tp->links[i].a.level;
        if (tp->links[i].b.level > maxlevel)
            maxlevel = tp->links[i].b.level;
    }
    tp->params.levels = maxlevel;
    return TS_OK;
}

/* ---------------------------------------------------------------- entry points */

int topo_load(const char *path, topo **out, ts_err *err)
{
    *out = NULL;
    csvio_table *t = NULL;
    int rc = csvio_read(path, NULL, 0, &t, err);
    if (rc) {
        if (rc == TS_EINVAL && strstr(err ? err->msg : "", "no header row"))
            err_prefix(err, "topology ");
        return rc;
    }
    topo *tp = calloc(1, sizeof *tp);
    if (!tp) {
        csvio_free(t);
        return err_set(err, TS_ENOMEM, "%s: out of memory", path);
    }
    snprintf(tp->source, sizeof tp->source, "%s", path);
    if (t->ncomments)
        snprintf(tp->description, sizeof tp->description, "%s", t->comments[0]);
    if (csvio_col(t, "endpoint_a") >= 0) {
        for (size_t i = 0; LINK_COLS[i] && !rc; i++)
            rc = csvio_require(t, LINK_COLS[i], err);
        if (!rc)
            rc = load_links(t, tp, err);
    } else if (csvio_col(t, "nodes") >= 0) {
        for (size_t i = 0; PARAM_COLS[i] && !rc; i++)
            rc = csvio_require(t, PARAM_COLS[i], err);
        if (!rc)
            rc = load_params(t, tp, err);
    } else {
        rc = err_set(err, TS_EINVAL,
                     "%s:%d: not a topology: the header needs the parametric columns (nodes, gpus_per_node, gpu, "
                     "intra_node_gbps, intra_node_latency_us, nics_per_node, nic_gbps, nic_latency_us, fabric, "
                     "levels, oversubscription) or the link-list columns (endpoint_a, endpoint_b, bandwidth_gbps, "
                     "latency_us, kind)",
                     path, t->header_line);
    }
    csvio_free(t);
    if (rc) {
        topo_free(tp);
        return rc;
    }
    *out = tp;
    return TS_OK;
}

int topo_default(int gpus, topo **out, ts_err *err)
{
    *out = NULL;
    if (gpus < 1)
        return err_set(err, TS_EINVAL, "--gpus %d: the default topology needs at least 1 GPU", gpus);
    topo *tp = calloc(1, sizeof *tp);
    if (!tp)
        return err_set(err, TS_ENOMEM, "out of memory");
    tp->form = TOPO_PARAMETRIC;
    snprintf(tp->source, sizeof tp->source, "built-in default");
    snprintf(tp->description, sizeof tp->description,
             "DGX A100 80GB nodes (8 GPUs, NVSwitch, 8 x HDR 200 Gb/s NICs) on a 3-level rail-optimized HDR "
             "InfiniBand fat tree like Selene (same figures as topologies/selene-dgx-a100.csv)");
    tp->params = (topo_params){
        .nodes = (gpus + 7) / 8,
        .gpus_per_node = 8,
        .gpu = "A100-SXM4-80GB",
        .intra_node_gbps = 300,       /* NVLink3, gpus.csv / networks.csv */
        .intra_node_latency_us = 0.6, /* see selene-dgx-a100.csv */
        .nics_per_node = 8,
        .nic_gbps = 25, /* HDR 200 Gb/s, networks.csv */
        .nic_latency_us = 0.6,
        .fabric = TOPO_RAIL_OPTIMIZED,
        .levels = 3,
        .oversubscription = 1,
        .switch_latency_us = DEF_SWITCH_LAT_US,
        .switch_ports = DEF_PORTS_HDR,
        .pods = 0,
        .pod_oversubscription = 1,
    };
    *out = tp;
    return TS_OK;
}

int topo_default_for(const gpu_spec *g, int gpus, topo **out, ts_err *err)
{
    int rc = topo_default(gpus, out, err);
    if (rc || !g)
        return rc;
    topo_params *p = &(*out)->params;
    snprintf(p->gpu, sizeof p->gpu, "%s", g->name);
    p->intra_node_gbps = g->nvlink_gbps;
    if (strncmp(g->name, "GB200", 5) == 0) {
        /* GB200 NVL72: a rack is one NVLink domain of 72 GPUs, one 400 Gb/s
         * NIC per GPU (topologies/gb200-nvl72.csv). */
        p->gpus_per_node = 72;
        p->nodes = (gpus + 71) / 72;
        p->nics_per_node = 72;
        p->nic_gbps = 50;
        p->levels = 2;
        p->switch_ports = DEF_PORTS_NDR;
        snprintf((*out)->description, sizeof(*out)->description,
                 "GB200 NVL72 racks of %s (72 GPUs in one NVLink domain, %g GB/s, one NDR 400 Gb/s NIC per GPU) on "
                 "a 2-level rail-optimized NDR InfiniBand fat tree (figures of topologies/gb200-nvl72.csv)",
                 g->name, g->nvlink_gbps);
    } else if (strncmp(g->name, "B200", 4) == 0) {
        p->nic_gbps = 50; /* DGX B200: 8 x ConnectX-7 400 Gb/s (topologies/dgx-b200-superpod.csv) */
        p->switch_ports = DEF_PORTS_NDR;
        snprintf((*out)->description, sizeof(*out)->description,
                 "DGX B200-like nodes of %s (8 GPUs, NVSwitch %g GB/s, 8 x NDR 400 Gb/s NICs) on a 3-level "
                 "rail-optimized NDR InfiniBand fat tree (figures of topologies/dgx-b200-superpod.csv)",
                 g->name, g->nvlink_gbps);
    } else if (g->nvlink_gbps > 300) {
        p->nic_gbps = 50; /* NDR 400 Gb/s, networks.csv */
        p->switch_ports = DEF_PORTS_NDR;
        snprintf((*out)->description, sizeof(*out)->description,
                 "DGX H100-like nodes of %s (8 GPUs, NVSwitch %g GB/s, 8 x NDR 400 Gb/s NICs) on a 3-level "
                 "rail-optimized NDR InfiniBand fat tree (figures of topologies/dgx-h100-cluster.csv)",
                 g->name, g->nvlink_gbps);
    } else {
        snprintf((*out)->description, sizeof(*out)->description,
                 "DGX A100-like nodes of %s (8 GPUs, NVSwitch %g GB/s, 8 x HDR 200 Gb/s NICs) on a 3-level "
                 "rail-optimized HDR InfiniBand fat tree like Selene (figures of topologies/selene-dgx-a100.csv)",
                 g->name, g->nvlink_gbps);
    }
    return TS_OK;
}

void topo_describe(const topo *t, char *buf, size_t cap)
{
    const topo_params *p = &t->params;
    if (t->form == TOPO_LINK_LIST) {
        snprintf(buf, cap, "%d nodes x %d GPUs, %d NICs per node, %zu explicit links, %d switch levels (%s)", p->nodes,
                 p->gpus_per_node, p->nics_per_node, t->n_links, p->levels, t->source);
        return;
    }
    char pods[96] = "";
    if (p->pods > 0)
        snprintf(pods, sizeof pods, ", %d pods at %g:1 between pods", p->pods, p->pod_oversubscription);
    snprintf(buf, cap,
             "%d nodes x %d %s, intra-node %g GB/s per GPU (%g us), %d x %g GB/s NICs (%g us), %d-level %s %g:1, "
             "%d-port switches (%g us per hop)%s (%s)",
             p->nodes, p->gpus_per_node, p->gpu, p->intra_node_gbps, p->intra_node_latency_us, p->nics_per_node,
             p->nic_gbps, p->nic_latency_us, p->levels, TOPO_FABRIC_NAMES[p->fabric], p->oversubscription,
             p->switch_ports, p->switch_latency_us, pods, t->source);
}

double topo_nic_eff(double nic_gbps)
{
    return nic_gbps <= 25.0 ? 12.2 / 12.5 : 47.0 / 50.0;
}
