/* net_names — the names of a network graph's nodes and links as
 * --degrade-link takes them (net_graph_node_name's grammar: gpu<s>.<k>,
 * nvs<s>, nic<s>.<k>, sw<level>.<i>): a summary of the valid names with
 * their index ranges for error messages, the nodes linked to one node, and
 * the full listing `trainsim config --list-nodes` prints.
 *
 * Everything is computed from the finished graph, so the names shown are
 * exactly those net_graph_node_by_name accepts for that graph.
 */
#ifndef TRAINSIM_NET_NAMES_H
#define TRAINSIM_NET_NAMES_H

#include <stddef.h>
#include <stdio.h>

#include "sim/net/net_graph.h"
#include "sim/net/net_route.h"
#include "sim/util/err.h"

/* The node names of g with their index ranges, e.g.
 *   "gpu<s>.<k> with s in 0..3, k in 0..7; nvs<s> with s in 0..3;
 *    nic<s>.<k> with s in 0..3, k in 0..7; sw1.<i> with i in 0..7"
 * (kinds absent from g are left out; a range is the smallest and largest
 * index present). Written into buf (cap bytes, cut if longer, always
 * NUL-terminated). Returns buf. */
const char *net_names_ranges(const net_graph *g, char *buf, size_t cap);

/* The names of the nodes node v has a link to, comma-separated ("gpu0.0,
 * sw1.0"), into buf (cut with "..." if longer than cap). Returns buf. */
const char *net_names_neighbors(const net_graph *g, int v, char *buf, size_t cap);

/* Write g's nodes and links to f:
 *   # <ranges>
 *   node,kind           one row per node (kind: gpu, nvswitch, nic, switch)
 *   link,kind,line_gbps,latency_us   one row per link, "A-B" as
 *                  --degrade-link takes it (a pair of directions is one
 *                  row; numbers as csvio_fmt_double writes them)
 * The graph must be finished. TS_EIO on a write error. */
int net_names_list(const net_graph *g, FILE *f, ts_err *err);

/* A summary of g for `trainsim topology`: GPUs, servers and NVLink
 * domains, NICs, switches and links per level, each switch level's
 * aggregate downlink and uplink line rate and their ratio (the
 * oversubscription as built), and the bisection bandwidth estimate of a
 * tree: half the smallest of the total NIC rate and each level's total
 * uplink rate (GB/s per direction). TS_EIO on a write error. */
int net_names_summary(const net_graph *g, FILE *f, ts_err *err);

/* Print the route from node a to node b (net_route.h, flow 0): one line
 * per hop "A -> B  kind  line GB/s  latency us", then the end-to-end
 * latency and the narrowest line rate. TS_EINVAL if there is no route. */
int net_names_route(const net_graph *g, int a, int b, FILE *f, ts_err *err);

/* Write g as a Graphviz graph (undirected edges, one per linked pair,
 * labelled with line GB/s). Large graphs are collapsed so the drawing stays
 * readable: with more than NET_NAMES_DOT_NODES nodes each server (its GPUs,
 * NVSwitch and NICs) is one box; with more than NET_NAMES_DOT_NODES
 * switches too, all servers are one box and each switch level one box
 * (labelled with the counts); parallel edges between two boxes are merged,
 * labelled with their count and summed GB/s. The title says which. TS_EIO on a write error, TS_ENOMEM. */
#define NET_NAMES_DOT_NODES 300
int net_names_dot(const net_graph *g, const char *title, FILE *f, ts_err *err);

#endif
