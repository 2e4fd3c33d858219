/* config — one validated description of a training run: model, parallelism,
 * schedule and cluster. Filled from a model preset and Megatron-LM style
 * flags (see flags.h), checked and completed by config_resolve().
 *
 * Ownership: config is a plain value; it owns no heap memory except the
 * topology pointer, which it owns (config_free releases it). The layer
 * layout (par.layout) is a fixed-capacity array inside the value, so a
 * copy of a config carries its own.
 */
#ifndef TRAINSIM_CONFIG_H
#define TRAINSIM_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/config/catalog.h"
#include "sim/config/overheads.h"
#include "sim/sched/sched.h"
#include "sim/sched/sched_layout.h"
#include "sim/util/err.h"

#define CONFIG_NAME_BYTES 64

typedef enum { PREC_BF16 = 0, PREC_FP16, PREC_FP32 } config_precision;
typedef enum { RECOMPUTE_NONE = 0, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL } config_recompute;
typedef enum { RECOMPUTE_METHOD_UNIFORM = 0, RECOMPUTE_METHOD_BLOCK } config_recompute_method;
typedef enum { NORM_LAYERNORM = 0, NORM_RMSNORM } config_norm;
/* Attention kernels (--attention-backend, Megatron-core's AttnBackend).
 * unfused and local run the softmax on a stored s x s score matrix
 * (Megatron's own kernels); flash and fused (Transformer Engine's
 * FlashAttention-2 and cuDNN fused attention) keep no scores: the simulator
 * costs them the same. auto is what Transformer Engine picks on the GPU:
 * flash with 16-bit activations on a GPU with bf16 tensor cores (Ampere and
 * later), the unfused kernels otherwise; config_resolve replaces it with the
 * backend it picks. 0 = unfused, so a config built by hand runs Megatron's
 * kernels of 2021-22 unless it says otherwise. */
typedef enum {
    ATTN_BACKEND_UNFUSED = 0,
    ATTN_BACKEND_FLASH,
    ATTN_BACKEND_FUSED,
    ATTN_BACKEND_LOCAL,
    ATTN_BACKEND_AUTO
} config_attn_backend;
/* FP8 training (Transformer Engine, Megatron-core's --fp8-format,
 * --fp8-recipe): FP8_FORMAT_NONE = bf16/fp16 GEMMs. e4m3 and hybrid (e4m3
 * forward, e5m2 gradients) cost the same: one byte per element either way.
 * Recipes (how scales are found): delayed (amax history of earlier steps,
 * found in the cast kernel), tensorwise (current scaling: an amax pass over
 * the tensor before its cast), blockwise (a scale per 1x128 / 128x128 block,
 * found in the cast kernel), mxfp8 (an e8m0 scale per 32 elements; Blackwell
 * tensor cores only). */
typedef enum { FP8_FORMAT_NONE = 0, FP8_FORMAT_E4M3, FP8_FORMAT_HYBRID } config_fp8_format;
typedef enum {
    FP8_RECIPE_DELAYED = 0,
    FP8_RECIPE_TENSORWISE,
    FP8_RECIPE_BLOCKWISE,
    FP8_RECIPE_MXFP8
} config_fp8_recipe;
/* Modules of selective recomputation (--recompute-modules, bits). */
#define CONFIG_RC_CORE_ATTN      0x01u               /* the attention core: scores, softmax, dropout, attention.V */
#define CONFIG_RC_MLP            0x02u               /* the MLP: FC1, activation, FC2 */
#define CONFIG_RC_LAYERNORM      0x04u               /* the two norms' outputs */
#define CONFIG_RC_MOE            0x08u               /* the whole MoE block (MoE models; --moe-layer-recompute) */
#define CONFIG_RC_MOE_ACT        0x10u               /* the routed experts' activation (MoE models) */
#define CONFIG_RC_MLA_UP_PROJ    0x20u               /* needs MLA: not modelled */
#define CONFIG_RC_SHARED_EXPERTS 0x40u               /* needs MoE: not modelled */
#define CONFIG_RC_DEFAULT        CONFIG_RC_CORE_ATTN /* Megatron-core's default */
/* What fully sharded data parallelism shards over the data-parallel group
 * (Megatron-FSDP's --data-parallel-sharding-strategy; torch FSDP2 is
 * SHARD_OPTIM_GRADS_PARAMS): nothing, the optimizer state (ZeRO-1), also
 * the gradients (ZeRO-2), also the parameters (ZeRO-3). */
