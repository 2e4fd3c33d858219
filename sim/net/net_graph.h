/* net_graph — the cluster as a graph: GPUs, NVSwitch domains, NICs and
 * fabric switches (leaf = level 1, spine = 2, core = 3, ...) joined by
 * directed links, each with a bandwidth and a latency.
 *
 * Units: bandwidth in GB/s (1e9 bytes/s, which is exactly 1 byte/ns, so a
 * flow of B bytes at R GB/s takes B/R ns), latency in microseconds.
 *
 * Every link stores its line rate and its effective payload bandwidth
 * (line rate x protocol efficiency of its class); flows (net_flow.h) share
 * the effective bandwidth. Default efficiencies (NET_NVLINK_EFF,
 * the NIC efficiency, topo_nic_eff) cite ../shared/reference/networks.csv.
 *
 * Building: net_graph_new(), then nodes and links, then net_graph_finish()
 * (validates and builds the adjacency). Builders for parametric fabrics
 * (fat trees with any oversubscription and any number of levels,
 * rail-optimized leaves, multi-pod clusters) are below.
 *
 * Ownership: a net_graph owns all its arrays; free it with net_graph_free().
 */
#ifndef TRAINSIM_NET_GRAPH_H
#define TRAINSIM_NET_GRAPH_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/util/err.h"

/* NVLink payload efficiency: 128-byte payload packets give 240 of the
 * 300 GB/s line rate on A100 (networks.csv, "A100 NVLink effective per GPU");
 * the H100 ring row's note says "about 20% protocol overhead": 0.8 for both. */
#define NET_NVLINK_EFF 0.8
/* NVLink SHARP (NVLS) all-reduce: the fraction of the NVLink line rate one
 * GPU's port carries in each direction while the switch reduces. An NVLS
 * all-reduce of S bytes moves S (n+1)/n bytes each way through every GPU
 * port (switch loads of all shards + the multicast store of its own), so
 * busbw = 2(n-1)/n x S / T = 2(n-1)/(n+1) x eff x 450 GB/s for n = 8.
 * Fitted to the one published row, H100 NVLS bus bandwidth 480 GB/s
 * (networks.csv): eff = 480/700. */
#define NET_NVLS_EFF (480.0 / 700.0)

#define NET_MAX_LEVELS 8

typedef enum {
    NET_NODE_GPU = 0,
    NET_NODE_NVSWITCH, /* one node per NVLink domain (all NVSwitch chips of a server) */
    NET_NODE_NIC,
    NET_NODE_SWITCH /* fabric switch; level 1 = leaf/ToR, 2 = spine, 3 = core ... */
} net_node_kind;

typedef enum {
    NET_LINK_NVLINK = 0, /* GPU <-> NVSwitch, or GPU <-> GPU */
    NET_LINK_PCIE,       /* GPU <-> NIC */
    NET_LINK_FABRIC      /* NIC <-> switch, switch <-> switch */
} net_link_kind;

typedef struct {
    net_node_kind kind;
    int level;  /* switches: 1 leaf, 2 spine, ...; 0 for other kinds */
    int server; /* GPU, NIC, NVSwitch: server (host) index; -1 for switches */
    int local;  /* index within the server (GPU 0..7, NIC 0..7); switch: index within its level */
} net_node;

typedef struct {
    int src, dst; /* node ids; the link carries data src -> dst */
    net_link_kind kind;
    double line_gbps; /* line rate, GB/s */
    double bw_gbps;   /* effective payload bandwidth = line x efficiency, GB/s */
    double lat_us;    /* one-way latency, microseconds */
    int reverse;      /* id of the link dst -> src, -1 if none */
    bool down;        /* failed (net_graph_fail_link): routes avoid it */
} net_link;

