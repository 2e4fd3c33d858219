/* infer_cost — the time of one inference step (a prefill, a decode step, or
 * a mixed continuous-batching iteration) on a tensor- and pipeline-parallel
 * layout, from the training cost models: GEMMs and element-wise kernels
 * from sim/model/cost.h, tensor-parallel all-reduces and pipeline hand-offs
 * from sim/model/commcost.h.
 *
 * One transformer layer on one tensor-parallel rank, for a step that runs
 * T tokens through the linear layers:
 *   ln1, QKV GEMM (T x (a+2g)d/t x h), rotary (q and k), attention,
 *   projection GEMM (T x h x ad/t), all-reduce of T*h 16-bit values (t > 1),
 *   residual, ln2, FC1 GEMM (T x ffn(x2 SwiGLU)/t x h), activation,
 *   FC2 GEMM (T x h x ffn/t), all-reduce (t > 1), residual.
 * A GEMM takes launch + max(compute, memory): compute is cost_gemm_ns's time
 * at the compute precision's peak (the training-calibrated efficiency
 * curve), memory is the weights (at the weight dtype) plus the activations
 * in and out over the HBM bandwidth at cost_mem_eff's fraction. At small T
 * (decode) the weights' bytes dominate: the step is memory-bound.
 * Attention: prefill chunks run flash-attention (causal: n(c + (n+1)/2)
 * query-key pairs for a chunk of n new tokens after c cached ones,
 * 4 x pairs x d flops per head); decode reads each sequence's KV cache
 * (keys x 2 x kv_heads/t x d x kv bytes); both take max(compute, memory).
 * The first stage adds the embedding lookup (and its all-reduce at t > 1),
 * the last the final norm and the logit GEMM for the sequences that emit a
 * token. Sampling is not modelled.
 *
 * Pipeline (p stages): a step's sequences split into m = min(p, sequences)
 * micro-batches that follow each other through the stages; a step takes
 *   max(m x slowest stage, sum of stages + hand-offs)
 * (the pipeline full, or one micro-batch's trip), and its first micro-batch
 * leaves after the trip, so a static batch's prefill ends after the trip
 * plus (m-1) slowest stages.
 *
 * Constants (infer_params): the launch overhead per kernel (default the
 * cost model's, cost.c), and two efficiency overrides (0 = the cost model's
 * curves); a decode calibration (infer_calib.h, trainsim infer
 * --decode-calibration) sets launch_ns and mem_eff from measured decode
 * steps. The cost and link parameters default to the GPU kind's tables
 * (cost_params_default, commcost_params_default); a kernel calibration
 * (--calibration, calib.h) replaces them, and a calibrated-only device
 * (`--gpu cpu`) has no other source.
 *
 * Ownership: infer_model_new returns a model owned by the caller
 * (infer_model_free); it borrows nothing from its arguments. Evaluating a
 * model uses GSL lookup accelerators: one model per thread.
 */
#ifndef TRAINSIM_INFER_COST_H
#define TRAINSIM_INFER_COST_H

#include <stdint.h>

#include "sim/config/config.h"
#include "sim/model/commcost.h"
#include "sim/model/cost.h"
#include "sim/util/err.h"

/* Element types of inference tensors. */
/* INFER_FP32 is the CPU executor's precision: only on a calibrated-only
 * device (`--gpu cpu`), whose tables are fitted from fp32 samples. */
typedef enum {
    INFER_FP16 = 0,
    INFER_BF16,
    INFER_FP8,
    INFER_INT8,
    INFER_INT4,
    INFER_FP32,
    INFER_DTYPE_COUNT
} infer_dtype;

/* NULL-terminated names, indexed by infer_dtype: "fp16" "bf16" "fp8" "int8" "int4" "fp32". */
extern const char *const INFER_DTYPE_NAMES[];

/* Bits per element: 16, 16, 8, 8, 4, 32. */
int infer_dtype_bits(infer_dtype d);

/* Precision of one deployment. */
typedef struct {
    infer_dtype act;    /* activations and GEMM compute: fp16, bf16 or fp8 (fp32: calibrated-only device) */
    infer_dtype weight; /* weights of the transformer layers: act, int8/int4 (weight-only), or fp8 with act fp8 */
    infer_dtype kv;     /* KV cache: fp16, bf16, fp8 or int8 */
} infer_prec;

/* Check a precision against a GPU: the combinations above; FP8 (act, weight
 * or KV cache) only on a GPU with FP8 tensor cores (gpu.fp8_tflops > 0);
 * a calibrated-only device runs fp32 throughout (act, weights, KV cache)
 * and nothing else, a GPU kind never fp32.
 * TS_EINVAL naming the flag and the GPU. */
