/* infer_search — inference deployments (infer_search.h). */
#include "sim/infer/infer_search.h"

#include <stdlib.h>
#include <string.h>

static int cmp_cand(const void *x, const void *y)
{
    const infer_cand *a = x, *b = y;
    if (a->meets != b->meets)
        return a->meets ? -1 : 1;
    if (a->r.throughput_per_gpu != b->r.throughput_per_gpu)
        return a->r.throughput_per_gpu > b->r.throughput_per_gpu ? -1 : 1;
    if (a->r.e2e_ns != b->r.e2e_ns)
        return a->r.e2e_ns < b->r.e2e_ns ? -1 : 1;
    if (a->t * a->p != b->t * b->p)
        return a->t * a->p < b->t * b->p ? -1 : 1;
    if (a->t != b->t)
        return a->t < b->t ? -1 : 1;
    if (a->batch != b->batch)
        return a->batch < b->batch ? -1 : 1;
    int pa = a->prec.act * 100 + a->prec.weight * 10 + a->prec.kv,
        pb = b->prec.act * 100 + b->prec.weight * 10 + b->prec.kv;
    return (pa > pb) - (pa < pb);
}

/* b dominates a: no worse in both, better in one. */
static bool dominates(const infer_cand *b, const infer_cand *a)
{
    bool ge = b->r.throughput_per_gpu >= a->r.throughput_per_gpu && b->r.e2e_ns <= a->r.e2e_ns;
    bool gt = b->r.throughput_per_gpu > a->r.throughput_per_gpu || b->r.e2e_ns < a->r.e2e_ns;
    return ge && gt;
}

static int push(infer_cand **v, size_t *n, size_t *cap, const infer_cand *c, ts_err *err)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        infer_cand *nv = realloc(*v, nc * sizeof *nv);
        if (!nv)
            return err_set(err, TS_ENOMEM, "out of memory for %zu candidates", nc);
        *v = nv;
        *cap = nc;
    }
    (*v)[(*n)++] = *c;
    return TS_OK;
}

/* Every precision and batch of one layout. */
static int run_layout(const infer_search_in *in, config *c, infer_cand **v, size_t *n, size_t *cap, size_t *skipped,
                      ts_err *err)
{
    infer_params ip = in->params ? *in->params : infer_params_default();
    int rc = TS_OK;
    for (int k = 0; !rc && k < in->n_precs; k++) {
        infer_model *m = NULL;
        ts_err e2;
        if (infer_model_new(c, &in->precs[k], &ip, &m, &e2)) {
            if (e2.code == TS_ENOMEM)
                return err_set(err, TS_ENOMEM, "%s", e2.msg);
            (*skipped)++;
            continue;
        }
        int64_t maxb = infer_max_batch(m, in->input_len, in->output_len, (int64_t)1 << 20);
        for (int j = 0; !rc && j < in->n_batches; j++) {
            if (in->batches[j] > maxb)
                continue;
            infer_cand cd = {.t = c->par.tp, .p = c->par.pp, .prec = in->precs[k], .batch = in->batches[j]};
            infer_static_in si = {
                .batch = in->batches[j], .input_len = in->input_len, .output_len = in->output_len, .gpus = in->gpus};
            rc = infer_static_run(m, &si, &cd.r, err);
            if (rc)
                break;
            cd.meets = (!(in->max_ttft_ns > 0) || (double)cd.r.ttft_ns <= in->max_ttft_ns) &&
                       (!(in->max_tpot_ns > 0) || (double)cd.r.tpot_ns <= in->max_tpot_ns);
            rc = push(v, n, cap, &cd, err);
        }
        infer_model_free(m);
    }
    return rc;
}

int infer_search_run(const infer_search_in *in, infer_cand **out, size_t *n, size_t *skipped, ts_err *err)
{
    *out = NULL;
    *n = 0;
    *skipped = 0;
    if (in->n_batches < 1 || in->n_precs < 1)
        return err_set(err, TS_EINVAL, "no batch sizes or precisions to try");
    if (in->max_ttft_ns < 0 || in->max_tpot_ns < 0)
        return err_set(err, TS_EINVAL, "--max-ttft-ms and --max-tpot-ms must be >= 0");
    if (in->gpus < 1)
        return err_set(err, TS_EINVAL, "--gpus %d: must be >= 1", in->gpus);
    infer_cand *v = NULL;
    size_t cap = 0;
    int rc = TS_OK;
    config c = *in->base;
    for (int t = 1; !rc && t <= in->max_tp && t <= in->gpus; t *= 2)
        for (int p = 1; !rc && p <= in->max_pp && t * p <= in->gpus; p *= 2) {
            if (in->gpus % (t * p) || p > c.model.num_layers)
                continue;
            c.par.tp = t;
            c.par.pp = p;
            /* Megatron-LM pads the vocabulary to a multiple of divisible_by x t */
            if (c.model.vocab_size > 0 && config_pad_vocab(c.model.vocab_size, c.model.make_vocab_size_divisible_by, t,
                                                           &c.model.padded_vocab_size, NULL)) {
                (*skipped)++;
                continue;
            }
            rc = run_layout(in, &c, &v, n, &cap, skipped, err);
        }
    if (rc) {
        free(v);
        *n = 0;
        return rc;
    }
    for (size_t i = 0; i < *n; i++) {
        v[i].pareto = v[i].meets;
        for (size_t j = 0; v[i].pareto && j < *n; j++)
            if (j != i && v[j].meets && dominates(&v[j], &v[i]))
                v[i].pareto = false;
    }
    if (*n)
        qsort(v, *n, sizeof *v, cmp_cand);
    *out = v;
    return TS_OK;
}
