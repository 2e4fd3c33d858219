/* xconfig — what trainexec runs of a resolved configuration (xconfig.h). */
#include "exec/xconfig.h"

#include <stdio.h>
#include <string.h>

static gpt_dims xconfig_dense_dims(const model_config *mc, const parallel_config *pc);

/* The first Llama-architecture flag the model uses (training runs them on
 * either backend; the KV-cache inference does not), or NULL. */
static const char *llama_flag(const model_config *m)
{
    if (m->swiglu)
        return "--swiglu";
    if (m->num_query_groups != m->num_attention_heads)
        return "--group-query-attention --num-query-groups";
    if (m->normalization == NORM_RMSNORM)
        return "--normalization RMSNorm";
    if (!m->add_bias_linear)
        return "--disable-bias-linear";
    if (m->position_embedding == POS_ROPE)
        return "--position-embedding-type rope";
    if (m->qk_layernorm)
        return "--qk-layernorm";
    return NULL;
}

/* The MoE flags the executor's MoE layers run (gpt.h, "MoE layers"). */
static int moe_supports(const config *c, bool inference, ts_err *err)
{
    const moe_config *e = &c->moe;
    if (e->num_experts <= 0) {
        if (e->ep > 1)
            return err_set(err, TS_ENOTSUP, "--expert-model-parallel-size %d without --num-experts (give 1)", e->ep);
        return TS_OK;
    }
    if (inference)
        return err_set(err, TS_ENOTSUP,
                       "--num-experts %d with --inference: the KV-cache inference runs dense layers only",
                       e->num_experts);
    if (e->etp != 1)
        return err_set(err, TS_ENOTSUP,
                       "--expert-tensor-parallel-size %d: the executor's experts are not tensor-split (give "
                       "--expert-tensor-parallel-size 1; Megatron's default is --tensor-model-parallel-size)",
                       e->etp);
    if (e->shared_ffn_hidden_size > 0)
        return err_set(err, TS_ENOTSUP,
                       "--moe-shared-expert-intermediate-size %d: the executor's MoE layer has no shared experts",
                       e->shared_ffn_hidden_size);
    if (e->pad_to_capacity)
        return err_set(err, TS_ENOTSUP,
                       "--moe-pad-expert-input-to-capacity: the executor's experts run the rows they receive "
                       "(remove the flag)");
    if (e->capacity_factor > 0 && e->drop_policy != MOE_DROP_PROBS)
        return err_set(err, TS_ENOTSUP,
                       "--moe-token-drop-policy position: the executor drops the lowest-weight assignments (probs)");
    if (e->router_num_groups > 0)
        return err_set(err, TS_ENOTSUP,
                       "--moe-router-num-groups %d: the executor's router has no group-limited routing",
                       e->router_num_groups);
    if (e->dispatcher == MOE_DISPATCH_FLEX || e->enable_deepep)
        return err_set(err, TS_ENOTSUP,
                       "--moe-token-dispatcher-type flex / --moe-enable-deepep: the executor dispatches by "
                       "all-to-all (give alltoall or allgather)");
    if (e->mla)
        return err_set(err, TS_ENOTSUP, "--multi-latent-attention: the executor's attention is multi-head / GQA");
    /* the executor's router: softmax top-k in the run's dtype, no loss, bias or scaling (xmoe.h) */
    const char *router = e->router_fp32                                       ? "--moe-router-dtype"
                         : e->router_score != 0                               ? "--moe-router-score-function"
                         : e->expert_bias                                     ? "--moe-router-enable-expert-bias"
                         : e->topk_scaling > 0                                ? "--moe-router-topk-scaling-factor"
                         : e->pre_softmax                                     ? "--moe-router-pre-softmax"
                         : e->z_loss_coeff > 0                                ? "--moe-z-loss-coeff"
                         : e->aux_loss_coeff > 0 && e->lb_type != MOE_LB_NONE ? "--moe-aux-loss-coeff"
                                                                              : NULL;
    if (router)
        return err_set(err, TS_ENOTSUP,
                       "%s: the executor's router is a plain softmax top-k (no fp32 GEMM, sigmoid, expert bias, "
                       "scaling, pre-softmax or loss; trainsim simulate models them): remove it",
                       router);
    if (e->load_path)
        return err_set(err, TS_ENOTSUP,
                       "--moe-expert-load %s: the executor routes with its own router (the file is trainsim "
                       "simulate's; trainexec writes one with --moe-load-out)",
                       e->load_path);
    return TS_OK;
}

