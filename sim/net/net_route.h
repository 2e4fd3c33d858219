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
 * Where several next hops lie on shortest paths (ECMP), the one taken is
 * candidates[h % n], candidates in increasing node id order and
 *   h = splitmix64(src * 0x9E3779B97F4A7C15 ^ dst * 0xC2B2AE3D27D4EB4F
 *                  ^ flow_id * 0x165667B19E3779F9 ^ hop)
 * (splitmix64 as in Steele et al. 2014). The same (src, dst, flow_id) always
 * takes the same path; different flow ids spread over the equal-cost paths.
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

/* The ECMP hash above (exposed for tests and documentation). */
uint64_t net_route_hash(int src, int dst, uint64_t flow_id, int hop);

#endif
