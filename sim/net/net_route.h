/* net_route — deterministic shortest-path routing with ECMP on a net_graph.
 *
 * A route from node src to node dst is a list of link ids:
 *  - a direct link src -> dst if there is one;
 *  - through a shared NVSwitch (src -> nvs -> dst) if both are GPUs of one
 *    NVLink domain;
 *  - otherwise through the fabric: src GPU -> its NIC (net_graph_gpu_nic; a
 *    NIC or a GPU joined straight to a switch is its own attachment), then a
 *    shortest path (fewest hops) over switches to the destination's NIC, then
 *    NIC -> dst GPU.
 * Where several next hops lie on shortest paths (ECMP), the choice is
 * destination-mod-k, as InfiniBand's fat-tree routing (OpenSM ftree) does:
 * the destination's key k is its port on its leaf plus the leaf's index
 * times the ports of a full leaf; a hop from level m up to m+1 takes
 * candidate (k / D_m) % n, and a hop down to level m takes digit m - 1 the
 * same way, where D_0 = 1 and D_{m+1} = D_m x (the fan-out seen going up
 * from level m), candidates in increasing node id order. On a non-blocking
 * fat tree every downlink then carries one destination's traffic, and
 * flows from one leaf to consecutive ports take distinct uplinks: a
 * shifted permutation (the inter-server step of a ring) runs at NIC rate.
 * The path depends on (src, dst) only; flow_id is kept for callers (it no
 * longer spreads one pair's flows, which share their NICs anyway).
 * Failed links (net_graph_fail_link) are never taken.
 *
 * Switch distances to each destination attachment are computed once by BFS
 * and cached (2 bytes per switch per destination).
 *
 * Ownership: a net_router borrows its graph (which must outlive it and stay
 * unchanged in shape); free it with net_router_free().
 */
#ifndef TRAINSIM_NET_ROUTE_H
#define TRAINSIM_NET_ROUTE_H

#include <stdint.h>

#include "sim/net/net_graph.h"
#include "sim/util/err.h"

#define NET_MAX_PATH 24 /* links in the longest route (8 levels up and down + endpoints) */

typedef struct net_router net_router;

/* New router over finished graph g; *out set on success (caller frees). */
int net_router_new(const net_graph *g, net_router **out, ts_err *err);
void net_router_free(net_router *r);

/* Route src -> dst (node ids, distinct) for flow_id: writes up to
 * NET_MAX_PATH link ids into links and returns their count (>= 1), or a
 * TS_E* code (TS_EINVAL if dst cannot be reached). */
int net_route(net_router *r, int src, int dst, uint64_t flow_id, int *links, ts_err *err);

/* Check that routes join every GPU of g to the same GPU of the next server,
 * to the next GPU of its server and to the next GPU of the next server
 * (another rail), both ways (with failed links, see
 * net_graph_fail_link). TS_EINVAL naming the first pair with no route
 * ("gpu0.3 cannot reach gpu1.3 ...") otherwise. */
int net_route_check_gpus(const net_graph *g, ts_err *err);

/* Apply --fail-link and --fail-node to g (before any router is made):
 *   links: "A:B" or "A-B" (node names as net_graph_node_name writes them),
 *          several separated by commas; both directions fail;
 *   nodes: node names, comma-separated; every link of the node fails.
 * Either may be NULL. Then every GPU must still reach the others
 * (net_route_check_gpus): a cut that disconnects GPUs is TS_EINVAL naming
 * a pair; a failed node that takes GPUs with it (a GPU, its NIC, its
 * NVSwitch) is TS_EINVAL saying how to shrink the job (run on the servers
 * left: --gpus (servers - lost) x GPUs per server, data-parallel size that
 * divided by tp x pp). tp, pp: the run's tensor and pipeline sizes. */
int net_route_apply_failures(net_graph *g, const char *links, const char *nodes, int tp, int pp, ts_err *err);

/* The ECMP hash above (exposed for tests and documentation). */
uint64_t net_route_hash(int src, int dst, uint64_t flow_id, int hop);

#endif
