/* layer — what runs: the ops of one transformer layer (and of the embedding
 * and the output layer) for one micro-batch on one tensor-parallel rank, per
 * pass, and the activations the forward saves.
 *
 * The layer is Megatron-LM's GPT layer (pre-norm):
 *   x -> LN1 -> [SP all-gather] -> QKV GEMM -> [q/k norms] -> QK^T -> softmax -> dropout
 *     -> attention.V -> projection GEMM -> all-reduce [SP: reduce-scatter]
 *     -> dropout + residual -> LN2 -> [SP all-gather] -> FC1 GEMM
 *     -> GELU (SwiGLU) -> FC2 GEMM -> all-reduce [SP: reduce-scatter]
 *     -> dropout + residual
 * with tensor-parallel shard shapes (heads, query groups and the FFN split
 * over t ranks), grouped-query attention (g query groups: K and V have
 * g*h/a columns) and SwiGLU (FC1 produces 2*ffn columns: gate and up).
 *
 * Ops. Each op is a GEMM (m, n, k, batch: batch times C[m x n] = A[m x k] B[k x n],
 * flops = 2*m*n*k*batch), a memory-bound element-wise kernel (bytes read +
 * written), or a tensor-parallel collective (bytes in commcost's convention,
 * group size t). Only GEMMs carry flops: element-wise work is costed by its
 * bytes and is not counted by either FLOP convention of formulas.md.
 *
 * Order and overlap. Ops are listed in program order. Compute ops (GEMM,
 * element-wise) run on the rank's compute stream, collectives on its
 * communication stream. Op i starts once ops dep[0] and dep[1] (indices in
 * the same list, -1 = none) have finished and its stream is free. Normally
 * dep[0] = i-1. In the backward, Megatron overlaps the input-gradient
 * all-reduce of a column-parallel GEMM (QKV, FC1) with that GEMM's
 * weight-gradient GEMM: the all-reduce and the weight-gradient GEMM both
 * depend on the input-gradient GEMM, and the next op depends on both. With
 * sequence parallelism the backward all-gathers the saved (sharded) GEMM
 * input again, overlapped with the input-gradient GEMM, and reduce-scatters
 * the input gradient overlapped with the weight-gradient GEMM.
 *
 * Passes:
 *   F  forward
 *   B  whole backward (input and weight gradients, Megatron order, overlapped)
 *   I  input-gradient part only (all element-wise backward, input-gradient
 *      GEMMs, the collectives of the input gradient; nothing overlapped)
 *   W  weight-gradient GEMMs only (with SP, preceded by the all-gathers of
 *      the saved sharded inputs they need)
 *   R  recompute forward, run just before B or I of the same layer:
 *      selective = the forward of each module of shape.rc_modules, in
 *      program order: layernorm (ln1, ln2), core_attn (the attention core:
 *      QK^T, softmax, dropout, attention.V; the flash kernel's forward),
 *      mlp (FC1 with its SP all-gather, activation, FC2 with its all-reduce
 *      or reduce-scatter: Megatron-core re-runs the whole MLP module);
 *      full = the whole forward, collectives included; none = no ops.
 *
 * Attention kernels (shape.attn). unfused/local: QK^T, a memory-bound
 * softmax and dropout over stored s x s scores, attention.V; backward:
 * the four GEMMs of the two products and the element-wise backward.
 * flash/fused (FlashAttention-2, Dao 2023; cuDNN's fused attention runs
 * the same algorithm): one fused kernel that keeps no scores and, causal,
 * skips the blocks above the diagonal: forward = QK^T and attention.V over
 * the lower half (GEMMs of s x ceil(s/2) x d: 2*s^2*d flops per head for
 * even s, half the unfused 4*s^2*d); backward = five such GEMMs (QK^T
 * recomputed, dV, dP, dQ, dK: 2.5x the forward's flops) after an
 * element-wise pass over dO and O (rowsum(dO o O): read 2 T a d/t
 * elements, write b a s/t fp32). Softmax and dropout run inside the
 * kernel (Philox dropout: no mask).
 *
 * Saved activations. layer_saved_build() lists every tensor the backward needs,
 * with its bytes, whether the forward keeps it (per recompute mode), whether
 * the recompute pass re-creates it, and when it may be freed: by the
 * input-gradient backward (I or B), or only by the weight-gradient backward
 * (W or B). With no recomputation the kept bytes per layer equal Korthikanti
 * et al. 2022 Table 2 exactly for 16-bit activations (GPT shapes): sbh(34 +
 * 5as/h), the TP and TP+SP variants, selective (sbh(10+24/t), 34sbh/t), full
 * (2sbh; 2sbh/t with SP, where the saved input is the sequence shard).
 * Tensors of the dtype scale with config_dtype_bytes; dropout masks are 1 byte
 * per element. With flash/fused attention the scores, the softmax output and
 * the dropout mask and output are not stored; the kernel saves the
 * log-sum-exp of each score row (fp32, s per head: 4*a*s*b bytes) with q,
 * k, v and its output (the projection's input): 16-bit, no TP,
 * sbh(34 + 4a/h); with TP 10sbh + 24sbh/t + 4asb/t; with SP
 * (34sbh + 4asb)/t (layer_flash_bytes). Selective recomputation drops the
 * tensors its modules re-create: core_attn the scores' tensors (flash: the
 * log-sum-exp), mlp FC1's output and the activation's output (act.in,
 * fc2.in: 8sbh/t + 8sbh/t for GPT shapes), layernorm the norms' outputs
 * (qkv.in, fc1.in: 2sbh each, /t with SP).
 *
 * Everything here is plain values: no heap memory.
 */
