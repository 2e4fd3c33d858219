/* topo — cluster topologies read from CSV (libcsv), validated, in one of two
 * forms, plus the built-in Selene-like default. The network model (net_*)
 * builds its graph from a struct topo; this module only describes.
 *
 * Units: bandwidths in GB/s (1e9 bytes/s) per direction, latencies in
 * microseconds (µs); column names carry them (_gbps, _us).
 *
 * (a) Parametric form: one data row with the columns
 *       nodes                  servers in the cluster (a run uses the first ceil(gpus/gpus_per_node))
 *       gpus_per_node          GPUs per server (one NVLink/NVSwitch domain)
 *       gpu                    GPU kind from topologies/gpus.csv (name or alias)
 *       intra_node_gbps        NVLink/NVSwitch bandwidth per GPU per direction, GB/s
 *       intra_node_latency_us  GPU to GPU through the NVSwitch, µs
 *       nics_per_node          compute NICs per server (GPU i uses NIC i mod nics)
 *       nic_gbps               per NIC per direction, GB/s (25 = HDR 200 Gb/s, 50 = NDR 400 Gb/s)
 *       nic_latency_us         NIC to first switch including the NIC's own latency, µs
 *       fabric                 fat-tree | rail-optimized (leaf k joins NIC k of its servers)
 *       levels                 switch levels above the NICs (1 = one switch, 2 = leaf/spine, 3 = + core)
 *       oversubscription       downlink:uplink bandwidth ratio at each level (1 = full bisection)
 *     and the optional columns (an empty cell or no column means the default in brackets)
 *       switch_latency_us      per switch hop, µs [0.13: NVIDIA Quantum QM8700/QM9700 port-to-port]
 *       switch_ports           switch radix, ports [40 for nic_gbps <= 25 (QM8700 HDR), else 64 (QM9700 NDR)]
 *       pods                   pods the nodes are split into [0 = one pod]
 *       pod_oversubscription   oversubscription between pods [1]
 *
 * (b) Link-list form, for anything custom: one row per link with the columns
 *       endpoint_a, endpoint_b, bandwidth_gbps, latency_us, kind
 *     Endpoints are named gpu<s>.<k> (GPU k of server s), nvs<s> (the NVSwitch
 *     domain of server s), nic<s>.<k> (NIC k of server s), sw<l>.<i> (switch i
 *     of level l >= 1). kind is nvlink (GPU-NVSwitch or GPU-GPU, same server),
 *     pcie (GPU-NIC, same server) or fabric (NIC-switch, switch-switch). A link
 *     is undirected: bandwidth_gbps per direction. Every server must hold the
 *     same GPUs gpu<s>.0 .. gpu<s>.<G-1>, servers numbered 0..S-1, and every
 *     endpoint must be connected to the GPUs. No cable may be missing: every
 *     GPU has as many nvlink and pcie links as the GPU with the most, every
 *     NIC named has a fabric link when any NIC has one, and the switches are
 *     joined to each other by switch-switch links (routes cross the fabric
 *     over switches only). The GPU kind comes from --gpu.
 *
 * The form is chosen by the header: a file with an endpoint_a column is a
 * link list. Comment rows ('#') document the source of the figures.
 *
 * Errors (TS_EINVAL) say FILE:LINE and the column: missing column, empty
 * file, non-number, zero or negative bandwidth, negative latency, unknown
 * fabric or link kind, duplicate link, dangling link (an endpoint name that
 * does not follow the grammar, a GPU missing from a server, an endpoint not
 * connected to the GPUs, a NIC without a PCIe link to a GPU), a missing
 * cable (the endpoint that lacks it, and a row that has one), unknown GPU
 * kind (valid kinds listed).
 *
 * Ownership: topo_load/topo_default return a topo owned by the caller (free
 * with topo_free; a config owns the one it points to).
 */
#ifndef TRAINSIM_TOPO_H
#define TRAINSIM_TOPO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "sim/config/catalog.h"
#include "sim/util/err.h"

#define TOPO_TEXT_BYTES 1024

/* Link bandwidths (GB/s per direction) are accepted in [TOPO_MIN_GBPS, TOPO_MAX_GBPS]:
 * 1 MB/s up to 1 PB/s covers every real link, and keeps transfer times finite and, for
 * realistic message sizes, inside int64 ns (the engine refuses any that is not). */
#define TOPO_MIN_GBPS 1e-3
#define TOPO_MAX_GBPS 1e6

typedef enum { TOPO_PARAMETRIC = 0, TOPO_LINK_LIST } topo_form;
typedef enum { TOPO_FAT_TREE = 0, TOPO_RAIL_OPTIMIZED, TOPO_FABRIC_CUSTOM } topo_fabric;
typedef enum { TOPO_EP_GPU = 0, TOPO_EP_NVSWITCH, TOPO_EP_NIC, TOPO_EP_SWITCH } topo_ep_kind;
typedef enum { TOPO_LINK_NVLINK = 0, TOPO_LINK_PCIE, TOPO_LINK_FABRIC } topo_link_kind;

