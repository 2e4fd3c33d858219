/* gpt — a GPT model in fp32, one pipeline stage at a time (llm.c style).
 *
 * Model: token embedding + learned positions; L pre-LN transformer layers
 * (LayerNorm, QKV projection, causal multi-head attention, output
 * projection, residual; LayerNorm, MLP h -> ffn -> h with GELU (tanh),
 * residual); final LayerNorm; an UNTIED output layer [V, C] (no bias) and
 * softmax cross-entropy, averaged over tokens. No dropout.
 *
 * Llama-architecture options (gpt_dims, Megatron-LM semantics): RMSNorm for
 * every norm; SwiGLU MLP (FC1 [2F, C] holding the gate rows then the up
 * rows, out = silu(gate) * up, FC2 [C, F]); no linear biases; grouped-query
 * attention (QKV [(NH + 2G) hs, C]: the NH query heads, then G key heads,
 * then G value heads; query head h uses key/value head h / (NH/G)); rotary
 * position embeddings (no wpe; q and k rotated after the QKV projection,
 * base 10000, Megatron's default --rotary-base). With qk_norm (any
 * architecture) the q and k heads are normalised before rope.
 *
 * A stage holds layers [first_layer, first_layer + num_layers) and, on the
 * first stage, the embedding, on the last, the final LayerNorm, the output
 * layer and the loss. The whole model on one process is one stage with both.
 *
 * Tensor parallelism (Megatron-LM's splits) is expressed here, over the
 * comm's COMM_TP group of t ranks:
 *   QKV [3C, C] and FC1 [F, C]: column-parallel (rows split; QKV per head:
 *     rank r holds heads r*NH/t .. (r+1)*NH/t - 1 of q, k and v; with
 *     grouped-query attention, as Megatron-core, query groups r*G/t ..
 *     (r+1)*G/t - 1 with their query heads; SwiGLU's FC1 per half: rank r
 *     holds rows r*F/t .. of the gate and of the up projection, so its
 *     local [2F/t, C] is its gate rows then its up rows, as Megatron's);
 *   attention output [C, C] and FC2 [C, F]: row-parallel (columns split),
 *     their partial outputs summed by an all-reduce (Megatron's "g"), their
 *     biases applied once after the sum; the backward all-reduces the input
 *     gradient of the column-parallel GEMMs (Megatron's "f").
 *   With sequence parallelism (sp) the LayerNorms, residuals and the
 *     pipeline tensors hold N/t rows (rank r: rows r*N/t ..); "f" becomes an
 *     all-gather forward / reduce-scatter backward and "g" a reduce-scatter
 *     forward / all-gather backward. The LayerNorm (and, on the first and
 *     last stage, embedding and final LayerNorm) gradients are then partial
 *     per rank: gpt_stage_reduce_grads() all-reduces them over COMM_TP.
 *   Embedding, final LayerNorm and output layer are replicated over the t
 *   ranks (not vocabulary-parallel): every tensor rank computes the full
 *   logits.
 *
 * MoE layers (exec/core/moe.h; Megatron-core's MoE MLP without shared
 * experts): layer i is a MoE layer when num_experts > 0, i >=
 * moe_first_dense and (i - moe_first_dense) % moe_layer_freq == 0 (the rule
 * of sim/model/moe.h's moe_layer_is_moe, which the unit test compares). Its
 * MLP (FC1, FC2 and their biases: absent from the flat parameters) is
 * replaced by a router, top-k routing with capacity / dropless / forced
 * balance, and E experts of the model's activation (GELU, or SwiGLU with
 * --swiglu) of moe_ffn each, on the LayerNorm's output rows of this rank
 * (N, or N/t with sp: the tokens stay sequence-parallel, the experts are not
 * split: expert tensor parallelism 1). Expert parallelism folds into tensor
 * x data parallelism through the comm's moe_xc / moe_edp (comm.h): this
 * rank holds the E/ep experts of its EP rank; the router is replicated
 * (its gradient, partial over the tensor ranks with sp, summed over COMM_TP
 * and COMM_DP as the other replicated weights), the expert gradients are
 * summed over the EDP group. The MoE weights live in the layer (host memory:
 * the CPU backend), outside the flat parameters, with their own Adam
 * moments; the auxiliary loss's gradient is scaled like the token losses
 * (1 / micro-batches of the global batch). With context parallelism
 * the MoE layer runs on the rank's N rows (its chunks) and expert
 * parallelism folds into tensor x context x data parallelism. With
 * recompute_moe the layer's routed state is freed after its forward and
 * rebuilt by rerunning the forward in the backward. Refused with
 * MoE: full recomputation, the distributed optimizer, t > 1 without sp, the
 * auxiliary loss with t > 1 or cp > 1.
 *
 * Context parallelism (the comm's COMM_CP group of cp ranks, flash
 * attention only): each rank holds T/cp positions of every sequence, its
 * two chunks of cp_split.h (rows b*T/cp + i, position cp_global_pos(i));
 * attention runs cp_attn's ring over the group, every other op is per row.
 * The stage takes the whole sequences' tokens and targets and picks its
 * rows; its loss is the sum over its rows; its gradients are partial over
 * COMM_CP, summed with the data-parallel ones (COMM_DP holds both).
 *
 * Backward is split for zero-bubble schedules: gpt_backward_input() computes
 * the gradient w.r.t. the stage input and saves what the weight gradients
 * need; gpt_backward_weight() then accumulates the parameter gradients.
 * gpt_backward() does both, layer by layer, without keeping the saved
 * gradients (what a plain "B" action runs).
 *
 * Parameters are initialised from their index in the full (t = 1) model and
 * a seed, so every layout's shards are slices of the same model.
 *
 * Ownership: a stage owns its parameters, gradients, Adam moments and
 * scratch (backend memory, counted by category); the backend and comm are
 * borrowed and must outlive it. gpt_acts (one micro-batch in flight) are
 * created and freed by the caller through the stage.
 */
