/* net_flow — see net_flow.h. */
#include "sim/net/net_flow.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/util/ckd.h"
#include "sim/util/grow.h"

typedef struct {
    int nlinks, cap; /* links in use / allocated (kept when the slot is reused) */
    int *links;      /* the route; a link may repeat (a bundle crossing it twice) */
    int *pos;        /* index of this flow in each link's flow list, per occurrence (links + cap) */
    double left_bytes;
    double rate;      /* GB/s = bytes/ns; 0 until first assigned */
    double new_rate;  /* scratch of the water-filling (before it: the share of own_link) */
    int own_link;     /* scratch: its tightest link no other flow uses, -1 if none */
    int sh_off, sh_n; /* scratch: its occurrences of shared links, net_flows.sh[sh_off ..] */
    int64_t last_ns;  /* time left_bytes was last brought up to date */
    int64_t done_ns;
    uint64_t tag;
    uint32_t mark;     /* component epoch */
    uint32_t fast_gen; /* == net_flows.gen: started alone, rate set, not yet counted */
    uint8_t active, frozen;
    uint8_t may_repeat; /* may list a link twice (0: known not to, from a start on idle links) */
    uint8_t solo;       /* scratch: no other flow on any of its links */
} flow_t;

/* A link's flows: occurrence 0 in the dense hot array (a lone flow on
 * idle links touches only that), the others in the link record. */
typedef struct {
    int n;   /* flow occurrences on the link */
    int fl0; /* occurrence 0 (if n > 0) */
} link_hot;

typedef struct {
    int *fl; /* occurrences 1 .. n-1 at fl[k - 1]; cap entries */
    int cap;
    int dirty;
} link_t;

/* A link's state in the water-filling, dense (16 bytes: the filling
 * touches every link of every flow it freezes). */
typedef struct {
    double rem; /* capacity left, GB/s */
    int unfrozen;
    uint32_t ver; /* heap version */
} link_fill;

typedef struct {
    double share;
    int link;
    uint32_t ver;
} fill_ent;
typedef struct {
    int64_t t_ns;
    int id;
} done_ent; /* completion heap entry: (done_ns, flow id) */

struct net_flows {
    const net_graph *g;
    link_hot *lh;
    link_t *lk;
    link_fill *lf;
    uint32_t *lmark; /* per link: component epoch (apart: lh stays 8 bytes a link) */
    flow_t *fl;
    int n_flows, cap_flows;
    int *free_ids;
    int n_free, cap_free;
    done_ent *heap;
    int n_heap; /* completion heap, cap = cap_flows */
    int *hpos;  /* per flow: position in the heap, -1 if absent */
    int *dirty;
    int n_dirty;                  /* dirty link ids, cap = n_links */
    int *comp_links, *comp_flows; /* scratch, caps n_links and cap_flows */
    fill_ent *fh;
    int n_fh, cap_fh; /* water-filling heap */
    int *sh;
    int cap_sh; /* scratch: the component's flows' shared-link occurrences */
    uint32_t epoch;
    uint32_t gen;     /* recomputation generation (starts at 1) */
    double *bw;       /* per link: the graph's bw_gbps, dense (solo rates read
                                      one per link of a bundle) */
    uint32_t bw_seen; /* the graph's bw_version that bw holds */
    uint32_t bw_gen;  /* bumped with each reread of bw: hints of another are stale */
    int n_fast;       /* flows started alone since the last recomputation */
    int64_t now_ns;
    int active;
    net_flow_stats st;
    /* per link, with net_flows_track_links (else NULL) */
    double *u_bytes, *u_peak;
    int64_t *u_busy, *u_since; /* busy time of closed periods; start of the open one */
};

/* ---------------------------------------------------------- completion heap */

static int before(done_ent a, done_ent b)
{
    return a.t_ns < b.t_ns || (a.t_ns == b.t_ns && a.id < b.id);
}

/* A 4-ary heap: half the depth of a binary one, the children of a node
 * side by side. (done_ns, id) is a total order, so the order of pops does
 * not depend on the shape. */
