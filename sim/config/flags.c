/* flags — trainsim's and Megatron-LM's flags registered in the option table
 * (flags_register) and the notes on them (flags.h); flags_parse.c parses,
 * flags_resolve.c resolves, flags_print.c prints. */
#include "sim/config/flags.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "sim/config/catalog.h"
#include "sim/config/catalog_models.h"
#include "sim/config/megatron_flags.h"
#include "sim/config/moe_flags.h"
#include "sim/config/topo.h"

/* The schedule names, from sched.h (generated kinds only, not "custom"). */
static const char *SCHED_NAMES[SCHED_CUSTOM + 1];
/* --fp8-format's values (Megatron-LM's choices); index i is config_fp8_format i + 1 */
static const char *const FP8_FORMATS[] = {"e4m3", "hybrid", NULL};

static void fill_sched_names(void)
{
    for (int k = 0; k < SCHED_CUSTOM; k++)
        SCHED_NAMES[k] = sched_kind_name((sched_kind)k);
    SCHED_NAMES[SCHED_CUSTOM] = NULL;
}

#define ADD(...)                                                                                                       \
    do {                                                                                                               \
        if ((rc = opt_add(t, &(opt_spec){__VA_ARGS__}, err)))                                                          \
            return rc;                                                                                                 \
    } while (0)
#define SECTION(title)                                                                                                 \
    do {                                                                                                               \
        if ((rc = opt_section(t, title, err)))                                                                         \
            return rc;                                                                                                 \
    } while (0)

