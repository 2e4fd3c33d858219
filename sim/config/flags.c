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

#define DEFAULT_GPU "A100-SXM4-80GB"

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
                "(the routed experts' activation; MoE models), mla_up_proj (MLA's up-projections and rope; with "
                "--multi-latent-attention); moe, shared_experts are refused");
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
        .defval = "the topology's, else " DEFAULT_GPU,
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

/* ---------------------------------------------------------------- finish */

/* Megatron-LM's argument defaults (megatron/training/arguments.py) for the
 * fields it has defaults for; 0 marks a required or derived value. */
#define MEGATRON_VOCAB                   50257 /* GPT2BPETokenizer, pretrain_gpt.py's default tokenizer */
#define MEGATRON_MAKE_VOCAB_DIVISIBLE_BY 128
#define MEGATRON_DROPOUT                 0.1 /* --attention-dropout and --hidden-dropout */

static void megatron_defaults(config *b)
{
    memset(b, 0, sizeof *b);
    snprintf(b->model.name, sizeof b->model.name, "custom");
    b->model.vocab_size = MEGATRON_VOCAB;
    b->model.make_vocab_size_divisible_by = MEGATRON_MAKE_VOCAB_DIVISIBLE_BY;
    b->model.add_bias_linear = true;
    b->model.normalization = NORM_LAYERNORM;
    b->model.position_embedding = POS_LEARNED_ABSOLUTE;
    b->model.attention_dropout = MEGATRON_DROPOUT;
    b->model.hidden_dropout = MEGATRON_DROPOUT;
    b->model.precision = PREC_FP32;
    b->model.attention_backend = ATTN_BACKEND_AUTO;
    b->par.tp = 1;
    b->par.pp = 1;
    b->par.schedule = SCHED_1F1B;
}

/* A preset over Megatron-LM's defaults: what models.csv gives. */
static int preset_base(const catalog_model *pm, config *b, ts_err *err)
{
    megatron_defaults(b);
    b->model = pm->model;
    b->model.make_vocab_size_divisible_by = MEGATRON_MAKE_VOCAB_DIVISIBLE_BY;
    b->model.attention_dropout = MEGATRON_DROPOUT; /* no preset sets them */
    b->model.hidden_dropout = MEGATRON_DROPOUT;
    b->model.attention_backend = ATTN_BACKEND_AUTO; /* no preset sets it: Megatron-LM's default */
    b->par = pm->par;
    b->moe = pm->moe;
    b->cluster.gpus = pm->gpus;
    if (sched_kind_parse(pm->schedule, &b->par.schedule, err))
        return err_prefix(err, "model preset %s (topologies/models.csv), column 'schedule': ", pm->model.name);
    return TS_OK;
}

static void rule(flags_state *s, flags_field f, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void rule(flags_state *s, flags_field f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->rule[f], sizeof s->rule[f], fmt, ap);
    va_end(ap);
    s->src[f] = FLAGS_SRC_DERIVED;
}

/* The field's flag was given: keep its value. Otherwise take the base's
 * and record where it came from. */
#define TAKE(F, flag, dst, base)                                                                                       \
    do {                                                                                                               \
        if (opt_was_set(t, flag)) {                                                                                    \
            s->src[F] = FLAGS_SRC_FLAG;                                                                                \
        } else {                                                                                                       \
            (dst) = (base);                                                                                            \
            s->src[F] = basesrc;                                                                                       \
        }                                                                                                              \
    } while (0)

static const char *const REQUIRED[] = {"--num-layers", "--hidden-size",      "--num-attention-heads",
                                       "--seq-length", "--micro-batch-size", NULL};

/* Megatron-LM's required flags, when no preset gives them. */
static int check_required(const opt_table *t, ts_err *err)
{
    char miss[256] = "";
    size_t off = 0;
    for (int i = 0; REQUIRED[i]; i++)
        if (!opt_was_set(t, REQUIRED[i]) && off < sizeof miss)
            off += (size_t)snprintf(miss + off, sizeof miss - off, "%s%s", off ? ", " : "", REQUIRED[i]);
    if (off)
        return err_set(err, TS_EINVAL,
                       "no model: Megatron-LM requires %s (missing: %s); or start from a preset with --model NAME "
                       "(trainsim config --list-models; --model " FLAGS_DEFAULT_MODEL " is the built-in default)",
                       "--num-layers, --hidden-size, --num-attention-heads, --seq-length and --micro-batch-size", miss);
    return TS_OK;
}