static void heap_up(net_flows *f, int i)
{
    done_ent e = f->heap[i];
    while (i > 0) {
        int p = (i - 1) / 4;
        if (!before(e, f->heap[p]))
            break;
        f->heap[i] = f->heap[p];
        f->hpos[f->heap[i].id] = i;
        i = p;
    }
    f->heap[i] = e;
    f->hpos[e.id] = i;
}

static void heap_down(net_flows *f, int i)
{
    done_ent e = f->heap[i];
    for (;;) {
        int c = 4 * i + 1, end = c + 4;
        if (c >= f->n_heap)
            break;
        if (end > f->n_heap)
            end = f->n_heap;
        for (int k = c + 1; k < end; k++)
            if (before(f->heap[k], f->heap[c]))
                c = k;
        if (!before(f->heap[c], e))
            break;
        f->heap[i] = f->heap[c];
        f->hpos[f->heap[i].id] = i;
        i = c;
    }
    f->heap[i] = e;
    f->hpos[e.id] = i;
}

/* Insert flow id at its done_ns, or move it there. */
static void heap_update(net_flows *f, int id)
{
    int i = f->hpos[id];
    if (i < 0) {
        i = f->n_heap++;
        f->heap[i] = (done_ent){f->fl[id].done_ns, id};
        heap_up(f, i);
    } else {
        f->heap[i].t_ns = f->fl[id].done_ns;
        heap_up(f, i);
        heap_down(f, f->hpos[id]);
    }
}

static void heap_remove(net_flows *f, int id)
{
    int i = f->hpos[id];
    if (i < 0)
        return;
    f->hpos[id] = -1;
    done_ent last = f->heap[--f->n_heap];
    if (i == f->n_heap)
        return;
    f->heap[i] = last;
    f->hpos[last.id] = i;
    heap_up(f, i);
    heap_down(f, f->hpos[last.id]);
}

/* ---------------------------------------------------------- lifecycle */

/* Copy the graph's link bandwidths (its bw_version) into f->bw. */
static void bw_reread(net_flows *f)
{
    for (int l = 0; l < f->g->n_links; l++)
        f->bw[l] = f->g->links[l].bw_gbps;
    f->bw_seen = f->g->bw_version;
    f->bw_gen++;
}

int net_flows_new(const net_graph *g, net_flows **out, ts_err *err)
{
    if (!g->finished)
        return err_set(err, TS_ESTATE, "net_flows_new: graph not finished");
    net_flows *f = calloc(1, sizeof *f);
    if (!f)
        return err_set(err, TS_ENOMEM, "net_flows: out of memory");
    f->g = g;
    f->gen = 1;
    size_t nl = (size_t)(g->n_links ? g->n_links : 1);
    f->lh = calloc(nl, sizeof *f->lh);
    f->bw = malloc(nl * sizeof *f->bw);
    f->lk = calloc(nl, sizeof *f->lk);
    f->lf = calloc(nl, sizeof *f->lf);
    f->lmark = calloc(nl, sizeof *f->lmark);
    f->dirty = malloc(nl * sizeof *f->dirty);
    f->comp_links = malloc(nl * sizeof *f->comp_links);
    if (!f->lh || !f->lk || !f->lf || !f->lmark || !f->dirty || !f->comp_links || !f->bw) {
        net_flows_free(f);
        return err_set(err, TS_ENOMEM, "net_flows: out of memory");
    }
    bw_reread(f);
    *out = f;
    return TS_OK;
}

void net_flows_free(net_flows *f)
{
    if (!f)
        return;
    if (f->lk)
        for (int i = 0; i < f->g->n_links; i++)
            free(f->lk[i].fl);
    free(f->lk);
    free(f->lf);
    free(f->lmark);
    free(f->lh);
    free(f->bw);
    for (int i = 0; i < f->n_flows; i++)
        free(f->fl[i].links); /* route arrays are kept per slot */
    free(f->fl);
    free(f->free_ids);
    free(f->heap);
    free(f->hpos);
    free(f->dirty);
    free(f->comp_links);
    free(f->comp_flows);
    free(f->fh);
    free(f->sh);
    free(f->u_bytes);
    free(f->u_peak);
    free(f->u_busy);
    free(f->u_since);
    free(f);
}

