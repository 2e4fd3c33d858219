/* flags_print — the resolved configuration, each value with its source
 * and rule (flags.h: flags_print). */
#include "sim/config/flags.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sim/config/catalog.h"
#include "sim/config/catalog_models.h"
#include "sim/config/megatron_flags.h"
#include "sim/config/moe_flags.h"
#include "sim/config/topo.h"

/* ---------------------------------------------------------------- print */

/* The layout line of flags_print: layers per virtual stage, compactly,
 * for the splits the "uneven split" line does not describe. */
static void print_layout(const parallel_config *p, FILE *f)
{
    const sched_layout *l = &p->layout;
    if (l->n_stages < 1 || !(p->layout_given || p->account_for_embedding || p->account_for_loss ||
                             (p->vp > 1 && !sched_layout_is_even(l))))
        return;
    char buf[256];
    size_t n = sched_layout_format(l, buf, sizeof buf);
    fprintf(f,
            "layers per stage:      %s%s (%d virtual stages, stage c x p + r is chunk c of rank r; embedding on "
            "stage %d, loss on stage %d)\n",
            buf, n >= sizeof buf ? " ..." : "", l->n_stages, l->emb_stage, l->loss_stage);
}

static const char *const SOURCE_NAMES[FLAGS_SRC_COUNT] = {
    "flag", "preset", "built-in default", "Megatron-LM default", "derived", "trainsim default"};

