/* gpt_impl — the private layout of gpt_stage and gpt_acts, shared by gpt.c
 * (parameters, sharding, optimizer), gpt_pass.c (forward and backward) and
 * gpt_infer.c (inference with a KV cache). Not a contract: include only from
 * those three files. */
#ifndef TRAINSIM_EXEC_GPT_IMPL_H
#define TRAINSIM_EXEC_GPT_IMPL_H

#include "exec/core/gpt.h"

/* Saved activations of one layer for one micro-batch. Rows: Ns = N/t with
 * sp, else N; "g" tensors are the all-gathered [N, C] copies (sp only). */
typedef struct {
    float *ln1, *ln1m, *ln1r, *ln1g; /* [Ns,C], [Ns], [Ns], [N,C] */
    float *qkv;                      /* [N, Wl] (q and k normalised with qk_norm, rotated with rope) */
    float *qkn, *qknm, *qknr;        /* qk_norm: q and k before the norm [N, (NH/t + NKV/t) hs], its mean
                                        (LayerNorm) and rstd per head [N, NH/t + NKV/t] */
    float *att;                      /* unfused: the scores [B, NH/t, T, T]; flash: the log-sum-exp [B, NH/t, Tl] */
    float *atty;                     /* [N, C/t] */
    float *res2;                     /* [Ns, C] */
    float *ln2, *ln2m, *ln2r, *ln2g;
    float *fch, *fchg; /* [N, Fu], [N, F/t]; absent in a MoE layer */
    float *res3;       /* [Ns, C]; NULL for the stage's last layer */
    moe_saved *moe;    /* a MoE layer's saved routing and expert rows, from its forward to its backward */
    float *mem;        /* a layer whose activations are kept: its own allocations, from its forward to the end
                          of its backward (gpt_layer_acts_alloc / _free); NULL for a recomputed layer. mem holds
                          the input part (freed after the input gradient when the backward is split), wmem the
                          weight part (gpt_lacts_carve) */
    float *wmem;
    float *xmem; /* the last stage's last kept layer: its output res3 (the final norm's input), its own allocation,
                    freed after the head's input gradient */
    size_t nfloats, wfloats;
} gpt_lacts;

/* A local layer's MoE MLP (L NULL: a dense layer) and its Adam moments,
 * wr then w1 then w2 (nr + n1 + n2 floats, host memory). */
typedef struct {
    moe_layer *L;
    float *m, *v;
    size_t nr, n1, n2;
} gpt_moe;

/* Output gradients a layer's weight gradients need (zero-bubble "W"). */
typedef struct {
    float *dqkv;        /* [N, Wl] */
    float *dprojo;      /* [N, C] gradient of the attention output projection */
    float *dfch;        /* [N, Fu] gradient before GELU / SwiGLU (absent in a MoE layer when split) */
    float *dfcprojo;    /* [N, C] gradient of the MLP output projection (likewise) */
    float *dln1, *dln2; /* [Ns, C] gradients of the LayerNorm outputs */
    /* split backward: the layer's own allocation of the four linear output gradients, from its
     * input gradient to its weight gradient (dln1, dln2: the stage's buffers, the norms' weight
     * gradients being taken with the input gradient) */
    float *mem;
    size_t nfloats;
} gpt_lcache;

/* The fused backward's buffers (one allocation, gpt_cache_layout) or, split,
 * the output gradients kept from the input to the weight gradient (each its
 * own allocation; dlnf then the stage's buffer). */
typedef struct {
    gpt_lcache *L;  /* per local layer */
    float *dlogits; /* [N, V] (last stage) */
    float *dlnf;    /* [Ns, C] (last stage) */
    float *dx0;     /* [Ns, C] gradient of the embedding output (first stage) */
    float *mem;     /* fused: one allocation holding all of the above */
    size_t nfloats;
} gpt_cache;

