/* infer_search — inference deployments of one model on a GPU count: every
 * tensor- and pipeline-parallel size (powers of two up to the limits, t x p
 * dividing the GPUs, shapes the layout can split), precision and batch size
 * that fits, each run as a static batch (infer_static.h). Kept: those that
 * meet the limits on time to first token and time per output token; ranked
 * by output tokens/s per GPU (then lower end-to-end latency, then fewer
 * GPUs per replica, smaller t, then batch); the Pareto front of throughput
 * per GPU against end-to-end latency among them is flagged.
 *
 * Ownership: infer_search_run returns an array owned by the caller (free).
 */
#ifndef TRAINSIM_INFER_SEARCH_H
#define TRAINSIM_INFER_SEARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sim/infer/infer_cost.h"
#include "sim/infer/infer_static.h"

#define INFER_SEARCH_MAX_LIST 64

typedef struct {
    const config *base; /* the model, GPU kind and topology (its t, p are replaced) */
    int gpus;
    int64_t input_len, output_len;
    int max_tp, max_pp;
    int64_t batches[INFER_SEARCH_MAX_LIST];
    int n_batches;
    infer_prec precs[INFER_SEARCH_MAX_LIST];
    int n_precs;
    double max_ttft_ns, max_tpot_ns; /* 0: no limit */
    const infer_params *params;      /* borrowed; NULL: infer_params_default() */
} infer_search_in;

typedef struct {
    int t, p;
    infer_prec prec;
    int64_t batch;
    infer_static_result r;
    bool meets;  /* within both limits */
    bool pareto; /* on the front among those that meet them */
} infer_cand;

/* Runs the search; *out (caller frees) holds every candidate that fits, in
 * rank order, those meeting the limits first. TS_EINVAL for empty lists or
 * bad limits; TS_ENOMEM. *skipped counts layouts the shape cannot split. */
int infer_search_run(const infer_search_in *in, infer_cand **out, size_t *n, size_t *skipped, ts_err *err);

#endif