static int resolve_model(flags_state *s, const opt_table *t, const config *base, flags_source basesrc, ts_err *err)
{
    model_config *m = &s->c->model;
    const model_config *q = &base->model;
    bool preset = basesrc != FLAGS_SRC_MEGATRON;
    bool set_h = opt_was_set(t, "--hidden-size"), set_sw = opt_was_set(t, "--swiglu");
    bool set_heads = opt_was_set(t, "--num-attention-heads");
    TAKE(FLAGS_F_LAYERS, "--num-layers", m->num_layers, q->num_layers);
    TAKE(FLAGS_F_HIDDEN, "--hidden-size", m->hidden_size, q->hidden_size);
    TAKE(FLAGS_F_HEADS, "--num-attention-heads", m->num_attention_heads, q->num_attention_heads);
    TAKE(FLAGS_F_SWIGLU, "--swiglu", m->swiglu, q->swiglu);
    TAKE(FLAGS_F_SEQ, "--seq-length", m->seq_length, q->seq_length);
    TAKE(FLAGS_F_ADROP, "--attention-dropout", m->attention_dropout, q->attention_dropout);
    TAKE(FLAGS_F_HDROP, "--hidden-dropout", m->hidden_dropout, q->hidden_dropout);
    if (!opt_was_set(t, "--attention-dropout"))
        s->src[FLAGS_F_ADROP] = FLAGS_SRC_MEGATRON;
    if (!opt_was_set(t, "--hidden-dropout"))
        s->src[FLAGS_F_HDROP] = FLAGS_SRC_MEGATRON;
    TAKE(FLAGS_F_UNTIE, "--untie-embeddings-and-output-weights", m->untie_embeddings, q->untie_embeddings);
    TAKE(FLAGS_F_MAKEDIV, "--make-vocab-size-divisible-by", m->make_vocab_size_divisible_by,
         q->make_vocab_size_divisible_by);
    if (!opt_was_set(t, "--make-vocab-size-divisible-by"))
        s->src[FLAGS_F_MAKEDIV] = FLAGS_SRC_MEGATRON; /* no preset sets it */
    if (opt_was_set(t, "--normalization")) {
        m->normalization = (config_norm)s->normalization;
        s->src[FLAGS_F_NORM] = FLAGS_SRC_FLAG;
    } else {
        m->normalization = q->normalization;
        s->src[FLAGS_F_NORM] = basesrc;
    }
    if (opt_was_set(t, "--position-embedding-type")) {
        m->position_embedding = (config_position)s->position;
        s->src[FLAGS_F_POS] = FLAGS_SRC_FLAG;
    } else {
        m->position_embedding = q->position_embedding;
        s->src[FLAGS_F_POS] = basesrc;
    }
    /* Megatron-LM's validate_args (arguments.py): "--no-position-embedding is deprecated, use
     * --position-embedding-type" unless the type is rope, whose rotary embedding has no table to drop */
    if (opt_was_set(t, "--no-position-embedding") && s->no_position_embedding && m->position_embedding != POS_ROPE)
        return err_set(err, TS_EINVAL,
                       "--no-position-embedding with --position-embedding-type %s: Megatron-LM refuses it (deprecated; "
                       "it is accepted only with rope, where it changes nothing): give --position-embedding-type none",
                       CONFIG_POSITION_NAMES[m->position_embedding]);
    m->add_bias_linear = opt_was_set(t, "--disable-bias-linear") ? !s->disable_bias : q->add_bias_linear;
    s->src[FLAGS_F_BIAS] = opt_was_set(t, "--disable-bias-linear") ? FLAGS_SRC_FLAG : basesrc;

    /* --kv-channels: Megatron-LM derives h / a */
    if (opt_was_set(t, "--kv-channels")) {
        s->src[FLAGS_F_KV] = FLAGS_SRC_FLAG;
    } else if (preset && !set_h && !set_heads && q->kv_channels > 0 && q->num_attention_heads > 0 &&
               q->kv_channels != q->hidden_size / q->num_attention_heads) {
        m->kv_channels = q->kv_channels; /* the preset's head size (models.csv kv_channels) */
        s->src[FLAGS_F_KV] = basesrc;
    } else {
        m->kv_channels = m->num_attention_heads > 0 && m->hidden_size % m->num_attention_heads == 0
                             ? m->hidden_size / m->num_attention_heads
                             : 0;
        rule(s, FLAGS_F_KV, "h / a");
    }
    /* grouped-query attention: a GQA preset counts as --group-query-attention */
    bool gqa = s->gqa || (preset && !opt_was_set(t, "--group-query-attention") && q->num_query_groups > 0 &&
                          q->num_query_groups < q->num_attention_heads);
    if (opt_was_set(t, "--num-query-groups")) {
        if (!gqa)
            return err_set(err, TS_EINVAL,
                           "--num-query-groups %d takes effect only with --group-query-attention (Megatron-LM "
                           "ignores it otherwise): add --group-query-attention, or drop --num-query-groups",
                           m->num_query_groups);
        s->src[FLAGS_F_GROUPS] = FLAGS_SRC_FLAG;
    } else if (!gqa) {
        m->num_query_groups = m->num_attention_heads;
        rule(s, FLAGS_F_GROUPS, "one per head (no --group-query-attention)");
    } else if (preset && q->num_query_groups < q->num_attention_heads &&
               (!set_heads || m->num_attention_heads % q->num_query_groups == 0)) {
        m->num_query_groups = q->num_query_groups; /* the preset's groups, while they divide the heads */
        s->src[FLAGS_F_GROUPS] = basesrc;
    } else {
        m->num_query_groups = 1; /* Megatron-LM's default for --num-query-groups */
        s->src[FLAGS_F_GROUPS] = FLAGS_SRC_MEGATRON;
    }
    /* --ffn-hidden-size: the preset's, unless h or the MLP kind changed */
    if (opt_was_set(t, "--ffn-hidden-size")) {
        s->src[FLAGS_F_FFN] = FLAGS_SRC_FLAG;
    } else if (preset && !set_h && !set_sw) {
        m->ffn_hidden_size = q->ffn_hidden_size;
        s->src[FLAGS_F_FFN] = basesrc;
    } else if (m->swiglu) { /* Megatron-LM's rule (arguments.py) */
        m->ffn_hidden_size = (int)((4.0 * m->hidden_size * 2 / 3) / 64) * 64;
        rule(s, FLAGS_F_FFN, "SwiGLU: 8h/3 rounded down to a multiple of 64");
    } else {
        m->ffn_hidden_size = 4 * m->hidden_size;
        rule(s, FLAGS_F_FFN, "4h");
    }
    if (opt_was_set(t, "--max-position-embeddings")) {
        s->src[FLAGS_F_MAXPOS] = FLAGS_SRC_FLAG;
    } else {
        m->max_position_embeddings = m->seq_length;
        rule(s, FLAGS_F_MAXPOS, "= --seq-length (the smallest table Megatron-LM accepts)");
    }
    m->precision = s->fp32 ? PREC_FP32 : s->fp16 ? PREC_FP16 : s->bf16 ? PREC_BF16 : q->precision;
    s->src[FLAGS_F_PREC] = s->fp32 || s->fp16 || s->bf16 ? FLAGS_SRC_FLAG : basesrc;

    static const char *const SHAPE[] = {"--num-layers",
                                        "--hidden-size",
                                        "--num-attention-heads",
                                        "--kv-channels",
                                        "--num-query-groups",
                                        "--group-query-attention",
                                        "--ffn-hidden-size",
                                        "--swiglu",
                                        "--seq-length",
                                        "--vocab-size",
                                        "--padded-vocab-size",
                                        "--untie-embeddings-and-output-weights",
                                        "--disable-bias-linear",
                                        "--normalization",
                                        "--position-embedding-type",
                                        NULL};
    bool changed = false;
    for (int i = 0; SHAPE[i]; i++)
        changed |= opt_was_set(t, SHAPE[i]);
    if (basesrc == FLAGS_SRC_BUILTIN)
        snprintf(m->name, sizeof m->name, "%.40s (built-in default)", q->name);
    else if (preset)
        snprintf(m->name, sizeof m->name, "%.40s%s", q->name, changed ? " (modified)" : "");
    else
        snprintf(m->name, sizeof m->name, "custom");
    return TS_OK;
}