#ifndef TRAINSIM_LAYER_H
#define TRAINSIM_LAYER_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/config/config.h"
#include "sim/model/commcost.h"
#include "sim/util/err.h"

/* Multi-latent attention's sizes (mla.h; on = false: standard attention;
 * its ops are built in layer_mla.c). */
typedef struct {
    bool on;
    int64_t q_lora;  /* --q-lora-rank (0: queries not compressed) */
    int64_t kv_lora; /* --kv-lora-rank */
    int64_t d_qk;    /* --qk-head-dim */
    int64_t d_rope;  /* --qk-pos-emb-head-dim */
    int64_t d_v;     /* --v-head-dim */
} layer_mla;

/* Shapes of one micro-batch on one tensor-parallel rank. */
typedef struct {
    int64_t h;              /* hidden size */
    int64_t a;              /* attention heads */
    int64_t g;              /* query groups (= a without GQA) */
    int64_t d;              /* head size (--kv-channels); 0 = h / a */
    bool no_attn_dropout;   /* --attention-dropout 0: no dropout kernel or mask on the scores */
    bool no_hidden_dropout; /* --hidden-dropout 0: the residual adds keep no mask; no embedding dropout */
    int64_t ffn;            /* FFN hidden size (per gate for SwiGLU) */
    bool swiglu;
    int64_t s;       /* sequence length, tokens */
    int64_t b;       /* micro-batch size, sequences */
    int64_t V;       /* padded vocabulary */
    int t;           /* tensor-parallel size */
    bool sp;         /* sequence parallelism */
    int dtype_bytes; /* 2 (bf16/fp16) or 4 (fp32) */
    config_recompute recompute;
    config_attn_backend attn; /* attention kernels (never auto); 0 = unfused */
    unsigned rc_modules;      /* selective: CONFIG_RC_* bits recomputed (dense: core_attn, mlp,
                                 layernorm); 0 = CONFIG_RC_DEFAULT (core_attn) */
    /* Context parallelism (cp.h): with cp > 1, s above is the s_full/cp
     * tokens of one rank (two chunks of s_full/(2cp), one from each end of
     * the sequence), every GEMM and element-wise op runs on them, and the
     * flash kernel attends to the full sequence through the exchange. */
    int cp;         /* context-parallel size (0 or 1: none) */
    int cp_a2a;     /* all-to-all level: q,k,v re-split from sequence to heads over it (1: none) */
    int cp_ring;    /* ring / gather level: K,V blocks passed (p2p) or gathered over it (1: none) */
    bool cp_gather; /* the ring level all-gathers K,V (all_gather) instead of passing them (p2p) */
    /* FP8 (config.h): with fp8 != FP8_FORMAT_NONE the four linear layers'
     * GEMMs (qkv, proj, fc1, fc2 and their dgrad / wgrad) run in FP8
     * (layer_op.fp8) and each pass adds the recipe's casts as memory-bound
     * ops (layer_fp8_cast_bytes); attention and the output layer stay 16-bit
     * (Transformer Engine's defaults). */
    config_fp8_format fp8;
    config_fp8_recipe fp8_recipe;
    /* A mixture-of-experts layer (moe.h): the MLP's FC1, activation, FC2 and
     * their collectives are left out of every pass and of the saved tensors
     * (act.in, fc2.in); LN2, its output fc1.in (the MoE block's input) and
     * the residual add stay. The MoE block's ops (moe_block_ops) are added
     * by the caller. */
    bool no_mlp;
    /* Multi-latent attention (mla.h): with mla.on the QKV GEMM (and its SP
     * all-gather) is replaced by MLA's down- and up-projections
     * (layer_mla.c), g = a, the attention core's scores have
     * heads of d_qk + d_rope and its values (and the projection's input
     * columns) d_v; --recompute-modules mla_up_proj (CONFIG_RC_MLA_UP_PROJ)
     * re-runs the up-projections and rope and drops q, k, v. */
    layer_mla mla;
    /* --qk-layernorm (standard attention; with MLA the flag names the
     * compressed q and kv norms layer_mla.c always costs, and qk_norm stays
     * false): Megatron-core's q_layernorm and k_layernorm (TENorm, the
     * model's normalization over the head size d) after the QKV GEMM, before
     * rope. Q = T (a + g) d / t query and key elements of the rank:
     *   forward  "qk_norm": read and write them, 2 Q dt bytes
     *   backward "qk_norm.bwd": read the output gradient and the saved
     *            input, write the input gradient, 3 Q dt (as ln1.bwd less
     *            its residual gradient; the weight gradient, 2d elements
     *            summed over the rows, rides in the same kernel)
     * and it saves its input (q and k before the norm, tensor
     * "qk_norm.in", Q dt bytes, freed by the input-gradient backward):
     * kept under selective recomputation whatever its modules
     * (Megatron-core's layernorm module re-runs input_layernorm and
     * pre_mlp_layernorm only, not the attention's q/k norms), re-created by
     * full recomputation. Its fp32 1/rms per row (T (a + g)/t x 4 bytes)
     * is not counted, as no norm's is. No FLOPs counted (element-wise). */
    bool qk_norm;
    /* Megatron-LM's kernel fusions (config.h): LAYER_UNFUSED_* bits of the
     * fused kernels replaced by the unfused ones, and LAYER_FUSED_CE for the
     * opt-in cross-entropy fusion; 0: Megatron's defaults (what the ops
     * above describe). bias: the linear layers have biases (the unfused
     * paths then add them in a kernel of their own); main_grad_bytes: the
     * main gradient's element (4: fp32 accumulation; 2 with fp16; 0 = 4). */
    unsigned fusion;
    bool bias;
    int main_grad_bytes;
} layer_shape;

