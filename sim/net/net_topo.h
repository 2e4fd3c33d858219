/* net_topo — the network graph of a parsed topology (topo.h), in either
 * form.
 *
 * Parametric form -> net_fabric_params:
 *   servers = ceil(gpus / gpus_per_node) (the run's share of the nodes);
 *   NVLink: intra_node_gbps at NET_NVLINK_EFF, intra_node_latency_us split
 *     over the two hops GPU -> NVSwitch -> GPU;
 *   PCIe GPU <-> NIC: 32 GB/s for nic_gbps <= 25 (Gen4 x16), else 64 (Gen5);
 *   NICs: nic_gbps at topo_nic_eff(nic_gbps), nic_latency_us to the leaf;
 *   leaves take down = round(switch_ports x o / (1 + o)) NIC ports (o =
 *     oversubscription) and switch_ports - down uplinks, whole ports; every
 *     level above has that down:up ratio; with 3 or more levels, level 2
 *     groups `down` leaves (a k-ary fat tree's pod at 1:1); the top level
 *     joins all; with 1 level the one switch level takes switch_ports;
 *   pods > 1: the nodes split into that many pods (nodes / pods each, a
 *     whole number of leaves), each its own fabric of `levels` levels,
 *     joined by one more level at pod_oversubscription; a run fills pods
 *     in order (the last one perhaps partly) and *pods is the number it uses.
 *   Every switch is built as designed (switch_ports, oversubscription),
 *     populated or not: see net_graph.h.
 *   NVLS (NVLink SHARP) is on for H100, H200, B200 and GB200 GPU kinds (the
 *     NVSwitch generations with SHARP; NET_NVLS_EFF is the H100 figure).
 * Link-list form -> net_graph_from_links with the same names and kinds;
 *   the GPU kind (gpu_kind) decides NVLS.
 *
 * Ownership: *out is the caller's (net_graph_free).
 */
#ifndef TRAINSIM_NET_TOPO_H
#define TRAINSIM_NET_TOPO_H

#include "sim/config/topo.h"
#include "sim/net/net_graph.h"
#include "sim/util/err.h"

/* gpus: GPUs the run uses (parametric: sizes the cluster; 0 = all nodes).
 * gpu_kind: for a link list (topo has none); NULL = not NVLS-capable. */
int net_graph_from_topo(const struct topo *t, int gpus, const char *gpu_kind, net_graph **out, ts_err *err);

/* Fill p from a parametric topology (exposed for tests and the bench). */
int net_topo_fabric_params(const struct topo *t, int gpus, net_fabric_params *p, int *pods, ts_err *err);

#endif