int xconfig_supports(const config *c, bool inference, ts_err *err)
{
    const model_config *m = &c->model;
    const parallel_config *p = &c->par;
    const char *llama = llama_flag(m);
    if (llama && inference)
        return err_set(err, TS_ENOTSUP,
                       "%s with --inference: the KV-cache inference runs the GPT layers only (train without "
                       "--inference)",
                       llama);
    if (m->position_embedding != POS_ROPE &&
        (m->position_embedding != POS_LEARNED_ABSOLUTE || m->max_position_embeddings != m->seq_length))
        return err_set(err, TS_ENOTSUP,
                       "--position-embedding-type %s, --max-position-embeddings %d: the executor learns one "
                       "position row per token of --seq-length %d (learned_absolute, max = seq) or uses rope",
                       CONFIG_POSITION_NAMES[m->position_embedding], m->max_position_embeddings, m->seq_length);
    if (config_head_size(m) * m->num_attention_heads != m->hidden_size)
        return err_set(err, TS_ENOTSUP, "--kv-channels %d: the executor's heads are h / a = %d wide", m->kv_channels,
                       m->hidden_size / m->num_attention_heads);
    if (m->fp8_format != FP8_FORMAT_NONE)
        return err_set(err, TS_ENOTSUP, "--fp8-format %s: the executor's GEMMs run at the run's precision, no FP8",
                       CONFIG_FP8_FORMAT_NAMES[m->fp8_format]);
    if (c->moe.mla || c->moe.mtp_num_layers > 0)
        return err_set(err, TS_ENOTSUP,
                       "%s: the executor's layers have no multi-latent attention or multi-token prediction (trainsim "
                       "simulate models them)",
                       c->moe.mla ? "--multi-latent-attention" : "--mtp-num-layers");
    if (m->no_bias_gelu_fusion || m->no_bias_swiglu_fusion || m->no_bias_dropout_fusion ||
        m->no_masked_softmax_fusion || m->no_gradient_accumulation_fusion || m->no_rope_fusion ||
        m->cross_entropy_loss_fusion)
        return err_set(err, TS_ENOTSUP,
                       "--no-*-fusion, --cross-entropy-loss-fusion: the executor runs its own kernels, not "
                       "Megatron-LM's fused or unfused ones (drop the fusion flags)");
    if (p->log_num_zeros)
        return err_set(err, TS_ENOTSUP, "--log-num-zeros-in-grad: the executor counts no zero gradients");
    if (p->data_loader_measured)
        return err_set(err, TS_ENOTSUP,
                       "--data-loader-ns: a measured figure for trainsim simulate; the executor measures its own "
                       "data step (its 'data step' line)");
    if (p->distributed_optimizer && !m->untie_embeddings && p->pp > 1 && p->dp * config_cp(c) > 1) /* shards: d x cp */
        return err_set(err, TS_ENOTSUP,
                       "--use-distributed-optimizer with the output layer tied to the word embedding and "
                       "--pipeline-model-parallel-size %d: the executor sums the two copies' gradients after the "
                       "reduce-scatter has sharded them (give --untie-embeddings-and-output-weights)",
                       p->pp);
    if (p->recompute == RECOMPUTE_SELECTIVE && (p->recompute_modules & ~(CONFIG_RC_CORE_ATTN | CONFIG_RC_MOE)))
        return err_set(err, TS_ENOTSUP,
                       "--recompute-modules: the executor recomputes the attention core (core_attn, "
                       "Megatron-core's default) and whole MoE layers (moe, --moe-layer-recompute) only, or whole "
                       "layers with --recompute-granularity full");
    if (p->recompute != RECOMPUTE_NONE && inference)
        return err_set(err, TS_ENOTSUP, "--recompute-granularity with --inference: inference keeps no activations");
    if (p->torch_fsdp2 || p->megatron_fsdp)
        return err_set(err, TS_ENOTSUP,
                       "--use-torch-fsdp2, --use-megatron-fsdp: the executor shards no parameters or "
                       "gradients over data parallelism (--use-distributed-optimizer shards the Adam state)");
    if (config_cp(c) > 1 && inference)
        return err_set(err, TS_ENOTSUP,
                       "--context-parallel-size %d: the KV-cache inference has no context parallelism (give 1)",
                       config_cp(c));
    return moe_supports(c, inference, err);
}

