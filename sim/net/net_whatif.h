/* net_whatif — the flow modes' what-if flags parsed: --straggler RANK:FACTOR
 * and --degrade-link A-B:FACTOR (net_simulate.h applies them).
 *
 * Ownership: borrows everything; writes only its out-parameters.
 */
#ifndef TRAINSIM_NET_WHATIF_H
#define TRAINSIM_NET_WHATIF_H

#include "sim/net/net_graph.h"
#include "sim/util/err.h"

/* Accepted factors: a straggler computes 1000x slower at most (or faster, down to
 * 1/1000), a link keeps at least a millionth of its bandwidth and at most 1000x it.
 * Beyond these, times leave any meaningful range and soon int64 ns. */
#define NET_STRAGGLER_MIN 1e-3
#define NET_STRAGGLER_MAX 1e3
#define NET_DEGRADE_MIN   1e-6
#define NET_DEGRADE_MAX   1e3

/* Parse "RANK:FACTOR" (--straggler) and "A-B:FACTOR" (--degrade-link, node
 * names as net_graph_node_name prints them), factors in the ranges above. */
int net_parse_straggler(const char *s, int n_ranks, int *rank, double *factor, ts_err *err);
int net_parse_degrade(const net_graph *g, const char *s, int *a, int *b, double *factor, ts_err *err);

#endif