/* The vocabulary, once t is known: --padded-vocab-size as given, or the
 * preset's padded size, or --vocab-size padded as Megatron-LM pads it. */
static int resolve_vocab(flags_state *s, const opt_table *t, const config *base, flags_source basesrc, ts_err *err)
{
    model_config *m = &s->c->model;
    bool set_v = opt_was_set(t, "--vocab-size"), set_pv = opt_was_set(t, "--padded-vocab-size");
    if (set_v && set_pv)
        return err_set(err, TS_EINVAL,
                       "--vocab-size and --padded-vocab-size exclude each other (give the tokenizer's size with "
                       "--vocab-size, padded as Megatron-LM pads it, or the padded size itself)");
    if (set_pv) {
        m->vocab_size = 0;
        s->src[FLAGS_F_PADDED] = FLAGS_SRC_FLAG;
        s->src[FLAGS_F_VOCAB] = FLAGS_SRC_FLAG;
        snprintf(s->rule[FLAGS_F_VOCAB], sizeof s->rule[FLAGS_F_VOCAB], "(not used: --padded-vocab-size given)");
        return TS_OK;
    }
    if (!set_v && base->model.vocab_size == 0) { /* a preset with a published padded size */
        m->vocab_size = 0;
        m->padded_vocab_size = base->model.padded_vocab_size;
        s->src[FLAGS_F_PADDED] = basesrc;
        s->src[FLAGS_F_VOCAB] = basesrc;
        snprintf(s->rule[FLAGS_F_VOCAB], sizeof s->rule[FLAGS_F_VOCAB], "(the preset gives the padded size)");
        return TS_OK;
    }
    if (!set_v) {
        m->vocab_size = base->model.vocab_size;
        s->src[FLAGS_F_VOCAB] = basesrc;
    } else {
        s->src[FLAGS_F_VOCAB] = FLAGS_SRC_FLAG;
    }
    int rc = config_pad_vocab(m->vocab_size, m->make_vocab_size_divisible_by, s->c->par.tp, &m->padded_vocab_size, err);
    if (rc)
        return rc;
    rule(s, FLAGS_F_PADDED, "--vocab-size padded to a multiple of %d x t = %lld", m->make_vocab_size_divisible_by,
         (long long)m->make_vocab_size_divisible_by * s->c->par.tp);
    return TS_OK;
}