#ifndef TRAINSIM_EXEC_GPT_H
#define TRAINSIM_EXEC_GPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exec/core/backend.h"
#include "exec/core/comm.h"
#include "exec/core/moe.h"
#include "sim/util/err.h"

/* Rotary base: Megatron-LM's --rotary-base default (megatron_arguments.csv). */
#define GPT_ROPE_BASE 10000.0f

typedef struct {
    int vocab;  /* V, --padded-vocab-size */
    int seq;    /* T, --seq-length */
    int hidden; /* C, --hidden-size */
    int heads;  /* NH, --num-attention-heads */
    int ffn;    /* F, --ffn-hidden-size */
    int layers; /* L, --num-layers (whole model) */
    int batch;  /* B, --micro-batch-size (sequences per micro-batch) */
    /* Llama-architecture options; all zero is the GPT model above. */
    int groups;     /* G, --num-query-groups (0 or heads: multi-head attention) */
    bool rmsnorm;   /* --normalization RMSNorm: the norms have a weight and no bias */
    bool swiglu;    /* --swiglu: FC1 is [2F, C] (gate | up), silu(gate) * up */
    bool no_bias;   /* --disable-bias-linear: no QKV, projection, FC1, FC2 biases */
    bool rope;      /* --position-embedding-type rope: no wpe; q, k rotated */
    bool qk_norm;   /* --qk-layernorm: the model's norm (LayerNorm, or RMSNorm with rmsnorm) over the head size
                       of each query and key head after the QKV projection, before rope (Megatron-core's
                       q_layernorm, k_layernorm); weights [hs] each, replicated over the tensor ranks (their
                       gradients summed over COMM_TP, with or without sp); the norm's input saved */
    bool tie_embed; /* the output layer is the word embedding (Megatron's default; false:
                       --untie-embeddings-and-output-weights). A last stage without the
                       embedding holds a copy (gpt_stage_tied_grad) */
    /* Full recomputation (--recompute-granularity full), per stage: a
     * recomputed layer keeps only its group's input (the previous layer's
     * output) through the forward; the backward reruns the group's forward
     * and then goes back through it. */
    int recompute;        /* GPT_RC_NONE, GPT_RC_UNIFORM, GPT_RC_BLOCK (--recompute-method) */
    bool recompute_attn;  /* --recompute-granularity selective (core_attn): the attention scores are not kept
                             per micro-batch; the backward recomputes them from the saved q, k */
    bool recompute_moe;   /* --moe-layer-recompute / --recompute-modules moe (selective): a MoE layer's MLP
                             keeps only its input (ln2's output) per micro-batch; the backward reruns its
                             forward (router, dispatch, experts, combine) before going back through it */
    bool dist_optim;      /* --use-distributed-optimizer: gradients reduce-scattered over COMM_DP, Adam on
                             this rank's shard (its moments only), parameters all-gathered */
    int recompute_layers; /* --recompute-num-layers: uniform, layers per group from the stage's first (0: 1);
                             block, the stage's first so many layers, each alone (0: all) */
    /* Mixture of experts (see "MoE layers" above); num_experts 0: every layer dense. */
    int num_experts;        /* E, --num-experts */
    int moe_topk;           /* k, --moe-router-topk */
    int moe_ffn;            /* --moe-ffn-hidden-size, per expert */
    int moe_layer_freq;     /* --moe-layer-freq N (>= 1) */
    int moe_first_dense;    /* the first K layers dense (--moe-layer-freq "([0]*K+[1]*M)") */
    double moe_capacity;    /* --moe-expert-capacity-factor; <= 0: dropless */
    bool moe_force_balance; /* --moe-router-force-load-balancing */
    double moe_aux_coeff;   /* --moe-aux-loss-coeff (0: no auxiliary loss) */
    bool flash;             /* --attention-backend flash or fused (the simulator's resolved backend): the backend's
                               attention_flash_* (cp_attn.h's recurrence) saves the log-sum-exp [B, NH/t, T/cp]
                               instead of the scores [B, NH/t, T, T], and its backward recomputes the scores;
                               false: unfused (the scores saved) */
} gpt_dims;