/* layer_shape.fusion bits; each applies only where the flag takes effect in
 * Megatron-LM (layer_shape_from_config clears it elsewhere):
 *   BIAS_ACT     --no-bias-gelu-fusion (GeLU with biases) or
 *                --no-bias-swiglu-fusion (SwiGLU): forward [bias add: read,
 *                write fc1's output], then GeLU (read F, write F), or SiLU of
 *                the gate (read F, write F) and the multiply (read 2F, write
 *                F) for SwiGLU (F = T ffn/t elements); backward: GeLU's the
 *                same (3F); SwiGLU's multiply (two products: 6F), SiLU (3F)
 *                and the gradient halves joined (4F): 13F against the fused
 *                5F, and the SiLU output saved (F more activation bytes)
 *   BIAS_DROPOUT --no-bias-dropout-fusion: [bias add 2E], dropout (read,
 *                write, mask: E(2dt+1)), residual add (read 2E, write E)
 *                against the fused E(3dt+1); backward unchanged (the dropout
 *                backward is the only kernel either way)
 *   SOFTMAX      --no-masked-softmax-fusion (unfused/local attention): the
 *                causal mask filled in place (read, write P) before the
 *                softmax, and its backward (read, write P) after the
 *                softmax's; flash/fused attention: no effect
 *   GRAD_ACCUM   --no-gradient-accumulation-fusion: each linear layer's wgrad
 *                GEMM writes its dt-byte result, then a kernel adds it into
 *                the main gradient: read dt + main_grad_bytes, write
 *                main_grad_bytes per weight element (op <gemm>.accum, after
 *                the pass's other ops)
 *   ROPE         --no-rope-fusion with rotary positions: q and k rotated by
 *                PyTorch ops, 12 passes of 16-bit q,k elements forward
 *                (rotate_half's negate and concatenation 3, two products 4,
 *                sum 3, the final concatenation 2) and 10 backward (two
 *                products 4, negate 1, halves joined 2, branch sum 3). The
 *                fused kernel (2 passes) is not costed by the default ops.
 *   CE           --cross-entropy-loss-fusion (native): the fp32 cast with the
 *                max and the exp with its sum fused (logits x (dt + 12)
 *                forward instead of dt + 16), the target and sum all-reduces
 *                batched into one (2T x 4 bytes); backward unchanged */
