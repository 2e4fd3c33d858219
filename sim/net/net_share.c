/* net_share — see net_share.h. */
#include "sim/net/net_share.h"

#include <math.h>
#include <stdlib.h>

#include "sim/util/ckd.h"
#include "sim/util/grow.h"

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
void net_share_heap_update(net_flows *f, int id)
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

void net_share_heap_remove(net_flows *f, int id)
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

/* ---------------------------------------------------------- lone flows */

/* Is flow id the only flow on every one of its links? */
int net_share_alone_on_links(const net_flows *f, int id)
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
double net_share_solo_rate(const net_flows *f, const int *links, int nlinks)
{
    double rate = 0;
    for (int h = 0; h < nlinks; h++) {
        int n = f->lh[links[h]].w;
        double bw = f->bw[links[h]];
        double share = n == 1 ? bw : bw / n; /* x / 1 == x: skip the division */
        if (h == 0 || share < rate)
            rate = share;
    }
    return rate > 0 ? rate : 0;
}

/* Link l carries rate_gbps now: keep the largest utilisation. */
void net_share_peak_note(net_flows *f, int l, double rate_gbps)
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

int64_t net_share_duration_ns(double bytes, double rate)
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

/* One recomputation that (re)assigned n flow rates, in the stats. */
void net_share_count_recompute(net_flows *f, int n)
{
    f->st.recomputes++;
    f->st.rate_updates += (uint64_t)n;
    if ((uint64_t)n > f->st.max_component)
        f->st.max_component = (uint64_t)n;
}

/* One pass of the filling over the component of the seed links (f->dirty,
 * f->n_dirty of them), cut at unsaturated links: from a flow the search
 * goes on through a shared link only if the link is a seed or the
 * bottleneck of some flow (lsat > 0). The other shared links are the
 * boundary: their flows outside the component keep their rates, which the
 * filling subtracts from the link's capacity. A flow outside the component
 * is frozen at a link all of whose flows are outside (else the search would
 * have crossed it), so its rate, and how it was reached, does not change.
 * The cut is right if no boundary link freezes a flow of the component: if
 * one does, it is made a seed and the pass returns 1 (to be run again);
 * else the rates are applied and it returns 0. TS_ENOMEM on failure. */