static int alloc_flow(net_flows *f)
{
    if (f->n_free > 0)
        return f->free_ids[--f->n_free];
    if (f->n_flows == f->cap_flows) {
        int ncap = f->cap_flows ? f->cap_flows * 2 : 256;
        flow_t *nf = realloc(f->fl, sizeof *nf * (size_t)ncap);
        if (!nf)
            return TS_ENOMEM;
        memset(nf + f->cap_flows, 0, sizeof *nf * (size_t)(ncap - f->cap_flows));
        f->fl = nf;
        done_ent *nh = realloc(f->heap, sizeof *nh * (size_t)ncap);
        if (!nh)
            return TS_ENOMEM;
        f->heap = nh;
        int *np = realloc(f->hpos, sizeof *np * (size_t)ncap);
        if (!np)
            return TS_ENOMEM;
        f->hpos = np;
        int *nc = realloc(f->comp_flows, sizeof *nc * (size_t)ncap);
        if (!nc)
            return TS_ENOMEM;
        f->comp_flows = nc;
        int *fr = realloc(f->free_ids, sizeof *fr * (size_t)ncap);
        if (!fr)
            return TS_ENOMEM;
        f->free_ids = fr;
        f->cap_flows = ncap;
    }
    return f->n_flows++;
}

/* Occurrence k of link l's flow list. */
static inline int lfl(const net_flows *f, int l, int k)
{
    return k ? f->lk[l].fl[k - 1] : f->lh[l].fl0;
}

static inline void lfl_set(net_flows *f, int l, int k, int id)
{
    if (k)
        f->lk[l].fl[k - 1] = id;
    else
        f->lh[l].fl0 = id;
}

/* Append flow id to link l's list; its occurrence index, or TS_ENOMEM. */
static int lfl_push(net_flows *f, int l, int id)
{
    link_hot *H = &f->lh[l];
    int k = H->n;
    if (k == 0) {
        H->fl0 = id;
        if (f->u_since)
            f->u_since[l] = f->now_ns; /* the link becomes busy */
    } else {
        link_t *L = &f->lk[l];
        if (k - 1 == L->cap && grow_to_int((void **)&L->fl, &L->cap, k, 4, sizeof *L->fl))
            return TS_ENOMEM;
        L->fl[k - 1] = id;
    }
    H->n = k + 1;
    return k;
}

static void mark_dirty(net_flows *f, int l)
{
    if (!f->lk[l].dirty) {
        f->lk[l].dirty = 1;
        f->dirty[f->n_dirty++] = l;
    }
}

/* Is flow id the only flow on every one of its links? */
static int alone_on_links(const net_flows *f, int id)
{
    const flow_t *F = &f->fl[id];
    for (int h = 0; h < F->nlinks; h++) {
        int l = F->links[h];
        for (int k = 0; k < f->lh[l].n; k++)
            if (lfl(f, l, k) != id)
                return 0;
    }
    return 1;
}

/* Rate of a flow alone on its links (each holding only its occurrences):
 * its tightest link's share bw / occurrences, GB/s. */
static double solo_rate(const net_flows *f, const int *links, int nlinks)
{
    double rate = 0;
    for (int h = 0; h < nlinks; h++) {
        int n = f->lh[links[h]].n;
        double bw = f->bw[links[h]];
        double share = n == 1 ? bw : bw / n; /* x / 1 == x: skip the division */
        if (h == 0 || share < rate)
            rate = share;
    }
    return rate > 0 ? rate : 0;
}

/* Link l carries rate_gbps now: keep the largest utilisation. */
static void peak_note(net_flows *f, int l, double rate_gbps)
{
    double u = f->bw[l] > 0 ? rate_gbps / f->bw[l] : 0;
    if (u > f->u_peak[l])
        f->u_peak[l] = u;
}

/* ---------------------------------------------------------- water-filling */

static int fh_less(const fill_ent *a, const fill_ent *b)
{
    return a->share < b->share || (a->share == b->share && a->link < b->link);
}