/* The row's flag and value, for flags_print. */
static const char *field_row(const flags_state *s, flags_field f, char *v, size_t cap)
{
    const config *c = s->c;
    const model_config *m = &c->model;
    const parallel_config *p = &c->par;
#define ROW_INT(name, x)                                                                                               \
    do {                                                                                                               \
        snprintf(v, cap, "%d", (int)(x));                                                                              \
        return name;                                                                                                   \
    } while (0)
#define ROW_STR(name, x)                                                                                               \
    do {                                                                                                               \
        snprintf(v, cap, "%s", (x));                                                                                   \
        return name;                                                                                                   \
    } while (0)
    switch (f) {
    case FLAGS_F_LAYERS:
        ROW_INT("--num-layers", m->num_layers);
    case FLAGS_F_HIDDEN:
        ROW_INT("--hidden-size", m->hidden_size);
    case FLAGS_F_HEADS:
        ROW_INT("--num-attention-heads", m->num_attention_heads);
    case FLAGS_F_KV:
        ROW_INT("--kv-channels", m->kv_channels);
    case FLAGS_F_GROUPS:
        ROW_INT("--num-query-groups", m->num_query_groups);
    case FLAGS_F_FFN:
        ROW_INT("--ffn-hidden-size", m->ffn_hidden_size);
    case FLAGS_F_SWIGLU:
        ROW_STR("--swiglu", m->swiglu ? "on" : "off");
    case FLAGS_F_SEQ:
        ROW_INT("--seq-length", m->seq_length);
    case FLAGS_F_MAXPOS:
        ROW_INT("--max-position-embeddings", m->max_position_embeddings);
    case FLAGS_F_ADROP:
        snprintf(v, cap, "%g", m->attention_dropout);
        return "--attention-dropout";
    case FLAGS_F_HDROP:
        snprintf(v, cap, "%g", m->hidden_dropout);
        return "--hidden-dropout";
    case FLAGS_F_VOCAB:
        if (m->vocab_size == 0)
            ROW_STR("--vocab-size", "-");
        ROW_INT("--vocab-size", m->vocab_size);
    case FLAGS_F_MAKEDIV:
        ROW_INT("--make-vocab-size-divisible-by", m->make_vocab_size_divisible_by);
    case FLAGS_F_PADDED:
        ROW_INT("--padded-vocab-size", m->padded_vocab_size);
    case FLAGS_F_UNTIE:
        ROW_STR("--untie-embeddings-and-output-weights", m->untie_embeddings ? "on" : "off");
    case FLAGS_F_BIAS:
        ROW_STR("--disable-bias-linear", m->add_bias_linear ? "off (biases)" : "on (no biases)");
    case FLAGS_F_NORM:
        ROW_STR("--normalization", CONFIG_NORM_NAMES[m->normalization]);
    case FLAGS_F_POS:
        ROW_STR("--position-embedding-type", CONFIG_POSITION_NAMES[m->position_embedding]);
    case FLAGS_F_PREC:
        ROW_STR("--bf16/--fp16/--fp32", CONFIG_PRECISION_NAMES[m->precision]);
    case FLAGS_F_MBS:
        ROW_INT("--micro-batch-size", p->micro_batch_size);
    case FLAGS_F_GBS:
        ROW_INT("--global-batch-size", p->global_batch_size);
    case FLAGS_F_TP:
        ROW_INT("--tensor-model-parallel-size", p->tp);
    case FLAGS_F_PP:
        ROW_INT("--pipeline-model-parallel-size", p->pp);
    case FLAGS_F_DP:
        ROW_INT("--data-parallel-size", p->dp);
    case FLAGS_F_VP:
        if (p->layers_per_virtual_stage == 0)
            ROW_STR("--num-layers-per-virtual-pipeline-stage", "unset");
        ROW_INT("--num-layers-per-virtual-pipeline-stage", p->layers_per_virtual_stage);
    case FLAGS_F_FIRST:
        ROW_INT("--decoder-first-pipeline-num-layers", p->first_stage_layers);
    case FLAGS_F_LAST:
        ROW_INT("--decoder-last-pipeline-num-layers", p->last_stage_layers);
    case FLAGS_F_SP:
        ROW_STR("--sequence-parallel", p->sequence_parallel ? "on" : "off");
    case FLAGS_F_RECOMPUTE:
        ROW_STR("--recompute-granularity", CONFIG_RECOMPUTE_NAMES[p->recompute]);
    case FLAGS_F_RMETHOD:
        ROW_STR("--recompute-method", CONFIG_RECOMPUTE_METHOD_NAMES[p->recompute_method]);
    case FLAGS_F_RLAYERS:
        ROW_INT("--recompute-num-layers", p->recompute_num_layers);
    case FLAGS_F_DISTOPT:
        ROW_STR("--use-distributed-optimizer", p->distributed_optimizer ? "on" : "off");
    case FLAGS_F_OVERLAP:
        ROW_STR("--overlap-grad-reduce", p->overlap_grad_reduce ? "on" : "off");
    case FLAGS_F_SCHEDULE:
        ROW_STR("--schedule", sched_kind_name(p->schedule));
    case FLAGS_F_GPUS:
        ROW_INT("--gpus", c->cluster.gpus);
    case FLAGS_F_GPU:
        ROW_STR("--gpu", c->cluster.gpu.name);
    case FLAGS_F_TOPOLOGY:
        ROW_STR("--topology", s->topology ? s->topology : "built-in default for the GPU kind");
    case FLAGS_F_ATTN:
        ROW_STR("--attention-backend", CONFIG_ATTN_BACKEND_NAMES[m->attention_backend]);
    case FLAGS_F_RMODULES: {
        size_t n = 0;
        unsigned bits = p->recompute_modules ? p->recompute_modules : CONFIG_RC_DEFAULT;
        v[0] = '\0';
        for (int i = 0; CONFIG_RC_MODULE_NAMES[i]; i++)
            if (bits & (1u << i) && n < cap)
                n += (size_t)snprintf(v + n, cap - n, "%s%s", n ? " " : "", CONFIG_RC_MODULE_NAMES[i]);
        return "--recompute-modules";
    }
    case FLAGS_F_COUNT:
        break;
    }
#undef ROW_INT
#undef ROW_STR
    v[0] = '\0';
    return "?";
}