static int add_model_flags(flags_state *s, opt_table *t, config *c, ts_err *err)
{
    int rc;
    model_config *m = &c->model;
    SECTION("Model (defaults are Megatron-LM's; --model NAME starts from a preset instead)");
    ADD(.name = "--model", .type = OPT_STRING, .target = &s->model, .metavar = "NAME",
        .defval = "none: Megatron-LM's defaults (no flag at all: the built-in default, " FLAGS_DEFAULT_MODEL ")",
        .help =
            "model preset from topologies/models.csv: gpt3-175b; megatron-1.7b, -3.6b, -7.5b, -18.4b, -39.1b, "
            "-76.1b, -145.6b, -310.1b, -529.6b, -1t (Narayanan et al. 2021 Table 1); llama2-7b, -13b, -70b; "
            "llama3-8b, -70b, -405b, -405b-128k; bloom-176b; mixtures of experts mixtral-8x7b, -8x22b, deepseek-v3, "
            "qwen3-235b-a22b, qwen3-30b-a3b. It sets the shape and the starting layout (GPUs, t, p, batch, "
            "recompute, schedule); every flag below overrides it (trainsim config --list-models)");
    ADD(.name = "--num-layers", .type = OPT_INT, .target = &m->num_layers, .min = 1, .max = 100000, .unit = "layers",
        .defval = "required", .help = "transformer layers");
    ADD(.name = "--hidden-size", .type = OPT_INT, .target = &m->hidden_size, .min = 1, .max = 1 << 24,
        .unit = "elements", .defval = "required", .help = "hidden size h");
    ADD(.name = "--num-attention-heads", .type = OPT_INT, .target = &m->num_attention_heads, .min = 1, .max = 1 << 20,
        .unit = "heads", .defval = "required", .help = "attention heads a");
    ADD(.name = "--kv-channels", .type = OPT_INT, .target = &m->kv_channels, .min = 1, .max = 1 << 20,
        .unit = "elements", .defval = "h / a", .help = "head size d (query, key and value projections are a x d wide)");
    ADD(.name = "--group-query-attention", .type = OPT_BOOL, .target = &s->gqa,
        .help = "grouped-query attention: --num-query-groups key/value heads");
    ADD(.name = "--num-query-groups", .type = OPT_INT, .target = &m->num_query_groups, .min = 1, .max = 1 << 20,
        .unit = "KV groups", .defval = "1 with --group-query-attention; else one per head",
        .help = "key/value head groups (takes effect only with --group-query-attention, as in Megatron-LM)");
    ADD(.name = "--ffn-hidden-size", .type = OPT_INT, .target = &m->ffn_hidden_size, .min = 1, .max = 1 << 26,
        .unit = "elements", .defval = "4h; SwiGLU: 8h/3 rounded down to a multiple of 64", .help = "MLP hidden size");
    ADD(.name = "--swiglu", .type = OPT_BOOL, .target = &m->swiglu,
        .help = "SwiGLU MLP (3 weight matrices) instead of GeLU (2); --swiglu=false turns a preset's off");
    ADD(.name = "--normalization", .type = OPT_ENUM, .target = &s->normalization, .enum_names = CONFIG_NORM_NAMES,
        .help = "normalization layer (RMSNorm has a weight and no bias)");
    ADD(.name = "--qk-layernorm", .type = OPT_BOOL, .target = &m->qk_layernorm,
        .help = "a norm of --normalization's kind over each attention head's query and key (head size d) after the "
                "QKV projection, before rope (Megatron-core's q_layernorm, k_layernorm; Qwen3); with "
                "--multi-latent-attention: the norms of the compressed q and kv, which trainsim's MLA always has");
    ADD(.name = "--disable-bias-linear", .type = OPT_BOOL, .target = &s->disable_bias,
        .help = "no biases in the linear layers (Megatron-LM adds them by default)");
    ADD(.name = "--position-embedding-type", .type = OPT_ENUM, .target = &s->position,
        .enum_names = CONFIG_POSITION_NAMES,
        .help = "learned_absolute: a table of --max-position-embeddings x h on the first stage; rope/yarn: rotary, "
                "no parameters; none");
    ADD(.name = "--no-position-embedding", .type = OPT_BOOL, .target = &s->no_position_embedding,
        .help = "Megatron-LM's deprecated switch: accepted with --position-embedding-type rope (which has no "
                "learned table: no effect), refused otherwise as Megatron-LM refuses it");
    ADD(.name = "--attention-dropout", .type = OPT_DOUBLE, .target = &m->attention_dropout, .min = 0, .max = 1,
        .unit = "probability", .defval = "0.1",
        .help = "dropout on the attention scores (0: no dropout kernel and no s x s mask)");
    ADD(.name = "--hidden-dropout", .type = OPT_DOUBLE, .target = &m->hidden_dropout, .min = 0, .max = 1,
        .unit = "probability", .defval = "0.1",
        .help = "dropout after the attention and MLP blocks and the embedding (0: no masks)");
    s->attention_backend = ATTN_BACKEND_AUTO;
    ADD(.name = "--attention-backend", .type = OPT_ENUM, .target = &s->attention_backend,
        .enum_names = CONFIG_ATTN_BACKEND_NAMES, .defval = "auto",
        .help = "attention kernels: unfused/local keep the s x s scores (Korthikanti et al. 2022); flash/fused "
                "keep none (FlashAttention-2, causal: half the score FLOPs; scores recomputed in the backward); "
                "auto: flash with --bf16/--fp16 on Ampere or later, unfused otherwise (Transformer Engine's pick)");
    ADD(.name = "--use-flash-attn", .type = OPT_BOOL, .target = &s->use_flash_attn,
        .help = "flash attention: the same as --attention-backend flash");
    s->fp8_format = -1;
    ADD(.name = "--fp8-format", .type = OPT_ENUM, .target = &s->fp8_format, .enum_names = FP8_FORMATS,
        .defval = "none (bf16/fp16 GEMMs)",
        .help = "FP8 GEMMs in the transformer layers (Transformer Engine): e4m3 everywhere, or hybrid (e4m3 "
                "forward, e5m2 gradients; costed the same: 1 byte per element); needs a GPU with FP8 tensor cores");
    s->fp8_recipe = FP8_RECIPE_DELAYED;
    ADD(.name = "--fp8-recipe", .type = OPT_ENUM, .target = &s->fp8_recipe, .enum_names = CONFIG_FP8_RECIPE_NAMES,
        .defval = "delayed",
        .help = "FP8 scaling: delayed (amax history; cast + transpose kernels), tensorwise (current scaling: an "
                "amax pass before each cast), blockwise (1x128/128x128 block scales), mxfp8 (32-element block "
                "scales, no transposes; Blackwell only)");
    ADD(.name = "--fp8-param-gather", .type = OPT_BOOL, .target = &m->fp8_param_gather,
        .help = "keep the parameters in FP8 (no 16-bit copy) and all-gather them in FP8: half the bytes of the "
                "distributed optimizer's or FSDP's parameter all-gather");
    ADD(.name = "--seq-length", .type = OPT_INT, .target = &m->seq_length, .min = 1, .max = 1 << 24, .unit = "tokens",
        .defval = "required", .help = "sequence length s");
    ADD(.name = "--max-position-embeddings", .type = OPT_INT, .target = &m->max_position_embeddings, .min = 1,
        .max = 1 << 24, .unit = "tokens", .defval = "--seq-length",
        .help = "rows of the learned position table (at least --seq-length)");
    ADD(.name = "--vocab-size", .type = OPT_INT, .target = &m->vocab_size, .min = 1, .max = 1 << 26, .unit = "tokens",
        .defval = "50257 (GPT-2 BPE, pretrain_gpt.py's default tokenizer)", .help = "vocabulary before padding");
    ADD(.name = "--make-vocab-size-divisible-by", .type = OPT_INT, .target = &m->make_vocab_size_divisible_by, .min = 1,
        .max = 1 << 20, .unit = "tokens", .defval = "128",
        .help = "the vocabulary is padded to a multiple of this x t");
    ADD(.name = "--padded-vocab-size", .type = OPT_INT, .target = &m->padded_vocab_size, .min = 1, .max = 1 << 26,
        .unit = "tokens", .defval = "derived from --vocab-size",
        .help = "the vocabulary after padding, given directly (a multiple of t; excludes --vocab-size)");
    ADD(.name = "--untie-embeddings-and-output-weights", .type = OPT_BOOL, .target = &m->untie_embeddings,
        .help = "a separate output weight (V x h) instead of sharing the input embedding's");
    ADD(.name = "--bf16", .type = OPT_BOOL, .target = &s->bf16,
        .help = "bf16 mixed precision (weights, activations, gradients in 2 bytes; fp32 master weights)");
    ADD(.name = "--fp16", .type = OPT_BOOL, .target = &s->fp16, .help = "fp16 mixed precision (exclusive with --bf16)");
    ADD(.name = "--fp32", .type = OPT_BOOL, .target = &s->fp32,
        .help = "fp32 training, Megatron-LM's default without --bf16/--fp16 (weights, activations, gradients in 4 "
                "bytes, no master copy)");
    return TS_OK;
}