struct gpt_acts {
    int *tokens, *targets; /* backend int memory, B*T each */
    float *in0;            /* [Ns, C] stage input (or embedding output) */
    gpt_lacts *L;
    float *lnf, *lnfm, *lnfr, *lnfg, *probs, *losses; /* last stage */
    float *mem;
    size_t nfloats;
    /* the last stage's own allocations, freed as the backward is done with them (as autograd frees
     * them): head_i (probs, losses) after the head's input gradient, head_w (lnf and its stats)
     * after its weight gradient; the forward allocates them when it reaches the head */
    float *head_i, *head_w;
    size_t head_in, head_wn;
    gpt_cache cache; /* saved by backward_input (split mode) */
    bool have_cache;
    float *rc_mem; /* split mode: the recomputed layers' activations, rerun by backward_input, kept for W */
    size_t rc_n;
};

struct gpt_stage {
    gpt_dims d;
    int t, tr;    /* tensor-parallel size and rank */
    int cp, cr;   /* context-parallel size and rank (COMM_CP) */
    cp_ring ring; /* the flash attention's ring over COMM_CP (size 1: one rank) */
    bool sp;
    int l0, nl; /* first global layer, local layer count */
    bool embed, head;
    backend *be;
    comm *cm;
    uint64_t seed;
    /* derived sizes */
    int B, T, C, Cl, F, Fl, NHl, hs, V;
    int Tl;   /* positions of each sequence on this rank: T / cp */
    int NKVl; /* local key/value heads (= NHl without grouped-query attention) */
    int Wl;   /* local QKV width (NHl + 2 NKVl) hs */
    int Fu;   /* local FC1 width: 2 Fl with SwiGLU, else Fl */
    size_t N, Ns;
    /* parameters: one buffer each, carved into tensors */
    size_t nparams;
    size_t shard, npad; /* optimizer shard (nparams with no dist_optim) and the padded buffers' size (d x shard) */
    float *gshard;      /* [shard] reduce-scatter / all-gather staging (dist_optim, d > 1) */
    float *params, *grads, *m, *v;
    gpt_tensor *tens;
    int ntens;
    float **pw, **pg; /* per local layer and kind: [li*GP_LAYER_COUNT + k] */
    float *wte, *wpe, *lnfw, *lnfb, *wout, *gwte, *gwpe, *glnfw, *glnfb, *gwout;
    /* scratch (buffers) */
    float *s_part;  /* [N, C] partial sums before a TP reduction */
    float *s_red;   /* [Ns, C] reduce-scatter output (sp) */
    float *s_dres;  /* [Ns, C] residual-stream gradient */
    float *s_dfchg; /* [N, F/t] */
    float *s_datty; /* [N, C/t] */
    float *s_datt;  /* [B, NH/t, T, T] (unfused only) */
    float *s_att;   /* gpt_att_floats: every layer's scores or log-sum-exp (recompute_attn) */
    float *scratch; /* one allocation holding the above */
    size_t scratch_n;
    gpt_cache fused; /* one layer's worth, reused by gpt_backward */
    /* full recomputation (gpt_recomp.c) */
    int *rc_lo, *rc_hi; /* per local layer: its recompute group [lo, hi); -1, -1 when its activations are kept */
    int n_rc;           /* recomputed layers: always the stage's first n_rc */
    size_t rc_slot;     /* floats of one layer's activations (with its output) */
    float *rc_ws;       /* one group's activations: the forward's and the fused backward's; allocated while a
                           group runs (gpt_rc_ws_get/put), as autograd holds a checkpointed group's tensors */
    size_t rc_ws_n;
    gpt_moe *moe;     /* [nl] */
    float loss_scale; /* of the backward under way (the MoE auxiliary loss's gradient scale) */
    gpt_prof_fn prof;
    void *prof_ud;
};

/* Call the stage's profiling hook (if any) at the start or end of op name. */
#define PROF(st, name, layer, end)                                                                                     \
    do {                                                                                                               \
        if ((st)->prof)                                                                                                \
            (st)->prof((st)->prof_ud, (name), (layer), (end));                                                         \
    } while (0)
