/* net_flow — see net_flow.h; the rates are computed in net_share.c. */
#include "sim/net/net_flow.h"

#include <stdlib.h>
#include <string.h>

#include "sim/net/net_share.h"
#include "sim/util/grow.h"

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
    f->lsat = calloc(nl, sizeof *f->lsat);
    f->lout = calloc(nl, sizeof *f->lout);
    f->bnd_links = malloc(nl * sizeof *f->bnd_links);
    f->ltouch = calloc(nl, sizeof *f->ltouch);
    f->touched = malloc(nl * sizeof *f->touched);
    if (!f->lh || !f->lk || !f->lf || !f->lmark || !f->dirty || !f->comp_links || !f->bw || !f->lsat || !f->lout ||
        !f->bnd_links || !f->ltouch || !f->touched) {
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
        for (int i = 0; i < f->g->n_links; i++) {
            free(f->lk[i].fl);
            free(f->lk[i].occ);
        }
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
    free(f->lsat);
    free(f->lout);
    free(f->bnd_links);
    free(f->ltouch);
    free(f->touched);
    free(f->comp_flows);
    free(f->fh);
    free(f->sh);
    free(f->shw);
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

/* Append flow id's route entry h, of weight w, to link l's list; its
 * index there, or TS_ENOMEM. */
static int lfl_push(net_flows *f, int l, int id, int h, int w)
{
    link_hot *H = &f->lh[l];
    link_t *L = &f->lk[l];
    int k = H->n;
    if (k == 0) {
        H->fl0 = id;
        L->occ0 = h;
        if (f->u_since)
            f->u_since[l] = f->now_ns; /* the link becomes busy */
    } else {
        int cap = L->cap;
        if (k - 1 == L->cap && grow_to_int((void **)&L->fl, &L->cap, k, 4, sizeof *L->fl))
            return TS_ENOMEM;
        if (L->cap != cap) {
            int *o = realloc(L->occ, sizeof *o * (size_t)L->cap);
            if (!o)
                return TS_ENOMEM;
            L->occ = o;
        }
        L->fl[k - 1] = id;
        L->occ[k - 1] = h;
    }
    H->n = k + 1;
    H->w += w;
    return k;
}

static void mark_dirty(net_flows *f, int l)
{
    if (!f->lk[l].dirty) {
        f->lk[l].dirty = 1;
        f->dirty[f->n_dirty++] = l;
    }
}

/* Recompute the rates of the components of the dirty links at f->now_ns.
 * Without dirty links only the lone starts since the last call are
 * counted (their rates are set). */
static inline int recompute(net_flows *f)
{
    if (f->n_dirty > 0)
        return net_share_recompute_dirty(f);
    if (f->n_fast > 0) {
        f->gen++;
        net_share_count_recompute(f, f->n_fast);
        f->n_fast = 0;
    }
    return TS_OK;
}

/* ---------------------------------------------------------- API */

int net_flow_start(net_flows *f, int64_t now_ns, const int *links, int nlinks, double bytes, uint64_t tag, ts_err *err)
{
    return net_flow_start_hint(f, now_ns, links, NULL, nlinks, bytes, tag, NULL, err);
}

int net_flow_start_hint(net_flows *f, int64_t now_ns, const int *links, const int *weights, int nlinks, double bytes,
                        uint64_t tag, net_flow_hint *hint, ts_err *err)
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
    if (hint && hint->gen != 0) { /* a list started before: checked then */
        for (int h = 0; h < nlinks; h++)
            alone &= f->lh[links[h]].n == 0;
    } else {
        for (int h = 0; h < nlinks; h++) {
            if ((unsigned)links[h] >= (unsigned)f->g->n_links)
                return err_set(err, TS_EINVAL, "net_flow_start: link id %d not in 0..%d", links[h], f->g->n_links - 1);
            if (weights && weights[h] < 1)
                return err_set(err, TS_EINVAL, "net_flow_start: link %d listed with weight %d (valid >= 1)", links[h],
                               weights[h]);
            alone &= f->lh[links[h]].n == 0;
        }
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
    F->bott = F->new_bott = -1;
    F->cap = keep_cap;
    /* one block of three ints per slot: the links, pos, then w */
    if (F->cap < nlinks && grow_to_int((void **)&F->links, &F->cap, nlinks, 8, 3 * sizeof *F->links))
        return err_set(err, TS_ENOMEM, "net_flows: out of memory");
    F->pos = F->links + F->cap;
    F->w = F->pos + F->cap;
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
        net_share_heap_update(f, id);
        return id;
    }
    F->nlinks = nlinks;
    int repeat = !alone; /* on idle links, an occurrence after the first is this flow's own */
    for (int h = 0; h < nlinks; h++) {
        int w = weights ? weights[h] : 1;
        int k = lfl_push(f, links[h], id, h, w);
        if (k < 0)
            return err_set(err, TS_ENOMEM, "net_flows: out of memory");
        F->links[h] = links[h];
        F->pos[h] = k;
        F->w[h] = w;
        if (f->u_bytes)
            f->u_bytes[links[h]] += bytes * w;
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
            rate = net_share_solo_rate(f, links, nlinks);
            if (hint)
                *hint = (net_flow_hint){rate, f->bw_gen};
        }
        F->rate = rate > 0 ? rate : 0;
        F->done_ns = F->rate > 0 ? now_ns + net_share_duration_ns(bytes, F->rate) : NET_TIME_NEVER;
        F->fast_gen = f->gen;
        f->n_fast++;
        net_share_heap_update(f, id);
        if (f->u_peak)
            for (int h = 0; h < nlinks; h++)
                net_share_peak_note(f, links[h], f->lh[links[h]].w * F->rate);
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
        if (!net_share_alone_on_links(f, id))
            return 0;
        for (int h = 0; h < F->nlinks; h++) {
            if (f->lh[F->links[h]].n > 0)
                busy_end(f, F->links[h]);
            f->lh[F->links[h]].n = 0;
            f->lh[F->links[h]].w = 0;
        }
        return 1;
    }
    int h = 0;
    for (; h < F->nlinks; h++) {
        link_hot *H = &f->lh[F->links[h]];
        if (H->n != 1)
            break;
        H->n = 0;
        H->w = 0;
    }
    if (h == F->nlinks) {
        if (f->u_busy)
            for (h = 0; h < F->nlinks; h++)
                busy_end(f, F->links[h]);
        return 1;
    }
    while (h-- > 0) { /* its own entry, which it was alone on */
        f->lh[F->links[h]].n = 1;
        f->lh[F->links[h]].w = F->w[h];
    }
    return 0;
}

static void detach(net_flows *f, int id)
{
    flow_t *F = &f->fl[id];
    if (F->bott >= 0) { /* it no longer holds its bottleneck */
        f->lsat[F->bott]--;
        F->bott = -1;
    }
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
        f->lh[l].w -= F->w[h];
        if (p != lastpos) { /* move the last entry (maybe this flow's other occurrence) into p */
            int gh = lfl_occ(f, l, lastpos);
            lfl_set(f, l, p, last, gh);
            f->fl[last].pos[gh] = p;
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
            net_share_heap_remove(f, id);
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
    return (net_flow_stats){f->st.flows_started, f->st.recomputes, f->st.rate_updates, f->st.max_component,
                            f->st.recompute_retries};
}