#define LAYER_UNFUSED_BIAS_ACT     0x01u
#define LAYER_UNFUSED_BIAS_DROPOUT 0x02u
#define LAYER_UNFUSED_SOFTMAX      0x04u
#define LAYER_UNFUSED_GRAD_ACCUM   0x08u
#define LAYER_UNFUSED_ROPE         0x10u
#define LAYER_FUSED_CE             0x20u

/* Build the shape from a validated config. TS_EINVAL if a divisibility the
 * layer needs does not hold (heads % t, groups % t, ffn % t, vocab % t,
 * h % heads, heads % groups; with SP seq % t), naming the flags. */
int layer_shape_from_config(const config *c, layer_shape *out, ts_err *err);

/* The same checks for a hand-built shape. */
int layer_shape_check(const layer_shape *L, ts_err *err);

/* TS_EINVAL, naming the flags, when one layer's activations or widest tensor
 * would pass 2^62 bytes (CKD_MAX_BYTES): past it int64 byte counts wrap. Called
 * by layer_shape_check. */
int layer_shape_check_size(const layer_shape *L, ts_err *err);

typedef enum { LAYER_OP_GEMM = 0, LAYER_OP_MEM, LAYER_OP_COMM } layer_op_kind;

typedef enum {
    LAYER_PASS_F = 0, /* forward */
    LAYER_PASS_B,     /* whole backward */
    LAYER_PASS_I,     /* input-gradient backward */
    LAYER_PASS_W,     /* weight-gradient backward */
    LAYER_PASS_R,     /* recompute forward (per shape.recompute) */
    LAYER_PASS_COUNT
} layer_pass;

typedef struct {
    const char *name; /* static, e.g. "qkv", "qkv.dgrad", "attn.softmax", "mlp.ar" */
    layer_op_kind kind;
    int64_t m, n, k;    /* GEMM dims */
    int64_t batch;      /* GEMM batch count (1 for plain GEMMs) */
    int64_t bytes;      /* MEM: bytes read + written; COMM: S (commcost convention) */
    commcost_coll coll; /* COMM only */
    int group;          /* COMM: ranks in the collective (t) */
    double flops;       /* GEMM: 2*m*n*k*batch; 0 otherwise */
    int dep[2];         /* ops of the same list this op waits for; -1 = none */
    int overlap;        /* compute op: index of the collective that starts with it and
                            runs alongside (slowing it: cost_overlap_ns); a MoE all-to-all
                            (a2a): each op of a chain run beside it (moe.h, shared experts:
                            overlap_beside_chain_ns); -1 = none */
    /* COMM ops of a context-parallel group (0: the tensor-parallel group): */
    int stride; /* ranks between two neighbours of the group (t, or t x a2a level) */
    int span;   /* ranks of the whole group (for p2p: the ring the pair belongs to) */
    bool fp8;   /* GEMM: runs on the FP8 tensor cores (cost.h: FP8 peak and tiles); a MoE all-to-all
                   (a2a, COMM_P2P): carries MXFP8 rows (moe_disp.h: FP8 dispatch) */
    bool fp32;  /* GEMM: fp32 operands (the router with --moe-router-dtype fp32; cost.h) */
    bool a2a;   /* COMM: the MoE dispatcher's traffic (moe_disp.h; the EP category). coll
                           COMM_P2P: its all-to-all over the expert-parallel group (group = EP;
                           bytes = what one rank sends, moe_a2a_send_bytes; time from moe_a2a_ns,
                           not commcost_ns); an all-gather or reduce-scatter: over group
                           consecutive ranks (stride 1), commcost_ns */
} layer_op;