/* Megatron-LM's kernel fusions (layer.h: the kernels each runs) and the
 * per-iteration fixed costs' flags (plan_build.c). */
static int add_fusion_flags(flags_state *s, opt_table *t, config *c, ts_err *err)
{
    int rc;
    model_config *m = &c->model;
    SECTION("Kernel fusions and per-iteration costs (defaults are Megatron-LM's: every fusion on but cross-entropy)");
    ADD(.name = "--no-bias-gelu-fusion", .type = OPT_BOOL, .target = &m->no_bias_gelu_fusion,
        .help = "GeLU MLPs with biases: a bias-add kernel, then GeLU (instead of one fused kernel); no effect "
                "with --swiglu or --disable-bias-linear");
    ADD(.name = "--no-bias-swiglu-fusion", .type = OPT_BOOL, .target = &m->no_bias_swiglu_fusion,
        .help = "SwiGLU MLPs: [bias add], SiLU and multiply as PyTorch kernels (the SiLU output is saved too); "
                "no effect without --swiglu");
    ADD(.name = "--no-bias-dropout-fusion", .type = OPT_BOOL, .target = &m->no_bias_dropout_fusion,
        .help = "after attention and MLP: [bias add], dropout, residual add as separate kernels");
    ADD(.name = "--no-masked-softmax-fusion", .type = OPT_BOOL, .target = &m->no_masked_softmax_fusion,
        .help = "unfused/local attention: the causal mask and the softmax as separate kernels; no effect with "
                "flash or fused attention (the softmax runs inside the kernel)");
    ADD(.name = "--no-gradient-accumulation-fusion", .type = OPT_BOOL, .target = &m->no_gradient_accumulation_fusion,
        .help = "each weight-gradient GEMM writes a 16-bit temporary, then a kernel adds it into the main gradient");
    ADD(.name = "--no-rope-fusion", .type = OPT_BOOL, .target = &m->no_rope_fusion,
        .help = "rotary embedding of q and k in PyTorch element-wise ops instead of one fused kernel; no effect "
                "without --position-embedding-type rope/yarn");
    ADD(.name = "--cross-entropy-loss-fusion", .type = OPT_BOOL, .target = &m->cross_entropy_loss_fusion,
        .help = "Megatron's fused vocabulary-parallel cross-entropy (native): the reductions fused into the "
                "element-wise passes, two all-reduces instead of three");
    s->clip_grad = 1.0;
    ADD(.name = "--clip-grad", .type = OPT_DOUBLE, .target = &s->clip_grad, .min = 0, .max = 1e300, .unit = "norm",
        .defval = "1.0",
        .help = "gradient clipping: > 0 reads every gradient once for its norm and all-reduces it over the "
                "model-parallel ranks each iteration; 0: no norm");
    ADD(.name = "--no-check-for-nan-in-loss-and-grad", .type = OPT_BOOL, .target = &c->par.no_nan_check,
        .help = "no NaN check of the gradients: Megatron's default reads every gradient bucket once for its norm "
                "before the bucket's reduction (off by itself with --fp16 and no --loss-scale)");
    ADD(.name = "--check-for-large-grads", .type = OPT_BOOL, .target = &c->par.check_large_grads,
        .help = "the same per-bucket gradient norms, checked for spikes (one read, shared with the NaN check)");
    ADD(.name = "--log-num-zeros-in-grad", .type = OPT_BOOL, .target = &c->par.log_num_zeros,
        .help = "count the zero gradients each iteration: every gradient of the optimizer's shard read once, "
                "one all-reduce like the norm's");
    ADD(.name = "--loss-scale", .type = OPT_DOUBLE, .target = &c->par.loss_scale, .min = 0, .max = 1e300,
        .unit = "scale", .defval = "none (fp16: dynamic)",
        .help = "a constant loss scale: with --bf16 too, the gradients are then unscaled and checked for inf/NaN "
                "each iteration (fp16 does it always)");
    ADD(.name = "--no-create-attention-mask-in-dataloader", .type = OPT_BOOL, .target = &c->par.no_loader_attn_mask,
        .help = "the data loader's batch without the [b, 1, s, s] bool attention mask (causal attention builds its "
                "own): it is then neither copied to the GPU nor broadcast");
    ADD(.name = "--data-loader-ns", .type = OPT_DOUBLE, .target = &c->par.data_loader_ns, .min = 0, .max = 1e15,
        .unit = "ns", .defval = "modelled: host-to-GPU copies, TP broadcasts, CP slices (docs/cost-model.md)",
        .help = "the data loader's step per micro-batch on each stage that loads data (first, last), measured "
                "(e.g. trainexec's 'data step' line): replaces the modelled one");
    return TS_OK;
}

