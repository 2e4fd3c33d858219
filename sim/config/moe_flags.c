/* moe_flags — MoE and MLA flags and Megatron-core's rules on them
 * (moe_flags.h). */
#include "sim/config/moe_flags.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/config/moe_load.h"

const char *const MOE_DISPATCHER_NAMES[] = {"allgather", "alltoall", "flex", NULL};
const char *const MOE_DROP_POLICY_NAMES[] = {"probs", "position", NULL};
const char *const MOE_ROUTER_DTYPE_NAMES[] = {"fp32", "fp64", NULL};
const char *const MOE_SCORE_NAMES[] = {"softmax", "sigmoid", NULL};
const char *const MOE_LB_NAMES[] = {"aux_loss", "seq_aux_loss", "global_aux_loss", "sinkhorn", "none", NULL};
const char *const MOE_COMM_DTYPE_NAMES[] = {"bf16", "mxfp8", NULL};

#define ADD(...)                                                                                                       \
    do {                                                                                                               \
        if ((rc = opt_add(t, &(opt_spec){__VA_ARGS__}, err)))                                                          \
            return rc;                                                                                                 \
    } while (0)

void moe_config_defaults(moe_config *e)
{
    memset(e, 0, sizeof *e);
    /* Megatron-LM's defaults (../shared/reference/megatron_arguments.csv) */
    e->topk = 2;
    e->layer_freq = 1;
    e->ep = 1;
    e->mla_kv_lora_rank = 32;
    e->mla_qk_head_dim = 128;
    e->mla_qk_pos_emb_head_dim = 64;
    e->mla_v_head_dim = 128;
    e->routing_skew = MOE_ROUTING_SKEW_DEFAULT;
}