void flags_print(const flags_state *s, FILE *f)
{
    const config *c = s->c;
    const model_config *m = &c->model;
    const parallel_config *p = &c->par;
    const gpu_spec *g = &c->cluster.gpu;
    if (s->builtin_default)
        fprintf(f, "built-in default:      no flag given, so the preset %s (--model %s) on its layout\n",
                FLAGS_DEFAULT_MODEL, FLAGS_DEFAULT_MODEL);
    fprintf(f, "model:                 %s\n", m->name);
    fprintf(f,
            "shape:                 %d layers, hidden %d, %d heads of %d, %d query groups, FFN %d (%s), sequence %d "
            "tokens, vocabulary %d\n",
            m->num_layers, m->hidden_size, m->num_attention_heads, config_head_size(m), m->num_query_groups,
            m->ffn_hidden_size, m->swiglu ? "SwiGLU" : "GeLU", m->seq_length, m->padded_vocab_size);
    fprintf(f, "layers:                %s%s, %s, %s position embeddings, %s embeddings\n",
            CONFIG_NORM_NAMES[m->normalization], m->qk_layernorm ? " (and over each head's query and key)" : "",
            m->add_bias_linear ? "biases" : "no biases", CONFIG_POSITION_NAMES[m->position_embedding],
            m->untie_embeddings ? "untied" : "tied");
    if (config_attn_is_flash(m->attention_backend))
        fprintf(f,
                "attention:             %s: no s x s scores kept (log-sum-exp only), causal half of the score "
                "FLOPs, scores recomputed in the backward\n",
                CONFIG_ATTN_BACKEND_NAMES[m->attention_backend]);
    else
        fprintf(f, "attention:             %s: softmax on stored s x s scores\n",
                CONFIG_ATTN_BACKEND_NAMES[m->attention_backend]);
    fprintf(f, "precision:             %s (%d bytes per element)\n", CONFIG_PRECISION_NAMES[m->precision],
            config_dtype_bytes(c));
    if (m->fp8_format != FP8_FORMAT_NONE)
        fprintf(f, "fp8:                   %s, %s recipe: the layers' linear GEMMs in FP8 (%.1f TFLOP/s peak)%s\n",
                CONFIG_FP8_FORMAT_NAMES[m->fp8_format], CONFIG_FP8_RECIPE_NAMES[m->fp8_recipe],
                c->cluster.gpu.fp8_tflops, m->fp8_param_gather ? ", parameters kept and all-gathered in FP8" : "");
    const struct {
        bool on;
        const char *what;
    } fus[] = {{m->no_bias_gelu_fusion, "bias-GeLU off"},
               {m->no_bias_swiglu_fusion, "bias-SwiGLU off"},
               {m->no_bias_dropout_fusion, "bias-dropout-add off"},
               {m->no_masked_softmax_fusion, "masked softmax off"},
               {m->no_gradient_accumulation_fusion, "gradient accumulation off"},
               {m->no_rope_fusion, "RoPE off"},
               {m->cross_entropy_loss_fusion, "cross-entropy on"}};
    int nf = 0;
    for (size_t i = 0; i < sizeof fus / sizeof fus[0]; i++)
        if (fus[i].on)
            fprintf(f, "%s%s", nf++ ? ", " : "fusions:               ", fus[i].what);
    if (nf)
        fprintf(f, " (the rest Megatron-LM's defaults)\n");
    if (p->no_clip_grad || p->loss_scale > 0)
        fprintf(f, "optimizer step:        %s%s\n", p->no_clip_grad ? "no gradient norm (--clip-grad 0)" : "",
                p->loss_scale > 0 ? (p->no_clip_grad ? ", constant loss scale" : "constant loss scale") : "");
    if (p->data_loader_measured)
        fprintf(f, "data loader:           %.0f ns per micro-batch, measured (--data-loader-ns)\n", p->data_loader_ns);
    else if (p->no_loader_attn_mask)
        fprintf(f,
                "data loader:           no attention mask in the batch (--no-create-attention-mask-in-dataloader)\n");
    fprintf(f, "parallelism:           t=%d p=%d d=%d v=%d (%d GPUs = %d x %d x %d)\n", p->tp, p->pp, p->dp, p->vp,
            c->cluster.gpus, p->tp, p->pp, p->dp);
    if (config_cp(c) > 1) {
        fprintf(f, "context parallel:      cp=%d, %s", p->cp, CONFIG_CP_COMM_NAMES[p->cp_comm]);
        if (p->cp_comm == CP_COMM_A2A_P2P)
            fprintf(f, " (all-to-all over %d, ring over %d)", p->cp_a2a, p->cp_p2p);
        fprintf(f, "; %d tokens per rank; world = t x cp x d x p = %d x %d x %d x %d\n", c->model.seq_length / p->cp,
                p->tp, p->cp, p->dp, p->pp);
    }
    if (p->first_stage_layers || p->last_stage_layers)
        fprintf(f, "uneven split:          first stage %d layers, last stage %d layers (0 = even share)\n",
                p->first_stage_layers, p->last_stage_layers);
    fprintf(f, "batch:                 micro-batch %d, global batch %d sequences, %d micro-batches per pipeline\n",
            p->micro_batch_size, p->global_batch_size, config_num_microbatches(c));
    fprintf(f, "schedule:              %s", sched_kind_name(p->schedule));
    if (p->vp > 1 && sched_layout_is_even(&p->layout))
        fprintf(f, " (%d chunks per rank, %d layers each)", p->vp, m->num_layers / (p->pp * p->vp));
    else if (p->vp > 1)
        fprintf(f, " (%d chunks per rank)", p->vp);
    fputc('\n', f);
    print_layout(p, f);
    fprintf(f, "sequence parallel:     %s\n", p->sequence_parallel ? "on" : "off");
    fprintf(f, "recompute:             %s", CONFIG_RECOMPUTE_NAMES[p->recompute]);
    if (p->recompute == RECOMPUTE_FULL)
        fprintf(f, " (method %s, %d layers; 0 = all)", CONFIG_RECOMPUTE_METHOD_NAMES[p->recompute_method],
                p->recompute_num_layers);
    if (p->recompute == RECOMPUTE_SELECTIVE) {
        char mods[FLAGS_RULE_BYTES];
        field_row(s, FLAGS_F_RMODULES, mods, sizeof mods);
        fprintf(f, " (modules %s)", mods);
    }
    fputc('\n', f);
    fprintf(f, "distributed optimizer: %s\n", p->distributed_optimizer ? "on" : "off");
    fprintf(f, "overlap grad reduce:   %s\n", p->overlap_grad_reduce ? "on" : "off");
    fprintf(f,
            "gpu:                   %s: %g TFLOP/s bf16, %g TFLOP/s fp16, %g GiB HBM at %g GB/s, NVLink %g GB/s "
            "per direction\n",
            g->name, g->bf16_tflops, g->fp16_tflops, g->hbm_gib, g->hbm_gbps, g->nvlink_gbps);
    if (c->cluster.topology) {
        char d[1024];
        topo_describe(c->cluster.topology, d, sizeof d);
        fprintf(f, "topology:              %s\n", d);
        if (c->cluster.topology->description[0])
            fprintf(f, "topology notes:        %s\n", c->cluster.topology->description);
    }
    if (s->preset_source[0])
        fprintf(f, "preset layout source:  %s\n", s->preset_source);
    fprintf(f, "\nwhere each value came from:\n");
    for (int i = 0; i < FLAGS_F_COUNT; i++) {
        char v[96];
        const char *name = field_row(s, (flags_field)i, v, sizeof v);
        const char *src = SOURCE_NAMES[s->src[i]];
        char who[160];
        if (s->src[i] == FLAGS_SRC_PRESET || s->src[i] == FLAGS_SRC_BUILTIN)
            snprintf(who, sizeof who, "%s %s", src, s->model_given ? s->model : FLAGS_DEFAULT_MODEL);
        else if (s->rule[i][0])
            snprintf(who, sizeof who, "%s: %s", src, s->rule[i]);
        else
            snprintf(who, sizeof who, "%s", src);
        fprintf(f, "  %-40s %-22s %s\n", name, v, who);
    }
}
