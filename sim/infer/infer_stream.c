/* infer_stream — continuous batching, event by event (infer_stream.h). */
#include "sim/infer/infer_stream.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

#include "sim/util/ckd.h"

typedef struct {
    int64_t arrival_ns, admit_ns, first_ns, end_ns;
    int64_t prefilled, generated, step_n; /* step_n: tokens in the current step */
} req;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Mean and nearest-rank p50/p99 of v[0..n-1] (sorts v). */
static infer_dist dist_of(double *v, size_t n)
{
    infer_dist d = {0, 0, 0};
    if (!n)
        return d;
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    qsort(v, n, sizeof *v, cmp_double);
    d.mean_ns = sum / (double)n;
    size_t i50 = (size_t)ceil(0.50 * (double)n), i99 = (size_t)ceil(0.99 * (double)n);
    d.p50_ns = v[(i50 ? i50 : 1) - 1];
    d.p99_ns = v[(i99 ? i99 : 1) - 1];
    return d;
}

/* KV-cache tokens that fit beside the weights and a step of max_num_tokens. */
static int64_t kv_capacity(const infer_model *m, const infer_stream_in *in)
{
    int64_t step = in->max_num_tokens, seqs = in->max_seqs;
    if (!infer_memory(m, 0, step, seqs, seqs).fits)
        return 0;
    int64_t lo = 0, hi = 1;
    while (hi < ((int64_t)1 << 40) && infer_memory(m, hi, step, seqs, seqs).fits) {
        lo = hi;
        hi *= 2;
    }
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (infer_memory(m, mid, step, seqs, seqs).fits)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static int check_in(const infer_model *m, const infer_stream_in *in, ts_err *err)
{
    const infer_layout *L = infer_model_layout(m);
    int tp = L->t * L->p;
    if (!(in->request_rate > 0) || !isfinite(in->request_rate))
        return err_set(err, TS_EINVAL, "--request-rate %g: must be > 0 requests/s", in->request_rate);
    if (in->num_requests < 1 || in->num_requests > 10000000)
        return err_set(err, TS_EINVAL, "--num-requests %lld: must be in [1, 1e7]", (long long)in->num_requests);
    if (in->input_len < 1 || in->output_len < 1)
        return err_set(err, TS_EINVAL, "--input-len %lld, --output-len %lld: both must be >= 1",
                       (long long)in->input_len, (long long)in->output_len);
    if (in->max_seqs < 1 || in->max_num_tokens < 1)
        return err_set(err, TS_EINVAL, "--batch-size %lld, --max-num-tokens %lld: both must be >= 1",
                       (long long)in->max_seqs, (long long)in->max_num_tokens);
    if (in->gpus < tp || in->gpus % tp)
        return err_set(err, TS_EINVAL, "--gpus %d: must be a multiple of t x p = %d", in->gpus, tp);
    return TS_OK;
}

/* Forms the next step from the running requests run[0..nrun-1] (admission
 * order): decode tokens first, then prefill chunks within the budget. Sets
 * each request's step_n. */
static infer_step form_step(req *r, const int64_t *run, int64_t nrun, const infer_stream_in *in)
{
    infer_step s = {0};
    int64_t budget = in->max_num_tokens, chunks = 0;
    double chunk_sum = 0;
    for (int64_t i = 0; i < nrun; i++) {
        req *q = &r[run[i]];
        q->step_n = 0;
        if (q->prefilled == in->input_len) {
            q->step_n = 1;
            s.tokens += 1;
            s.logits += 1;
            s.dec_seqs += 1;
            s.dec_keys += (double)(in->input_len + q->generated);
            budget--;
        }
    }
    for (int64_t i = 0; i < nrun && budget > 0; i++) {
        req *q = &r[run[i]];
        if (q->prefilled == in->input_len)
            continue;
        int64_t n = in->input_len - q->prefilled;
        if (n > budget)
            n = budget;
        double c = (double)q->prefilled, dn = (double)n;
        q->step_n = n;
        s.tokens += dn;
        s.pre_pairs += dn * (c + (dn + 1) / 2);
        s.pre_keys += c + dn;
        if (q->prefilled + n == in->input_len)
            s.logits += 1;
        chunks++;
        chunk_sum += dn;
        budget -= n;
    }
    s.pre_chunk_len = chunks ? chunk_sum / (double)chunks : 0;
    return s;
}

int infer_stream_run(infer_model *m, const infer_stream_in *in, infer_stream_result *out, ts_err *err)
{
    memset(out, 0, sizeof *out);
    int rc = check_in(m, in, err);
    if (rc)
        return rc;
    const infer_layout *L = infer_model_layout(m);
    int tp = L->t * L->p;
    out->replicas = in->gpus / tp;
    int64_t per_req = in->input_len + in->output_len;
    out->kv_capacity_tokens = kv_capacity(m, in);
    if (out->kv_capacity_tokens < per_req)
        return err_set(err, TS_EINVAL,
                       "one request's KV cache (%lld tokens) does not fit beside the weights and a step of "
                       "--max-num-tokens %lld (room for %lld tokens): use more GPUs (-t, -p) or shorter requests",
                       (long long)per_req, (long long)in->max_num_tokens, (long long)out->kv_capacity_tokens);
    size_t n = (size_t)in->num_requests;
    req *r = calloc(n, sizeof *r);
    int64_t *run = calloc(n, sizeof *run);
    double *v = calloc(n, sizeof *v);
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    if (!r || !run || !v || !rng) {
        rc = err_set(err, TS_ENOMEM, "out of memory for %zu requests", n);
        goto done;
    }
    gsl_rng_set(rng, in->seed);
    double rate = in->request_rate / out->replicas, t_s = 0;
    for (size_t i = 0; i < n; i++) {
        t_s += gsl_ran_exponential(rng, 1.0 / rate);
        r[i].arrival_ns = ckd_ns(t_s * 1e9);
    }
    int64_t now = 0, nrun = 0, next = 0, finished = 0, kv_used = 0;
    double busy_area = 0, busy_ns = 0;
    while (finished < in->num_requests) {
        /* admit in arrival order while there is room */
        while (next < in->num_requests && r[next].arrival_ns <= now && nrun < in->max_seqs &&
               kv_used + per_req <= out->kv_capacity_tokens) {
            r[next].admit_ns = now;
            run[nrun++] = next++;
            kv_used += per_req;
        }
        if (kv_used > out->peak_kv_tokens)
            out->peak_kv_tokens = kv_used;
        if (nrun == 0) { /* idle until the next arrival */
            now = r[next].arrival_ns;
            continue;
        }
        infer_step s = form_step(r, run, nrun, in);
        int64_t dt = infer_step_time(m, &s, nrun).step_ns;
        if (dt < 1)
            dt = 1;
        now = ckd_add_ns(now, dt);
        out->steps++;
        busy_area += (double)nrun * (double)dt;
        busy_ns += (double)dt;
        int64_t keep = 0;
        for (int64_t i = 0; i < nrun; i++) {
            req *q = &r[run[i]];
            if (q->prefilled == in->input_len && q->step_n == 1) {
                q->generated++;
            } else if (q->step_n > 0) {
                q->prefilled += q->step_n;
                if (q->prefilled == in->input_len) {
                    q->generated = 1;
                    q->first_ns = now;
                }
            }
            if (q->generated == in->output_len) {
                q->end_ns = now;
                finished++;
                kv_used -= per_req;
            } else {
                run[keep++] = run[i];
            }
        }
        nrun = keep;
    }
    out->makespan_ns = now;
    out->mean_running = busy_ns > 0 ? busy_area / busy_ns : 0;
    out->mean_in_batch = now > 0 ? busy_area / (double)now : 0;
    double service = 0;
    for (size_t i = 0; i < n; i++)
        service += (double)(r[i].end_ns - r[i].admit_ns);
    out->mean_service_ns = service / (double)n;
    for (size_t i = 0; i < n; i++)
        v[i] = (double)(r[i].first_ns - r[i].arrival_ns);
    out->ttft = dist_of(v, n);
    for (size_t i = 0; i < n; i++)
        v[i] = (double)(r[i].end_ns - r[i].arrival_ns);
    out->e2e = dist_of(v, n);
    if (in->output_len > 1) {
        for (size_t i = 0; i < n; i++)
            v[i] = (double)(r[i].end_ns - r[i].first_ns) / (double)(in->output_len - 1);
        out->tpot = dist_of(v, n);
    }
    double per_replica = (double)in->num_requests * (double)in->output_len / ((double)now * 1e-9);
    out->tokens_per_s = per_replica * out->replicas;
    out->throughput_per_gpu = per_replica / tp;
    out->mem = infer_memory(m, out->peak_kv_tokens, in->max_num_tokens, in->max_seqs, in->max_seqs);
done:
    gsl_rng_free(rng);
    free(v);
    free(run);
    free(r);
    return rc;
}