#define LAYER_MAX_OPS 64

typedef struct {
    int n;
    layer_op op[LAYER_MAX_OPS];
} layer_ops;

/* Op-list builders, shared by the layer's lists and the MoE block's
 * (moe.h). Each appends one op to o, named name (a static string), with
 * dep[0] = the previous op, no second dependency and no overlap, and returns
 * its index. The caller guarantees room: o->n < LAYER_MAX_OPS.
 *   layer_ops_push  an op of kind, every other field zero (batch 1)
 *   layer_ops_gemm  a GEMM m x n x k, batch times, 2mnk x batch flops
 *   layer_ops_mem   a memory-bound op moving bytes
 *   layer_ops_comm  a collective coll of bytes over a group of group ranks */
int layer_ops_push(layer_ops *o, const char *name, layer_op_kind kind);
int layer_ops_gemm(layer_ops *o, const char *name, int64_t m, int64_t n, int64_t k, int64_t batch);
int layer_ops_mem(layer_ops *o, const char *name, int64_t bytes);
int layer_ops_comm(layer_ops *o, const char *name, commcost_coll coll, int64_t bytes, int group);

/* Append src's ops to dst: their dependency and overlap indices shifted,
 * src's first op (when it waits for nothing) made to wait for dst's last.
 * TS_EINVAL when the two lists do not fit in LAYER_MAX_OPS. */
int layer_ops_append(layer_ops *dst, const layer_ops *src, ts_err *err);

/* Bytes one FP8 cast kernel moves for elems 16-bit elements under recipe r:
 * it reads the 16-bit tensor (2 B) and writes the FP8 copy the forward GEMM
 * reads and the one the backward GEMM reads (Hopper's FP8 MMA takes K-major
 * operands only, so that one is the transpose; MXFP8 writes a row-wise and a
 * column-wise copy): 4 B per element; plus
 *   delayed     nothing (the amax of this step is found in the same kernel and
 *               used for the next step's scale)
 *   tensorwise  2 B: a pass reading the tensor for its amax before the cast
 *               (current scaling)
 *   blockwise   2 x 4 B per 128 elements: an fp32 scale per 1x128 block of
 *               each copy
 *   mxfp8       2 x 1 B per 32 elements: an e8m0 scale per 32-element block
 *               of each copy
 * i.e. 4, 6, 4.0625, 4.0625 B per element (rounded down). */
int64_t layer_fp8_cast_bytes(config_fp8_recipe r, int64_t elems);

/* FP8 (L->fp8 != FP8_FORMAT_NONE): mark the linear GEMMs among o's ops
 * from index from on as FP8 (layer_op.fp8; their ".wgrad" GEMMs too) and
 * append after the list the cast each forward GEMM's input and each dgrad
 * GEMM's output gradient needs (op "<gemm>.fp8.cast", layer_fp8_cast_bytes
 * of m x k x batch elements: a grouped expert GEMM casts each expert's
 * input), with the amax all-reduce current scaling adds under sequence
 * parallelism (LAYER_FP8_AMAX_BYTES). The GEMMs: the dense layer's qkv,
 * proj, fc1, fc2; MLA's down and up projections; the routed experts'
 * grouped fc1/fc2 and the shared experts' fc1/fc2. Attention, the router
 * and the output layer stay 16-bit. Called by layer_ops_build and
 * moe_block_ops; GEMMs already marked are skipped. Nothing without FP8.
 * Returns TS_EINVAL (o as far as it got) if the casts would pass
 * LAYER_MAX_OPS. */