static int resolve_recompute(flags_state *s, const opt_table *t, const config *base, flags_source basesrc, ts_err *err)
{
    parallel_config *p = &s->c->par;
    bool set_g = opt_was_set(t, "--recompute-granularity");
    if (s->recompute_activations) {
        if (set_g && s->recompute != RECOMPUTE_SELECTIVE)
            return err_set(err, TS_EINVAL,
                           "--recompute-activations means --recompute-granularity selective; it conflicts with "
                           "--recompute-granularity %s (give one)",
                           CONFIG_RECOMPUTE_NAMES[s->recompute]);
        p->recompute = RECOMPUTE_SELECTIVE;
        s->src[FLAGS_F_RECOMPUTE] = FLAGS_SRC_FLAG;
    } else if (set_g) {
        p->recompute = (config_recompute)s->recompute;
        s->src[FLAGS_F_RECOMPUTE] = FLAGS_SRC_FLAG;
    } else {
        p->recompute = base->par.recompute;
        s->src[FLAGS_F_RECOMPUTE] = basesrc;
    }
    p->recompute_method = (config_recompute_method)s->recompute_method;
    s->src[FLAGS_F_RMETHOD] = opt_was_set(t, "--recompute-method") ? FLAGS_SRC_FLAG : FLAGS_SRC_MEGATRON;
    if (opt_was_set(t, "--recompute-method") && p->recompute != RECOMPUTE_FULL) /* as Megatron-LM */
        return err_set(err, TS_EINVAL, "--recompute-method applies to --recompute-granularity full only (got %s)",
                       CONFIG_RECOMPUTE_NAMES[p->recompute]);
    if (!opt_was_set(t, "--recompute-num-layers"))
        p->recompute_num_layers = 0;
    s->src[FLAGS_F_RLAYERS] = opt_was_set(t, "--recompute-num-layers") ? FLAGS_SRC_FLAG : FLAGS_SRC_MEGATRON;
    p->recompute_modules = opt_was_set(t, "--recompute-modules") ? s->rc_modules : 0;
    s->src[FLAGS_F_RMODULES] = opt_was_set(t, "--recompute-modules") ? FLAGS_SRC_FLAG : FLAGS_SRC_MEGATRON;
    return TS_OK;
}

/* --attention-backend and --use-flash-attn; auto is resolved by
 * config_resolve, once the GPU and the precision are known. */
static int resolve_attention(flags_state *s, const opt_table *t, ts_err *err)
{
    model_config *m = &s->c->model;
    bool set_b = opt_was_set(t, "--attention-backend");
    if (s->use_flash_attn && set_b && s->attention_backend != ATTN_BACKEND_FLASH)
        return err_set(err, TS_EINVAL,
                       "--use-flash-attn means --attention-backend flash; it conflicts with "
                       "--attention-backend %s (give one)",
                       CONFIG_ATTN_BACKEND_NAMES[s->attention_backend]);
    m->attention_backend = s->use_flash_attn ? ATTN_BACKEND_FLASH : (config_attn_backend)s->attention_backend;
    m->fp8_format = s->fp8_format < 0 ? FP8_FORMAT_NONE : (config_fp8_format)(s->fp8_format + 1);
    m->fp8_recipe = (config_fp8_recipe)s->fp8_recipe;
    s->src[FLAGS_F_ATTN] = set_b || s->use_flash_attn ? FLAGS_SRC_FLAG : FLAGS_SRC_MEGATRON;
    return TS_OK;
}

