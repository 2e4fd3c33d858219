/* infer_stream — a stream of requests served with continuous batching,
 * simulated event by event on one replica.
 *
 * Requests: num_requests, each input_len tokens in and output_len out,
 * arriving as a Poisson process of rate request_rate / replicas per second
 * on this replica (a random split of a Poisson stream over the replicas is
 * Poisson): exponential gaps drawn with GSL's MT19937 seeded with seed, so
 * a seed gives the same stream, byte for byte.
 * Scheduler (iteration-level, as vLLM's and TensorRT-LLM's in-flight
 * batching): before every step, arrived requests join the running set in
 * arrival order while it holds fewer than max_seqs sequences and the KV
 * cache has room for their input_len + output_len tokens (reserved on
 * admission, freed at their end). A step runs one decode token for every
 * running sequence past its prefill, then prefill chunks, in admission
 * order, of the sequences still prefilling, up to the token budget
 * max_num_tokens (decode tokens count against it first; the chunked
 * prefill). A sequence whose prefill ends in a step emits its first token
 * at the step's end. The step's time is infer_step_time's step_ns for the
 * mix. With nothing running the replica idles until the next arrival.
 * Per request: TTFT = first token - arrival; TPOT = (end - first token) /
 * (output_len - 1) (requests with output_len > 1); E2E = end - arrival.
 * Throughput: output tokens / the time the last request ends (from 0), times
 * the replicas; per GPU divided by gpus.
 *
 * Ownership: plain values; the run allocates and frees its own arrays.
 */
#ifndef TRAINSIM_INFER_STREAM_H
#define TRAINSIM_INFER_STREAM_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/infer/infer_cost.h"
#include "sim/infer/infer_kv.h"

typedef struct {
    double request_rate;    /* requests/s to the whole deployment, > 0 */
    int64_t num_requests;   /* >= 1 */
    unsigned long seed;     /* GSL MT19937 seed */
    int64_t input_len;      /* tokens, >= 1 */
    int64_t output_len;     /* tokens, >= 1 */
    int64_t max_seqs;       /* sequences in flight, >= 1 (--batch-size) */
    int64_t max_num_tokens; /* token budget of a step, >= 1 */
    int gpus;               /* a multiple of t x p */
} infer_stream_in;

typedef struct {
    double mean_ns, p50_ns, p99_ns; /* nearest-rank percentiles */
} infer_dist;

typedef struct {
    infer_dist ttft, tpot, e2e;
    double tokens_per_s;        /* output tokens/s of every replica together */
    double throughput_per_gpu;  /* output tokens/s per GPU */
    int64_t makespan_ns;        /* when the last request ended */
    int64_t steps;              /* steps run */
    double mean_running;        /* time-averaged sequences running while busy */
    double mean_in_batch;       /* time-averaged sequences running over [0, makespan] (Little's L) */
    double mean_service_ns;     /* mean time from admission to the end (Little's W) */
    int64_t kv_capacity_tokens; /* KV-cache tokens that fit per replica */
    int64_t peak_kv_tokens;     /* the most reserved at once */
    int replicas;
    infer_mem mem; /* memory at the KV cache's peak */
} infer_stream_result;

/* Run it. TS_EINVAL for an input out of range (naming the flag) or when one
 * request's KV cache alone does not fit; TS_ENOMEM. */
int infer_stream_run(infer_model *m, const infer_stream_in *in, infer_stream_result *out, ts_err *err);

#endif
