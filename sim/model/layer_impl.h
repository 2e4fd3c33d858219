/* layer_impl — the layer module's private functions, shared by its files:
 * layer_shape.c (the shape from a config and its checks), layer.c (the
 * dense layer's ops), layer_saved.c (the tensors saved for the backward)
 * and layer_mla.c (multi-latent attention's ops: mla.h has its closed forms
 * and the tensor-parallel split). Not a contract: include only from those
 * files. */
#ifndef TRAINSIM_LAYER_IMPL_H
#define TRAINSIM_LAYER_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/config/config.h"
#include "sim/model/layer.h"
#include "sim/util/err.h"

/* Derived sizes of one TP rank. */
typedef struct {
    int64_t T;     /* tokens of the micro-batch: s*b */
    int64_t Tl;    /* tokens an element-wise op sees: T, or T/t with SP */
    int64_t d;     /* head size d (--kv-channels, default h/a) */
    int64_t dqk;   /* head size of the scores (QK^T): d; MLA d_qk + d_rope */
    int64_t dv;    /* head size of the values (attention.V): d; MLA d_v */
    int64_t adt;   /* attention output width on this rank: a*dv/t (proj's input columns) */
    int64_t at;    /* heads on this rank */
    int64_t gt;    /* query groups on this rank */
    int64_t qkv_n; /* QKV output columns on this rank: (h + 2*g*d)/t */
    int64_t ffn_t; /* FFN columns per gate on this rank */
    int64_t fc1_n; /* FC1 output columns (2*ffn_t for SwiGLU) */
    int64_t Vt;    /* vocabulary shard */
    int64_t dt;    /* bytes per element */
    int64_t S;     /* TP collective size: T*h*dt */
    bool comm;     /* t > 1: collectives exist */
} layer_dims;

/* The derived sizes of L (L valid: layer_shape_check). */
layer_dims layer_dims_of(const layer_shape *L);

/* Whether L's attention backend is a flash kernel (config_attn_is_flash). */
bool layer_is_flash(const layer_shape *L);

/* The selective-recompute modules of the shape (CONFIG_RC_DEFAULT when none
 * given). */
unsigned layer_rc_modules_of(const layer_shape *L);

/* The layer shape's MLA fields from e (L->mla.on = e->mla). */
void layer_mla_from_config(const moe_config *e, layer_shape *L);

/* TS_EINVAL naming the flag when an MLA shape is out of range (every size
 * >= 1 but q_lora >= 0), or combined with what the MLA ops do not model:
 * context parallelism. OK when !L->mla.on. */
int layer_mla_check(const layer_shape *L, ts_err *err);

/* Ops (layer.h's conventions; T = b s tokens, Tl = T / t with sequence
 * parallelism, else T; at = a / t heads; q' = d_qk + d_r; dt bytes):
 *
 * layer_mla_qkv_fwd: what replaces [SP all-gather] + QKV of the dense forward:
 *   mla.q_down (Tl x q_l x h), mla.q_norm (2 Tl q_l dt), [SP: mla.q_up.ag,
 *   T q_l dt], mla.q_up (T x at q' x q_l)  — or, q_l = 0, [SP: mla.q.ag,
 *   T h dt] mla.q_proj (T x at q' x h);
 *   mla.kv_down (Tl x (kv_l + d_r) x h), mla.kv_norm (2 Tl kv_l dt),
 *   [SP: mla.kv_up.ag, T (kv_l + d_r) dt], mla.kv_up (T x at (d_qk + d_v)
 *   x kv_l); mla.rope (rotary embedding and the q, k concatenation: read
 *   q and k's parts, write q and k: (2 T at q' + T at d_qk + T d_r +
 *   T at q') dt).
 * layer_mla_up_fwd: what --recompute-modules mla_up_proj re-runs in the R pass:
 *   the up-projections with their all-gathers and mla.rope (q_l = 0: the
 *   q projection instead of q_up).
 * layer_mla_qkv_bwd: the backward of layer_mla_qkv_fwd, in reverse: mla.rope.bwd; per
 *   up-projection (kv, then q) its input-gradient GEMM, the input-gradient
 *   collective (t > 1: SP reduce-scatter, else all-reduce, of T x the
 *   input's width, kv's with the rotary key's d_r) overlapped with the
 *   weight-gradient GEMM (with SP the saved sharded input, T q_l or T kv_l,
 *   re-gathered alongside the input-gradient GEMM), the norm's
 *   backward (4 Tl width dt), the down-projection's input and weight
 *   gradients (Tl rows). dgrad only (pass I): no weight gradients and no
 *   re-gathers; wgrad only (pass W): the weight-gradient GEMMs, each
 *   up-projection's after its re-gather (SP). The caller guarantees room
 *   (at most 24 ops). */
void layer_mla_qkv_fwd(const layer_shape *L, layer_ops *o);
void layer_mla_up_fwd(const layer_shape *L, layer_ops *o);
void layer_mla_qkv_bwd(const layer_shape *L, layer_ops *o, bool dgrad, bool wgrad);

/* Bytes of the tensors MLA saves besides the dense layer's (one
 * micro-batch, one rank): the q and kv down-projections' outputs (their
 * norms' inputs, freed by the input-gradient backward: Tl q_l dt, Tl
 * (kv_l + d_r) dt) and the norms' outputs (the up-projections' inputs,
 * needed by their weight gradients only: Tl q_l dt, Tl kv_l dt; SP keeps
 * them sharded and re-gathers). q_l = 0: the q terms are 0 (the q
 * projection reads the layer's normed input, saved by the dense layer).
 * FP8: the up-projections' inputs are their FP8 copies
 * (layer_fp8_saved_bytes of Tl q_l, Tl kv_l); the norms' inputs stay
 * 16-bit (Megatron-core's MLA spec fuses each norm into its up-projection,
 * TELayerNormColumnParallelLinear, which keeps the norm's 16-bit input for
 * the norm's backward and the FP8 normed output for the weight gradient). */
typedef struct {
    int64_t q_down_out, q_up_in, kv_down_out, kv_up_in;
} layer_mla_saved_bytes;
void layer_mla_saved(const layer_shape *L, layer_mla_saved_bytes *out);

#endif