/* --pipeline-model-parallel-layout into par.layout. A layout is the whole
 * split, so it drops the preset's (not explicitly given) first/last split
 * and interleaving, and without --schedule more stages than p mean
 * interleaved 1F1B (Megatron-core takes v from the layout); the
 * account-for flags and an explicit virtual-pipeline flag drop the
 * preset's first/last split too (it was chosen for the preset's chunks). */
static int resolve_pipeline_layout(flags_state *s, const opt_table *t, ts_err *err)
{
    parallel_config *p = &s->c->par;
    p->layout_given = s->pipeline_layout != NULL;
    bool chunks = opt_was_set(t, "--num-virtual-stages-per-pipeline-rank") ||
                  opt_was_set(t, "--num-layers-per-virtual-pipeline-stage");
    const char *why = p->layout_given                                   ? "--pipeline-model-parallel-layout"
                      : p->account_for_embedding || p->account_for_loss ? "an account-for flag"
                                                                        : "a virtual-pipeline flag";
    if ((p->layout_given || p->account_for_embedding || p->account_for_loss || chunks) &&
        (p->first_stage_layers || p->last_stage_layers)) {
        if (!opt_was_set(t, "--decoder-first-pipeline-num-layers")) {
            p->first_stage_layers = 0;
            rule(s, FLAGS_F_FIRST, "the preset's uneven split dropped (%s given)", why);
        }
        if (!opt_was_set(t, "--decoder-last-pipeline-num-layers")) {
            p->last_stage_layers = 0;
            rule(s, FLAGS_F_LAST, "the preset's uneven split dropped (%s given)", why);
        }
    }
    if (p->layout_given && !opt_was_set(t, "--num-layers-per-virtual-pipeline-stage") && p->layers_per_virtual_stage) {
        p->layers_per_virtual_stage = 0;
        rule(s, FLAGS_F_VP, "the preset's interleaving dropped (%s given)", why);
    }
    if (!p->layout_given)
        return TS_OK;
    int rc = sched_layout_parse(s->pipeline_layout, &p->layout, err);
    if (rc)
        return err_prefix(err, "--pipeline-model-parallel-layout: ");
    if (!opt_was_set(t, "--schedule") && p->layout.n_stages > p->pp) {
        p->schedule = SCHED_INTERLEAVED;
        rule(s, FLAGS_F_SCHEDULE, "interleaved 1F1B (the layout lists more stages than p)");
    }
    return TS_OK;
}