static int fh_push(net_flows *f, double share, int link, uint32_t ver)
{
    if (f->n_fh == f->cap_fh && grow_to_int((void **)&f->fh, &f->cap_fh, f->n_fh + 1, 256, sizeof *f->fh))
        return TS_ENOMEM;
    int i = f->n_fh++;
    fill_ent e = {share, link, ver};
    while (i > 0) {
        int p = (i - 1) / 4;
        if (fh_less(&f->fh[p], &e))
            break;
        f->fh[i] = f->fh[p];
        i = p;
    }
    f->fh[i] = e;
    return TS_OK;
}

/* Put e at position i of the heap and sift it down. The water-filling heap
 * is 4-ary like the completion heap: four 16-byte children share a cache
 * line, and pops (the order (share, link) is total, see fh_heapify) come
 * out in the same order whatever the arity. */
static void fh_sift_down(net_flows *f, int i, fill_ent e)
{
    for (;;) {
        int c = 4 * i + 1, end = c + 4;
        if (c >= f->n_fh)
            break;
        if (end > f->n_fh)
            end = f->n_fh;
        for (int k = c + 1; k < end; k++)
            if (fh_less(&f->fh[k], &f->fh[c]))
                c = k;
        if (fh_less(&e, &f->fh[c]))
            break;
        f->fh[i] = f->fh[c];
        i = c;
    }
    f->fh[i] = e;
}

/* Order fh[0 .. n_fh) into a heap in place (bottom-up). The entries'
 * order (share, link) is total up to stale twins of one link, so pops come
 * out as if pushed one by one. */
static void fh_heapify(net_flows *f)
{
    for (int i = f->n_fh > 1 ? (f->n_fh - 2) / 4 : -1; i >= 0; i--)
        fh_sift_down(f, i, f->fh[i]);
}

static fill_ent fh_pop(net_flows *f)
{
    fill_ent top = f->fh[0], e = f->fh[--f->n_fh];
    if (f->n_fh > 0)
        fh_sift_down(f, 0, e);
    return top;
}

static int64_t duration_ns(double bytes, double rate)
{
    if (bytes <= 0)
        return 0;
    double x = bytes / rate;
    double c = ceil(x - 1e-9 * x - 1e-9);
    if (c < 0)
        c = 0;
    /* Past the engine's horizon (2^62 ns): one ns beyond it, which the engine refuses
     * when the flow's task finishes, and which added to any time before the horizon
     * still fits an int64. */
    if (c > (double)CKD_MAX_NS)
        return CKD_MAX_NS + 1;
    return (int64_t)c;
}

static int recompute_dirty(net_flows *f);

/* One recomputation that (re)assigned n flow rates, in the stats. */
static void count_recompute(net_flows *f, int n)
{
    f->st.recomputes++;
    f->st.rate_updates += (uint64_t)n;
    if ((uint64_t)n > f->st.max_component)
        f->st.max_component = (uint64_t)n;
}

/* Recompute the rates of the components of the dirty links at f->now_ns.
 * Without dirty links only the lone starts since the last call are
 * counted (their rates are set). */
static inline int recompute(net_flows *f)
{
    if (f->n_dirty > 0)
        return recompute_dirty(f);
    if (f->n_fast > 0) {
        f->gen++;
        count_recompute(f, f->n_fast);
        f->n_fast = 0;
    }
    return TS_OK;
}