typedef struct net_graph {
    int n_nodes, n_links;
    net_node *nodes;     /* n_nodes */
    net_link *links;     /* n_links */
    int *out_off;        /* n_nodes + 1: out-links of node v are out_link[out_off[v] .. out_off[v+1]) */
    int *out_link;       /* n_links, sorted by destination node id */
    int n_gpus;          /* GPUs, numbered 0..n_gpus-1 in order of creation */
    int *gpu_node;       /* n_gpus: node id of GPU i */
    int n_servers;       /* servers (hosts) */
    int gpus_per_server; /* GPUs per server (-1 if not uniform) */
    bool nvls;           /* NVSwitches reduce in the switch (NVLink SHARP: H100, H200) */
    bool finished;
    uint32_t bw_version; /* bumped whenever a link's bandwidth changes after creation
                            (net_graph_scale_link): net_flows rereads them */
    int cap_nodes, cap_links, cap_gpus;
} net_graph;

/* An empty graph; NULL on allocation failure. Caller frees with net_graph_free. */
net_graph *net_graph_new(void);
void net_graph_free(net_graph *g);

/* Add a node; returns its id (>= 0) or TS_ENOMEM. GPUs are numbered in the
 * order they are added. */
int net_graph_add_node(net_graph *g, net_node_kind kind, int level, int server, int local, ts_err *err);

/* Add a directed link a -> b with line rate line_gbps, efficiency eff in
 * (0, 1] and latency lat_us; returns its id or a TS_E* code. */
int net_graph_add_link1(net_graph *g, int a, int b, net_link_kind kind, double line_gbps, double eff, double lat_us,
                        ts_err *err);

/* Add a link in both directions with the same parameters; returns the id of
 * a -> b (b -> a is that id + 1) or a TS_E* code. */
int net_graph_add_link2(net_graph *g, int a, int b, net_link_kind kind, double line_gbps, double eff, double lat_us,
                        ts_err *err);

/* Validate (every GPU reachable link-wise, rates > 0) and build adjacency.
 * No nodes or links may be added afterwards. */
int net_graph_finish(net_graph *g, ts_err *err);

/* Link id a -> b, or -1 if none (binary search; graph must be finished). */
int net_graph_find_link(const net_graph *g, int a, int b);

/* Scale the effective bandwidth of the links a -> b and b -> a by factor
 * (> 0; < 1 degrades). TS_EINVAL if there is no such link. */
int net_graph_scale_link(net_graph *g, int a, int b, double factor, ts_err *err);

/* Mark the links a -> b and b -> a failed: routes (net_route.h) no longer
 * use them. TS_EINVAL if there is no such link. Call before routers are
 * made (a router caches distances). */
int net_graph_fail_link(net_graph *g, int a, int b, ts_err *err);

/* Node id of the NIC used by GPU gpu (the NIC joined to it by a PCIe link;
 * with several, the one with the same local index, else the first); -1 if
 * none. Node id of its NVLink domain switch, -1 if none. */
int net_graph_gpu_nic(const net_graph *g, int gpu);
int net_graph_gpu_nvswitch(const net_graph *g, int gpu);

/* Printable name of a node, in topo.h's grammar ("gpu1.4" = GPU 4 of
 * server 1, "nvs1", "nic1.4", "sw2.5" = switch 5 of level 2),
 * written into buf (at least 32 bytes). Returns buf. */
const char *net_graph_node_name(const net_graph *g, int node, char *buf, int cap);

/* Parse a node name as printed by net_graph_node_name(); node id or -1. */
int net_graph_node_by_name(const net_graph *g, const char *name);

/* ------------------------------------------------------------ fabrics */

/* One level of switches above another. Level l (1-based) switches are built
 * in groups: `group` units of level l-1 (for l = 2: leaves) under one group
 * of `switches` level-l switches, every unit switch linked to every switch of
 * its group; 0 groups all units together (the top). The uplinks of a level
 * l-1 switch carry its DESIGN downlink bandwidth divided by `oversub` (1 =
 * full bisection, 2 = 2:1, 7 = 1:7 as between Llama 3's pods): a leaf's
 * design downlink is leaf_ports NIC ports, an upper switch's the uplinks of
 * a full group shared by the group's switches, whether or not the run
 * populates them (a partly filled leaf, group or pod has a full one's
 * uplinks). Counted in ports of the NIC rate: spread evenly over all
 * switches of the group when there is at least one port for each, else
 * whole ports to a round-robin subset (so a lone flow still runs at port
 * rate; only the aggregate is cut). */