/* The schedule and its virtual stages. */
static int resolve_schedule(flags_state *s, const opt_table *t, const config *base, flags_source basesrc, ts_err *err)
{
    parallel_config *p = &s->c->par;
    const parallel_config *q = &base->par;
    bool set_pp = opt_was_set(t, "--pipeline-model-parallel-size") && basesrc != FLAGS_SRC_MEGATRON && p->pp != q->pp;
    bool set_lv = opt_was_set(t, "--num-layers-per-virtual-pipeline-stage");
    bool set_vs = opt_was_set(t, "--num-virtual-stages-per-pipeline-rank");
    bool set_sched = opt_was_set(t, "--schedule");
    if (set_lv && set_vs) /* Megatron-LM asserts the same */
        return err_set(err, TS_EINVAL,
                       "--num-layers-per-virtual-pipeline-stage and --num-virtual-stages-per-pipeline-rank exclude "
                       "each other (give one)");
    /* an uneven split (first/last, account-for, layout string) keeps the
     * chunk count for config_resolve; an even one becomes layers per chunk */
    bool uneven = opt_was_set(t, "--decoder-first-pipeline-num-layers") ||
                  opt_was_set(t, "--decoder-last-pipeline-num-layers") ||
                  opt_was_set(t, "--account-for-embedding-in-pipeline-split") ||
                  opt_was_set(t, "--account-for-loss-in-pipeline-split") || s->pipeline_layout;
    p->virtual_stages_per_rank = set_vs && uneven ? s->vstages : 0;
    if (set_vs && !uneven) {
        long per = (long)p->pp * s->vstages;
        if (s->c->model.num_layers % per)
            return err_set(err, TS_EINVAL,
                           "--num-virtual-stages-per-pipeline-rank %d: --num-layers %d is not divisible by p x v = "
                           "%d x %d = %ld",
                           s->vstages, s->c->model.num_layers, p->pp, s->vstages, per);
        p->layers_per_virtual_stage = (int)(s->c->model.num_layers / per);
    }
    if (set_lv || set_vs) {
        s->src[FLAGS_F_VP] = FLAGS_SRC_FLAG;
    } else if (set_pp || (set_sched && s->schedule != SCHED_INTERLEAVED) || basesrc == FLAGS_SRC_MEGATRON) {
        p->layers_per_virtual_stage = 0;
        if (basesrc == FLAGS_SRC_MEGATRON)
            s->src[FLAGS_F_VP] = FLAGS_SRC_MEGATRON;
        else
            rule(s, FLAGS_F_VP, "the preset's interleaving dropped (%s given)", set_pp ? "-p" : "--schedule");
    } else {
        p->layers_per_virtual_stage = q->layers_per_virtual_stage;
        s->src[FLAGS_F_VP] = basesrc;
    }
    if (set_sched) {
        p->schedule = (sched_kind)s->schedule;
        s->src[FLAGS_F_SCHEDULE] = FLAGS_SRC_FLAG;
    } else if (set_lv || set_vs) {
        p->schedule = SCHED_INTERLEAVED;
        rule(s, FLAGS_F_SCHEDULE, "interleaved 1F1B (a virtual-pipeline flag is given)");
    } else if (basesrc == FLAGS_SRC_MEGATRON || (set_pp && q->schedule == SCHED_INTERLEAVED)) {
        p->schedule = SCHED_1F1B;
        s->src[FLAGS_F_SCHEDULE] = FLAGS_SRC_MEGATRON;
    } else {
        p->schedule = q->schedule;
        s->src[FLAGS_F_SCHEDULE] = basesrc;
    }
    bool set_first = opt_was_set(t, "--decoder-first-pipeline-num-layers");
    bool set_last = opt_was_set(t, "--decoder-last-pipeline-num-layers");
    if (!set_first)
        p->first_stage_layers = set_pp ? 0 : q->first_stage_layers;
    if (!set_last)
        p->last_stage_layers = set_pp ? 0 : q->last_stage_layers;
    s->src[FLAGS_F_FIRST] = set_first ? FLAGS_SRC_FLAG : set_pp ? FLAGS_SRC_MEGATRON : basesrc;
    s->src[FLAGS_F_LAST] = set_last ? FLAGS_SRC_FLAG : set_pp ? FLAGS_SRC_MEGATRON : basesrc;
    return TS_OK;
}