void xconfig_arch_text(const gpt_dims *d, char *buf, size_t size)
{
    buf[0] = '\0';
    if (!gpt_dims_llama(d)) {
        if (!d->tie_embed)
            (void)snprintf(buf, size, " [untied]");
        return;
    }
    (void)snprintf(buf, size, " [groups=%d%s%s%s%s%s%s]", gpt_dims_groups(d), d->rmsnorm ? " RMSNorm" : "",
                   d->swiglu ? " SwiGLU" : "", d->no_bias ? " no-bias" : "", d->rope ? " rope" : "",
                   d->qk_norm ? " qk-norm" : "", d->tie_embed ? "" : " untied");
}

void xconfig_mode_text(const gpt_dims *d, char *buf, size_t size)
{
    buf[0] = '\0';
    if (d->recompute != GPT_RC_NONE)
        (void)snprintf(buf, size, ", recompute full %s %d", d->recompute == GPT_RC_BLOCK ? "block" : "uniform",
                       d->recompute_layers);
    if (d->recompute_attn || d->recompute_moe) {
        size_t n = strlen(buf);
        (void)snprintf(buf + n, size - n, ", recompute selective%s%s", d->recompute_attn ? " core_attn" : "",
                       d->recompute_moe ? " moe" : "");
    }
    if (d->dist_optim) {
        size_t n = strlen(buf);
        (void)snprintf(buf + n, size - n, ", distributed optimizer");
    }
    size_t n = strlen(buf);
    (void)snprintf(buf + n, size - n, ", %s attention", d->flash ? "flash" : "unfused");
}

gpt_dims xconfig_dims(const model_config *mc, const parallel_config *pc, const moe_config *e)
{
    gpt_dims d = xconfig_dense_dims(mc, pc);
    if (!e || e->num_experts <= 0)
        return d;
    d.num_experts = e->num_experts;
    d.moe_topk = e->topk;
    d.moe_ffn = e->ffn_hidden_size;
    d.moe_layer_freq = e->layer_freq;
    d.moe_first_dense = e->first_dense_layers;
    d.moe_capacity = e->capacity_factor;
    d.moe_force_balance = e->force_load_balancing;
    d.moe_aux_coeff = 0.0; /* --moe-aux-loss-coeff is default-only (0) in the flags table */
    return d;
}

static gpt_dims xconfig_dense_dims(const model_config *mc, const parallel_config *pc)
{
    return (gpt_dims){.vocab = mc->padded_vocab_size,
                      .seq = mc->seq_length,
                      .hidden = mc->hidden_size,
                      .heads = mc->num_attention_heads,
                      .ffn = mc->ffn_hidden_size,
                      .layers = mc->num_layers,
                      .batch = pc->micro_batch_size,
                      .groups = mc->num_query_groups,
                      .rmsnorm = mc->normalization == NORM_RMSNORM,
                      .swiglu = mc->swiglu,
                      .no_bias = !mc->add_bias_linear,
                      .rope = mc->position_embedding == POS_ROPE,
                      .qk_norm = mc->qk_layernorm,
                      .recompute = pc->recompute != RECOMPUTE_FULL                  ? GPT_RC_NONE
                                   : pc->recompute_method == RECOMPUTE_METHOD_BLOCK ? GPT_RC_BLOCK
                                                                                    : GPT_RC_UNIFORM,
                      .recompute_layers = pc->recompute_num_layers,
                      .recompute_attn = pc->recompute == RECOMPUTE_SELECTIVE &&
                                        (!pc->recompute_modules || (pc->recompute_modules & CONFIG_RC_CORE_ATTN)),
                      .recompute_moe =
                          pc->recompute == RECOMPUTE_SELECTIVE && (pc->recompute_modules & CONFIG_RC_MOE) != 0,
                      .dist_optim = pc->distributed_optimizer,
                      .flash = config_attn_is_flash(mc->attention_backend),
                      .tie_embed = !mc->untie_embeddings};
}