static int add_parallel_flags(flags_state *s, opt_table *t, config *c, ts_err *err)
{
    int rc;
    parallel_config *p = &c->par;
    SECTION("Parallelism and batch");
    ADD(.name = "--micro-batch-size", .type = OPT_INT, .target = &p->micro_batch_size, .min = 1, .max = 1 << 20,
        .unit = "sequences", .defval = "required", .help = "micro-batch size b");
    ADD(.name = "--global-batch-size", .type = OPT_INT, .target = &p->global_batch_size, .min = 1, .max = 1 << 30,
        .unit = "sequences", .defval = "b x d", .help = "global batch B per iteration (a multiple of b x d)");
    ADD(.name = "--tensor-model-parallel-size", .alias = "-t", .type = OPT_INT, .target = &p->tp, .min = 1,
        .max = 65536, .unit = "GPUs", .defval = "1", .help = "tensor-parallel size t");
    ADD(.name = "--pipeline-model-parallel-size", .alias = "-p", .type = OPT_INT, .target = &p->pp, .min = 1,
        .max = 65536, .unit = "GPUs", .defval = "1",
        .help = "pipeline-parallel size p (with --model, given explicitly, it drops the preset's interleaving and "
                "uneven split)");
    ADD(.name = "--data-parallel-size", .alias = "-d", .type = OPT_INT, .target = &s->dp, .min = 1, .max = 1 << 24,
        .unit = "GPUs", .defval = "derived: gpus / (t x p)",
        .help = "data-parallel size d; if given, --gpus must equal t x p x d");
    ADD(.name = "--num-layers-per-virtual-pipeline-stage", .type = OPT_INT, .target = &p->layers_per_virtual_stage,
        .min = 1, .max = 100000, .unit = "layers", .defval = "unset",
        .help = "layers per model chunk: interleaved 1F1B with v = layers / (p x this) chunks per rank; zb-v: "
                "optional, must give v = 2");
    ADD(.name = "--num-virtual-stages-per-pipeline-rank", .type = OPT_INT, .target = &s->vstages, .min = 1,
        .max = 100000, .unit = "chunks", .defval = "unset",
        .help = "model chunks v per pipeline rank: interleaved 1F1B (excludes "
                "--num-layers-per-virtual-pipeline-stage)");
    ADD(.name = "--decoder-first-pipeline-num-layers", .type = OPT_INT, .target = &p->first_stage_layers, .min = 1,
        .max = 100000, .unit = "layers", .defval = "even split",
        .help = "layers on the first pipeline stage (uneven split; the other stages share the rest evenly)");
    ADD(.name = "--decoder-last-pipeline-num-layers", .type = OPT_INT, .target = &p->last_stage_layers, .min = 1,
        .max = 100000, .unit = "layers", .defval = "even split", .help = "layers on the last pipeline stage");
    ADD(.name = "--sequence-parallel", .type = OPT_BOOL, .target = &p->sequence_parallel,
        .help = "sequence parallelism (Korthikanti et al. 2022; no effect with t = 1); --sequence-parallel=false "
                "turns a preset's off");
    ADD(.name = "--recompute-granularity", .type = OPT_ENUM, .target = &s->recompute,
        .enum_names = CONFIG_RECOMPUTE_NAMES, .help = "activation recomputation");
    ADD(.name = "--recompute-activations", .type = OPT_BOOL, .target = &s->recompute_activations,
        .help = "selective recomputation (Megatron-LM's shorthand for --recompute-granularity selective)");
    ADD(.name = "--recompute-method", .type = OPT_ENUM, .target = &s->recompute_method,
        .enum_names = CONFIG_RECOMPUTE_METHOD_NAMES,
        .help = "full recomputation: uniform (groups of --recompute-num-layers) or block (that many layers per "
                "stage)");
    ADD(.name = "--recompute-num-layers", .type = OPT_INT, .target = &p->recompute_num_layers, .min = 0, .max = 100000,
        .unit = "layers", .help = "layers per recompute group/block for full recomputation (0 = all)");
    ADD(.name = "--recompute-modules", .type = OPT_STRING, .target = &s->recompute_modules, .metavar = "MODULE...",
        .defval = "core_attn",
        .help = "selective recomputation: the modules re-run in the backward, one or more of core_attn (scores, "
                "softmax, dropout, attention.V), mlp (FC1, activation, FC2), layernorm (the norms' outputs), moe_act "
                "(the routed experts' activation; MoE models), moe (the whole MoE layer; MoE models), mla_up_proj "
                "(MLA's up-projections and rope; with --multi-latent-attention); shared_experts is refused");
    ADD(.name = "--use-distributed-optimizer", .type = OPT_BOOL, .target = &p->distributed_optimizer,
        .help = "shard optimizer state over data-parallel ranks (ZeRO-1 like)");
    ADD(.name = "--overlap-grad-reduce", .type = OPT_BOOL, .target = &p->overlap_grad_reduce,
        .help = "overlap the data-parallel gradient reduction with the backward pass");
    ADD(.name = "--ddp-bucket-size", .type = OPT_INT64, .target = &p->ddp_bucket_params, .min = 1, .max = 1e15,
        .unit = "parameters", .defval = "max(40M, 1M x d)",
        .help = "gradient bucket size with --overlap-grad-reduce (and --overlap-param-gather)");
    ADD(.name = "--overlap-param-gather", .type = OPT_BOOL, .target = &p->overlap_param_gather,
        .help = "all-gather updated parameters in buckets, each waited for at its first forward use (needs "
                "--use-distributed-optimizer and --overlap-grad-reduce); exposed: the first bucket's gather");
    ADD(.name = "--tp-comm-overlap", .type = OPT_BOOL, .target = &p->tp_comm_overlap,
        .help = "Transformer Engine userbuffers: sequence-parallel all-gathers and reduce-scatters split into "
                "chunks pipelined with their GEMMs (needs --sequence-parallel at t > 1; docs/cost-model.md)");
    ADD(.name = "--overlap-moe-expert-parallel-comm", .type = OPT_BOOL, .target = &p->overlap_moe_ep_comm,
        .help = "MoE: in the steady state one micro-batch's forward runs beside another's backward, each pass's "
                "expert-parallel all-to-alls hidden behind the other's compute (needs --expert-model-parallel-size "
                "> 1, the alltoall or flex dispatcher, interleaved or dualpipev at p > 1; docs/moe.md)");
    ADD(.name = "--delay-wgrad-compute", .type = OPT_BOOL, .target = &p->delay_wgrad,
        .help = "with --overlap-moe-expert-parallel-comm: each paired backward's weight-gradient GEMMs run after "
                "its input-gradient GEMMs, the next all-to-all of the backward starting between them (docs/moe.md)");
    ADD(.name = "--use-torch-fsdp2", .type = OPT_BOOL, .target = &p->torch_fsdp2,
        .help = "PyTorch FSDP2: optimizer state, gradients and parameters sharded over the data-parallel group; "
                "per-layer parameter all-gathers in forward and again in backward, per-layer gradient "
                "reduce-scatters (docs/simulator.md)");
    ADD(.name = "--use-megatron-fsdp", .type = OPT_BOOL, .target = &p->megatron_fsdp,
        .help = "Megatron-FSDP, sharding per --data-parallel-sharding-strategy");
    p->dp_sharding = SHARD_OPTIM_GRADS_PARAMS; /* Megatron-LM's default */
    ADD(.name = "--data-parallel-sharding-strategy", .type = OPT_ENUM, .target = &p->dp_sharding,
        .enum_names = CONFIG_SHARDING_NAMES,
        .help = "with --use-megatron-fsdp: what is sharded over the data-parallel group (optimizer state; + "
                "gradients; + parameters)");
    ADD(.name = "--no-async-tensor-model-parallel-allreduce", .type = OPT_BOOL, .target = &p->sync_tp_allreduce,
        .help = "a flag of Megatron-LM 2022-2023 releases (removed since; the 2021 code had only this behaviour): the "
                "backward's "
                "tensor-parallel input-gradient all-reduce runs after, not beside, the weight-gradient GEMM");
    /* context parallelism (sim/model/cp.h) */
    ADD(.name = "--context-parallel-size", .type = OPT_INT, .target = &p->cp, .min = 1, .max = 65536, .unit = "GPUs",
        .defval = "1",
        .help = "context-parallel size cp: the sequence split over cp ranks (2 chunks of s/(2cp) tokens each, "
                "causally balanced); the world is t x cp x d x p; needs flash or fused attention");
    ADD(.name = "--cp-comm-type", .type = OPT_ENUM, .target = &s->cp_comm, .enum_names = CONFIG_CP_COMM_NAMES,
        .defval = "p2p",
        .help = "how context-parallel ranks exchange keys and values: p2p (a ring overlapped with the attention "
                "blocks), all_gather (gathered before attention), a2a (all-to-alls of q,k,v and the output), "
                "a2a+p2p (a2a inside the first hierarchical level, a ring over the second)");
    ADD(.name = "--hierarchical-context-parallel-sizes", .type = OPT_STRING, .target = &s->hcp, .metavar = "A P",
        .unit = "GPUs", .defval = "unset",
        .help = "a2a+p2p only: the all-to-all size A and the ring size P, A x P = cp");
    return TS_OK;
}