static int resolve_layout(flags_state *s, const opt_table *t, const config *base, flags_source basesrc, ts_err *err)
{
    parallel_config *p = &s->c->par;
    const parallel_config *q = &base->par;
    int rc;
    TAKE(FLAGS_F_TP, "--tensor-model-parallel-size", p->tp, q->tp);
    TAKE(FLAGS_F_PP, "--pipeline-model-parallel-size", p->pp, q->pp);
    TAKE(FLAGS_F_MBS, "--micro-batch-size", p->micro_batch_size, q->micro_batch_size);
    TAKE(FLAGS_F_SP, "--sequence-parallel", p->sequence_parallel, q->sequence_parallel);
    TAKE(FLAGS_F_DISTOPT, "--use-distributed-optimizer", p->distributed_optimizer, q->distributed_optimizer);
    TAKE(FLAGS_F_OVERLAP, "--overlap-grad-reduce", p->overlap_grad_reduce, false);
    if (!opt_was_set(t, "--overlap-grad-reduce"))
        s->src[FLAGS_F_OVERLAP] = FLAGS_SRC_MEGATRON;
    if (!opt_was_set(t, "--no-async-tensor-model-parallel-allreduce"))
        p->sync_tp_allreduce = q->sync_tp_allreduce;
    p->no_clip_grad = s->clip_grad <= 0;
    if ((rc = resolve_recompute(s, t, base, basesrc, err)) || (rc = resolve_attention(s, t, err)) ||
        (rc = resolve_schedule(s, t, base, basesrc, err)))
        return rc;
    p->dp = opt_was_set(t, "--data-parallel-size") ? s->dp : 0;
    p->vp = 0;
    /* context parallelism: the flags, else the preset's */
    if (!opt_was_set(t, "--context-parallel-size"))
        p->cp = q->cp;
    p->cp_comm = opt_was_set(t, "--cp-comm-type") ? (config_cp_comm)s->cp_comm : q->cp_comm;
    if (opt_was_set(t, "--hierarchical-context-parallel-sizes")) {
        p->cp_a2a = s->hcp_a2a;
        p->cp_p2p = s->hcp_p2p;
    } else {
        p->cp_a2a = q->cp_a2a;
        p->cp_p2p = q->cp_p2p;
    }
    /* GPUs: the preset's, or t x p x d (the smallest world the layout runs on) */
    if (opt_was_set(t, "--gpus")) {
        s->src[FLAGS_F_GPUS] = FLAGS_SRC_FLAG;
    } else if (basesrc != FLAGS_SRC_MEGATRON) {
        s->c->cluster.gpus = base->cluster.gpus;
        s->src[FLAGS_F_GPUS] = basesrc;
    } else {
        long g = (long)p->tp * p->pp * (p->dp > 0 ? p->dp : 1) * (p->cp > 1 ? p->cp : 1);
        if (g > (1L << 24))
            return err_set(err, TS_EINVAL, "t x p x d = %ld GPUs is past the limit of %d", g, 1 << 24);
        s->c->cluster.gpus = (int)g;
        rule(s, FLAGS_F_GPUS, "t x p x d (no --gpus; d = %d)", p->dp > 0 ? p->dp : 1);
    }
    s->src[FLAGS_F_DP] = opt_was_set(t, "--data-parallel-size") ? FLAGS_SRC_FLAG : FLAGS_SRC_DERIVED;
    if (!opt_was_set(t, "--data-parallel-size"))
        snprintf(s->rule[FLAGS_F_DP], sizeof s->rule[FLAGS_F_DP], "gpus / (t x p)");
    /* global batch: the preset's, or Megatron-LM's b x d (once d is known) */
    if (opt_was_set(t, "--global-batch-size")) {
        s->src[FLAGS_F_GBS] = FLAGS_SRC_FLAG;
    } else if (basesrc != FLAGS_SRC_MEGATRON) {
        p->global_batch_size = q->global_batch_size;
        s->src[FLAGS_F_GBS] = basesrc;
    } else {
        p->global_batch_size = 0; /* filled after config_resolve's d */
        rule(s, FLAGS_F_GBS, "micro-batch x d (Megatron-LM's default)");
    }
    return resolve_pipeline_layout(s, t, err);
}

static int resolve_cluster(flags_state *s, ts_err *err)
{
    cluster_config *cl = &s->c->cluster;
    int rc;
    gpu_spec g;
    topo *tp = NULL;
    catalog_gpus *cat = NULL;
    if ((rc = catalog_gpus_load(NULL, &cat, err)))
        return rc;
    if (s->gpu && !strcasecmp(s->gpu, "cpu")) {
        /* calibrated-only device (config.h): no rates; capacity = this machine's memory */
        memset(&g, 0, sizeof g);
        snprintf(g.name, sizeof g.name, "CPU");
        g.calibrated_only = true;
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGE_SIZE);
        g.hbm_gib = pages > 0 && psz > 0 ? (double)pages * (double)psz / 1073741824.0 : 0.0;
        if (s->topology) {
            rc = err_set(err, TS_EINVAL, "--gpu cpu takes no --topology (one machine)");
            goto out;
        }
        if ((rc = topo_default_for(&g, cl->gpus, &tp, err)))
            goto out;
        goto done;
    }
    if (s->gpu && (rc = catalog_gpus_lookup(cat, s->gpu, &g, err))) {
        err_prefix(err, "--gpu: ");
        goto out;
    }
    if (s->topology) {
        if ((rc = topo_load(s->topology, &tp, err)))
            goto out;
        if (tp->form == TOPO_PARAMETRIC) {
            if (s->gpu && strcmp(g.name, tp->params.gpu)) {
                rc = err_set(err, TS_EINVAL,
                             "--gpu %s conflicts with the topology %s, whose nodes hold %s (drop --gpu, or use a "
                             "topology of %s nodes)",
                             g.name, tp->source, tp->params.gpu, g.name);
                goto out;
            }
            if ((rc = catalog_gpus_lookup(cat, tp->params.gpu, &g, err)))
                goto out;
        } else if (!s->gpu && (rc = catalog_gpus_lookup(cat, DEFAULT_GPU, &g, err))) {
            goto out;
        }
    } else {
        if (!s->gpu && (rc = catalog_gpus_lookup(cat, DEFAULT_GPU, &g, err)))
            goto out;
        if ((rc = topo_default_for(&g, cl->gpus, &tp, err)))
            goto out;
    }