typedef struct {
    int group;      /* units per group, 0 = all */
    int switches;   /* switches per group (each unit joins each one); 0 = auto:
                         the uplink ports of the widest switch below */
    double oversub; /* downlink : uplink bandwidth of the level below, >= 1 */
} net_fabric_level;

typedef struct {
    int servers;          /* hosts */
    int gpus_per_server;  /* GPUs in one NVLink domain */
    int nics_per_server;  /* compute NICs (GPU i uses NIC i mod nics) */
    double nvlink_gbps;   /* NVLink line rate per GPU per direction, GB/s */
    double nvlink_eff;    /* NET_NVLINK_EFF */
    double nvlink_lat_us; /* GPU <-> NVSwitch hop */
    double pcie_gbps;     /* GPU <-> NIC, per direction, GB/s */
    double pcie_lat_us;
    double nic_gbps;                     /* NIC line rate per direction, GB/s (50 = NDR 400 Gb/s) */
    double net_eff;                      /* fabric links' payload efficiency: topo_nic_eff(nic_gbps) */
    double nic_lat_us;                   /* NIC <-> leaf */
    double switch_lat_us;                /* switch <-> switch hop */
    bool rail_optimized;                 /* leaf k of a rail group joins NIC k of its servers */
    bool nvls;                           /* NVSwitch supports NVLink SHARP (H100, H200) */
    int leaf_ports;                      /* NIC ports per leaf switch */
    int pod_servers;                     /* servers per pod: leaves hold one pod's NICs; 0 = one pod */
    int levels;                          /* switch levels above the NICs (>= 1) */
    net_fabric_level up[NET_MAX_LEVELS]; /* up[l] for l = 2..levels (up[0], up[1] unused) */
} net_fabric_params;

/* Defaults for a DGX-like server of the given GPU kind ("A100", "H100",
 * "H200": NVLink 300/450/450 GB/s; NIC HDR 25 / NDR 50 GB/s; 8 GPUs, 8 NICs),
 * a 2-level non-blocking rail-optimized fat tree with 32-port leaves and as
 * many spines as a leaf has uplink ports.
 * TS_EINVAL for an unknown kind. */
int net_fabric_defaults(net_fabric_params *p, const char *gpu_kind, int servers, ts_err *err);

/* Build the graph of p. *out is set on success (caller frees). */
int net_graph_build_fabric(const net_fabric_params *p, net_graph **out, ts_err *err);

/* Multi-pod cluster: pods of pod_servers servers with full bisection inside
 * (a 2-level fat tree each), pods joined through a core level at
 * oversubscription pod_oversub (Llama 3: 384-server / 3072-GPU pods, 7).
 * Fills p from base (server and link parameters) and builds. */
int net_graph_build_multipod(const net_fabric_params *base, int pods, int pod_servers, double pod_oversub,
                             net_graph **out, ts_err *err);

/* ------------------------------------------------------------ link list */

/* One explicit link between named nodes: "gpu<s>.<k>" (GPU k of server s,
 * global index s * gpus_per_server + k), "nvs<s>", "nic<s>.<k>",
 * "sw<level>.<i>". Node objects are created on first mention. */
typedef struct {
    const char *a, *b;
    double gbps; /* line rate per direction */
    double eff;  /* efficiency (0 = the class default) */
    double lat_us;
} net_link_spec;

/* Build from an explicit list; gpus_per_server gives GPU i's server. Names
 * are validated; an error names the spec index and what was expected. */
int net_graph_from_links(const net_link_spec *specs, int n, int gpus_per_server, net_graph **out, ts_err *err);

#endif
