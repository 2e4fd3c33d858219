/* infer_static — a static batch (infer_static.h). */
#include "sim/infer/infer_static.h"

#include <string.h>

#include "sim/util/ckd.h"

#define MAX_BATCH_CAP ((int64_t)1 << 20)

int infer_static_run(infer_model *m, const infer_static_in *in, infer_static_result *out, ts_err *err)
{
    memset(out, 0, sizeof *out);
    const infer_layout *L = infer_model_layout(m);
    int tp = L->t * L->p;
    if (in->batch < 1)
        return err_set(err, TS_EINVAL, "--batch-size %lld: must be >= 1", (long long)in->batch);
    if (in->input_len < 1 || in->output_len < 1)
        return err_set(err, TS_EINVAL, "--input-len %lld, --output-len %lld: both must be >= 1",
                       (long long)in->input_len, (long long)in->output_len);
    if (in->gpus < tp || in->gpus % tp)
        return err_set(err, TS_EINVAL, "--gpus %d: must be a multiple of t x p = %d", in->gpus, tp);
    infer_step pre = infer_step_prefill(in->batch, in->input_len);
    infer_step_times pt = infer_step_time(m, &pre, in->batch);
    out->ttft_ns = pt.last_ns;
    out->prefill_ns = pt.last_ns;
    int64_t dec = 0;
    for (int64_t i = 1; i < in->output_len; i++) {
        infer_step s = infer_step_decode(in->batch, in->input_len + i);
        dec = ckd_add_ns(dec, infer_step_time(m, &s, in->batch).step_ns);
    }
    out->decode_ns = dec;
    out->tpot_ns = in->output_len > 1 ? dec / (in->output_len - 1) : 0;
    out->e2e_ns = ckd_add_ns(out->prefill_ns, dec);
    out->replicas = in->gpus / tp;
    double per_replica =
        out->e2e_ns > 0 ? (double)in->batch * (double)in->output_len / ((double)out->e2e_ns * 1e-9) : 0;
    out->tokens_per_s = per_replica * out->replicas;
    out->throughput_per_gpu = per_replica / tp;
    out->mem =
        infer_memory(m, in->batch * (in->input_len + in->output_len), in->batch * in->input_len, in->batch, in->batch);
    out->max_batch = infer_max_batch(m, in->input_len, in->output_len, MAX_BATCH_CAP);
    return TS_OK;
}
