/* infer_static — a static batch: the prefill of the whole batch (every
 * sequence emits its first token when it ends), then output_len - 1 decode
 * steps, the context growing by one token per step, until the outputs end.
 *
 *   TTFT  = the prefill's end (infer_step_time's last_ns)
 *   TPOT  = the mean decode step (0 when output_len = 1)
 *   E2E   = TTFT + the decode steps
 *   output tokens/s = batch x output_len / E2E per replica; replicas =
 *   gpus / (t x p); per GPU = per replica / (t x p).
 * Memory: infer_memory with batch x (input + output) tokens of KV cache and
 * the prefill as the widest step; the largest batch that fits alongside.
 */
#ifndef TRAINSIM_INFER_STATIC_H
#define TRAINSIM_INFER_STATIC_H

#include <stdint.h>

#include "sim/infer/infer_cost.h"
#include "sim/infer/infer_kv.h"

typedef struct {
    int64_t batch;      /* sequences */
    int64_t input_len;  /* tokens */
    int64_t output_len; /* tokens, >= 1 */
    int gpus;           /* GPUs of the deployment (a multiple of t x p) */
} infer_static_in;

typedef struct {
    int64_t ttft_ns, tpot_ns, e2e_ns;
    int64_t prefill_ns, decode_ns; /* e2e = prefill + decode */
    double tokens_per_s;           /* output tokens/s of every replica together */
    double throughput_per_gpu;     /* output tokens/s per GPU */
    int replicas;
    infer_mem mem;
    int64_t max_batch; /* largest batch that fits (capped at 1 << 20) */
} infer_static_result;

/* Run it. TS_EINVAL when batch, lengths or gpus are out of range (naming
 * the flag). A batch that does not fit is still timed (out->mem.fits false). */
int infer_static_run(infer_model *m, const infer_static_in *in, infer_static_result *out, ts_err *err);

#endif