int layer_fp8_ops(const layer_shape *L, layer_ops *o, int from, ts_err *err);

/* Current scaling (tensorwise) with sequence parallelism: the input of
 * qkv and fc1 and the output gradient of proj and fc2 are all-gathered in
 * FP8, so each rank's amax is all-reduced over the t ranks (one fp32,
 * op <gemm>.fp8.amax.ar) before the cast, which waits for it (Transformer
 * Engine's Float8CurrentScaling quantizers with amax reduction over the TP
 * group). Delayed scaling's amax reduction is per chunk, not per layer
 * (fp8.h fp8_amax_reduce_bytes). */
#define LAYER_FP8_AMAX_BYTES 4

/* The LAYER_UNFUSED_* / LAYER_FUSED_CE bits of a model's fusion flags,
 * each kept only where Megatron-LM's flag takes effect: bias-GeLU with GeLU
 * and biases, bias-SwiGLU with SwiGLU, masked softmax with the unfused or
 * local attention, RoPE with rope/yarn positions. */
unsigned layer_fusion_of(const model_config *m);

/* Bytes of the add of a weight gradient of weight_elems elements into the
 * main gradient (LAYER_UNFUSED_GRAD_ACCUM): read the dt-byte temporary and
 * the main gradient, write the main gradient. */
int64_t layer_grad_accum_bytes(const layer_shape *L, int64_t weight_elems);

/* Ops of one transformer layer for pass. Always succeeds for a shape that
 * passes layer_shape_check (TS_EINVAL otherwise). */
int layer_ops_build(const layer_shape *L, layer_pass pass, layer_ops *out, ts_err *err);

/* Ops of the input embedding (first stage): word + position lookup, dropout,
 * the vocabulary-parallel all-reduce (SP: reduce-scatter) forward; the
 * gradient scatter-add backward (B and W; I has only the SP all-gather).
 * LAYER_PASS_R gives no ops. */
int layer_embedding_ops(const layer_shape *L, layer_pass pass, layer_ops *out, ts_err *err);

/* Ops of the output layer and loss (last stage): final LayerNorm, [SP
 * all-gather], logit GEMM (2bshV/t flops forward, 4bshV/t backward),
 * vocabulary-parallel cross-entropy (element-wise + two small all-reduces),
 * backward with the input-gradient all-reduce (SP: reduce-scatter).
 * LAYER_PASS_R gives no ops (never recomputed). */
int layer_output_ops(const layer_shape *L, layer_pass pass, layer_ops *out, ts_err *err);

/* Sum of flops / of COMM bytes of a list (helpers for reports and tests). */
double layer_ops_flops(const layer_ops *ops);
int64_t layer_ops_comm_bytes(const layer_ops *ops, commcost_coll coll);

/* When a saved tensor may be freed. */
typedef enum {
    LAYER_FREE_AFTER_I = 0, /* needed by the input-gradient backward: freed when I (or B) ends */
    LAYER_FREE_AFTER_W      /* needed only by weight-gradient GEMMs: freed when W (or B) ends */
} layer_free_when;

typedef struct {
    const char *name;  /* static, e.g. "ln1.in", "attn.softmax.out" */
    int64_t bytes;     /* per micro-batch on one TP rank */
    bool kept_after_f; /* stored by F under shape.recompute */
    bool by_recompute; /* re-created by R (not kept after F but needed) */
    layer_free_when free_when;
} layer_tensor;

#define LAYER_MAX_SAVED 24

typedef struct {
    int n;
    layer_tensor t[LAYER_MAX_SAVED];
} layer_saved_list;

/* Tensors saved by one transformer layer's forward for its backward. Every
 * tensor is either kept_after_f or by_recompute (never both). */
int layer_saved_build(const layer_shape *L, layer_saved_list *out, ts_err *err);