int moe_flags_register(moe_flags_state *s, opt_table *t, config *c, ts_err *err)
{
    int rc;
    moe_config *e = &c->moe;
    memset(s, 0, sizeof *s);
    moe_config_defaults(e);
    if ((rc = opt_section(t,
                          "Mixture of experts (allgather, alltoall and DeepEP dispatchers, ETP), multi-latent "
                          "attention, multi-token prediction",
                          err)))
        return rc;
    ADD(.name = "--num-experts", .type = OPT_INT, .target = &e->num_experts, .min = 1, .max = 1 << 20,
        .unit = "experts", .defval = "none (dense)", .help = "routed experts per MoE layer");
    ADD(.name = "--moe-router-topk", .type = OPT_INT, .target = &e->topk, .min = 1, .max = 1 << 20, .unit = "experts",
        .defval = "2", .help = "experts each token is routed to");
    ADD(.name = "--moe-ffn-hidden-size", .type = OPT_INT, .target = &e->ffn_hidden_size, .min = 1, .max = 1 << 26,
        .unit = "elements", .defval = "--ffn-hidden-size", .help = "FFN hidden size of one routed expert");
    ADD(.name = "--moe-shared-expert-intermediate-size", .type = OPT_INT, .target = &e->shared_ffn_hidden_size,
        .min = 1, .max = 1 << 26, .unit = "elements", .defval = "none",
        .help = "FFN hidden size of the shared experts together (every token goes through them)");
    ADD(.name = "--moe-shared-expert-overlap", .type = OPT_BOOL, .target = &e->shared_overlap,
        .help = "run the shared experts on a side stream beside the dispatch all-to-all (forward) and the combine's "
                "backward all-to-all (alltoall or flex dispatcher)");
    ADD(.name = "--moe-layer-freq", .type = OPT_STRING, .target = &s->layer_freq, .metavar = "N|PATTERN", .defval = "1",
        .help = "N: layers 0, N, 2N, ... are MoE; ([0]*K+[1]*M): the first K layers dense, the rest MoE");
    ADD(.name = "--moe-router-num-groups", .type = OPT_INT, .target = &e->router_num_groups, .min = 1, .max = 1 << 20,
        .unit = "groups", .defval = "none",
        .help = "group-limited routing: expert groups (one per node or device group)");
    ADD(.name = "--moe-router-group-topk", .type = OPT_INT, .target = &e->router_group_topk, .min = 1, .max = 1 << 20,
        .unit = "groups", .defval = "none", .help = "groups each token may be routed to");
    ADD(.name = "--moe-expert-capacity-factor", .type = OPT_DOUBLE, .target = &e->capacity_factor, .min = 1e-6,
        .max = 1e6, .unit = "x mean load", .defval = "none (dropless)",
        .help = "capacity of an expert as a multiple of the mean tokens per expert (tokens past it are dropped)");
    ADD(.name = "--moe-pad-expert-input-to-capacity", .type = OPT_BOOL, .target = &e->pad_to_capacity,
        .help = "pad every expert's input to its capacity (needs --moe-expert-capacity-factor)");
    ADD(.name = "--moe-token-drop-policy", .type = OPT_ENUM, .target = &e->drop_policy,
        .enum_names = MOE_DROP_POLICY_NAMES, .defval = "probs",
        .help = "which tokens an over-capacity expert drops: lowest router probabilities, or latest positions");
    ADD(.name = "--moe-router-force-load-balancing", .type = OPT_BOOL, .target = &e->force_load_balancing,
        .help = "route tokens evenly over the experts (benchmarking)");
    ADD(.name = "--moe-routing-skew", .type = OPT_DOUBLE, .target = &e->routing_skew, .min = 0, .max = 100,
        .unit = "Zipf exponent", .defval = "0.18",
        .help = "trainsim's routing model when balance is not forced: expert popularity follows Zipf's law with "
                "this exponent over a fixed random order of the experts (0 = balance; the default is fitted to "
                "h100_training_calibration.csv row (c), which does not state its routing balance; before the fit "
                "it was 0.3, an assumption: docs/moe.md)");
    ADD(.name = "--moe-expert-load", .type = OPT_STRING, .target = &s->expert_load, .metavar = "FILE",
        .unit = "routed token-slots per expert", .defval = "none (the --moe-routing-skew model)",
        .help = "measured per-expert loads (CSV layer,expert,tokens, e.g. trainexec --moe-load-out) replacing the "
                "routing model: the busiest EP rank's load follows from them (docs/moe.md)");
    ADD(.name = "--moe-layer-recompute", .type = OPT_BOOL, .target = &s->layer_recompute,
        .help = "checkpoint each whole MoE layer (router, dispatch, experts, combine, shared experts): its forward "
                "re-run in the backward, only its input kept; Megatron-core's deprecated form of "
                "--recompute-granularity selective with moe added to --recompute-modules (default core_attn)");
    ADD(.name = "--moe-router-dtype", .type = OPT_ENUM, .target = &s->router_dtype,
        .enum_names = MOE_ROUTER_DTYPE_NAMES, .defval = "the run's dtype",
        .help = "the router GEMM and its input in this precision (fp64 not modelled)");
    ADD(.name = "--moe-router-score-function", .type = OPT_ENUM, .target = &e->router_score,
        .enum_names = MOE_SCORE_NAMES, .defval = "softmax", .help = "router scores: softmax or sigmoid (DeepSeek-V3)");
    ADD(.name = "--moe-router-load-balancing-type", .type = OPT_ENUM, .target = &e->lb_type, .enum_names = MOE_LB_NAMES,
        .defval = "aux_loss",
        .help = "load-balancing loss (computed when --moe-aux-loss-coeff > 0; sinkhorn not modelled)");
    ADD(.name = "--moe-aux-loss-coeff", .type = OPT_DOUBLE, .target = &e->aux_loss_coeff, .min = 0, .max = 1e6,
        .unit = "coefficient", .defval = "0 (no auxiliary loss)",
        .help = "load-balancing loss coefficient: > 0 adds the loss's ops to every MoE layer");
    ADD(.name = "--moe-z-loss-coeff", .type = OPT_DOUBLE, .target = &e->z_loss_coeff, .min = 0, .max = 1e6,
        .unit = "coefficient", .defval = "none", .help = "router z-loss coefficient: adds a logsumexp over the logits");
    ADD(.name = "--moe-router-enable-expert-bias", .type = OPT_BOOL, .target = &e->expert_bias,
        .help = "aux-loss-free balancing: a per-expert bias added to the scores before top-k (needs sigmoid)");
    ADD(.name = "--moe-router-topk-scaling-factor", .type = OPT_DOUBLE, .target = &e->topk_scaling, .min = 1e-9,
        .max = 1e6, .unit = "x", .defval = "none", .help = "scale of the top-k probabilities (DeepSeek-V3: 2.5)");
    ADD(.name = "--moe-router-pre-softmax", .type = OPT_BOOL, .target = &e->pre_softmax,
        .help = "softmax over all experts before the top-k (the same bytes: the order only)");
    ADD(.name = "--moe-token-dispatcher-type", .type = OPT_ENUM, .target = &e->dispatcher,
        .enum_names = MOE_DISPATCHER_NAMES, .defval = "allgather",
        .help = "token dispatch: all-gather/reduce-scatter, all-to-all, or flex (DeepEP)");
    ADD(.name = "--moe-enable-deepep", .type = OPT_BOOL, .target = &e->enable_deepep,
        .help = "DeepEP kernels for the flex dispatcher (needs --moe-token-dispatcher-type flex)");
    ADD(.name = "--moe-dispatch-fwd-dtype", .type = OPT_ENUM, .target = &s->dispatch_fwd_dtype,
        .enum_names = MOE_COMM_DTYPE_NAMES, .defval = "bf16",
        .help = "the dispatch's tokens sent in 16 bits or MXFP8 (quantized before the send; needs --fp8-recipe "
                "mxfp8)");
    ADD(.name = "--moe-combine-bwd-dtype", .type = OPT_ENUM, .target = &s->combine_bwd_dtype,
        .enum_names = MOE_COMM_DTYPE_NAMES, .defval = "bf16",
        .help = "the combine's output gradients sent in 16 bits or MXFP8 in the backward (needs --fp8-recipe "
                "mxfp8)");
    ADD(.name = "--moe-grouped-gemm", .type = OPT_BOOL, .target = &e->grouped_gemm,
        .help = "one grouped GEMM over the local experts instead of one GEMM per expert");
    ADD(.name = "--moe-permute-fusion", .type = OPT_BOOL, .target = &e->permute_fusion,
        .help = "fused permute/unpermute kernels");
    ADD(.name = "--expert-model-parallel-size", .type = OPT_INT, .target = &e->ep, .min = 1, .max = 1 << 20,
        .unit = "GPUs", .defval = "1", .help = "expert-parallel size ep (experts split over ep ranks)");
    ADD(.name = "--expert-tensor-parallel-size", .type = OPT_INT, .target = &e->etp, .min = 1, .max = 65536,
        .unit = "GPUs", .defval = "t", .help = "tensor-parallel size inside each expert");
    ADD(.name = "--multi-latent-attention", .type = OPT_BOOL, .target = &e->mla,
        .help = "multi-latent attention (DeepSeek-V2/V3: low-rank compressed queries, keys and values)");
    ADD(.name = "--q-lora-rank", .type = OPT_INT, .target = &e->mla_q_lora_rank, .min = 1, .max = 1 << 24,
        .unit = "elements", .defval = "none (queries uncompressed)", .help = "MLA: query compression rank");
    ADD(.name = "--kv-lora-rank", .type = OPT_INT, .target = &e->mla_kv_lora_rank, .min = 1, .max = 1 << 24,
        .unit = "elements", .defval = "32", .help = "MLA: key/value compression rank");
    ADD(.name = "--qk-head-dim", .type = OPT_INT, .target = &e->mla_qk_head_dim, .min = 1, .max = 1 << 20,
        .unit = "elements", .defval = "128", .help = "MLA: non-rotary query/key head size");
    ADD(.name = "--qk-pos-emb-head-dim", .type = OPT_INT, .target = &e->mla_qk_pos_emb_head_dim, .min = 1,
        .max = 1 << 20, .unit = "elements", .defval = "64", .help = "MLA: rotary query/key head size");
    ADD(.name = "--v-head-dim", .type = OPT_INT, .target = &e->mla_v_head_dim, .min = 1, .max = 1 << 20,
        .unit = "elements", .defval = "128", .help = "MLA: value head size");
    ADD(.name = "--mtp-num-layers", .type = OPT_INT, .target = &e->mtp_num_layers, .min = 1, .max = 1 << 10,
        .unit = "layers", .defval = "none",
        .help = "multi-token prediction depths on the last pipeline stage (DeepSeek-V3; one layer of the last "
                "layer's type, an eh projection and the output layer each)");
    return TS_OK;
}