static int share_pass(net_flows *f, uint32_t gen, int n_fast)
{
    uint32_t ep = ++f->epoch;
    int nl = 0, nb = 0, nf = 0, fast_seen = 0, nsh = 0;
    for (int i = 0; i < f->n_dirty; i++) {
        int l = f->dirty[i];
        if (f->lmark[l] != ep) {
            f->lmark[l] = ep;
            f->comp_links[nl++] = l;
        }
    }
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
            if (nsh + F->nlinks > f->cap_sh) {
                int cap = f->cap_sh;
                if (grow_to_int((void **)&f->sh, &f->cap_sh, nsh + F->nlinks, 1024, sizeof *f->sh))
                    return TS_ENOMEM;
                int *w = realloc(f->shw, sizeof *w * (size_t)f->cap_sh);
                if (!w) {
                    f->cap_sh = cap; /* sh is larger, harmless */
                    return TS_ENOMEM;
                }
                f->shw = w;
            }
            F->own_link = -1;
            F->new_bott = -1;
            F->sh_off = nsh;
            for (int h = 0; h < F->nlinks; h++) {
                int l2 = F->links[h];
                if (f->lh[l2].n == 1) {
                    fill_ent e = {F->w[h] == 1 ? f->bw[l2] : f->bw[l2] / F->w[h], l2, 0}; /* bw / its occurrences */
                    if (F->own_link < 0 || fh_less(&e, &(fill_ent){F->new_rate, F->own_link, 0})) {
                        F->own_link = l2;
                        F->new_rate = e.share;
                    }
                    continue;
                }
                f->shw[nsh] = F->w[h];
                f->sh[nsh++] = l2;
                if (f->lmark[l2] != ep) {
                    f->lmark[l2] = ep;
                    if (f->lsat[l2] > 0)
                        f->comp_links[nl++] = l2;
                    else
                        f->bnd_links[nb++] = l2;
                }
            }
            F->sh_n = nsh - F->sh_off;
        }
    }
    /* The flows started alone since the last call (net_flow_start) count as
     * if their links had been marked dirty: each is a component of its own
     * unless the search above reached it. */
    f->pass_counted = nf + n_fast - fast_seen;
    if (nf == 0)
        return 0;
    /* A flow alone on all its links (the common case: a collective on an
     * idle NVSwitch domain) is frozen first at its tightest link's share
     * bw / occurrences, whatever the others do: set it directly, which is
     * what the filling below would compute, bit for bit. Without a shared
     * link it is alone; with one, only a flow listing a link twice can
     * still be (its own occurrences). */
    int unfrozen = nf; /* once 0, every entry left in the heap would be skipped */
    for (int fi = 0; fi < nf; fi++) {
        flow_t *F = &f->fl[f->comp_flows[fi]];
        F->solo = (uint8_t)(F->sh_n == 0 || (F->may_repeat && net_share_alone_on_links(f, f->comp_flows[fi])));
        F->frozen = F->solo;
        unfrozen -= F->solo;
        if (F->solo)
            F->new_rate = net_share_solo_rate(f, F->links, F->nlinks);
    }
    /* Progressive filling of the others. */
    if (nl + nb + nf > f->cap_fh && grow_to_int((void **)&f->fh, &f->cap_fh, nl + nb + nf, 256, sizeof *f->fh))
        return TS_ENOMEM;
    /* Links that only one flow uses keep the share bw / occurrences until
     * that flow is frozen, so only the tightest of them per flow can be the
     * one that freezes it: it alone enters the heap, the others could only
     * pop as stale entries; nor does freezing a flow need to update them
     * (nothing reads them again). Pops come out in the same order as with
     * every link in the heap, and the rates bit for bit. */
    f->n_fh = 0;
    for (int li = 0; li < nl + nb; li++) {
        int l = li < nl ? f->comp_links[li] : f->bnd_links[li - nl], n = f->lh[l].n;
        if (n <= 1) /* empty, or a dirty link of one flow: its candidate is set */
            continue;
        link_fill *L = &f->lf[l];
        if (li >= nl) { /* boundary: the flows outside keep their rates */
            double out = 0;
            int nin = 0, nout = 0;
            for (int k = 0; k < n; k++) {
                const flow_t *G = &f->fl[lfl(f, l, k)];
                int w = G->w[lfl_occ(f, l, k)];
                if (G->mark == ep) {
                    nin += w;
                } else {
                    out += w == 1 ? G->rate : G->rate * w;
                    nout++;
                }
            }
            if (nout > 0) {
                f->lout[l] = ep;
                L->rem = f->bw[l] - out;
                L->unfrozen = nin;
                L->ver++;
                f->fh[f->n_fh++] = (fill_ent){(L->rem > 0 ? L->rem : 0) / nin, l, L->ver};
                continue;
            }
        }
        int id0 = f->lh[l].fl0;
        flow_t *F0 = &f->fl[id0];
        if (F0->solo)
            continue;
        L->rem = f->bw[l];
        L->unfrozen = f->lh[l].w;
        L->ver++;
        fill_ent e = {L->rem / L->unfrozen, l, L->ver};
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
            L->unfrozen = f->lh[F->own_link].w;
            L->ver++;
        }
        f->fh[f->n_fh++] = (fill_ent){F->new_rate, F->own_link, L->ver};
    }
    fh_heapify(f);
    while (f->n_fh > 0 && unfrozen > 0) {
        fill_ent e = fh_pop(f);
        link_fill *L = &f->lf[e.link];
        if (e.ver != L->ver || L->unfrozen == 0)
            continue;
        if (f->lout[e.link] == ep) { /* a boundary link would freeze: cut it no more */
            f->lk[e.link].dirty = 1;
            f->dirty[f->n_dirty++] = e.link;
            return 1;
        }
        double share = L->rem > 0 ? L->rem / L->unfrozen : 0;
        /* The links this step changes get one heap entry each, of their
         * state after it: an entry per change would be stale by the next
         * pop (a newer version of the link), skipped there */
        uint64_t step = ++f->n_pops;
        int nt = 0;
        for (int k = 0; k < f->lh[e.link].n; k++) {
            int id = lfl(f, e.link, k);
            flow_t *F = &f->fl[id];
            if (F->frozen)
                continue;
            F->frozen = 1;
            unfrozen--;
            F->new_rate = share;
            F->new_bott = e.link;
            const int *sh = f->sh + F->sh_off, *shw = f->shw + F->sh_off;
            for (int h = 0; h < F->sh_n; h++) {
                link_fill *L2 = &f->lf[sh[h]];
                L2->rem -= shw[h] == 1 ? share : share * shw[h];
                L2->unfrozen -= shw[h];
                L2->ver++;
                if (f->ltouch[sh[h]] != step) {
                    f->ltouch[sh[h]] = step;
                    f->touched[nt++] = sh[h];
                }
            }
        }
        for (int i = 0; i < nt; i++) {
            const link_fill *L2 = &f->lf[f->touched[i]];
            if (L2 != L && L2->unfrozen > 0 &&
                fh_push(f, (L2->rem > 0 ? L2->rem : 0) / L2->unfrozen, f->touched[i], L2->ver))
                return TS_ENOMEM;
        }
    }
    /* Apply. */
    for (int fi = 0; fi < nf; fi++) {
        int id = f->comp_flows[fi];
        flow_t *F = &f->fl[id];
        if (F->bott != F->new_bott) {
            if (F->bott >= 0)
                f->lsat[F->bott]--;
            if (F->new_bott >= 0)
                f->lsat[F->new_bott]++;
            F->bott = F->new_bott;
        }
        if (F->new_rate == F->rate && f->hpos[id] >= 0)
            continue;
        F->left_bytes -= F->rate * (double)(f->now_ns - F->last_ns);
        if (F->left_bytes < 0)
            F->left_bytes = 0;
        F->last_ns = f->now_ns;
        F->rate = F->new_rate;
        F->done_ns = F->rate > 0 ? f->now_ns + net_share_duration_ns(F->left_bytes, F->rate) : NET_SHARE_NEVER_NS;
        net_share_heap_update(f, id);
    }
    if (f->u_peak) {
        for (int li = 0; li < nl + nb; li++) { /* the shared links (and the dirty ones) */
            int l = li < nl ? f->comp_links[li] : f->bnd_links[li - nl];
            double sum = 0;
            for (int k = 0; k < f->lh[l].n; k++) {
                const flow_t *G = &f->fl[lfl(f, l, k)];
                int w = G->w[lfl_occ(f, l, k)];
                sum += w == 1 ? G->rate : G->rate * w;
            }
            net_share_peak_note(f, l, sum);
        }
        for (int fi = 0; fi < nf; fi++) { /* the links of one flow occurrence */
            const flow_t *F = &f->fl[f->comp_flows[fi]];
            for (int h = 0; h < F->nlinks; h++)
                if (f->lh[F->links[h]].n == 1)
                    net_share_peak_note(f, F->links[h], F->rate * F->w[h]);
        }
    }
    return 0;
}

int net_share_recompute_dirty(net_flows *f)
{
    uint32_t gen = f->gen++;
    int n_fast = f->n_fast, rc;
    f->n_fast = 0;
    while ((rc = share_pass(f, gen, n_fast)) == 1)
        f->st.recompute_retries++;
    for (int i = 0; i < f->n_dirty; i++)
        f->lk[f->dirty[i]].dirty = 0;
    f->n_dirty = 0;
    if (rc)
        return rc;
    if (f->pass_counted > 0)
        net_share_count_recompute(f, f->pass_counted);
    return TS_OK;
}