static int recompute_dirty(net_flows *f)
{
    uint32_t ep = ++f->epoch, gen = f->gen++;
    int nl = 0, nf = 0, fast_seen = 0, n_fast = f->n_fast, nsh = 0;
    f->n_fast = 0;
    for (int i = 0; i < f->n_dirty; i++) {
        int l = f->dirty[i];
        f->lk[l].dirty = 0;
        if (f->lmark[l] != ep) {
            f->lmark[l] = ep;
            f->comp_links[nl++] = l;
        }
    }
    f->n_dirty = 0;
    /* BFS over links <-> flows. A link that only the flow reaching it uses
     * (n == 1: most of a bundle's path) leads nowhere else: it stays out of
     * comp_links and is seen only here, as a candidate for the flow's
     * tightest own link (share bw / 1; see below). The flow's occurrences of
     * the other links go to its shared list sh[sh_off .. +sh_n), in route
     * order: the filling below touches only those. */
    for (int li = 0; li < nl; li++) {
        int l = f->comp_links[li];
        for (int k = 0; k < f->lh[l].n; k++) {
            int id = lfl(f, l, k);
            flow_t *F = &f->fl[id];
            if (F->mark == ep)
                continue;
            F->mark = ep;
            fast_seen += F->fast_gen == gen;
            f->comp_flows[nf++] = id;
            if (nsh + F->nlinks > f->cap_sh &&
                grow_to_int((void **)&f->sh, &f->cap_sh, nsh + F->nlinks, 1024, sizeof *f->sh))
                return TS_ENOMEM;
            F->own_link = -1;
            F->sh_off = nsh;
            for (int h = 0; h < F->nlinks; h++) {
                int l2 = F->links[h];
                if (f->lh[l2].n == 1) {
                    fill_ent e = {f->bw[l2], l2, 0}; /* share bw / 1 */
                    if (F->own_link < 0 || fh_less(&e, &(fill_ent){F->new_rate, F->own_link, 0})) {
                        F->own_link = l2;
                        F->new_rate = e.share;
                    }
                    continue;
                }
                f->sh[nsh++] = l2;
                if (f->lmark[l2] != ep) {
                    f->lmark[l2] = ep;
                    f->comp_links[nl++] = l2;
                }
            }
            F->sh_n = nsh - F->sh_off;
        }
    }
    /* The flows started alone since the last call (net_flow_start) count as
     * if their links had been marked dirty: each is a component of its own
     * unless the search above reached it. */
    int counted = nf + n_fast - fast_seen;
    if (counted == 0)
        return TS_OK;
    count_recompute(f, counted);
    if (nf == 0)
        return TS_OK;
    /* A flow alone on all its links (the common case: a collective on an
     * idle NVSwitch domain) is frozen first at its tightest link's share
     * bw / occurrences, whatever the others do: set it directly, which is
     * what the filling below would compute, bit for bit. Without a shared
     * link it is alone; with one, only a flow listing a link twice can
     * still be (its own occurrences). */
    for (int fi = 0; fi < nf; fi++) {
        flow_t *F = &f->fl[f->comp_flows[fi]];
        F->solo = (uint8_t)(F->sh_n == 0 || (F->may_repeat && alone_on_links(f, f->comp_flows[fi])));
        F->frozen = F->solo;
        if (F->solo)
            F->new_rate = solo_rate(f, F->links, F->nlinks);
    }
    /* Progressive filling of the others. */
    if (nl + nf > f->cap_fh && grow_to_int((void **)&f->fh, &f->cap_fh, nl + nf, 256, sizeof *f->fh))
        return TS_ENOMEM;
    /* Links that only one flow uses keep the share bw / occurrences until
     * that flow is frozen, so only the tightest of them per flow can be the
     * one that freezes it: it alone enters the heap, the others could only
     * pop as stale entries; nor does freezing a flow need to update them
     * (nothing reads them again). Pops come out in the same order as with
     * every link in the heap, and the rates bit for bit. */
    f->n_fh = 0;
    for (int li = 0; li < nl; li++) {
        int l = f->comp_links[li], n = f->lh[l].n;
        if (n <= 1) /* empty, or a dirty link of one flow: its candidate is set */
            continue;
        int id0 = f->lh[l].fl0;
        flow_t *F0 = &f->fl[id0];
        if (F0->solo)
            continue;
        link_fill *L = &f->lf[l];
        L->rem = f->bw[l];
        L->unfrozen = n;
        L->ver++;
        fill_ent e = {L->rem / n, l, L->ver};
        int own = 1;
        for (int k = 1; k < n && own; k++)
            own = lfl(f, l, k) == id0;
        if (!own) {
            f->fh[f->n_fh++] = e;
        } else if (F0->own_link < 0 || fh_less(&e, &(fill_ent){F0->new_rate, F0->own_link, 0})) {
            F0->own_link = l;
            F0->new_rate = e.share;
        }
    }
    for (int fi = 0; fi < nf; fi++) {
        const flow_t *F = &f->fl[f->comp_flows[fi]];
        if (F->solo || F->own_link < 0)
            continue;
        link_fill *L = &f->lf[F->own_link];
        if (f->lh[F->own_link].n == 1) { /* not set above */
            L->rem = f->bw[F->own_link];
            L->unfrozen = 1;
            L->ver++;
        }
        f->fh[f->n_fh++] = (fill_ent){F->new_rate, F->own_link, L->ver};
    }
    fh_heapify(f);
    while (f->n_fh > 0) {
        fill_ent e = fh_pop(f);
        link_fill *L = &f->lf[e.link];
        if (e.ver != L->ver || L->unfrozen == 0)
            continue;
        double share = L->rem > 0 ? L->rem / L->unfrozen : 0;
        for (int k = 0; k < f->lh[e.link].n; k++) {
            int id = lfl(f, e.link, k);
            flow_t *F = &f->fl[id];
            if (F->frozen)
                continue;
            F->frozen = 1;
            F->new_rate = share;
            const int *sh = f->sh + F->sh_off;
            for (int h = 0; h < F->sh_n; h++) {
                link_fill *L2 = &f->lf[sh[h]];
                L2->rem -= share;
                L2->unfrozen--;
                L2->ver++;
                if (L2 != L && L2->unfrozen > 0 &&
                    fh_push(f, (L2->rem > 0 ? L2->rem : 0) / L2->unfrozen, sh[h], L2->ver))
                    return TS_ENOMEM;
            }
        }
    }
    /* Apply. */
    for (int fi = 0; fi < nf; fi++) {
        int id = f->comp_flows[fi];
        flow_t *F = &f->fl[id];
        if (F->new_rate == F->rate && f->hpos[id] >= 0)
            continue;
        F->left_bytes -= F->rate * (double)(f->now_ns - F->last_ns);
        if (F->left_bytes < 0)
            F->left_bytes = 0;
        F->last_ns = f->now_ns;
        F->rate = F->new_rate;
        F->done_ns = F->rate > 0 ? f->now_ns + duration_ns(F->left_bytes, F->rate) : NET_TIME_NEVER;
        heap_update(f, id);
    }
    if (f->u_peak) {
        for (int li = 0; li < nl; li++) { /* the shared links (and the dirty ones) */
            int l = f->comp_links[li];
            double sum = 0;
            for (int k = 0; k < f->lh[l].n; k++)
                sum += f->fl[lfl(f, l, k)].rate;
            peak_note(f, l, sum);
        }
        for (int fi = 0; fi < nf; fi++) { /* the links of one flow occurrence */
            const flow_t *F = &f->fl[f->comp_flows[fi]];
            for (int h = 0; h < F->nlinks; h++)
                if (f->lh[F->links[h]].n == 1)
                    peak_note(f, F->links[h], F->rate);
        }
    }
    return TS_OK;
}