/* Megatron-core's ways of splitting the layers unevenly over the virtual
 * stages (all reduce to par.layout, see config.h). */
static int add_layout_flags(flags_state *s, opt_table *t, config *c, ts_err *err)
{
    int rc;
    parallel_config *p = &c->par;
    ADD(.name = "--pipeline-model-parallel-layout", .type = OPT_STRING, .target = &s->pipeline_layout,
        .metavar = "LAYOUT",
        .help = "Megatron-core layout of the virtual stages: E embedding, t transformer layer, L loss, | stage "
                "boundary, *N repeat, ( ) group; stages listed chunk-major (chunk 0 of ranks 0..p-1, then chunk 1 "
                "...), a multiple of p of them (v = stages / p), layers summing to --num-layers; e.g. Llama 3 "
                "405B at p 16: 'Et*3|(t*4|)*30t*3L' (docs/schedules.md)");
    ADD(.name = "--account-for-embedding-in-pipeline-split", .type = OPT_BOOL, .target = &p->account_for_embedding,
        .help = "count the embedding as one layer of the split: the first virtual stage gets one transformer layer "
                "fewer ((layers + 1 [+ 1]) must split evenly over p x v)");
    ADD(.name = "--account-for-loss-in-pipeline-split", .type = OPT_BOOL, .target = &p->account_for_loss,
        .help = "count the loss as one layer of the split: the last virtual stage gets one transformer layer fewer");
    return TS_OK;
}