int infer_prec_check(const infer_prec *p, const gpu_spec *gpu, ts_err *err);

/* "fp16", "fp8/kv-fp8", "fp16/w-int4/kv-int8": act, then what differs. */
void infer_prec_name(const infer_prec *p, char *buf, size_t n);

/* The overridable constants (see above). */
typedef struct {
    double launch_ns; /* per kernel; < 0: the cost model's launch_ns */
    double mem_eff;   /* achievable fraction of HBM bandwidth; 0: cost_mem_eff's curve */
    double gemm_eff;  /* achievable fraction of the GEMM peak; 0: cost_gemm_eff's curve */
    /* launch_ns and mem_eff were fitted on measured decode steps of up to
     * decode_rows sequences (a decode calibration). In a pure decode step a
     * GEMM of at most decode_rows rows takes launch + bytes at mem_eff:
     * the fitted line, which measured those GEMMs, their compute included.
     * A larger one (or any, when decode_rows is 0) takes launch + max(flops
     * at the GEMM curve's plateau efficiency, bytes at mem_eff): the
     * curve's low-intensity knots are memory-bound times of other shapes,
     * which the fitted bandwidth replaces, and only a GEMM compute-bound at
     * full efficiency may take longer. Prefill and mixed steps keep the
     * curve. */
    bool decode_line;
    double decode_rows;
    /* Borrowed, copied by infer_model_new; NULL: the GPU kind's defaults
     * (required for a calibrated-only device). */
    const cost_params *cost;
    const commcost_params *link;
} infer_params;

/* Defaults: launch_ns -1, mem_eff 0, gemm_eff 0, decode_line false, decode_rows 0, cost and link NULL. */
infer_params infer_params_default(void);

/* What one step runs on the whole replica (all sequences of the step). */
typedef struct {
    double tokens;        /* tokens through the linear layers */
    double logits;        /* sequences emitting a token (logit GEMM rows) */
    double dec_seqs;      /* decode sequences (one query each) */
    double dec_keys;      /* sum of their context lengths, tokens */
    double pre_pairs;     /* prefill: sum over chunks of n(c + (n+1)/2) query-key pairs */
    double pre_keys;      /* prefill: sum over chunks of c + n (KV read/written), tokens */
    double pre_chunk_len; /* prefill: the mean chunk length n (attention GEMM shape), tokens; 0: none */
} infer_step;

/* The step of a static batch: prefill of b sequences of in tokens
 * (each emits its first token). */
infer_step infer_step_prefill(int64_t b, int64_t in);
/* One decode step of b sequences whose context holds ctx tokens each. */
infer_step infer_step_decode(int64_t b, int64_t ctx);

typedef struct infer_model infer_model;

/* Build the model of c's shape (model flags, t = c->par.tp, p = c->par.pp,
 * the GPU kind and topology's GPUs per node) at precision pr. Layers are
 * split over the p stages evenly, the first stages taking one more when p
 * does not divide them. TS_EINVAL for a bad precision, a shape the layout
 * cannot split (heads % t, query groups vs t, ffn % t, vocabulary % t, p >
 * layers), or a GPU with no default tables; TS_ENOMEM. */
int infer_model_new(const config *c, const infer_prec *pr, const infer_params *ip, infer_model **out, ts_err *err);
void infer_model_free(infer_model *m); /* NULL allowed */

/* Time of one stage (0 .. p-1) for the share s of a step, ns. */
int64_t infer_stage_ns(infer_model *m, int stage, const infer_step *s);

/* Hand-off from stage s to s+1 of tokens activations, ns. */
int64_t infer_handoff_ns(const infer_model *m, int stage, double tokens);

typedef struct {
    int64_t step_ns;  /* the whole step (pipeline formula above) */
    int64_t first_ns; /* when the first micro-batch leaves the last stage */
    int64_t last_ns;  /* when the last micro-batch leaves it (a static prefill's end) */
    int micro_batches;
} infer_step_times;

/* Times of a step of seqs sequences (split into min(p, seqs) micro-batches). */
infer_step_times infer_step_time(infer_model *m, const infer_step *s, int64_t seqs);

/* Layout and sizes the model was built with. */
typedef struct {
    int t, p;
    int layers[SCHED_LAYOUT_MAX_STAGES]; /* transformer layers per stage */
    int64_t kv_heads_rank;               /* KV heads a rank holds: g/t, or 1 when t > g */
    int64_t head_dim;                    /* d */
    double launch_ns;                    /* per kernel */
    double hbm_bytes;                    /* GPU memory, bytes */
} infer_layout;

const infer_layout *infer_model_layout(const infer_model *m);
const config *infer_model_config(const infer_model *m); /* borrowed copy (topology not owned) */
const infer_prec *infer_model_prec(const infer_model *m);

#endif