typedef enum { SHARD_NO_SHARD = 0, SHARD_OPTIM, SHARD_OPTIM_GRADS, SHARD_OPTIM_GRADS_PARAMS } config_sharding;
/* --cp-comm-type (Megatron-core's names): p2p = a ring passing K,V blocks;
 * all_gather = K,V gathered before attention; a2a = Ulysses all-to-alls of
 * q,k,v and the output (heads split over cp); a2a+p2p = a2a inside the
 * first level of --hierarchical-context-parallel-sizes, a ring over the
 * second. */
typedef enum { CP_COMM_P2P = 0, CP_COMM_ALL_GATHER, CP_COMM_A2A, CP_COMM_A2A_P2P } config_cp_comm;
/* Position embeddings: a learned table of max_position_embeddings x h
 * (parameters on the first stage), rotary (rope, and yarn, its rescaled
 * form: no parameters, an element-wise rotation of q and k), or none. */
typedef enum { POS_LEARNED_ABSOLUTE = 0, POS_ROPE, POS_YARN, POS_NONE } config_position;

/* Transformer shape (Megatron-LM names in comments). */
typedef struct {
    char name[CONFIG_NAME_BYTES];          /* preset name or "custom" */
    int num_layers;                        /* --num-layers */
    int hidden_size;                       /* --hidden-size */
    int num_attention_heads;               /* --num-attention-heads */
    int kv_channels;                       /* --kv-channels: head size d (Megatron's default h / a) */
    int ffn_hidden_size;                   /* --ffn-hidden-size (default 4h; 8h/3 rounded for SwiGLU presets) */
    int num_query_groups;                  /* --num-query-groups with --group-query-attention (= heads when no GQA) */
    bool swiglu;                           /* --swiglu */
    int seq_length;                        /* --seq-length, tokens */
    int max_position_embeddings;           /* --max-position-embeddings, tokens (learned position table rows) */
    int vocab_size;                        /* --vocab-size before padding, tokens (0: padded size given directly) */
    int make_vocab_size_divisible_by;      /* --make-vocab-size-divisible-by (the padding multiple is this x t) */
    int padded_vocab_size;                 /* the vocabulary after padding, tokens (derived, or --padded-vocab-size) */
    bool untie_embeddings;                 /* --untie-embeddings-and-output-weights: a separate output weight */
    bool add_bias_linear;                  /* biases in the linear layers (Megatron's default; --disable-bias-linear) */
    config_norm normalization;             /* --normalization LayerNorm|RMSNorm */
    bool qk_layernorm;                     /* --qk-layernorm: a norm (the model's) over each head's query and key */
    config_position position_embedding;    /* --position-embedding-type */
    double attention_dropout;              /* --attention-dropout: probability on the attention scores (0 = none) */
    double hidden_dropout;                 /* --hidden-dropout: probability after each block and the embedding */
    config_precision precision;            /* --bf16 / --fp16 (default fp32, as Megatron-LM) */
    config_attn_backend attention_backend; /* --attention-backend, never auto after config_resolve */
    config_fp8_format fp8_format;          /* --fp8-format (FP8_FORMAT_NONE: no FP8 GEMMs) */
    config_fp8_recipe fp8_recipe;          /* --fp8-recipe (Megatron's default delayed) */
    bool fp8_param_gather;                 /* --fp8-param-gather: parameters kept and all-gathered in FP8 */
    /* Megatron-LM's kernel fusions (layer.h costs the kernels each one runs;
     * all false: Megatron's defaults). The --no-... flags turn a default-on
     * fusion off; --cross-entropy-loss-fusion turns the default-off one on. */
    bool no_bias_gelu_fusion;             /* --no-bias-gelu-fusion: bias add, then GeLU (GeLU MLPs) */
    bool no_bias_swiglu_fusion;           /* --no-bias-swiglu-fusion: bias add, SiLU, multiply (SwiGLU MLPs) */
    bool no_bias_dropout_fusion;          /* --no-bias-dropout-fusion: bias add, dropout, residual add */
    bool no_masked_softmax_fusion;        /* --no-masked-softmax-fusion: mask, then softmax (unfused/local) */
    bool no_gradient_accumulation_fusion; /* --no-gradient-accumulation-fusion: wgrad to a temporary, then added */
    bool no_rope_fusion;                  /* --no-rope-fusion: rotary embedding in PyTorch element-wise ops */
    bool cross_entropy_loss_fusion;       /* --cross-entropy-loss-fusion (native): fused passes, 2 all-reduces */
} model_config;

