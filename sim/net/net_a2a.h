/* net_a2a — the MoE dispatchers' all-to-alls (net_coll.h's ALLTOALL and
 * DEEPEP, which describes the transfers and bundles) as one phase of a
 * net_plan.
 *
 * Ownership: borrows everything; appends to p's arrays (net_plan_free
 * releases them).
 */
#ifndef TRAINSIM_NET_A2A_H
#define TRAINSIM_NET_A2A_H

#include "sim/net/net_plan.h"

/* Append the phase of ALLTOALL or DEEPEP request q (GPUs already checked
 * by net_coll_plan) to p: none when q moves no bytes. TS_EINVAL for root
 * out of 0..n-1, hot < 1 (0 counts as 1), rdma_bytes < 0, or DeepEP over
 * servers holding unequal numbers of the group's GPUs; TS_ENOMEM. */
int net_a2a_phases(const net_graph *g, net_router *r, const net_coll_req *q, net_plan *p, ts_err *err);

#endif
