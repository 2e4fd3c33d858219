/* moe_flags — Megatron-LM's mixture-of-experts and multi-latent attention
 * flags in the shared flag table, and Megatron-core's rules on them.
 *
 * moe_flags_register adds the flags (names and defaults from
 * ../shared/reference/megatron_arguments.csv) to the table flags_register
 * builds, writing into c->moe and into s; moe_flags_finish, once the dense
 * layout is resolved (t, p, d, --gpus, sequence parallelism), fills the
 * derived fields (etp default t, edp, expert FFN default --ffn-hidden-size)
 * and enforces the rules Megatron-LM enforces (validate_args and
 * TransformerConfig), each as TS_EINVAL naming the flags and what would be
 * valid:
 *   - --expert-model-parallel-size > 1 needs --num-experts;
 *   - --num-experts a multiple of --expert-model-parallel-size;
 *   - --gpus a multiple of p x etp x ep (the expert layout of each stage);
 *   - t > 1 with ep > 1 needs --sequence-parallel; so does t > 1 with any
 *     experts (Megatron-core's MoELayer raises in training without it);
 *   - --moe-ffn-hidden-size a multiple of etp, the shared experts' size a
 *     multiple of t (column/row-parallel splits);
 *   - 1 <= --moe-router-topk <= --num-experts;
 *   - group-limited routing: both --moe-router-num-groups and
 *     --moe-router-group-topk, experts a multiple of the groups, group top-k
 *     <= groups, top-k <= group top-k x experts per group;
 *   - --moe-expert-capacity-factor only with the alltoall dispatcher;
 *     --moe-pad-expert-input-to-capacity only with a capacity factor;
 *   - --moe-enable-deepep only with --moe-token-dispatcher-type flex;
 *   - --moe-layer-freq: an integer N >= 1, or the pattern "([0]*K+[1]*M)"
 *     (K dense layers first) with K + M = --num-layers; other Python list
 *     expressions are refused (not modelled);
 *   - multi-latent attention: --kv-lora-rank, --qk-head-dim,
 *     --qk-pos-emb-head-dim, --v-head-dim >= 1.
 * A valid configuration is then refused (TS_EINVAL naming the flag) where
 * the simulator does not model it: flex without --moe-enable-deepep, flex
 * with --expert-tensor-parallel-size > 1, --use-torch-fsdp2 with experts
 * (--use-megatron-fsdp is modelled: the experts sharded over edp); multi-latent
 * attention without experts (with them, and group-limited routing, the
 * simulator's plan refuses them: sim/core/plan_moe.h). --moe-routing-skew (trainsim's own,
 * default MOE_ROUTING_SKEW_DEFAULT) sets the routing model's Zipf exponent;
 * it and --recompute-modules moe_act need --num-experts.
 * Router options: --moe-router-dtype fp32 (fp64 refused: no FP64 rate in
 * the GPU catalog), --moe-router-score-function softmax|sigmoid,
 * --moe-router-load-balancing-type aux_loss|seq_aux_loss|global_aux_loss|none
 * (sinkhorn refused: its iterations run until a tolerance, a count that
 * depends on the data) with --moe-aux-loss-coeff (one value; 0: no loss
 * computed, as Megatron-core), --moe-z-loss-coeff,
 * --moe-router-enable-expert-bias (needs the sigmoid score function,
 * Megatron-core's TransformerConfig rule), --moe-router-topk-scaling-factor,
 * --moe-router-pre-softmax (softmax scores only; Megatron-core ignores it
 * with sigmoid);
 * their ops are moe_block_ops'. They all need --num-experts.
 * FP8 dispatch: --moe-dispatch-fwd-dtype mxfp8 (the dispatch's tokens) and
 * --moe-combine-bwd-dtype mxfp8 (the combine's output gradients) are sent
 * in MXFP8 (moe_disp.h). ../shared/reference lists these flags' names,
 * default (bf16) and choices only, not Megatron-core's checks on them; the
 * rules enforced are what the modelled path needs: MoE (--num-experts), a
 * GPU with Blackwell's block-scaled tensor cores (the same rule as
 * --fp8-recipe mxfp8, naming the GPU), and FP8 training with --fp8-recipe
 * mxfp8 (the MXFP8 tokens are the expert GEMMs' inputs; a 16-bit expert
 * GEMM behind an MXFP8 dispatch is not modelled). Every dispatcher
 * (allgather, alltoall, flex with DeepEP) takes them.
 * --moe-expert-load FILE (trainsim's) reads measured per-expert loads
 * (moe_load.h) that replace the skew model: it needs --num-experts and is
 * refused with --moe-routing-skew or --moe-router-force-load-balancing. Parameter and FLOP
 * closed forms live in sim/model/moe.h.
 */
#ifndef TRAINSIM_MOE_FLAGS_H
#define TRAINSIM_MOE_FLAGS_H

#include "sim/config/config.h"
#include "sim/util/err.h"
#include "sim/util/opt.h"