/* Parallel layout and training step. */
typedef struct {
    int micro_batch_size;         /* --micro-batch-size, sequences */
    int global_batch_size;        /* --global-batch-size, sequences */
    int tp;                       /* --tensor-model-parallel-size */
    int pp;                       /* --pipeline-model-parallel-size */
    int dp;                       /* derived: gpus / (tp*pp) */
    int vp;                       /* chunks per pipeline rank (1 = not interleaved) */
    int layers_per_virtual_stage; /* --num-layers-per-virtual-pipeline-stage (0 = unset) */
    int first_stage_layers;       /* --decoder-first-pipeline-num-layers (0 = even) */
    int last_stage_layers;        /* --decoder-last-pipeline-num-layers (0 = even) */
    int virtual_stages_per_rank;  /* --num-virtual-stages-per-pipeline-rank (0 = unset) */
    bool account_for_embedding;   /* --account-for-embedding-in-pipeline-split */
    bool account_for_loss;        /* --account-for-loss-in-pipeline-split */
    bool layout_given;            /* layout came from --pipeline-model-parallel-layout */
    /* Transformer layers of each of the p x v virtual stages (model order,
     * chunk-major: stage c*p + r is chunk c of rank r; sched_layout.h):
     * the one split the schedule, the simulator, the search and the
     * executor use. Parsed by flags_finish when layout_given; otherwise
     * config_resolve fills it from the even, first/last or account-for
     * flags. n_stages = 0 only for --schedule custom whose layers do not
     * split evenly (the schedule file's own split applies). */
    sched_layout layout;
    bool sequence_parallel;                   /* --sequence-parallel */
    config_recompute recompute;               /* --recompute-granularity none|selective|full */
    config_recompute_method recompute_method; /* --recompute-method uniform|block */
    int recompute_num_layers;                 /* --recompute-num-layers (full only; 0 = all) */
    unsigned recompute_modules;               /* --recompute-modules, CONFIG_RC_* bits (selective; 0 = default) */
    bool distributed_optimizer;               /* --use-distributed-optimizer */
    bool overlap_grad_reduce;                 /* --overlap-grad-reduce */
    int64_t ddp_bucket_params;                /* --ddp-bucket-size, parameters (0: max(40M, 1M x d)) */
    bool overlap_param_gather;                /* --overlap-param-gather (needs the two above on) */
    bool tp_comm_overlap;                     /* --tp-comm-overlap: userbuffers GEMM/collective overlap */
    bool overlap_moe_ep_comm;                 /* --overlap-moe-expert-parallel-comm (ep_pair.h) */
    bool delay_wgrad;                         /* --delay-wgrad-compute: with the above (ep_pair.h) */
    bool torch_fsdp2;                         /* --use-torch-fsdp2 (shards optimizer, gradients, parameters) */
    bool megatron_fsdp;                       /* --use-megatron-fsdp */
    int dp_sharding;                          /* config_sharding: --data-parallel-sharding-strategy (Megatron-FSDP) */
    sched_kind schedule;                      /* --schedule */
    bool sync_tp_allreduce;                   /* --no-async-tensor-model-parallel-allreduce: the
                                                 backward's TP all-reduce is not overlapped with
                                                 the weight-gradient GEMM (Megatron-LM before the
                                                 async all-reduce, e.g. the 2021 runs) */
    /* ---- context parallelism (sim/model/cp.h): the sequence split over cp
     * ranks; the world is t x cp x d x p with ranks ordered tp fastest, then
     * cp, then dp, then pp (Megatron-core's default order tp-cp-ep-dp-pp) ---- */
    int cp;                 /* --context-parallel-size (0 or 1: none) */
    config_cp_comm cp_comm; /* --cp-comm-type */
    int cp_a2a;             /* --hierarchical-context-parallel-sizes' first (a2a) level, a2a+p2p only; 0 = unset */
    int cp_p2p;             /* its second (p2p ring) level; cp_a2a x cp_p2p = cp */
    /* ---- per-iteration fixed costs (plan_build.c's optimizer step) ---- */
    bool no_clip_grad;      /* --clip-grad 0: no gradient norm (Megatron's default --clip-grad 1.0 computes it) */
    double loss_scale;      /* --loss-scale: a constant loss scale (0: none given; fp16 then scales dynamically) */
    bool no_nan_check;      /* --no-check-for-nan-in-loss-and-grad (Megatron's default checks each gradient bucket) */
    bool check_large_grads; /* --check-for-large-grads: the same bucket norms, checked for spikes */
    bool log_num_zeros;     /* --log-num-zeros-in-grad: zero gradients counted and all-reduced */
    /* ---- the data loader's step of each micro-batch (sim/model/dataload.h) ---- */
    bool no_loader_attn_mask;  /* --no-create-attention-mask-in-dataloader: no [b, 1, s, s] mask in the batch */
    bool data_loader_measured; /* --data-loader-ns given: it replaces the modelled step */
    double data_loader_ns;     /* --data-loader-ns: the measured step per micro-batch, ns */
} parallel_config;