void moe_flags_take(const moe_flags_state *s, const opt_table *t, const moe_config *base, config *c)
{
    moe_config *e = &c->moe;
#define MOE_TAKE(flag, field)                                                                                          \
    do {                                                                                                               \
        if (!opt_was_set(t, flag))                                                                                     \
            e->field = base->field;                                                                                    \
    } while (0)
    MOE_TAKE("--num-experts", num_experts);
    MOE_TAKE("--moe-router-topk", topk);
    MOE_TAKE("--moe-ffn-hidden-size", ffn_hidden_size);
    MOE_TAKE("--moe-shared-expert-intermediate-size", shared_ffn_hidden_size);
    MOE_TAKE("--moe-router-num-groups", router_num_groups);
    MOE_TAKE("--moe-router-group-topk", router_group_topk);
    MOE_TAKE("--expert-model-parallel-size", ep);
    MOE_TAKE("--expert-tensor-parallel-size", etp);
    MOE_TAKE("--moe-token-dispatcher-type", dispatcher);
    MOE_TAKE("--multi-latent-attention", mla);
    MOE_TAKE("--q-lora-rank", mla_q_lora_rank);
    MOE_TAKE("--kv-lora-rank", mla_kv_lora_rank);
    MOE_TAKE("--qk-head-dim", mla_qk_head_dim);
    MOE_TAKE("--qk-pos-emb-head-dim", mla_qk_pos_emb_head_dim);
    MOE_TAKE("--v-head-dim", mla_v_head_dim);
    MOE_TAKE("--mtp-num-layers", mtp_num_layers);
#undef MOE_TAKE
    if (!s->layer_freq) {
        e->layer_freq = base->layer_freq > 0 ? base->layer_freq : 1;
        e->first_dense_layers = base->first_dense_layers;
    }
}