enum { GPT_RC_NONE = 0, GPT_RC_UNIFORM, GPT_RC_BLOCK };

/* Parameter tensors, in the order of the full model's flat layout:
 * wte, wpe, then per layer ln1w .. fcprojb, then lnfw, lnfb, wout. */
typedef enum {
    GP_WTE = 0,
    GP_WPE,
    GP_LN1W,
    GP_LN1B,
    GP_QKVW,
    GP_QKVB,
    GP_QLNW, /* --qk-layernorm: the query heads' norm weight [hs] and bias (LayerNorm) */
    GP_QLNB,
    GP_KLNW, /* the key heads' */
    GP_KLNB,
    GP_PROJW,
    GP_PROJB,
    GP_LN2W,
    GP_LN2B,
    GP_FCW,
    GP_FCB,
    GP_FCPROJW,
    GP_FCPROJB,
    GP_LNFW,
    GP_LNFB,
    GP_WOUT,
    GP_NKINDS
} gpt_pkind;
#define GP_LAYER_FIRST GP_LN1W
#define GP_LAYER_COUNT (GP_FCPROJB - GP_LN1W + 1)

typedef struct {
    gpt_pkind kind;
    int layer;       /* global layer index; -1 outside layers */
    size_t offset;   /* into the stage's params/grads/m/v, floats */
    size_t n;        /* local (sharded) element count */
    bool tp_partial; /* gradient is a partial sum over COMM_TP (sp only; the q/k norms' always) */
    bool copy;       /* the last stage's copy of the tied word embedding (not exported) */
} gpt_tensor;

/* Profiling hook: called around each op (GEMM, kernel, collective) with its
 * name ("qkv", "attn", "tp_allreduce", ...) and global layer (-1 outside
 * layers); end = false at start, true at end. */
typedef void (*gpt_prof_fn)(void *ud, const char *op, int layer, bool end);

/* The op of gpt_forward that copies the micro-batch's token ids (first
 * stage) or targets (last stage; with cp > 1 the rank's rows picked first)
 * to the device: the executor's data step (runtime.h rt_data_step). */
#define GPT_OP_DATA "data"

typedef struct gpt_stage gpt_stage;
typedef struct gpt_acts gpt_acts;

/* Check dims against t (and sp): heads, hidden, ffn divisible by t; hidden
 * divisible by heads; with sp, batch*seq divisible by t; groups dividing
 * heads and divisible by t; an even head size with rope. */
int gpt_dims_check(const gpt_dims *d, int t, bool sp, ts_err *err);

/* Query groups G (heads when d->groups is 0). */
int gpt_dims_groups(const gpt_dims *d);
/* Whether any Llama-architecture option is set (then the model needs the
 * backend's Llama kernels; KV-cache inference does not run it). */
bool gpt_dims_llama(const gpt_dims *d);

/* Parameters of the full (t = 1) model's flat layout (without the MoE
 * layers' routers and experts: gpt_moe_num_params). */
size_t gpt_num_params(const gpt_dims *d);

/* Whether global layer `layer` is a MoE layer (see MoE layers above). */
bool gpt_layer_is_moe(const gpt_dims *d, int layer);
/* Router and expert parameters of all MoE layers (0 for a dense model). */
size_t gpt_moe_num_params(const gpt_dims *d);

/* Create a stage; tensor rank and size come from cm. seed picks the
 * initial weights. */
int gpt_stage_create(const gpt_dims *d, int first_layer, int num_layers, bool embed, bool head, bool sp, uint64_t seed,
                     backend *be, comm *cm, gpt_stage **out, ts_err *err);
void gpt_stage_free(gpt_stage *st);
void gpt_stage_set_prof(gpt_stage *st, gpt_prof_fn fn, void *ud);

