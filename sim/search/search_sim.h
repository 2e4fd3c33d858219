/* search_sim — the search's default evaluator: one candidate simulated on
 * the timeline (simulate.h), its metrics copied into a search_metrics.
 */
#ifndef TRAINSIM_SEARCH_SIM_H
#define TRAINSIM_SEARCH_SIM_H

#include "sim/config/config.h"
#include "sim/search/search.h"
#include "sim/util/err.h"

/* The default evaluator: simulate_run on the timeline. user: a const
 * simulate_opts * (calibration file), or NULL for the defaults; always run
 * with no_balanced_rerun (a skewed MoE candidate is simulated once: the
 * search reads no imbalance figure). */
int search_eval_simulate(void *user, const config *c, search_metrics *out, ts_err *err);

#endif