/* A non-negative decimal integer filling [p, end), or -1. */
static long parse_count(const char *p, const char *end)
{
    if (p >= end || end - p > 9)
        return -1;
    long v = 0;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

int moe_flags_parse_layer_freq(const char *v, int num_layers, int *freq, int *first_dense, ts_err *err)
{
    size_t n = strlen(v);
    long f = parse_count(v, v + n);
    if (f >= 1 && f <= INT_MAX) {
        *freq = (int)f;
        *first_dense = 0;
        return TS_OK;
    }
    /* "([0]*K+[1]*M)" (spaces not accepted) */
    const char *a = "([0]*", *b = "+[1]*";
    if (n > 12 && strncmp(v, a, 5) == 0 && v[n - 1] == ')') {
        const char *plus = strstr(v + 5, b);
        if (plus) {
            long k = parse_count(v + 5, plus), m = parse_count(plus + 5, v + n - 1);
            if (k >= 0 && m >= 1) {
                if (k + m != num_layers)
                    return err_set(err, TS_EINVAL,
                                   "--moe-layer-freq %s: the pattern has %ld layers, --num-layers is %d (give K + "
                                   "M = %d)",
                                   v, k + m, num_layers, num_layers);
                *freq = 1;
                *first_dense = (int)k;
                return TS_OK;
            }
        }
    }
    return err_set(err, TS_EINVAL,
                   "--moe-layer-freq %s: not modelled (valid: an integer N >= 1, every N-th layer MoE, or "
                   "\"([0]*K+[1]*M)\", the first K layers dense)",
                   v);
}

static int check_routing(const moe_config *e, const opt_table *t, ts_err *err)
{
    if (e->topk > e->num_experts)
        return err_set(err, TS_EINVAL, "--moe-router-topk %d is more than --num-experts %d (valid: 1 to %d)", e->topk,
                       e->num_experts, e->num_experts);
    /* on the resolved values: a preset's groups (DeepSeek-V3's 8) take a --moe-router-group-topk alone */
    bool ng = e->router_num_groups > 0, gk = e->router_group_topk > 0;
    if (ng != gk)
        return err_set(err, TS_EINVAL, "%s needs %s (group-limited routing takes both)",
                       ng ? "--moe-router-num-groups" : "--moe-router-group-topk",
                       ng ? "--moe-router-group-topk" : "--moe-router-num-groups");
    if (ng) {
        if (e->num_experts % e->router_num_groups)
            return err_set(err, TS_EINVAL,
                           "--num-experts %d is not a multiple of --moe-router-num-groups %d (give a divisor of %d)",
                           e->num_experts, e->router_num_groups, e->num_experts);
        if (e->router_group_topk > e->router_num_groups)
            return err_set(err, TS_EINVAL, "--moe-router-group-topk %d is more than --moe-router-num-groups %d",
                           e->router_group_topk, e->router_num_groups);
        long reach = (long)e->router_group_topk * (e->num_experts / e->router_num_groups);
        if (e->topk > reach)
            return err_set(err, TS_EINVAL,
                           "--moe-router-topk %d is more than the %ld experts of --moe-router-group-topk %d groups "
                           "(valid: at most %ld)",
                           e->topk, reach, e->router_group_topk, reach);
    }
    if (opt_was_set(t, "--moe-expert-capacity-factor") && e->dispatcher != MOE_DISPATCH_ALLTOALL)
        return err_set(err, TS_EINVAL,
                       "--moe-expert-capacity-factor works only with --moe-token-dispatcher-type alltoall (given: %s)",
                       MOE_DISPATCHER_NAMES[e->dispatcher]);
    if (e->pad_to_capacity && !opt_was_set(t, "--moe-expert-capacity-factor"))
        return err_set(err, TS_EINVAL, "--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor");
    /* megatron/core/transformer/transformer_config.py, __post_init__ */
    if (e->expert_bias && e->router_score != 1)
        return err_set(err, TS_EINVAL,
                       "--moe-router-enable-expert-bias needs --moe-router-score-function sigmoid (Megatron-core's "
                       "aux-loss-free balancing supports only the sigmoid scores)");
    if (e->enable_deepep && e->dispatcher != MOE_DISPATCH_FLEX)
        return err_set(err, TS_EINVAL,
                       "--moe-enable-deepep works only with --moe-token-dispatcher-type flex (given: %s)",
                       MOE_DISPATCHER_NAMES[e->dispatcher]);
    return TS_OK;
}

static int check_layout(moe_config *e, const config *c, ts_err *err)
{
    const parallel_config *p = &c->par;
    if (e->num_experts % e->ep)
        return err_set(err, TS_EINVAL,
                       "--num-experts %d is not a multiple of --expert-model-parallel-size %d (give a divisor of %d)",
                       e->num_experts, e->ep, e->num_experts);
    long per_stage = (long)e->etp * e->ep * p->pp;
    if (c->cluster.gpus % per_stage)
        return err_set(err, TS_EINVAL,
                       "--gpus %d is not a multiple of p x expert-tensor-parallel x expert-model-parallel = %d x %d "
                       "x %d = %ld (Megatron-core folds the experts of each pipeline stage over etp x ep x edp ranks: "
                       "give an etp x ep dividing %d)",
                       c->cluster.gpus, p->pp, e->etp, e->ep, per_stage, c->cluster.gpus / (p->pp > 0 ? p->pp : 1));
    e->edp = (int)(c->cluster.gpus / per_stage);
    if (p->tp > 1 && e->ep > 1 && !p->sequence_parallel)
        return err_set(err, TS_EINVAL,
                       "--expert-model-parallel-size %d with --tensor-model-parallel-size %d needs "
                       "--sequence-parallel (Megatron-core's rule)",
                       e->ep, p->tp);
    /* megatron/core/transformer/moe/moe_layer.py, MoELayer.forward: raises in
     * training when tensor parallelism runs without sequence parallelism */
    if (p->tp > 1 && !p->sequence_parallel)
        return err_set(err, TS_EINVAL,
                       "--num-experts with --tensor-model-parallel-size %d needs --sequence-parallel (Megatron-core's "
                       "MoELayer refuses to train MoE with tensor parallelism without it)",
                       p->tp);
    /* the expert FC1 is column-parallel and FC2 row-parallel over the ETP
     * group, the shared experts over the tensor-parallel group: Megatron's
     * linear layers divide their split dimension exactly */
    if (e->ffn_hidden_size % e->etp)
        return err_set(err, TS_EINVAL,
                       "--moe-ffn-hidden-size %d is not a multiple of --expert-tensor-parallel-size %d (each expert's "
                       "FFN is split over the ETP ranks: give an ETP dividing %d)",
                       e->ffn_hidden_size, e->etp, e->ffn_hidden_size);
    if (e->shared_ffn_hidden_size % p->tp)
        return err_set(err, TS_EINVAL,
                       "--moe-shared-expert-intermediate-size %d is not a multiple of --tensor-model-parallel-size "
                       "%d (the shared experts are split over the tensor-parallel ranks)",
                       e->shared_ffn_hidden_size, p->tp);
    /* Megatron-core's TransformerConfig: the overlap needs shared experts and
     * the alltoall or flex dispatcher */
    if (e->shared_overlap && e->shared_ffn_hidden_size <= 0)
        return err_set(err, TS_EINVAL,
                       "--moe-shared-expert-overlap needs shared experts (give --moe-shared-expert-intermediate-size)");
    if (e->shared_overlap && e->dispatcher == MOE_DISPATCH_ALLGATHER)
        return err_set(
            err, TS_EINVAL,
            "--moe-shared-expert-overlap needs --moe-token-dispatcher-type alltoall or flex (got allgather)");
    if (e->shared_overlap && p->overlap_moe_ep_comm)
        return err_set(err, TS_EINVAL,
                       "--moe-shared-expert-overlap with --overlap-moe-expert-parallel-comm: Megatron-LM refuses the "
                       "combination (megatron/training/arguments.py, validate_args: disable moe_shared_expert_overlap "
                       "when enabling overlap_moe_expert_parallel_comm; the pair computes the shared experts in its "
                       "own sub-modules); give one of the two");
    return TS_OK;
}

static int check_mla(const moe_config *e, const opt_table *t, ts_err *err)
{
    static const char *const MLA_FLAGS[] = {"--q-lora-rank", "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim",
                                            "--v-head-dim"};
    if (e->mla)
        return TS_OK;
    for (size_t i = 0; i < sizeof MLA_FLAGS / sizeof MLA_FLAGS[0]; i++)
        if (opt_was_set(t, MLA_FLAGS[i]))
            return err_set(err, TS_EINVAL, "%s needs --multi-latent-attention", MLA_FLAGS[i]);
    return TS_OK;
}

/* A valid MoE configuration the simulator's MoE layer ops do not cover
 * yet: TS_EINVAL naming the flag and what is modelled. */
static int check_modelled(const moe_config *e, const config *c, ts_err *err)
{
    if (e->dispatcher == MOE_DISPATCH_FLEX && !e->enable_deepep)
        return err_set(
            err, TS_EINVAL,
            "--moe-token-dispatcher-type flex without DeepEP: not modelled (the MoE block is simulated "
            "with the allgather or alltoall dispatcher, or flex with --moe-enable-deepep: give one of them)");
    if (e->dispatcher == MOE_DISPATCH_FLEX && e->etp > 1)
        return err_set(err, TS_EINVAL,
                       "--expert-tensor-parallel-size %d with --moe-token-dispatcher-type flex: not modelled (its "
                       "default is --tensor-model-parallel-size: give --expert-tensor-parallel-size 1, or the "
                       "allgather or alltoall dispatcher)",
                       e->etp);
    if (e->lb_type == MOE_LB_SINKHORN)
        return err_set(err, TS_EINVAL,
                       "--moe-router-load-balancing-type sinkhorn: not modelled (Megatron-core's sinkhorn iterates "
                       "over the T x E logits until its error falls below 1e-4, a count that depends on the data: "
                       "give aux_loss, seq_aux_loss, global_aux_loss or none)");
    if (c->par.torch_fsdp2) /* Megatron-FSDP's expert sharding over edp is modelled (plan_build.c) */
        return err_set(err, TS_EINVAL,
                       "--use-torch-fsdp2 with --num-experts: not modelled (how PyTorch FSDP2 shards the experts; "
                       "--use-megatron-fsdp with experts is)");
    return TS_OK;
}

/* --moe-dispatch-fwd-dtype / --moe-combine-bwd-dtype mxfp8 (moe_flags.h):
 * into c->moe when the GPU and the FP8 recipe allow them. */
static int check_fp8_dispatch(const moe_flags_state *s, config *c, ts_err *err)
{
    const model_config *m = &c->model;
    bool fwd = s->dispatch_fwd_dtype == 1, bwd = s->combine_bwd_dtype == 1;
    const char *flag = fwd ? "--moe-dispatch-fwd-dtype mxfp8" : "--moe-combine-bwd-dtype mxfp8";
    c->moe.dispatch_fwd_mxfp8 = false;
    c->moe.combine_bwd_mxfp8 = false;
    if (!fwd && !bwd)
        return TS_OK;
    /* Blackwell = the catalogue's GPUs with FP4 tensor cores, as config.c's
     * rule on --fp8-recipe mxfp8 (gpus_blackwell.csv) */
    if (!(c->cluster.gpu.fp4_tflops > 0))
        return err_set(err, TS_EINVAL,
                       "%s needs Blackwell's block-scaled tensor cores (MXFP8); %s has none: give bf16 (or --gpu "
                       "B200-SXM-180GB with --fp8-format and --fp8-recipe mxfp8)",
                       flag, c->cluster.gpu.name);
    if (m->fp8_format == FP8_FORMAT_NONE || m->fp8_recipe != FP8_RECIPE_MXFP8)
        return err_set(err, TS_EINVAL,
                       "%s needs FP8 training with --fp8-recipe mxfp8 (the MXFP8 tokens are the expert GEMMs' "
                       "inputs; got %s%s): give --fp8-format e4m3|hybrid --fp8-recipe mxfp8, or bf16",
                       flag, m->fp8_format == FP8_FORMAT_NONE ? "no --fp8-format" : "--fp8-recipe ",
                       m->fp8_format == FP8_FORMAT_NONE ? "" : CONFIG_FP8_RECIPE_NAMES[m->fp8_recipe]);
    c->moe.dispatch_fwd_mxfp8 = fwd;
    c->moe.combine_bwd_mxfp8 = bwd;
    return TS_OK;
}

void moe_flags_release(moe_flags_state *s)
{
    free(s->loads);
    s->loads = NULL;
}

/* --moe-expert-load: refused with the other routing flags, else read into
 * s->loads for e. */
static int take_expert_load(moe_flags_state *s, const opt_table *t, const config *c, moe_config *e, ts_err *err)
{
    if (!s->expert_load)
        return TS_OK;
    if (opt_was_set(t, "--moe-routing-skew"))
        return err_set(err, TS_EINVAL,
                       "--moe-expert-load with --moe-routing-skew: the file's loads replace the skew model (give one "
                       "of them)");
    if (e->force_load_balancing)
        return err_set(err, TS_EINVAL,
                       "--moe-expert-load with --moe-router-force-load-balancing: forced balance ignores the measured "
                       "loads (give one of them)");
    moe_flags_release(s);
    int nl = c->model.num_layers > 0 ? c->model.num_layers : 1;
    s->loads = calloc((size_t)e->num_experts * (size_t)nl, sizeof *s->loads);
    if (!s->loads)
        return err_set(err, TS_ENOMEM, "--moe-expert-load: out of memory for %d experts x %d layers", e->num_experts,
                       nl);
    int rc = moe_load_read(s->expert_load, e, c->model.num_layers, s->loads, &e->expert_load_per_layer, err);
    if (rc) {
        ts_err inner = *err;
        err_set(err, rc, "--moe-expert-load: %s", inner.msg);
        moe_flags_release(s);
        return rc;
    }
    e->load_path = s->expert_load;
    e->expert_load = s->loads;
    return TS_OK;
}

int moe_flags_layer_recompute(const moe_flags_state *s, parallel_config *p, ts_err *err)
{
    if (!s->layer_recompute)
        return TS_OK;
    if (p->recompute == RECOMPUTE_FULL)
        return err_set(err, TS_EINVAL,
                       "--moe-layer-recompute with --recompute-granularity full: Megatron-core refuses it (full "
                       "recomputation re-runs the MoE layers already; give one)");
    p->recompute = RECOMPUTE_SELECTIVE;
    p->recompute_modules = (p->recompute_modules ? p->recompute_modules : CONFIG_RC_DEFAULT) | CONFIG_RC_MOE;
    return TS_OK;
}

int moe_flags_finish(moe_flags_state *s, const opt_table *t, config *c, ts_err *err)
{
    moe_config *e = &c->moe;
    int rc;
    if ((rc = check_mla(e, t, err)))
        return rc;
    if (e->mtp_num_layers > 0 && (c->par.torch_fsdp2 || c->par.megatron_fsdp))
        return err_set(err, TS_EINVAL, "--mtp-num-layers with %s: not modelled together (remove one)",
                       c->par.torch_fsdp2 ? "--use-torch-fsdp2" : "--use-megatron-fsdp");
    if (e->num_experts == 0) {
        static const char *const NEED[] = {"--moe-router-topk",
                                           "--moe-ffn-hidden-size",
                                           "--moe-shared-expert-intermediate-size",
                                           "--moe-shared-expert-overlap",
                                           "--moe-layer-freq",
                                           "--moe-router-num-groups",
                                           "--moe-router-group-topk",
                                           "--moe-expert-capacity-factor",
                                           "--moe-pad-expert-input-to-capacity",
                                           "--moe-router-force-load-balancing",
                                           "--moe-enable-deepep",
                                           "--expert-tensor-parallel-size",
                                           "--moe-expert-load",
                                           "--moe-layer-recompute",
                                           "--moe-router-dtype",
                                           "--moe-router-score-function",
                                           "--moe-router-load-balancing-type",
                                           "--moe-aux-loss-coeff",
                                           "--moe-z-loss-coeff",
                                           "--moe-router-enable-expert-bias",
                                           "--moe-router-topk-scaling-factor",
                                           "--moe-router-pre-softmax",
                                           "--moe-dispatch-fwd-dtype",
                                           "--moe-combine-bwd-dtype"};
        if (e->ep > 1)
            return err_set(err, TS_EINVAL,
                           "--expert-model-parallel-size %d needs --num-experts (a dense model has "
                           "no experts to split)",
                           e->ep);
        for (size_t i = 0; i < sizeof NEED / sizeof NEED[0]; i++)
            if (opt_was_set(t, NEED[i]))
                return err_set(err, TS_EINVAL, "%s needs --num-experts", NEED[i]);
        e->etp = c->par.tp;
        e->edp = c->par.dp;
        if (opt_was_set(t, "--moe-routing-skew"))
            return err_set(err, TS_EINVAL, "--moe-routing-skew needs --num-experts");
        if (c->par.recompute_modules & CONFIG_RC_MOE_ACT)
            return err_set(err, TS_EINVAL,
                           "--recompute-modules moe_act needs --num-experts (valid for a dense model: core_attn, mlp, "
                           "layernorm)");
        return TS_OK;
    }
    if (e->ffn_hidden_size == 0)
        e->ffn_hidden_size = c->model.ffn_hidden_size;
    if (e->etp == 0)
        e->etp = c->par.tp;
    if (opt_was_set(t, "--moe-router-dtype")) {
        if (s->router_dtype != 0)
            return err_set(err, TS_EINVAL,
                           "--moe-router-dtype fp64: not modelled (the GPU catalog has no FP64 rate: give fp32)");
        e->router_fp32 = true;
    }
    if (s->layer_freq && (rc = moe_flags_parse_layer_freq(s->layer_freq, c->model.num_layers, &e->layer_freq,
                                                          &e->first_dense_layers, err)))
        return rc;
    if ((rc = check_routing(e, t, err)) || (rc = check_layout(e, c, err)) || (rc = check_modelled(e, c, err)) ||
        (rc = check_fp8_dispatch(s, c, err)))
        return rc;
    return take_expert_load(s, t, c, e, err);
}

int moe_flags_check_layout(config *c, ts_err *err)
{
    moe_config *e = &c->moe;
    if (e->num_experts <= 0)
        return TS_OK;
    if (e->ep < 1)
        e->ep = 1;
    if (e->etp == 0)
        e->etp = c->par.tp;
    int rc = check_layout(e, c, err);
    return rc ? rc : check_modelled(e, c, err);
}
