/* net_simulate — the network model plugged into simulate_run (simulate.h):
 * communication tasks become flows on the topology graph of the config's
 * cluster (net_topo.h), in the symmetric mode (one pipeline simulated,
 * collectives over whole groups) or the full mode (every rank and flow).
 *
 *   net_sim_opts no = {0};
 *   net_sim_opts_register(&no, &table, &err);   // the flags below
 *   ... parse ...
 *   net_simulate *ns = NULL;
 *   if (net_sim_opts_active(&no)) net_simulate_new(&c, &no, &ns, &err);
 *   simulate_opts so = {..., .net = ns ? net_simulate_hooks(ns) : NULL};
 *   simulate_run(&c, &so, &r, &err);
 *   net_simulate_free(ns);
 *
 * Flags (units and defaults in --help):
 *   --network-flows          symmetric mode with flows (default: closed-form commcost)
 *   --full                   every rank and every flow (implies flows)
 *   --straggler RANK:FACTOR  global rank RANK computes FACTOR x slower (full)
 *   --degrade-link A-B:FACTOR  scale one link's bandwidth (both directions; full)
 *   --fail-link A:B[,C:D...]  links that are down: routes avoid them (flows, full)
 *   --fail-node N[,M...]  nodes that are down (a switch: routed around;
 *                            a GPU, NIC or NVSwitch: an error saying how to shrink the job)
 *   --mixed-gpus KIND:FIRST-LAST  GPUs FIRST..LAST are KIND: their compute is
 *                            scaled by (bf16 peak of --gpu) / (bf16 peak of KIND) (full)
 *   --comm-compute-slowdown S  compute that starts while the rank communicates
 *                            takes (1 + S) longer (SMs taken by NCCL; default 0 = off)
 *   --rank-order ORDER       placement order, innermost first (default tp-dp-pp)
 *   --link-report FILE.csv   per-link bytes, busy time and peak utilisation
 *                            (with --network-flows or --full; see
 *                            net_simulate_link_report)
 *
 * Mapping of plan steps: compute -> compute; tensor-parallel and
 * data-parallel steps -> collectives of the rank's group (kind from the
 * step's commcost_coll: all-reduce, all-gather, reduce-scatter; a MoE
 * model's data-parallel steps run their routed experts' part over the
 * expert-data-parallel groups after the rest); the MoE dispatcher's
 * all-to-alls (plan steps of category EP: moe.a2a.dispatch, .combine and
 * their .bwd) -> an ALLTOALL or DEEPEP collective of the rank's
 * expert-parallel group (net_a2a.h; Megatron-core's fold,
 * net_place_set_experts), the busiest rank (the group's first) receiving
 * (dispatch, combine's gradient) or sending (combine, dispatch's gradient)
 * the plan's load factor times its share; pipeline sends -> a
 * p2p flow per rank with sequence parallelism or t = 1, else Megatron's
 * scatter/gather (S/t over each of the t NICs, then an NVLink all-gather).
 *
 * A second simulate_run with the same hooks (simulate's balanced MoE run)
 * gets a fresh net_engine; the statistics and the link report stay the
 * first run's.
 *
 * Ownership: net_simulate borrows the config (must outlive it) and owns its
 * graph, placement and net_engines.
 */
#ifndef TRAINSIM_NET_SIMULATE_H
#define TRAINSIM_NET_SIMULATE_H

#include <stdbool.h>
#include <stdio.h>

#include "sim/config/config.h"
#include "sim/core/simulate.h"
#include "sim/net/net_engine.h"
#include "sim/util/err.h"
#include "sim/util/opt.h"

typedef struct {
    bool flows;
    bool full;
    const char *straggler;
    const char *degrade;
    const char *fail_link;
    const char *fail_node;
    const char *mixed_gpus;
    double comm_compute_slowdown;
    const char *rank_order;
    const char *link_report; /* --link-report FILE.csv, NULL if none */
} net_sim_opts;

/* Add the flags above (with a "Network" heading) to t; targets in o. */
int net_sim_opts_register(net_sim_opts *o, opt_table *t, ts_err *err);

/* Does o ask for the network model at all? */
bool net_sim_opts_active(const net_sim_opts *o);

typedef struct net_simulate net_simulate;

/* Build the graph, placement and engine bridge for config c (validated).
 * TS_EINVAL for what-ifs without --full, bad flag values (naming the flag),
 * more ranks than GPUs, expert-data-parallel groups that cross the
 * data-parallel ones (etp x ep not a multiple of t with edp > 1). */
int net_simulate_new(const config *c, const net_sim_opts *o, net_simulate **out, ts_err *err);
void net_simulate_free(net_simulate *ns);

/* What to put in simulate_opts.net (owned by ns). */
const simulate_net *net_simulate_hooks(net_simulate *ns);

/* After the run: statistics, the graph (nodes, links) and the placement
 * note ("" if nothing to report). */
net_engine_stats net_simulate_stats(const net_simulate *ns);
const net_graph *net_simulate_graph(const net_simulate *ns);
const char *net_simulate_note(const net_simulate *ns);

/* After the run, with --link-report: write path (atomically, sim/util/afile;
 * "-" = stdout) as CSV, one row per directed link in link id order:
 *   link,bw_gbps,bytes,busy_ns,peak_utilisation
 * (link "A-B" carries data A -> B, node names as --degrade-link takes
 * them; bw_gbps the effective bandwidth the flows shared, after
 * --degrade-link), then print the ten hottest links (highest peak
 * utilisation, then longest busy time, then most bytes, then lowest id)
 * to top (NULL: not printed). In the symmetric mode the figures cover the
 * flows simulated (the collectives of replica (0, 0)'s groups, over their
 * whole groups, and its pipeline's sends), not the whole cluster's.
 * TS_EIO naming the path on a write error. */
int net_simulate_link_report(const net_simulate *ns, const char *path, FILE *top, ts_err *err);

#endif