struct topo; /* topo.h: parsed cluster topology */

/* The cluster the run is placed on. */
typedef struct {
    int gpus;                   /* --gpus, total GPUs */
    int gpus_per_node;          /* from the topology (8 for DGX) */
    gpu_spec gpu;               /* --gpu KIND (default A100-SXM4-80GB) */
    struct topo *topology;      /* --topology FILE, or the built-in Selene-like default; owned */
    memory_overheads overheads; /* memory besides tensors per GPU (OVERHEADS_DEFAULT: the GPU's) */
} cluster_config;

/* Mixture of experts (Megatron-core's MoE flags; num_experts = 0: a dense
 * model, every other field then unused) and multi-latent attention (MLA,
 * DeepSeek-V2/V3: mla = false, the other mla_ fields unused). Expert
 * layout as Megatron-core folds it: the experts of a pipeline stage over
 * etp x ep x edp ranks (edp = gpus / (pp x etp x ep)), the same pipeline
 * stages as the dense part. Filled by moe_flags_finish (moe_flags.h). */
typedef enum { MOE_DISPATCH_ALLGATHER = 0, MOE_DISPATCH_ALLTOALL, MOE_DISPATCH_FLEX } config_moe_dispatcher;
typedef enum { MOE_DROP_PROBS = 0, MOE_DROP_POSITION } config_moe_drop;
/* --moe-router-load-balancing-type (sinkhorn is refused: moe_flags.h) */
typedef enum { MOE_LB_AUX = 0, MOE_LB_SEQ_AUX, MOE_LB_GLOBAL_AUX, MOE_LB_SINKHORN, MOE_LB_NONE } config_moe_lb;
typedef struct {
    int num_experts;             /* --num-experts (0 = dense) */
    int topk;                    /* --moe-router-topk (Megatron's default 2) */
    int ffn_hidden_size;         /* --moe-ffn-hidden-size, per expert (default --ffn-hidden-size) */
    int shared_ffn_hidden_size;  /* --moe-shared-expert-intermediate-size (0 = no shared expert) */
    bool shared_overlap;         /* --moe-shared-expert-overlap: the shared experts beside the all-to-alls (moe.h) */
    int layer_freq;              /* --moe-layer-freq N: layer i (from 0) is MoE when i % N == 0 */
    int first_dense_layers;      /* --moe-layer-freq "([0]*K+[1]*M)": the first K layers dense (else 0) */
    int router_num_groups;       /* --moe-router-num-groups (0 = no group-limited routing) */
    int router_group_topk;       /* --moe-router-group-topk (0 = unset) */
    double capacity_factor;      /* --moe-expert-capacity-factor (0 = dropless) */
    bool pad_to_capacity;        /* --moe-pad-expert-input-to-capacity */
    int drop_policy;             /* --moe-token-drop-policy, config_moe_drop */
    bool force_load_balancing;   /* --moe-router-force-load-balancing */
    double routing_skew;         /* --moe-routing-skew (trainsim's): Zipf exponent of expert popularity (moe.h) */
    const char *load_path;       /* --moe-expert-load FILE (moe_load.h), NULL = the skew model; borrowed */
    const double *expert_load;   /* its tokens per expert [num_experts], replacing the skew model; borrowed
                                     (owned by the flags' state, moe_flags_release; tests: their own array) */
    bool expert_load_per_layer;  /* expert_load is [num_layers x num_experts]: layer l's at l E (moe_load.h) */
    int dispatcher;              /* --moe-token-dispatcher-type, config_moe_dispatcher */
    bool enable_deepep;          /* --moe-enable-deepep (flex dispatcher with DeepEP) */
    bool dispatch_fwd_mxfp8;     /* --moe-dispatch-fwd-dtype mxfp8: the dispatch's tokens sent in MXFP8 (moe_disp.h) */
    bool combine_bwd_mxfp8;      /* --moe-combine-bwd-dtype mxfp8: the combine's gradients sent in MXFP8 */
    bool grouped_gemm;           /* --moe-grouped-gemm */
    bool permute_fusion;         /* --moe-permute-fusion */
    int ep;                      /* --expert-model-parallel-size */
    int etp;                     /* --expert-tensor-parallel-size (resolved: default t) */
    int edp;                     /* derived: gpus / (pp x etp x ep) */
    bool mla;                    /* --multi-latent-attention */
    int mla_q_lora_rank;         /* --q-lora-rank (0 = no query compression) */
    int mla_kv_lora_rank;        /* --kv-lora-rank */
    int mla_qk_head_dim;         /* --qk-head-dim (the non-rotary part of a query/key head) */
    int mla_qk_pos_emb_head_dim; /* --qk-pos-emb-head-dim (the rotary part) */
    int mla_v_head_dim;          /* --v-head-dim */
    int mtp_num_layers;          /* --mtp-num-layers: multi-token prediction depths (0 = none; mtp.h) */
    /* router options (moe.h, moe_block_ops: the router ops they add) */
    bool router_fp32;      /* --moe-router-dtype fp32: the router GEMM and its input in fp32 */
    int router_score;      /* --moe-router-score-function: 0 softmax, 1 sigmoid */
    int lb_type;           /* --moe-router-load-balancing-type, config_moe_lb */
    double aux_loss_coeff; /* --moe-aux-loss-coeff (0 = no auxiliary loss computed) */
    double z_loss_coeff;   /* --moe-z-loss-coeff (0 = no z-loss) */
    bool expert_bias;      /* --moe-router-enable-expert-bias */
    double topk_scaling;   /* --moe-router-topk-scaling-factor (0 = none) */
    bool pre_softmax;      /* --moe-router-pre-softmax */
} moe_config;