/* ---------------------------------------------------------- API */

int net_flow_start(net_flows *f, int64_t now_ns, const int *links, int nlinks, double bytes, uint64_t tag, ts_err *err)
{
    return net_flow_start_hint(f, now_ns, links, nlinks, bytes, tag, NULL, err);
}

int net_flow_start_hint(net_flows *f, int64_t now_ns, const int *links, int nlinks, double bytes, uint64_t tag,
                        net_flow_hint *hint, ts_err *err)
{
    if (now_ns < f->now_ns)
        return err_set(err, TS_EINVAL, "net_flow_start: time %lld ns is before the current time %lld ns",
                       (long long)now_ns, (long long)f->now_ns);
    if (nlinks < 1 || !(bytes >= 0))
        return err_set(err, TS_EINVAL, "net_flow_start: %d links (valid >= 1), %g bytes (valid >= 0)", nlinks, bytes);
    /* On links no other flow uses, the flow is a component of its own:
     * recompute() would give it its tightest link's share bw / occurrences
     * (the solo case there, bit for bit) and touch nothing else, so it gets
     * that rate below and the links stay clean. */
    int alone = 1;
    for (int h = 0; h < nlinks; h++) {
        if ((unsigned)links[h] >= (unsigned)f->g->n_links)
            return err_set(err, TS_EINVAL, "net_flow_start: link id %d not in 0..%d", links[h], f->g->n_links - 1);
        alone &= f->lh[links[h]].n == 0;
    }
    if (now_ns > f->now_ns) {
        if (recompute(f))
            return err_set(err, TS_ENOMEM, "net_flows: out of memory");
        f->now_ns = now_ns;
    }
    int id = alloc_flow(f);
    if (id < 0)
        return err_set(err, TS_ENOMEM, "net_flows: out of memory");
    flow_t *F = &f->fl[id];
    int *keep_links = F->links, keep_cap = F->cap;
    memset(F, 0, sizeof *F);
    F->links = keep_links;
    F->cap = keep_cap;
    /* one block of two ints per slot: the links, then pos */
    if (F->cap < nlinks && grow_to_int((void **)&F->links, &F->cap, nlinks, 8, 2 * sizeof *F->links))
        return err_set(err, TS_ENOMEM, "net_flows: out of memory");
    F->pos = F->links + F->cap;
    f->hpos[id] = -1;
    F->active = 1;
    F->tag = tag;
    F->left_bytes = bytes;
    F->last_ns = now_ns;
    F->mark = f->epoch;
    if (f->active == 0 && f->bw_seen != f->g->bw_version)
        bw_reread(f); /* a busy period begins */
    f->active++;
    f->st.flows_started++;
    if (bytes == 0) { /* finishes now; takes no bandwidth */
        F->nlinks = 0;
        F->done_ns = now_ns;
        heap_update(f, id);
        return id;
    }
    F->nlinks = nlinks;
    int repeat = !alone; /* on idle links, an occurrence after the first is this flow's own */
    for (int h = 0; h < nlinks; h++) {
        int k = lfl_push(f, links[h], id);
        if (k < 0)
            return err_set(err, TS_ENOMEM, "net_flows: out of memory");
        F->links[h] = links[h];
        F->pos[h] = k;
        if (f->u_bytes)
            f->u_bytes[links[h]] += bytes;
        repeat |= k > 0;
        if (!alone)
            mark_dirty(f, links[h]);
    }
    F->may_repeat = (uint8_t)repeat;
    if (alone) {
        double rate;
        if (hint && hint->gen == f->bw_gen) {
            rate = hint->rate_gbps;
        } else {
            rate = solo_rate(f, links, nlinks);
            if (hint)
                *hint = (net_flow_hint){rate, f->bw_gen};
        }
        F->rate = rate > 0 ? rate : 0;
        F->done_ns = F->rate > 0 ? now_ns + duration_ns(bytes, F->rate) : NET_TIME_NEVER;
        F->fast_gen = f->gen;
        f->n_fast++;
        heap_update(f, id);
        if (f->u_peak)
            for (int h = 0; h < nlinks; h++)
                peak_note(f, links[h], f->lh[links[h]].n * F->rate);
    }
    return id;
}