done:
    cl->gpu = g;
    cl->topology = tp;
    cl->gpus_per_node = tp->params.gpus_per_node;
    tp = NULL;
out:
    topo_free(tp);
    catalog_gpus_free(cat);
    return rc;
}

/* Whether any of the shared flags was given. */
static bool any_shared_flag(const flags_state *s, const opt_table *t)
{
    for (size_t i = s->first_entry; i < s->end_entry && i < t->n; i++)
        if (t->entries[i].set)
            return true;
    return false;
}

int flags_finish(flags_state *s, const opt_table *t, ts_err *err)
{
    config *c = s->c;
    c->cluster.topology = NULL;
    s->preset_source[0] = '\0';
    if (s->bf16 && s->fp16)
        return err_set(err, TS_EINVAL, "--bf16 and --fp16 exclude each other (give one)");
    if (s->fp32 && (s->fp16 || s->bf16))
        return err_set(err, TS_EINVAL, "--fp32 excludes --bf16 and --fp16 (give one)");
    s->model_given = opt_was_set(t, "--model");
    s->builtin_default = !any_shared_flag(s, t);
    config base;
    flags_source basesrc = FLAGS_SRC_MEGATRON;
    int rc;
    if (s->model_given || s->builtin_default) {
        catalog_model pm;
        rc = catalog_model_preset(s->model_given ? s->model : FLAGS_DEFAULT_MODEL, &pm, err);
        if (rc)
            return rc == TS_EINVAL ? err_prefix(err, "--model: ") : rc;
        if ((rc = preset_base(&pm, &base, err)))
            return rc;
        snprintf(s->preset_source, sizeof s->preset_source, "%s", pm.source);
        basesrc = s->model_given ? FLAGS_SRC_PRESET : FLAGS_SRC_BUILTIN;
    } else {
        megatron_defaults(&base);
        if ((rc = check_required(t, err)))
            return rc;
    }
    if ((rc = resolve_model(s, t, &base, basesrc, err)) || (rc = resolve_layout(s, t, &base, basesrc, err)) ||
        (rc = resolve_vocab(s, t, &base, basesrc, err)))
        return rc;
    if (basesrc != FLAGS_SRC_MEGATRON) /* the preset's experts and MLA, where no flag overrides them */
        moe_flags_take(&s->moe, t, &base.moe, c);
    parallel_config *p = &c->par;
    if (p->global_batch_size == 0) { /* Megatron-LM: b x d */
        long tpp = (long)p->tp * p->pp * config_cp(c);
        long d = p->dp > 0 ? p->dp : (c->cluster.gpus % tpp ? 1 : c->cluster.gpus / tpp);
        long gbs = (long)p->micro_batch_size * d;
        if (gbs > (1L << 30))
            return err_set(err, TS_EINVAL, "--global-batch-size b x d = %ld is past the limit of %d sequences", gbs,
                           1 << 30);
        p->global_batch_size = (int)gbs;
    }
    s->src[FLAGS_F_GPU] = s->gpu ? FLAGS_SRC_FLAG : FLAGS_SRC_TRAINSIM;
    s->src[FLAGS_F_TOPOLOGY] = s->topology ? FLAGS_SRC_FLAG : FLAGS_SRC_TRAINSIM;
    if ((rc = resolve_cluster(s, err)) || (rc = config_resolve(c, err)) ||
        (rc = moe_flags_finish(&s->moe, t, c, err))) {
        config_free(c);
        return rc;
    }
    const model_config *fm = &c->model;
    if ((fm->no_bias_swiglu_fusion || fm->no_bias_gelu_fusion || fm->no_gradient_accumulation_fusion ||
         fm->no_rope_fusion) &&
        (c->moe.num_experts > 0 || c->moe.mla)) {
        config_free(c);
        return err_set(err, TS_EINVAL,
                       "--no-bias-gelu-fusion, --no-bias-swiglu-fusion, --no-gradient-accumulation-fusion and "
                       "--no-rope-fusion are modelled for dense layers with standard attention only (not the "
                       "experts' GEMMs and activations, nor MLA's rotary part); drop them or the MoE/MLA flags");
    }
    if (s->attention_backend == ATTN_BACKEND_AUTO && !s->use_flash_attn)
        rule(s, FLAGS_F_ATTN, "auto (%s): Transformer Engine's pick for %s on %s",
             opt_was_set(t, "--attention-backend") ? "given" : "Megatron-LM's default",
             CONFIG_PRECISION_NAMES[c->model.precision], c->cluster.gpu.name);
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