static int add_cluster_flags(flags_state *s, opt_table *t, config *c, ts_err *err)
{
    int rc;
    SECTION("Schedule");
    ADD(.name = "--schedule", .type = OPT_ENUM, .target = &s->schedule, .enum_names = SCHED_NAMES,
        .defval = "1f1b; interleaved with a virtual-pipeline flag",
        .help = "pipeline schedule (interleaved = Megatron's interleaved 1F1B; zb-* = zero bubble, Qi et al. "
                "2024; gpipe; dualpipev = DeepSeek-V3's DualPipeV, V placement, m >= 2p; dualpipe: trainsim schedule "
                "only)");
    SECTION("Cluster");
    ADD(.name = "--gpus", .alias = "-n", .type = OPT_INT, .target = &c->cluster.gpus, .min = 1, .max = 1 << 24,
        .unit = "GPUs", .defval = "t x p x d (d = 1 unless given)",
        .help = "GPUs in the run (the launcher's world size)");
    ADD(.name = "--gpu", .type = OPT_STRING, .target = &s->gpu, .metavar = "KIND",
        .defval = "the topology's, else " FLAGS_DEFAULT_GPU,
        .help = "GPU kind from topologies/gpus.csv: A100-SXM4-40GB, A100-SXM4-80GB, H100-SXM5-80GB, H200-SXM-141GB "
                "(or an alias: a100, h100, h200); or 'cpu': a device with no datasheet, all of whose compute "
                "and link costs come from --calibration FILE (trainsim calibrate)");
    ADD(.name = "--topology", .type = OPT_STRING, .target = &s->topology, .metavar = "FILE",
        .defval = "built-in: DGX A100 80GB nodes, 3-level HDR fat tree like Selene, sized to --gpus (DGX H100-like "
                  "for --gpu h100/h200)",
        .help = "cluster topology CSV, parametric or link list (topologies/*.csv; docs/inputs.md)");
    ADD(.name = "--megatron-script", .type = OPT_STRING, .target = &s->megatron_script, .metavar = "FILE",
        .defval = "none",
        .help = "a Megatron-LM bash launch script (torchrun ... pretrain_gpt.py ${GPT_MODEL_ARGS[@]} ...), read and "
                "never run: its pretrain_gpt.py arguments come first, flags on the command line override them; "
                "--gpus = the launcher's nproc_per_node x nnodes (docs/inputs.md)");
    return TS_OK;
}