typedef struct {
    model_config model;
    parallel_config par;
    cluster_config cluster;
    moe_config moe; /* mixture of experts and MLA (dense: num_experts = 0, mla = false) */
} config;

/* NULL-terminated name lists, indexed by the enums: "none", "selective",
 * "full"; "uniform", "block"; "bf16", "fp16", "fp32". */
extern const char *const CONFIG_RECOMPUTE_NAMES[];
extern const char *const CONFIG_RECOMPUTE_METHOD_NAMES[];
extern const char *const CONFIG_PRECISION_NAMES[];
/* "no_shard", "optim", "optim_grads", "optim_grads_params" (Megatron-LM's). */
extern const char *const CONFIG_SHARDING_NAMES[];
/* The sharding a resolved configuration runs with: dp_sharding under
 * Megatron-FSDP, SHARD_OPTIM_GRADS_PARAMS under torch FSDP2, SHARD_NO_SHARD
 * without FSDP (the distributed optimizer is separate: par.distributed_optimizer). */
config_sharding config_fsdp_sharding(const parallel_config *p);
/* Megatron-LM's spellings: "LayerNorm", "RMSNorm"; "learned_absolute",
 * "rope", "yarn", "none". */
extern const char *const CONFIG_NORM_NAMES[];
extern const char *const CONFIG_POSITION_NAMES[];
/* "unfused", "flash", "fused", "local", "auto" (config_attn_backend order);
 * "core_attn", "mlp", "layernorm", "moe", "moe_act", "mla_up_proj",
 * "shared_experts" (bit i = 1 << i). */
