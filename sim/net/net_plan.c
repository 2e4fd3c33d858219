/* net_plan — see net_plan.h. */
#include "sim/net/net_plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/util/grow.h"

int net_plan_xfer(net_router *r, net_plan *p, int src, int dst, double bytes, uint64_t key, ts_err *err)
{
    return net_plan_xfer_at(r, p, src, dst, bytes, key, p->nx, err);
}

int net_plan_xfer_at(net_router *r, net_plan *p, int src, int dst, double bytes, uint64_t key, int index, ts_err *err)
{
    if (p->nx == p->capx && grow_to_int((void **)&p->x, &p->capx, p->nx + 1, 16, sizeof *p->x))
        return err_set(err, TS_ENOMEM, "net_coll: out of memory");
    net_xfer *x = &p->x[p->nx];
    x->src = src;
    x->dst = dst;
    x->bytes = bytes;
    x->bundle = p->cur_bundle;
    int rc = net_route(r, src, dst, key * 0x100000001B3ull + (uint64_t)index, x->links, err);
    if (rc < 0)
        return rc;
    x->nlinks = rc;
    p->nx++;
    return TS_OK;
}

int net_plan_phase_begin(net_plan *p, ts_err *err)
{
    if (p->nph == p->capph && grow_to_int((void **)&p->ph, &p->capph, p->nph + 1, 8, sizeof *p->ph))
        return err_set(err, TS_ENOMEM, "net_coll: out of memory");
    p->ph[p->nph] = (net_phase){.first = p->nx};
    p->nph++;
    p->cur_bundle = 0;
    return TS_OK;
}

/* Close the open phase: its latency is steps x (largest route latency +
 * step overhead), added to the plan's. */
void net_plan_phase_end(const net_graph *g, net_plan *p, int steps)
{
    net_phase *ph = &p->ph[p->nph - 1];
    ph->count = p->nx - ph->first;
    ph->nbundles = ph->count ? p->x[p->nx - 1].bundle + 1 : 0;
    double worst_us = 0;
    for (int i = ph->first; i < p->nx; i++) {
        double us = 0;
        for (int h = 0; h < p->x[i].nlinks; h++)
            us += g->links[p->x[i].links[h]].lat_us;
        if (us > worst_us)
            worst_us = us;
    }
    ph->lat_ns = (int64_t)llround((double)steps * (worst_us + NET_STEP_OVERHEAD_US) * 1000.0);
    p->lat_ns += ph->lat_ns;
}

void net_plan_free(net_plan *p)
{
    if (!p || p->packed)
        return; /* a packed plan is one block: free() it */
    free(p->x);
    free(p->ph);
    /* The analyzer's double free needs plan_bundles to realloc b or bl to 0
     * bytes, i.e. a negative capacity (capb and capbl are >= 0). */
    free(p->b);   /* NOLINT(clang-analyzer-unix.Malloc): see above */
    free(p->bl);  /* NOLINT(clang-analyzer-unix.Malloc): see above */
    free(p->blw); /* NOLINT(clang-analyzer-unix.Malloc): see above */
    memset(p, 0, sizeof *p);
}

/* Merge the repeats of bl[0 .. n) into their first appearance, counted in
 * blw, keeping the order of first appearances; the distinct links' number.
 * stamp, at: scratch indexed by link id (> every link of bl), stamp[l] ==
 * mark where l was seen in this list, at its position. */
static int dedupe_links(int *bl, int *blw, int n, int *stamp, int *at, int mark)
{
    int m = 0;
    for (int i = 0; i < n; i++) {
        int l = bl[i];
        if (stamp[l] == mark) {
            blw[at[l]]++;
            continue;
        }
        stamp[l] = mark;
        at[l] = m;
        bl[m] = l;
        blw[m++] = 1;
    }
    return m;
}

