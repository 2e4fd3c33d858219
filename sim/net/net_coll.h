/* net_coll — collectives as NCCL runs them, decomposed into phases of
 * transfers (flows) on a net_graph, and a runner that drives them over
 * net_flow with per-step latency.
 *
 * A plan is a list of phases. A phase waits its latency, then starts all of
 * its transfers as concurrent flows; it ends when the last flow ends; then
 * the next phase begins. The transfers of one ring (or one NVLS, tree,
 * broadcast chain, scatter) move in lockstep in NCCL: chunks advance at the
 * pace of the slowest hop. They form one bundle, run as a single flow over
 * all their links (net_flow.h), whose rate is the max-min share of its
 * tightest link; independent rings of one phase (hierarchical) are separate
 * bundles. Phase latency = steps x (largest route latency of
 * its transfers + NET_STEP_OVERHEAD_US).
 *
 * NCCL pipelines chunks through a ring, so the n-1 steps of a ring phase
 * overlap: each phase of a ring is modeled as n concurrent flows (rank i to
 * rank i+1), each carrying the bytes of all n-1 steps, plus n-1 step
 * latencies. On an idle uniform fabric this is exactly the closed form
 * (formulas.md): ring all-reduce of S bytes over n ranks at per-rank
 * bandwidth B takes 2(n-1) alpha + 2 (n-1)/n S/B.
 *
 * Algorithms (bytes S as NCCL counts them: all-reduce and broadcast: the
 * buffer; all-gather: the output; reduce-scatter: the input):
 *  - RING all-reduce: reduce-scatter phase + all-gather phase, each n flows
 *    of (n-1)/n S. All-gather / reduce-scatter: one such phase. Broadcast: a
 *    pipelined chain from the root, n-1 flows of S, n-1 step latencies.
 *  - TREE all-reduce: NCCL's double binary tree; each tree carries S/2, up
 *    (reduce) and down (broadcast) pipelined: one phase with a flow of S/2
 *    per tree edge per direction, 2 x depth step latencies. Tree A is the
 *    heap tree over positions 0..n-1 (parent (i-1)/2), tree B the same over
 *    the positions reversed.
 *  - HIER all-reduce (group of k GPUs on each of m servers): ring
 *    reduce-scatter among the k GPUs of each server, then k rings across the
 *    m servers (local rank j with local rank j, through their own NICs) each
 *    all-reducing S/k, then ring all-gather inside each server.
 *  - NVLS all-reduce (one NVLink domain with NVLink SHARP): every GPU sends
 *    and receives S (n+1)/n bytes through the switch, at efficiency
 *    NET_NVLS_EFF of the line rate; 2 step latencies.
 *  - P2P: one flow of S. SCATTER_GATHER p2p: the t GPUs of the source server
 *    each send S/t to the GPU of the same local rank on the destination
 *    server (t NICs in parallel), then a ring all-gather of S among the t
 *    destination GPUs.
 *  - PIPE (all-reduce, all-gather, reduce-scatter of a group of k GPUs on
 *    each of m servers, k > 1, m > 1): NCCL's ring through all n = k m
 *    GPUs with k channels, channel j leaving every server through local
 *    rank j's NIC, pipelined. Every GPU sends W = (n-1)/n S (all-reduce
 *    2(n-1)/n S) over all channels: (k-1)/k W over NVLink (a ring bundle
 *    per server), W/k through its NIC (a ring bundle per local rank across
 *    the servers), all in ONE phase, n-1 (all-reduce 2(n-1)) step
 *    latencies. Its bandwidth is NCCL's ring bus bandwidth, min(NVLink,
 *    k NICs), which the default mode (sim/model/commcost) uses.
 *  - ALLTOALL (the MoE alltoall dispatcher; S = what one rank sends): NCCL
 *    runs it as n - 1 sends per rank in one group call, all in flight:
 *    ONE phase with a transfer i -> j of S/(n-1) for every ordered pair,
 *    n (n - 1) transfers (none between two positions on the same GPU),
 *    each over its own route (inside a server through the NVSwitch, across
 *    servers through the NICs and the fabric), 1 step latency. Routing
 *    skew: the transfers into position `root` (hot_sends: out of it) carry
 *    `hot` times their bytes (the busiest expert-parallel rank). Bundles:
 *    the transfers of one receiver (hot_sends: of one sender) from (to) its
 *    own server move in lockstep, and so do those from (to) the other
 *    servers: up to 2n bundles, each of transfers of one size (a bundle
 *    runs its largest transfer's bytes); the busiest rank's are the slow
 *    ones. On an idle fabric with
 *    balanced routing this is the default mode's closed form
 *    (moe_a2a_ns): max(S (k-1)/(n-1) / B_nvlink, S (n-k)/(n-1) / B_nic).
 *    merge_peers (the symmetric mode, which simulates position root's rank
 *    alone): root's two bundles, and the other positions' transfers as two
 *    bundles, their local ones and their remote ones, each a flow crossing
 *    a link as often as those transfers do (without skew, hot 1, root is
 *    one of them: two bundles in all). Their bundles would each move
 *    at one rate where the fabric treats the positions alike (an
 *    uncontended non-blocking fabric: every NIC link carries as many of
 *    them), and then the merged flow has that rate: the same times with 4
 *    flows instead of 2n, over each distinct link once. Where their rates
 *    would differ (ECMP collisions, contention on some of their links) the
 *    merged flow moves at its tightest link's pace throughout, the slowest
 *    peer's (test_net_a2a: a peer behind a slow NIC, never earlier than
 *    the bundles one by one). The routes are those of the plan without
 *    merging.
 *  - DEEPEP (the flex dispatcher with DeepEP; bytes = NVLink bytes a rank
 *    sends, rdma_bytes = its RDMA bytes; k GPUs of the group on each of m
 *    servers): ONE phase with transfers of bytes/(k-1) to each of the
 *    rank's k - 1 server peers and rdma_bytes/(m-1) to the GPU of the same
 *    local index on each of the m - 1 other servers (DeepEP's internode
 *    kernels: one RDMA copy per remote node, forwarded there over NVLink),
 *    hot and bundles as ALLTOALL; 1 step latency. The default mode's
 *    moe_deepep_ns on an idle fabric. One server: ALLTOALL of bytes.
 *  - RING_STEP (context parallelism's ring exchange of K,V blocks): one
 *    step of a ring, every position i sending S to position i + 1 mod n,
 *    the n transfers in lockstep (one bundle), 1 step latency: S / B on an
 *    idle fabric, B the slowest hop's rate (a NIC's once the ring leaves a
 *    server).
 * NET_ALGO_AUTO picks NVLS for an all-reduce inside one NVLS-capable
 * domain, PIPE for a group spanning servers with several GPUs on each, and
 * RING otherwise (a collective on one GPU per server, or inside one
 * server). It does not pick by message size: NCCL's tree and protocols
 * (LL, LL128), which the default mode chooses per size, are not modelled
 * as flows; TREE and HIER run only when asked for. A caller that wants
 * NCCL's time on an idle fabric scales the bytes by commcost_flow_terms'
 * factor and passes its latency to net_sim_start_plan (net_engine does).
 *
 * Ownership: a net_sim borrows its graph (must outlive it); it owns its
 * router, flows and plans. Free with net_sim_free().
 */