/* Memory besides tensors (config.h memory_overheads, overheads.h): every
 * field starts at OVERHEADS_DEFAULT, which config_resolve replaces by
 * the GPU kind's figure unless the flag is given. */
int flags_register_memory(opt_table *t, memory_overheads *o, ts_err *err)
{
    int rc;
    o->cuda_context_gib = o->nccl_buffer_mib = o->cublas_workspace_mib = OVERHEADS_DEFAULT;
    o->allocator_fragmentation = OVERHEADS_DEFAULT;
    o->nccl_channels = (int)OVERHEADS_DEFAULT;
    SECTION("Memory besides tensors (added to every GPU's peak; docs/simulator.md#memory)");
    ADD(.name = "--cuda-context-gib", .type = OPT_DOUBLE, .target = &o->cuda_context_gib, .min = 0, .max = 1024,
        .unit = "GiB", .defval = "the GPU's (gpus.csv): 0.75 A100, 1.0 H100/H200",
        .help = "CUDA context and loaded kernel modules (cuBLAS, NCCL, framework) per GPU; a stated estimate");
    ADD(.name = "--nccl-buffer-mib", .type = OPT_DOUBLE, .target = &o->nccl_buffer_mib, .min = 0, .max = 65536,
        .unit = "MiB", .defval = "9.1875 (NCCL defaults: Simple 4 + LL128 4.6875 + LL 0.5)",
        .help = "NCCL buffers per channel per peer; a rank holds communicators x channels x 2 peers of them");
    ADD(.name = "--nccl-channels", .type = OPT_INT, .target = &o->nccl_channels, .min = 0, .max = 64,
        .unit = "channels", .defval = "the GPU's (gpus.csv): 16 A100, 32 H100/H200",
        .help = "NCCL channels per communicator (TP, PP, DP, tied-embedding groups)");
    ADD(.name = "--cublas-workspace-mib", .type = OPT_DOUBLE, .target = &o->cublas_workspace_mib, .min = 0,
        .max = 65536, .unit = "MiB", .defval = "the GPU's (gpus.csv): 4 A100, 32 H100/H200",
        .help = "cuBLAS workspace per GEMM stream (cuBLAS's documented default per architecture)");
    ADD(.name = "--allocator-fragmentation", .type = OPT_DOUBLE, .target = &o->allocator_fragmentation, .min = 0,
        .max = 10, .unit = "fraction", .defval = "0.10 (estimate; 0 for --gpu cpu)",
        .help = "caching-allocator overhead on the activations and pipeline buffers live (0.10 = 10% more)");
    return TS_OK;
}