/* Names: "fat-tree", "rail-optimized", "custom"; "nvlink", "pcie", "fabric". */
extern const char *const TOPO_FABRIC_NAMES[];    /* NULL-terminated, by topo_fabric */
extern const char *const TOPO_LINK_KIND_NAMES[]; /* NULL-terminated, by topo_link_kind */

/* The parametric description. For a link list, nodes, gpus_per_node and
 * nics_per_node are derived from the links, fabric is TOPO_FABRIC_CUSTOM and
 * the bandwidth/latency fields are 0. */
typedef struct {
    int nodes; /* servers */
    int gpus_per_node;
    char gpu[CATALOG_NAME_BYTES]; /* catalogue name of the GPU kind ("" for a link list) */
    double intra_node_gbps;       /* per GPU per direction, GB/s */
    double intra_node_latency_us;
    int nics_per_node;
    double nic_gbps; /* per NIC per direction, GB/s */
    double nic_latency_us;
    topo_fabric fabric;
    int levels;                  /* switch levels above the NICs */
    double oversubscription;     /* >= 1 */
    double switch_latency_us;    /* per hop */
    int switch_ports;            /* radix */
    int pods;                    /* 0 = one pod */
    double pod_oversubscription; /* >= 1 */
} topo_params;

typedef struct {
    topo_ep_kind kind;
    int server; /* GPU, NVSwitch, NIC: server index; -1 for switches */
    int index;  /* GPU/NIC: index within the server; switch: index within its level; 0 for NVSwitch */
    int level;  /* switch level (>= 1); 0 otherwise */
} topo_endpoint;

typedef struct {
    topo_endpoint a, b;
    topo_link_kind kind;
    double bandwidth_gbps; /* per direction */
    double latency_us;
    int line; /* line in the CSV */
} topo_link;

struct topo {
    topo_form form;
    char source[TOPO_TEXT_BYTES];      /* file path, or "built-in default" */
    char description[TOPO_TEXT_BYTES]; /* the first comment row, "" if none */
    topo_params params;
    size_t n_links;   /* link list only */
    topo_link *links; /* n_links, file order (owned) */
};
typedef struct topo topo;

/* Read and validate a topology file. The parametric 'gpu' column is looked
 * up in the shipped GPU catalogue (catalog.h; TRAINSIM_DATA_DIR applies). */
int topo_load(const char *path, topo **out, ts_err *err);

/* The built-in default: DGX A100 80GB servers (8 GPUs, NVSwitch 300 GB/s per
 * GPU per direction, 8 x HDR 200 Gb/s = 25 GB/s NICs) on a 3-level
 * rail-optimized HDR fat tree with full bisection, like Selene; as many
 * servers as gpus needs (ceil(gpus / 8)). Same figures as
 * topologies/selene-dgx-a100.csv. */
int topo_default(int gpus, topo **out, ts_err *err);

/* The default for a GPU kind: A100 kinds (NVLink <= 300 GB/s) get the
 * Selene-like figures above with g's NVLink; newer kinds (H100, H200) get
 * DGX H100-like servers: g's NVLink (450 GB/s), 8 x NDR 400 Gb/s = 50 GB/s
 * NICs, 64-port switches, same 3-level rail-optimized fat tree (as
 * topologies/dgx-h100-cluster.csv). g NULL = A100-SXM4-80GB (topo_default). */
int topo_default_for(const gpu_spec *g, int gpus, topo **out, ts_err *err);

void topo_free(topo *t);

/* GPUs the topology holds (nodes x gpus_per_node). */
int topo_gpu_capacity(const topo *t);

/* TS_EINVAL if gpus is not in [1, capacity] ("--gpus 5000 exceeds the 4480
 * GPUs of FILE (560 nodes x 8)"). */
int topo_check_gpus(const topo *t, int gpus, ts_err *err);

/* Parse an endpoint name (grammar above). TS_EINVAL with the grammar if bad. */
int topo_endpoint_parse(const char *name, topo_endpoint *out, ts_err *err);

/* Write the endpoint's name ("gpu3.7", "nvs3", "nic3.0", "sw2.11") into
 * buf (>= 32 bytes); returns buf. */
const char *topo_endpoint_name(const topo_endpoint *e, char *buf, size_t cap);

/* Global GPU index of a GPU endpoint: server * gpus_per_node + index. */
int topo_gpu_index(const topo *t, const topo_endpoint *e);

/* A short human description ("560 x 8 A100-SXM4-80GB, NVSwitch 300 GB/s,
 * 8 x 25 GB/s NICs, 3-level rail-optimized fat tree 1:1"). */
void topo_describe(const topo *t, char *buf, size_t cap);

/* Achievable fraction of a NIC's line rate under NCCL
 * (../shared/reference/networks.csv): 12.2 GB/s per 100 Gb/s (12.5 GB/s)
 * NIC up to HDR rates (nic_gbps <= 25), 47 of 50 GB/s for a 400 Gb/s NIC
 * above. The one rule for NCCL's model (sim/model/commcost) and the flow
 * modes' fabric links (sim/net), so that both move a large message at the
 * same rate. */
double topo_nic_eff(double nic_gbps);

#endif