#ifndef TRAINSIM_NET_COLL_H
#define TRAINSIM_NET_COLL_H

#include <stdint.h>

#include "sim/net/net_flow.h"
#include "sim/net/net_graph.h"
#include "sim/net/net_plan.h"
#include "sim/net/net_route.h"
#include "sim/util/err.h"

/* Build the plan of req into plan (reset first; arrays reused). Errors name
 * the problem (GPU out of range, NVLS on a group spanning domains, ...). */
int net_coll_plan(const net_graph *g, net_router *r, const net_coll_req *req, net_plan *plan, ts_err *err);

/* ------------------------------------------------------------ runner */

typedef struct net_sim net_sim;

/* Called when a collective finishes. */
typedef void (*net_coll_done_fn)(void *ctx, uint64_t tag, int64_t t_ns);

int net_sim_new(const net_graph *g, net_coll_done_fn done, void *ctx, net_sim **out, ts_err *err);
void net_sim_free(net_sim *s);

/* Start collective req at now_ns (>= the current time); done(ctx, tag, t)
 * is called when it ends. */
int net_sim_start(net_sim *s, int64_t now_ns, const net_coll_req *req, uint64_t tag, ts_err *err);

/* The plan of req, computed on first use and kept by s until
 * net_sim_free (the same request always gives the same plan): a handle for
 * net_sim_start_plan, so that a caller who knows its requests repeat can
 * skip the lookup. */
int net_sim_plan(net_sim *s, const net_coll_req *req, const net_plan **out, ts_err *err);

/* net_sim_start of the request whose plan net_sim_plan(s, ...) returned
 * (may be called from the done callback, at its time).
 * lat_ns < 0: the phases wait their own latencies (the links'); lat_ns >= 0:
 * the collective's latency in total (NCCL's model of it, net_engine),
 * spread over the phases in proportion to theirs, or waited before the
 * first one when the plan has none. */
int net_sim_start_plan(net_sim *s, int64_t now_ns, const net_plan *plan, int64_t lat_ns, uint64_t tag, ts_err *err);

/* Time of the next internal event (NET_TIME_NEVER if idle). */
int64_t net_sim_next_ns(net_sim *s);

/* Process every event at or before t_ns (callbacks included). */
int net_sim_advance(net_sim *s, int64_t t_ns, ts_err *err);

/* Run until no collective is in flight; *end_ns (may be NULL) gets the time
 * of the last event. */
int net_sim_run(net_sim *s, int64_t *end_ns, ts_err *err);

int net_sim_in_flight(const net_sim *s);
net_flow_stats net_sim_flow_stats(const net_sim *s);
net_router *net_sim_router(net_sim *s);
/* The flows s runs its collectives on (owned by s). */
net_flows *net_sim_flows(net_sim *s);

/* Time of req alone on an idle copy of the fabric, ns (a convenience for
 * tests and cost tables; builds a private net_sim). */
int net_coll_time_ns(const net_graph *g, const net_coll_req *req, int64_t *out_ns, ts_err *err);

#endif