extern const char *const CONFIG_ATTN_BACKEND_NAMES[];
extern const char *const CONFIG_RC_MODULE_NAMES[];
/* "none", "e4m3", "hybrid" (config_fp8_format order); "delayed",
 * "tensorwise", "blockwise", "mxfp8" (config_fp8_recipe order). */
extern const char *const CONFIG_FP8_FORMAT_NAMES[];
extern const char *const CONFIG_FP8_RECIPE_NAMES[];

/* "p2p", "all_gather", "a2a", "a2a+p2p" (config_cp_comm order). */
extern const char *const CONFIG_CP_COMM_NAMES[];

/* The context-parallel size: par.cp, 1 when it is 0 (a config built by hand). */
int config_cp(const config *c);

/* What decides each pipeline rank's NCCL communicators (overheads.h):
 * the layout, the experts' folds, the CP exchange and the tied embedding. */
overheads_layout config_overheads_layout(const config *c);

/* Whether the backend keeps no s x s scores (flash or fused). */
bool config_attn_is_flash(config_attn_backend b);

/* The backend auto stands for on this GPU at this precision (Transformer
 * Engine's choice): flash with bf16/fp16 on a GPU with a bf16 peak (bf16
 * tensor cores came with Ampere, sm80, the first that FlashAttention-2 and
 * cuDNN fused attention run on), unfused otherwise (fp32 activations, or
 * the calibrated-only CPU device). */
config_attn_backend config_attn_auto(const gpu_spec *g, config_precision p);

/* Megatron-LM's padding of the vocabulary: the smallest multiple of
 * divisible_by x t that is >= vocab (megatron/training/tokenizer's
 * _vocab_size_with_padding). TS_EINVAL if an operand is < 1 or the result
 * passes INT_MAX. */
int config_pad_vocab(int vocab, int divisible_by, int t, int *padded, ts_err *err);

/* The most parameters a model may have: 2^56 (7.2e16, about 40 000 times
 * the largest published dense model, GPT-4-class 1.8e12). The memory model
 * multiplies a parameter count by at most 20 bytes (bf16 weights and
 * gradients, fp32 master weights and gradients, two Adam moments) and adds a
 * few such terms, so 2^56 x 64 bytes stays inside CKD_MAX_BYTES = 2^62. */
#define CONFIG_MAX_PARAMS ((int64_t)1 << 56)

/* The model shape's own rules, the first part of config_resolve (which
 * search applies to its shape too): every size >= 1, hidden size divisible
 * by the heads (unless --kv-channels is given), query groups dividing the
 * heads, the learned position table at least --seq-length long, at most
 * CONFIG_MAX_PARAMS parameters. TS_EINVAL naming the flags. */
int config_check_model(const model_config *m, ts_err *err);

/* Head size d: kv_channels, or h / a when it is 0. */
int config_head_size(const model_config *m);

/* Check every cross-field rule (divisibility, ranges, fits of layers to
 * stages, gpus = tp*pp*dp, ...) and fill the derived fields, so c is then
 * ready to simulate: par.dp (gpus / (tp*pp) when left 0), par.vp (chunks
 * per pipeline rank), cluster.gpus_per_node (from the topology, when there
 * is one), par.layout (layers per virtual stage; checked against p,
 * --num-layers and the schedule when it was given as a layout string),
 * par.sequence_parallel turned off at tp 1 (as Megatron-LM: a no-op with
 * one tensor-parallel rank), cluster.overheads' fields left at
 * OVERHEADS_DEFAULT (from the GPU kind: overheads_resolve). A model of more
 * than CONFIG_MAX_PARAMS parameters (counted with checked arithmetic, as
 * flops_param_count counts them) is refused. TS_EINVAL with a message that names
 * the flag(s) and what would be valid; c may then be partly resolved. */
int config_resolve(config *c, ts_err *err);

/* Release what c owns (the topology). c itself is not freed. */
void config_free(config *c);

/* Micro-batches per pipeline per iteration: B / (b * d). */
int config_num_microbatches(const config *c);

/* Bytes per element of activations/weights at c's precision (2 or 4). */
int config_dtype_bytes(const config *c);

#endif