/* --moe-routing-skew's default: fitted to
 * ../shared/reference/h100_training_calibration.csv row (c) (Qwen3-235B-A22B
 * on 256 H100s, 19.7 s per step), which does not state its routing balance;
 * before the fit the default was 0.3, an assumption. Procedure:
 * experiments/cost-fit/moe-skew.sh, bisection of the skew on the simulated
 * step to the published 19.7 s, rounded to 2 significant digits (0.1796 ->
 * 0.18: 19.78 s, +0.4%; fitted with the run's QK layernorm, --qk-layernorm in
 * the Qwen3 presets; without it the fit was 0.1963 -> 0.2). No measured
 * per-expert load is in ../shared/reference (docs/moe.md gives the busiest EP
 * rank's load at the default for the MoE presets). */
#define MOE_ROUTING_SKEW_DEFAULT 0.18

/* What the MoE flags set besides c->moe (plain values; layer_freq points
 * into the parsed argv, borrowed). */
typedef struct {
    const char *layer_freq;  /* --moe-layer-freq as given; NULL = 1 */
    const char *expert_load; /* --moe-expert-load FILE as given; NULL = none */
    double *loads;           /* that file's tokens per expert (moe_load.h), owned; c->moe.expert_load borrows it */
    int router_dtype;        /* --moe-router-dtype, MOE_ROUTER_DTYPE_NAMES index (when given) */
    int dispatch_fwd_dtype;  /* --moe-dispatch-fwd-dtype, MOE_COMM_DTYPE_NAMES index */
    int combine_bwd_dtype;   /* --moe-combine-bwd-dtype, MOE_COMM_DTYPE_NAMES index */
    bool layer_recompute;    /* --moe-layer-recompute */
} moe_flags_state;

/* Set e to Megatron-LM's MoE and MLA defaults (megatron_arguments.csv: top-2,
 * every layer MoE, EP 1, the MLA head sizes) and the default routing skew;
 * no experts. The flags and the model presets start from it. */
void moe_config_defaults(moe_config *e);

/* Add the MoE and MLA flags to t, with c->moe at Megatron-LM's defaults.
 * TS_ENOMEM. */
int moe_flags_register(moe_flags_state *s, opt_table *t, config *c, ts_err *err);

/* A model preset's experts and MLA (base: catalog_models.h's moe) into
 * c->moe for every flag of them not given (--moe-layer-freq: the preset's
 * parsed layer_freq and first_dense_layers). Before moe_flags_finish. */
void moe_flags_take(const moe_flags_state *s, const opt_table *t, const moe_config *base, config *c);

/* Resolve and check c->moe against c's resolved dense layout (see above),
 * reading --moe-expert-load's file into s->loads. TS_EINVAL naming the
 * flags or the file's row; TS_EIO / TS_ENOMEM reading the file. */
int moe_flags_finish(moe_flags_state *s, const opt_table *t, config *c, ts_err *err);

/* The rules of moe_flags_finish that depend on the layout, for a
 * configuration built without flags (the search's candidates: c resolved
 * by config_resolve, c->moe already checked for routing): the experts a
 * multiple of ep, --gpus a multiple of p x etp x ep, sequence parallelism
 * with t > 1 and ep > 1, then the refusals of what the simulator does not
 * model (the same messages). Fills c->moe.edp (and etp = t when 0). Dense
 * (no experts): TS_OK, nothing changed. TS_EINVAL naming the flags. */
int moe_flags_check_layout(config *c, ts_err *err);

/* Free what moe_flags_finish allocated (the loads of --moe-expert-load);
 * c->moe.expert_load no longer valid after. Safe on a zeroed state. */
void moe_flags_release(moe_flags_state *s);

/* --moe-layer-recompute on p, once the recompute flags are resolved (as
 * Megatron-core's TransformerConfig treats the deprecated flag): with
 * --recompute-granularity full TS_EINVAL (Megatron-core raises "Do not set
 * --moe-layer-recompute with full recompute granularity"); otherwise the
 * granularity becomes selective and moe joins the modules (the default
 * core_attn when --recompute-modules was not given). Not set: nothing. */
int moe_flags_layer_recompute(const moe_flags_state *s, parallel_config *p, ts_err *err);

/* Megatron's --moe-layer-freq: "N" (N >= 1) or "([0]*K+[1]*M)" for a model
 * of num_layers layers; sets *freq and *first_dense. TS_EINVAL naming the
 * value. */
int moe_flags_parse_layer_freq(const char *v, int num_layers, int *freq, int *first_dense, ts_err *err);

/* "allgather", "alltoall", "flex" (config_moe_dispatcher order); "probs",
 * "position" (config_moe_drop order); NULL-terminated. */
extern const char *const MOE_DISPATCHER_NAMES[];
extern const char *const MOE_DROP_POLICY_NAMES[];
/* "fp32", "fp64" (--moe-router-dtype); "softmax", "sigmoid"
 * (--moe-router-score-function, moe_config.router_score order); "aux_loss",
 * "seq_aux_loss", "global_aux_loss", "sinkhorn", "none" (config_moe_lb
 * order); NULL-terminated. */
extern const char *const MOE_ROUTER_DTYPE_NAMES[];
extern const char *const MOE_SCORE_NAMES[];
extern const char *const MOE_LB_NAMES[];
/* "bf16", "mxfp8" (--moe-dispatch-fwd-dtype, --moe-combine-bwd-dtype);
 * NULL-terminated. bf16 is the run's 16-bit activations (fp16 too). */
extern const char *const MOE_COMM_DTYPE_NAMES[];

#endif