/* Same for the embedding (dropout mask) and the output layer (final LN
 * input, logit GEMM input, fp32 logits for the loss: 4sbV/t). */
int layer_embedding_saved(const layer_shape *L, layer_saved_list *out, ts_err *err);
int layer_output_saved(const layer_shape *L, layer_saved_list *out, ts_err *err);

/* Bytes an FP8 linear layer's saved input of elems elements takes (L->fp8
 * != FP8_FORMAT_NONE): Transformer Engine's linear modules (Linear,
 * LayerNormLinear, GroupedLinear) keep, for the weight gradient, the FP8
 * copy of their input their cast wrote (the column-wise usage of the
 * quantized input: transformer_engine/pytorch/module/linear.py saves
 * inputmat after update_usage(rowwise_usage=False,
 * columnwise_usage=True); grouped_linear.py the same per expert), not the
 * 16-bit tensor: 1 byte an element, plus per recipe
 *   delayed, tensorwise  nothing (one fp32 scale per tensor)
 *   blockwise            4 B per 128 (an fp32 scale per 1x128 block)
 *   mxfp8                1 B per 32 (an e8m0 scale per 32 elements)
 * i.e. elems, or elems + elems / 32 for the block-scaled recipes (rounded
 * down). Without FP8: elems x dtype_bytes. Every FP8 GEMM input
 * layer_saved_build and moe_block_mem_of save goes through it: the dense
 * layer's qkv, proj, fc1, fc2 inputs; MLA's down-projection inputs (one
 * copy each: two modules quantize the normed input separately) and
 * up-projection inputs; the routed experts' fc1 and fc2 inputs; the shared
 * experts' fc1 and fc2 inputs. */
int64_t layer_fp8_saved_bytes(const layer_shape *L, int64_t elems);

/* Sum of bytes kept after F (what stays alive between F and R/B/I). */
int64_t layer_saved_kept_bytes(const layer_saved_list *l);

/* Bytes a split backward keeps from I to W besides the saved inputs (which
 * W frees, LAYER_FREE_AFTER_W): the output gradient each weight-gradient
 * op of the W list w reads, as zero-bubble implementations of Megatron-LM
 * stash it with each linear layer's input. For "X.wgrad" the gradient the
 * I list's "X.dgrad" GEMM reads (dX[T, in] = dY[T, out] W: m x k =
 * T x out, times its batch), in the activations' dtype (1 byte when the
 * wgrad runs in FP8: the cast Transformer Engine's wgrad reads); without
 * such a dgrad the wgrad's k x m; the embedding's "emb.wgrad" the gradient
 * of its output, tokens x h. A GPT layer: T (qkv_n + h + fc1_n + h) x dt. */
int64_t layer_wgrad_stash_bytes(const layer_shape *L, const layer_ops *i, const layer_ops *w);

/* Korthikanti et al. 2022 Table 2 per-layer activation bytes for the
 * shape's t, sp and recompute (16-bit activations): the closed form the
 * tests compare layer_saved_build() with. Exact in integers when t divides the
 * terms (the Table 2 rows); rounded down otherwise. */
int64_t layer_korthikanti_bytes(const layer_shape *L);

/* The flash/fused closed form for the shape's t and sp with no
 * recomputation (16-bit activations, GPT shapes: a = g, d = h/a, ffn = 4h,
 * both dropouts on): sbh(34 + 4a/h) at t = 1, 10sbh + 24sbh/t + 4asb/t
 * with TP, (34sbh + 4asb)/t with SP. The tests compare layer_saved_build()
 * with it. */
int64_t layer_flash_bytes(const layer_shape *L);

/* Score elements of one head's s x s matrix on and below the diagonal,
 * s(s + 1)/2: what Megatron-LM's fused causal softmax reads
 * (scaled_upper_triang_masked_softmax, the kernel FusedScaleMaskSoftmax runs
 * for a causal mask with 16-bit scores: row i loads its first i + 1 scores,
 * and its backward the same of the gradient and the output; both write the
 * whole row, the masked part as zeros). */
int64_t layer_causal_tri(int64_t s);

const char *layer_pass_name(layer_pass p); /* "F", "B", "I", "W", "R" */

#endif