/* Run stmt as op `name` of `layer`, timed by the profiling hook. */
#define OP(st, name, layer, stmt)                                                                                      \
    do {                                                                                                               \
        PROF(st, name, layer, false);                                                                                  \
        stmt;                                                                                                          \
        PROF(st, name, layer, true);                                                                                   \
    } while (0)

#define LW(st, li, k) ((st)->pw[(size_t)(li)*GP_LAYER_COUNT + ((k)-GP_LAYER_FIRST)])
#define LG(st, li, k) ((st)->pg[(size_t)(li)*GP_LAYER_COUNT + ((k)-GP_LAYER_FIRST)])

/* Layer li's own activations (a layer that is not recomputed) where
 * absent, carved into a->L[li]; free releases them (NULL allowed). */
int gpt_layer_acts_alloc(gpt_stage *st, gpt_acts *a, int li, ts_err *err);
void gpt_layer_acts_free(gpt_stage *st, gpt_acts *a, int li);
/* Free layer li's input part only (a split backward after its input
 * gradient: the weight part stays for W); NULL allowed. */
void gpt_layer_acts_free_input(gpt_stage *st, gpt_acts *a, int li);
/* Free the last stage's last layer's output (xmem) once the head's input
 * gradient has read it; a no-op for other layers. */
void gpt_layer_acts_free_output(gpt_stage *st, gpt_acts *a, int li);

/* The last stage's head activations of a (gpt_acts' head_i, head_w) where
 * absent; a no-op on other stages. */
int gpt_head_acts_alloc(gpt_stage *st, gpt_acts *a, ts_err *err);
/* Free head_w (weight_part) or head_i; NULL pointers are allowed. */
void gpt_head_acts_free(gpt_stage *st, gpt_acts *a, bool weight_part);

/* Floats of one layer's saved attention state: the scores (unfused) or the
 * log-sum-exp (flash). */
size_t gpt_att_floats(const gpt_stage *st);

/* Carve one layer's activations (with its output res3 if res3; without the
 * MLP's if moe): the weight part (the linear layers' inputs, which the
 * weight gradients read: ln1, ln1g, atty, ln2, ln2g, fchg;
 * gpt_lacts_w_floats of them) from wbase, the rest from ibase (NULL: right
 * after the weight part); wbase NULL: only count. Returns the floats taken. */
size_t gpt_lacts_carve(const gpt_stage *st, gpt_lacts *A, float *wbase, float *ibase, bool res3, bool moe);
size_t gpt_lacts_w_floats(const gpt_stage *st, bool moe);
/* Full recomputation: the groups of st->d's method over the stage's layers
 * and the size of the group workspace. */
int gpt_rc_setup(gpt_stage *st, ts_err *err);
void gpt_rc_free(gpt_stage *st);
/* Allocate the group workspace st->rc_ws (counted as activations) if it is
 * not; put frees it (the group is done). */
int gpt_rc_ws_get(gpt_stage *st, ts_err *err);
void gpt_rc_ws_put(gpt_stage *st);
/* Point the activations of the recompute group starting at local layer lo
 * into base (group slots of st->rc_slot floats); the group's last output
 * (its checkpoint, per micro-batch) keeps its place. */
void gpt_rc_bind(const gpt_stage *st, gpt_acts *a, int lo, float *base);

/* MoE layers (gpt_moe.c): dims check for t (and sp); the stage's layers
 * (st->moe, [nl], created over the comm's expert groups); their release,
 * gradient zeroing, reduction and Adam step. */
int gpt_moe_check(const gpt_dims *d, int t, bool sp, ts_err *err);
int gpt_moe_create(gpt_stage *st, ts_err *err);
void gpt_moe_free(gpt_stage *st);
void gpt_moe_zero_grads(gpt_stage *st);
int gpt_moe_reduce_grads(gpt_stage *st, ts_err *err);
void gpt_moe_adam(gpt_stage *st, float lr, float b1, float b2, float eps, float wd, int step);

/* Carve the cache for `layers` layers (+ head, embed parts as the stage
 * needs) from base (NULL: only count). Returns floats needed. */
size_t gpt_cache_layout(const gpt_stage *st, gpt_cache *c, int layers, float *base);

#endif