/* The MoE layer of global layer `layer` on this stage (borrowed), or NULL
 * (dense, or not on this stage). */
moe_layer *gpt_stage_moe(gpt_stage *st, int layer);

/* The stage's global layers [*first, *first + *count). */
void gpt_stage_layers(const gpt_stage *st, int *first, int *count);

/* Rows of a pipeline tensor (stage input/output): N = B*T/cp, or N/t with sp. */
size_t gpt_stage_io_floats(const gpt_stage *st);
size_t gpt_stage_num_params(const gpt_stage *st);
const gpt_tensor *gpt_stage_tensors(const gpt_stage *st, int *count);
float *gpt_stage_params(gpt_stage *st);
float *gpt_stage_grads(gpt_stage *st);

/* Activations of one micro-batch (counted as activations). */
int gpt_acts_create(gpt_stage *st, gpt_acts **out, ts_err *err);
void gpt_acts_free(gpt_stage *st, gpt_acts *a);

/* Forward of one micro-batch. tokens, targets: host arrays of B*T ids in
 * [0, V) (tokens used on the first stage, targets on the last; others may
 * be NULL). x_in: stage input (io floats, backend memory; NULL on the first
 * stage); copied. y: stage output (io floats; unused on the last stage).
 * On the last stage *loss_sum (may be NULL) gets the sum of the B*T token
 * losses. */
int gpt_forward(gpt_stage *st, gpt_acts *a, const int *tokens, const int *targets, const float *x_in, float *y,
                double *loss_sum, ts_err *err);

/* Input-gradient part of the backward. dy: gradient w.r.t. the stage output
 * (io floats; NULL on the last stage, whose loss gradient is loss_scale per
 * token loss). dx: gradient w.r.t. the stage input, written (io floats;
 * unused on the first stage). */
int gpt_backward_input(gpt_stage *st, gpt_acts *a, const float *dy, float loss_scale, float *dx, ts_err *err);
/* Weight-gradient part: grads += what a's saved gradients give. Must follow
 * gpt_backward_input on the same a. */
int gpt_backward_weight(gpt_stage *st, gpt_acts *a, ts_err *err);
/* Both, fused (no saved gradients kept). */
int gpt_backward(gpt_stage *st, gpt_acts *a, const float *dy, float loss_scale, float *dx, ts_err *err);

/* Tied word embedding split over stages: the gradient of this stage's
 * part of it (the first stage's wte, or the last stage's copy; *n = V*C
 * floats), which the runtime sums between the two stages before the
 * optimizer (Megatron's embedding all-reduce); NULL when the stage holds
 * neither or both (nothing to sum) or the output layer is untied. */
float *gpt_stage_tied_grad(gpt_stage *st, size_t *n); /* borrowed: the stage's gradient buffer */

/* Zero the gradients. */
void gpt_stage_zero_grads(gpt_stage *st);
/* All-reduce the tp_partial gradients over COMM_TP. Then, if the
 * comm has d > 1, all-reduce every gradient over COMM_DP (sum; the loss
 * scale already divides by the global token count); with dist_optim,
 * reduce-scatter them instead: only this rank's shard (gpt_stage_grad_shard)
 * holds the sum afterwards. */
int gpt_stage_reduce_grads(gpt_stage *st, ts_err *err);
/* AdamW step `step` (1-based) on every parameter of the stage; with
 * dist_optim, on this rank's shard, then the parameters all-gathered over
 * COMM_DP. */
int gpt_stage_adam(gpt_stage *st, float lr, float b1, float b2, float eps, float wd, int step, ts_err *err);
/* The range [*lo, *hi) of the stage's flat parameters whose gradients this
 * rank holds reduced and updates: all of them, or its COMM_DP shard (the
 * flat buffer padded to d equal shards; rank q holds shard q) with
 * dist_optim. */
void gpt_stage_grad_shard(const gpt_stage *st, size_t *lo, size_t *hi);

/* Global offset of the first element of (kind, layer) in the full model's
 * flat layout and its full element count. */
size_t gpt_full_offset(const gpt_dims *d, gpt_pkind kind, int layer, size_t *n_full);
/* Write the stage's parameters (grads = false) or gradients (grads = true)
 * into full, a host array of gpt_num_params() floats, at their full-model
 * positions. Replicated tensors are written only if write_replicated. */
int gpt_stage_export(gpt_stage *st, bool grads, bool write_replicated, float *full, ts_err *err);
/* The same for the stage's flat elements [lo, hi) only. */
int gpt_stage_export_range(gpt_stage *st, bool grads, bool write_replicated, size_t lo, size_t hi, float *full,
                           ts_err *err);

#endif
