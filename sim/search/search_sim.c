/* search_sim — the search's default evaluator: one simulated iteration on
 * the timeline (simulate.h). */
#include "sim/search/search_sim.h"

#include "sim/search/search.h"

#include "sim/core/simulate.h"

int search_eval_simulate(void *user, const config *c, search_metrics *out, ts_err *err)
{
    simulate_opts o = {0};
    if (user)
        o = *(const simulate_opts *)user;
    /* the search reads the iteration and the peak only: not the routing
     * imbalance's cost, which would simulate a skewed MoE run twice */
    o.no_balanced_rerun = true;
    simulate_result *r = NULL;
    int rc = simulate_run(c, &o, &r, err);
    if (rc)
        return rc;
    out->iteration_s = (double)r->iteration_ns * 1e-9;
    out->tflops_per_gpu = r->model_tflops_per_gpu;
    out->mfu = r->mfu;
    out->peak_mem_bytes = (double)r->peak_bytes;
    out->bubble_fraction = r->bubble_fraction;
    out->exposed_comm_s = 0;
    for (int k = 0; k < SIMULATE_COMM_KINDS; k++) {
        out->exposed_s[k] = r->exposed_ns[k] * 1e-9;
        out->exposed_comm_s += out->exposed_s[k];
    }
    out->tokens_per_s = r->tokens_per_s;
    simulate_result_free(r);
    return TS_OK;
}