int net_plan_bundles(net_plan *p, ts_err *err)
{
    p->nb = 0;
    p->nbl = 0;
    int nlinks = 0;
    for (int i = 0; i < p->nx; i++)
        nlinks += p->x[i].nlinks;
    int nb = 0;
    for (int k = 0; k < p->nph; k++)
        nb += p->ph[k].nbundles;
    int cap = p->capbl;
    if (grow_to_int((void **)&p->b, &p->capb, nb, 0, sizeof *p->b) ||
        grow_to_int((void **)&p->bl, &p->capbl, nlinks, 0, sizeof *p->bl))
        return err_set(err, TS_ENOMEM, "net_coll: out of memory");
    if (p->capbl != cap || !p->blw) {
        int *w = realloc(p->blw, sizeof *w * (size_t)(p->capbl ? p->capbl : 1));
        if (!w)
            return err_set(err, TS_ENOMEM, "net_coll: out of memory");
        p->blw = w;
    }
    int most_link = 0;
    for (int i = 0; i < p->nx; i++)
        for (int h = 0; h < p->x[i].nlinks; h++)
            most_link = p->x[i].links[h] > most_link ? p->x[i].links[h] : most_link;
    int *stamp = calloc((size_t)most_link + 1, sizeof *stamp), *at = malloc(sizeof *at * ((size_t)most_link + 1));
    if (!stamp || !at) {
        free(stamp);
        free(at);
        return err_set(err, TS_ENOMEM, "net_coll: out of memory");
    }
    for (int k = 0; k < p->nph; k++) {
        net_phase *ph = &p->ph[k];
        int end = ph->first + ph->count;
        ph->first_bundle = p->nb;
        for (int i = ph->first; i < end;) {
            int bi = p->x[i].bundle;
            if (p->nb == nb)
                break;
            net_bundle *b = &p->b[p->nb++];
            b->hint = (net_flow_hint){0, 0};
            b->first_link = p->nbl;
            b->bytes = p->x[i].bytes;
            for (; i < end && p->x[i].bundle == bi; i++) {
                const net_xfer *x = &p->x[i];
                memcpy(p->bl + p->nbl, x->links, sizeof *x->links * (size_t)x->nlinks);
                p->nbl += x->nlinks;
                if (x->bytes > b->bytes)
                    b->bytes = x->bytes;
            }
            b->nlinks =
                dedupe_links(p->bl + b->first_link, p->blw + b->first_link, p->nbl - b->first_link, stamp, at, p->nb);
            p->nbl = b->first_link + b->nlinks;
        }
        if (p->nb - ph->first_bundle != ph->nbundles) {
            free(stamp);
            free(at);
            return err_set(err, TS_ESTATE, "net_coll: phase %d has %d bundles, expected %d", k,
                           p->nb - ph->first_bundle, ph->nbundles);
        }
    }
    free(stamp);
    free(at);
    return TS_OK;
}

net_plan *net_plan_pack(const net_plan *p)
{
    size_t hdr = (sizeof *p + 15) & ~(size_t)15, sph = sizeof *p->ph * (size_t)p->nph,
           sb = sizeof *p->b * (size_t)p->nb, sbl = sizeof *p->bl * (size_t)p->nbl;
    char *m = malloc(hdr + sph + sb + 2 * sbl);
    if (!m)
        return NULL;
    net_plan *q = (net_plan *)(void *)m;
    *q = (net_plan){.algo = p->algo, .nph = p->nph, .nb = p->nb, .nbl = p->nbl, .lat_ns = p->lat_ns, .packed = 1};
    q->ph = (net_phase *)(void *)(m + hdr);
    q->b = (net_bundle *)(void *)(m + hdr + sph);
    q->bl = (int *)(void *)(m + hdr + sph + sb);
    q->blw = q->bl + p->nbl;
    if (sph)
        memcpy(q->ph, p->ph, sph);
    if (sb)
        memcpy(q->b, p->b, sb);
    if (sbl) {
        memcpy(q->bl, p->bl, sbl);
        memcpy(q->blw, p->blw, sbl);
    }
    return q;
}