/* Link l has just become idle: close its busy period. */
static inline void busy_end(net_flows *f, int l)
{
    if (f->u_busy)
        f->u_busy[l] += f->now_ns - f->u_since[l];
}

/* Empty flow id's links if it is alone on them: 1 if it was, 0 (nothing
 * changed) if not. A flow that lists no link twice is alone where each of
 * its links holds one occurrence: one pass, in which a link held by another
 * flow too stops it and the links emptied before get their occurrence back. */
static int empty_if_alone(net_flows *f, int id)
{
    const flow_t *F = &f->fl[id];
    if (F->may_repeat) {
        if (!alone_on_links(f, id))
            return 0;
        for (int h = 0; h < F->nlinks; h++) {
            if (f->lh[F->links[h]].n > 0)
                busy_end(f, F->links[h]);
            f->lh[F->links[h]].n = 0;
        }
        return 1;
    }
    int h = 0;
    for (; h < F->nlinks; h++) {
        link_hot *H = &f->lh[F->links[h]];
        if (H->n != 1)
            break;
        H->n = 0;
    }
    if (h == F->nlinks) {
        for (h = 0; h < F->nlinks; h++)
            busy_end(f, F->links[h]);
        return 1;
    }
    while (h-- > 0)
        f->lh[F->links[h]].n = 1;
    return 0;
}

