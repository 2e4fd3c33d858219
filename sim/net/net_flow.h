/* net_flow — flows on a net_graph sharing link bandwidth max-min fairly.
 *
 * A flow carries a number of bytes along a fixed list of links (a route,
 * or a bundle of routes moving in lockstep, such as the n transfers of one
 * NCCL ring phase: a link listed k times carries k x the flow's rate).
 * At any moment every active flow has a rate (GB/s = bytes/ns): the max-min
 * fair allocation of the links' effective bandwidths, computed by
 * progressive filling (water-filling): repeatedly take the link whose
 * remaining capacity divided by its unfrozen flow occurrences is smallest,
 * freeze those
 * flows at that share, subtract it from their other links (ties: lowest
 * link id).
 *
 * Incremental: starting or ending a flow marks its links dirty; before time
 * moves on, only the connected component (links <-> flows sharing them) of
 * the dirty links is recomputed. Max-min allocations of disjoint components
 * are independent, so this gives the same rates as a global recomputation.
 * Starts and ends at the same instant are coalesced into one recomputation.
 *
 * Time is integer nanoseconds. A flow's bytes left are kept as a double and
 * updated whenever its rate changes; its completion time is
 * last_change_ns + ceil(bytes_left / rate) (a relative 1e-9 slack absorbs
 * rounding so that 1000 bytes at 1 GB/s end at exactly 1000 ns). All
 * arithmetic happens in a fixed order, so runs are deterministic.
 *
 * Ownership: net_flows borrows its graph (must outlive it; bandwidths may be
 * changed only while no flow is active, through net_graph_scale_link, which
 * the next start sees). Free with net_flows_free().
 */
#ifndef TRAINSIM_NET_FLOW_H
#define TRAINSIM_NET_FLOW_H

#include <stdint.h>

#include "sim/net/net_graph.h"
#include "sim/net/net_route.h"
#include "sim/util/err.h"

#define NET_TIME_NEVER INT64_MAX

typedef struct net_flows net_flows;

/* Called for each finished flow, in (time, flow id) order. It may start new
 * flows at t_ns. */
typedef void (*net_flow_done_fn)(void *ctx, int flow, uint64_t tag, int64_t t_ns);

typedef struct {
    uint64_t flows_started;
    uint64_t recomputes;        /* component recomputations */
    uint64_t rate_updates;      /* flow rates (re)assigned by recomputations */
    uint64_t max_component;     /* largest component (flows) recomputed */
    uint64_t recompute_retries; /* passes run again after a boundary link turned out saturated */
} net_flow_stats;

int net_flows_new(const net_graph *g, net_flows **out, ts_err *err);
void net_flows_free(net_flows *f);

/* Start a flow of bytes (>= 0) at now_ns (>= the current time) over links
 * (>= 1 link ids, copied; repeats count once per occurrence). tag is returned in the callback.
 * Returns the flow id (>= 0; ids of finished flows are reused) or a TS_E*
 * code. A flow of 0 bytes finishes at now_ns. */
int net_flow_start(net_flows *f, int64_t now_ns, const int *links, int nlinks, double bytes, uint64_t tag, ts_err *err);

/* A lone flow's rate, kept by the caller between starts over the same
 * link list (zero-initialize it; one per distinct list). */
typedef struct {
    double rate_gbps;
    uint32_t gen; /* the bandwidths it was computed with (0: none yet) */
} net_flow_hint;

/* net_flow_start, where links[h] stands for weights[h] (>= 1) occurrences
 * of that link (weights NULL: one each; a bundle lists each distinct link
 * once with its count, the same rates as listing it that many times, and
 * one list entry to keep instead of many), and a flow that starts on idle
 * links takes its rate from *hint if it was computed with the current
 * bandwidths (they change only through net_graph_scale_link, between busy
 * periods) instead of reading every link's bandwidth, and leaves it there
 * otherwise. A hint filled by an earlier start also vouches for the list:
 * its links and weights, checked then, are not checked again. hint may be
 * NULL. */
int net_flow_start_hint(net_flows *f, int64_t now_ns, const int *links, const int *weights, int nlinks, double bytes,
                        uint64_t tag, net_flow_hint *hint, ts_err *err);

/* Time of the next flow completion (NET_TIME_NEVER if none). Recomputes
 * dirty rates first. */
int64_t net_flows_next_ns(net_flows *f);

/* Finish every flow that completes at or before t_ns, calling done for each;
 * then the current time is t_ns. To interleave with another event queue,
 * call it with t_ns = net_flows_next_ns(). */
int net_flows_advance(net_flows *f, int64_t t_ns, net_flow_done_fn done, void *ctx, ts_err *err);

/* Current rate of an active flow, GB/s (recomputes dirty rates first); -1
 * if the flow is not active. */
double net_flow_rate_gbps(net_flows *f, int flow);

/* Per-link usage, kept once net_flows_track_links() is called (before the
 * first start): bytes carried (a flow's bytes once per occurrence of the
 * link in its list, counted when the flow starts), busy time (ns during
 * which at least one flow was on the link, up to the current time) and
 * peak utilisation (the largest sum of the rates of the link's flow
 * occurrences divided by the link's bandwidth, over every instant rates
 * changed; 1 = saturated). */
typedef struct {
    double bytes;
    int64_t busy_ns;
    double peak_util;
} net_link_usage;

/* Start keeping per-link usage (nothing if already kept). TS_ESTATE once
 * a flow has started, TS_ENOMEM. */
int net_flows_track_links(net_flows *f, ts_err *err);

/* Usage of link l (zeros if not tracked or l is out of range). */
net_link_usage net_flows_link_usage(const net_flows *f, int l);

int net_flows_active(const net_flows *f);
int64_t net_flows_now_ns(const net_flows *f);
net_flow_stats net_flows_stats(const net_flows *f);

#endif
