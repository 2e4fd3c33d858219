/* net_plan — see net_plan.h. */
#include "sim/net/net_plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/util/grow.h"

int net_plan_xfer(net_router *r, net_plan *p, int src, int dst, double bytes, uint64_t key, ts_err *err)
{
    if (p->nx == p->capx && grow_to_int((void **)&p->x, &p->capx, p->nx + 1, 16, sizeof *p->x))
        return err_set(err, TS_ENOMEM, "net_coll: out of memory");
    net_xfer *x = &p->x[p->nx];
    x->src = src;
    x->dst = dst;
    x->bytes = bytes;
    x->bundle = p->cur_bundle;
    int rc = net_route(r, src, dst, key * 0x100000001B3ull + (uint64_t)p->nx, x->links, err);
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
    free(p->b);  /* NOLINT(clang-analyzer-unix.Malloc): see above */
    free(p->bl); /* NOLINT(clang-analyzer-unix.Malloc): see above */
    memset(p, 0, sizeof *p);
}