static void detach(net_flows *f, int id)
{
    flow_t *F = &f->fl[id];
    /* Alone on all its links: they become empty and no other rate changes,
     * so they need no recomputation. */
    if (empty_if_alone(f, id)) {
        F->active = 0;
        f->active--;
        return;
    }
    for (int h = 0; h < F->nlinks; h++) {
        int l = F->links[h];
        int p = F->pos[h], lastpos = --f->lh[l].n, last = lfl(f, l, lastpos);
        if (p != lastpos) { /* move the last entry (maybe this flow's other occurrence) into p */
            lfl_set(f, l, p, last);
            flow_t *G = &f->fl[last];
            for (int hh = 0; hh < G->nlinks; hh++)
                if (G->links[hh] == l && G->pos[hh] == lastpos) {
                    G->pos[hh] = p;
                    break;
                }
        }
        if (lastpos == 0)
            busy_end(f, l);
        mark_dirty(f, l);
    }
    F->active = 0;
    f->active--;
}

int64_t net_flows_next_ns(net_flows *f)
{
    if (recompute(f))
        return NET_TIME_NEVER;
    return f->n_heap ? f->heap[0].t_ns : NET_TIME_NEVER;
}

int net_flows_advance(net_flows *f, int64_t t_ns, net_flow_done_fn done, void *ctx, ts_err *err)
{
    for (;;) {
        if (recompute(f))
            return err_set(err, TS_ENOMEM, "net_flows: out of memory");
        if (f->n_heap == 0)
            break;
        int64_t T = f->heap[0].t_ns;
        if (T > t_ns || T == NET_TIME_NEVER)
            break;
        f->now_ns = T;
        /* Pop every flow finishing at T; report them in flow id order. */
        while (f->n_heap > 0 && f->heap[0].t_ns == T) {
            int id = f->heap[0].id;
            heap_remove(f, id);
            detach(f, id);
            f->free_ids[f->n_free++] = id;
            if (done)
                done(ctx, id, f->fl[id].tag, T);
        }
    }
    if (t_ns > f->now_ns && t_ns != NET_TIME_NEVER)
        f->now_ns = t_ns;
    return TS_OK;
}

double net_flow_rate_gbps(net_flows *f, int flow)
{
    if (recompute(f))
        return -1;
    if (flow < 0 || flow >= f->n_flows || !f->fl[flow].active)
        return -1;
    return f->fl[flow].rate;
}

int net_flows_track_links(net_flows *f, ts_err *err)
{
    if (f->u_bytes)
        return TS_OK;
    if (f->st.flows_started > 0)
        return err_set(err, TS_ESTATE, "net_flows_track_links: flows have already started");
    size_t nl = (size_t)(f->g->n_links ? f->g->n_links : 1);
    f->u_bytes = calloc(nl, sizeof *f->u_bytes);
    f->u_peak = calloc(nl, sizeof *f->u_peak);
    f->u_busy = calloc(nl, sizeof *f->u_busy);
    f->u_since = calloc(nl, sizeof *f->u_since);
    if (!f->u_bytes || !f->u_peak || !f->u_busy || !f->u_since) {
        free(f->u_bytes);
        free(f->u_peak);
        free(f->u_busy);
        free(f->u_since);
        f->u_bytes = f->u_peak = NULL;
        f->u_busy = f->u_since = NULL;
        return err_set(err, TS_ENOMEM, "net_flows: out of memory for the per-link usage of %d links", f->g->n_links);
    }
    return TS_OK;
}

net_link_usage net_flows_link_usage(const net_flows *f, int l)
{
    net_link_usage u = {0, 0, 0};
    if (!f->u_bytes || l < 0 || l >= f->g->n_links)
        return u;
    u.bytes = f->u_bytes[l];
    u.busy_ns = f->u_busy[l] + (f->lh[l].n > 0 ? f->now_ns - f->u_since[l] : 0);
    u.peak_util = f->u_peak[l];
    return u;
}

int net_flows_active(const net_flows *f)
{
    return f->active;
}
int64_t net_flows_now_ns(const net_flows *f)
{
    return f->now_ns;
}
net_flow_stats net_flows_stats(const net_flows *f)
{
    return f->st;
}