int flags_register(flags_state *s, opt_table *t, config *c, ts_err *err)
{
    memset(s, 0, sizeof *s);
    memset(c, 0, sizeof *c);
    s->c = c;
    fill_sched_names();
    s->first_entry = t->n;
    int rc;
    if ((rc = add_model_flags(s, t, c, err)) || (rc = add_fusion_flags(s, t, c, err)) ||
        (rc = add_parallel_flags(s, t, c, err)) || (rc = add_layout_flags(s, t, c, err)) ||
        (rc = add_cluster_flags(s, t, c, err)) || (rc = flags_register_memory(t, &c->cluster.overheads, err)))
        return rc;
    if ((rc = moe_flags_register(&s->moe, t, c, err))) /* mixture of experts, MLA (moe_flags.h) */
        return rc;
    s->end_entry = t->n;
    return TS_OK;
}

/* ---------------------------------------------------------------- Megatron-LM flags */

const char *flags_ignored(const flags_state *s)
{
    return s->megatron_ignored;
}

void flags_note_ignored(const flags_state *s, FILE *f)
{
    if (s->megatron_ignored)
        fprintf(f, "ignored (cannot change performance): %s\n", s->megatron_ignored);
}

void flags_note_fusions(const config *c, FILE *f)
{
    const model_config *m = &c->model;
    bool rope = m->position_embedding == POS_ROPE || m->position_embedding == POS_YARN;
    const char *why[6];
    const char *flag[6];
    int n = 0;
    if (m->no_bias_gelu_fusion && (m->swiglu || !m->add_bias_linear)) {
        flag[n] = "--no-bias-gelu-fusion";
        why[n++] =
            m->swiglu ? "a SwiGLU MLP: --no-bias-swiglu-fusion applies" : "no biases: GeLU runs alone either way";
    }
    if (m->no_bias_swiglu_fusion && !m->swiglu) {
        flag[n] = "--no-bias-swiglu-fusion";
        why[n++] = "a GeLU MLP: --no-bias-gelu-fusion applies";
    }
    if (m->no_masked_softmax_fusion && config_attn_is_flash(m->attention_backend)) {
        flag[n] = "--no-masked-softmax-fusion";
        why[n++] = "flash/fused attention runs the softmax inside its kernel";
    }
    if (m->no_rope_fusion && !rope) {
        flag[n] = "--no-rope-fusion";
        why[n++] = "no rotary position embedding";
    }
    for (int i = 0; i < n; i++)
        fprintf(f, "no effect here: %s (%s)\n", flag[i], why[i]);
}

int flags_print_megatron(FILE *f, ts_err *err)
{
    config c;
    flags_state s;
    opt_table t;
    opt_table_init(&t, "trainsim", NULL);
    mflags_table *mt = NULL;
    int rc = flags_register(&s, &t, &c, err);
    if (!rc)
        rc = mflags_load(NULL, &mt, err);
    if (!rc)
        rc = mflags_print(mt, &t, f, err);
    mflags_free(mt);
    config_free(&c);
    opt_table_free(&t);
    return rc;
}
