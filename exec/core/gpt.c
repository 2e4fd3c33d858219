/* gpt — parameters, their tensor-parallel shards, initialisation, gradient
 * reduction, the optimizer step and activation memory. The passes are in
 * gpt_pass.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/core/cp_split.h"
#include "exec/core/gpt_impl.h"

/* How a parameter is split over the t tensor ranks. */
typedef enum { SPLIT_NONE = 0, SPLIT_COL, SPLIT_ROW } split_kind;

typedef struct {
    size_t rows, cols; /* full shape (a vector is rows x 1); 0 rows: absent */
    split_kind split;
    int blocks;      /* SPLIT_COL: row blocks split separately (3 for QKV) */
    size_t brows[3]; /* SPLIT_COL: rows of each block (they sum to rows) */
} pshape;

static pshape col_split(size_t b0, size_t b1, size_t b2, size_t cols)
{
    int nb = b2 ? 3 : b1 ? 2 : 1;
    return (pshape){b0 + b1 + b2, cols, SPLIT_COL, nb, {b0, b1, b2}};
}

int gpt_dims_groups(const gpt_dims *d)
{
    return d->groups > 0 ? d->groups : d->heads;
}

bool gpt_dims_llama(const gpt_dims *d)
{
    return gpt_dims_groups(d) != d->heads || d->rmsnorm || d->swiglu || d->no_bias || d->rope || d->qk_norm;
}

static pshape shape_of(const gpt_dims *d, gpt_pkind k)
{
    size_t V = d->vocab, T = d->seq, C = d->hidden, F = d->ffn;
    size_t hs = (size_t)d->hidden / (size_t)d->heads, kv = (size_t)gpt_dims_groups(d) * hs;
    size_t bias = d->no_bias ? 0 : 1, normb = d->rmsnorm ? 0 : C;
    switch (k) {
    case GP_WTE:
        return (pshape){V, C, SPLIT_NONE, 1, {0}};
    case GP_WPE:
        return (pshape){d->rope ? 0 : T, C, SPLIT_NONE, 1, {0}};
    case GP_QKVW:
        return col_split(C, kv, kv, C);
    case GP_QKVB:
        return col_split(bias * C, bias * kv, bias * kv, 1);
    case GP_PROJW:
        return (pshape){C, C, SPLIT_ROW, 1, {0}};
    case GP_FCW:
        return d->swiglu ? col_split(F, F, 0, C) : col_split(F, 0, 0, C);
    case GP_FCB:
        return d->swiglu ? col_split(bias * F, bias * F, 0, 1) : col_split(bias * F, 0, 0, 1);
    case GP_FCPROJW:
        return (pshape){C, F, SPLIT_ROW, 1, {0}};
    case GP_WOUT:
        return (pshape){d->tie_embed ? 0 : V, C, SPLIT_NONE, 1, {0}};
    case GP_PROJB:
    case GP_FCPROJB:
        return (pshape){bias * C, 1, SPLIT_NONE, 1, {0}};
    case GP_LN1B:
    case GP_LN2B:
    case GP_LNFB:
        return (pshape){normb, 1, SPLIT_NONE, 1, {0}};
    case GP_QLNW:
    case GP_KLNW:
        return (pshape){d->qk_norm ? hs : 0, 1, SPLIT_NONE, 1, {0}};
    case GP_QLNB:
    case GP_KLNB:
        return (pshape){d->qk_norm && !d->rmsnorm ? hs : 0, 1, SPLIT_NONE, 1, {0}};
    default:
        return (pshape){C, 1, SPLIT_NONE, 1, {0}}; /* norm weights */
    }
}

int gpt_dims_check(const gpt_dims *d, int t, bool sp, ts_err *err)
{
    if (d->vocab < 2 || d->seq < 1 || d->hidden < 1 || d->heads < 1 || d->ffn < 1 || d->layers < 1 || d->batch < 1)
        return err_set(err, TS_EINVAL,
                       "model: every size must be positive (vocab >= 2); got V=%d T=%d C=%d "
                       "heads=%d F=%d L=%d B=%d",
                       d->vocab, d->seq, d->hidden, d->heads, d->ffn, d->layers, d->batch);
    if (t < 1)
        return err_set(err, TS_EINVAL, "--tensor-model-parallel-size %d: must be >= 1", t);
    if (d->hidden % d->heads)
        return err_set(err, TS_EINVAL, "--hidden-size %d is not a multiple of --num-attention-heads %d", d->hidden,
                       d->heads);
    if (d->heads % t || d->ffn % t)
        return err_set(err, TS_EINVAL,
                       "--tensor-model-parallel-size %d must divide --num-attention-heads %d "
                       "and --ffn-hidden-size %d",
                       t, d->heads, d->ffn);
    int G = gpt_dims_groups(d);
    if (G < 1 || d->heads % G || G % t)
        return err_set(err, TS_EINVAL,
                       "--num-query-groups %d must divide --num-attention-heads %d and be a multiple of "
                       "--tensor-model-parallel-size %d",
                       G, d->heads, t);
    if (d->rope && (d->hidden / d->heads) % 2)
        return err_set(err, TS_EINVAL,
                       "--position-embedding-type rope: the head size %d (--hidden-size %d / --num-attention-heads "
                       "%d) must be even",
                       d->hidden / d->heads, d->hidden, d->heads);
    if (sp && ((size_t)d->batch * d->seq) % (size_t)t)
        return err_set(err, TS_EINVAL,
                       "--sequence-parallel: micro-batch tokens %d x %d must be a multiple of "
                       "--tensor-model-parallel-size %d",
                       d->batch, d->seq, t);
    return gpt_moe_check(d, t, sp, err);
}

/* The dense MLP's tensors, absent from a MoE layer. */
static bool mlp_kind(gpt_pkind k)
{
    return k == GP_FCW || k == GP_FCB || k == GP_FCPROJW || k == GP_FCPROJB;
}

/* Full element count of kind k in layer (-1 outside layers). */
static size_t full_size(const gpt_dims *d, gpt_pkind k, int layer)
{
    if (layer >= 0 && mlp_kind(k) && gpt_layer_is_moe(d, layer))
        return 0;
    pshape s = shape_of(d, k);
    return s.rows * s.cols;
}

static size_t layer_size(const gpt_dims *d, int layer)
{
    size_t n = 0;
    for (int k = GP_LAYER_FIRST; k < GP_LAYER_FIRST + GP_LAYER_COUNT; k++)
        n += full_size(d, (gpt_pkind)k, layer);
    return n;
}

size_t gpt_full_offset(const gpt_dims *d, gpt_pkind kind, int layer, size_t *n_full)
{
    size_t off = 0;
    bool in_layer = kind >= GP_LAYER_FIRST && kind < GP_LAYER_FIRST + GP_LAYER_COUNT;
    if (in_layer) {
        off = full_size(d, GP_WTE, -1) + full_size(d, GP_WPE, -1);
        for (int l = 0; l < layer; l++)
            off += layer_size(d, l);
        for (int k = GP_LAYER_FIRST; k < (int)kind; k++)
            off += full_size(d, (gpt_pkind)k, layer);
    } else if (kind == GP_WTE) {
        off = 0;
    } else if (kind == GP_WPE) {
        off = full_size(d, GP_WTE, -1);
    } else {
        off = full_size(d, GP_WTE, -1) + full_size(d, GP_WPE, -1);
        for (int l = 0; l < d->layers; l++)
            off += layer_size(d, l);
        for (int k = GP_LNFW; k < (int)kind; k++)
            off += full_size(d, (gpt_pkind)k, -1);
    }
    if (n_full)
        *n_full = full_size(d, kind, in_layer ? layer : -1);
    return off;
}

size_t gpt_num_params(const gpt_dims *d)
{
    size_t n;
    size_t off = gpt_full_offset(d, GP_WOUT, -1, &n);
    return off + n;
}

/* Index within the full tensor of local element i of rank tr's shard. */
static size_t local_to_full(const gpt_dims *d, gpt_pkind k, int t, int tr, size_t i)
{
    pshape s = shape_of(d, k);
    if (s.split == SPLIT_NONE || t == 1)
        return i;
    if (s.split == SPLIT_ROW) {
        size_t lc = s.cols / t, r = i / lc, c = i % lc;
        return r * s.cols + (size_t)tr * lc + c;
    }
    size_t lr = i / s.cols, c = i % s.cols, full0 = 0;
    for (int b = 0; b < s.blocks; b++) {
        size_t lrows = s.brows[b] / (size_t)t;
        if (lr < lrows)
            return (full0 + (size_t)tr * lrows + lr) * s.cols + c;
        lr -= lrows;
        full0 += s.brows[b];
    }
    return SIZE_MAX; /* not reached: i is below the local size */
}

/* splitmix64 of (seed, index) -> uniform in [-1, 1). */
static float hash_uniform(uint64_t seed, uint64_t idx)
{
    uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (idx + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (float)((double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Initial value of full-model element gi of a tensor of kind k: GPT-2's
 * scales (std 0.02; residual projections 0.02/sqrt(2L)) as uniform
 * draws; LayerNorms and biases are perturbed away from 1 and 0 so that a
 * gradient check exercises every term. */
static float init_value(const gpt_dims *d, gpt_pkind k, uint64_t seed, size_t gi)
{
    float u = hash_uniform(seed, gi);
    const float s3 = 1.7320508f;
    switch (k) {
    case GP_LN1W:
    case GP_LN2W:
    case GP_LNFW:
    case GP_QLNW:
    case GP_KLNW:
        return 1.0f + 0.1f * u;
    case GP_LN1B:
    case GP_LN2B:
    case GP_LNFB:
    case GP_QLNB:
    case GP_KLNB:
        return 0.1f * u;
    case GP_WPE:
        return 0.01f * s3 * u;
    case GP_PROJW:
    case GP_FCPROJW:
        return 0.02f * s3 / sqrtf(2.0f * d->layers) * u;
    case GP_QKVB:
    case GP_PROJB:
    case GP_FCB:
    case GP_FCPROJB:
        return 0.01f * u;
    default:
        return 0.02f * s3 * u;
    }
}

static bool is_tp_partial(gpt_pkind k, bool sp)
{
    if (k == GP_QLNW || k == GP_QLNB || k == GP_KLNW || k == GP_KLNB)
        return true; /* each tensor rank's part: its own heads */
    if (!sp)
        return false;
    switch (k) {
    case GP_LN1W:
    case GP_LN1B:
    case GP_LN2W:
    case GP_LN2B:
    case GP_LNFW:
    case GP_LNFB:
    case GP_WTE:
    case GP_WPE:
        return true;
    default:
        return false;
    }
}

static void add_tensor(gpt_stage *st, gpt_pkind k, int layer)
{
    pshape s = shape_of(&st->d, k);
    size_t n = full_size(&st->d, k, layer) / (s.split == SPLIT_NONE ? 1 : (size_t)st->t);
    bool copy = k == GP_WOUT && st->d.tie_embed && !st->embed; /* the last stage's copy of wte */
    if (copy)
        n = (size_t)st->d.vocab * (size_t)st->d.hidden;
    if (n == 0)
        return; /* absent in this architecture (bias, position table): its pointers stay NULL */
    gpt_tensor *tt = &st->tens[st->ntens++];
    tt->kind = k;
    tt->layer = layer;
    tt->offset = st->nparams;
    tt->n = n;
    tt->tp_partial = is_tp_partial(k, st->sp);
    tt->copy = copy;
    st->nparams += n;
}

/* A split backward's kept output gradients (gpt_cache). */
static void free_cache_mem(gpt_stage *st, gpt_cache *c)
{
    for (int li = 0; c->L && li < st->nl; li++)
        be_free(st->be, c->L[li].mem, c->L[li].nfloats, XMEM_ACTS);
    be_free(st->be, c->dlogits, st->N * (size_t)st->V, XMEM_ACTS);
    be_free(st->be, c->dx0, st->Ns * (size_t)st->C, XMEM_ACTS);
    free(c->L);
    memset(c, 0, sizeof *c);
}

void gpt_stage_free(gpt_stage *st)
{
    if (!st)
        return;
    backend *be = st->be;
    be_free(be, st->params, st->npad, XMEM_WEIGHTS);
    be_free(be, st->grads, st->npad, XMEM_GRADS);
    be_free(be, st->m, st->shard, XMEM_OPTIM);
    be_free(be, st->v, st->shard, XMEM_OPTIM);
    be_free(be, st->gshard, st->shard, XMEM_BUFFERS);
    be_free(be, st->scratch, st->scratch_n, XMEM_BUFFERS);
    be_free(be, st->fused.mem, st->fused.nfloats, XMEM_BUFFERS);
    free(st->fused.L);
    gpt_rc_free(st);
    gpt_moe_free(st);
    free(st->tens);
    free(st->pw);
    free(st->pg);
    free(st);
}

/* The backend has the kernels the architecture needs (TS_ENOTSUP naming
 * the flag otherwise). */
static int backend_check(const gpt_dims *d, const backend *be, ts_err *err)
{
    const char *flag = NULL;
    if (d->rmsnorm && !(be->rmsnorm_fwd && be->rmsnorm_bwd_input && be->rmsnorm_bwd_weight))
        flag = "--normalization RMSNorm";
    else if (d->swiglu && !(be->swiglu_fwd && be->swiglu_bwd))
        flag = "--swiglu";
    else if (d->rope && !(be->rope_fwd && be->rope_bwd))
        flag = "--position-embedding-type rope";
    else if (gpt_dims_groups(d) != d->heads && !(be->attention_gqa_fwd && be->attention_gqa_bwd))
        flag = "--group-query-attention --num-query-groups";
    else if (d->qk_norm && !(be->qknorm_fwd && be->qknorm_bwd_weight && be->qknorm_bwd_input))
        flag = "--qk-layernorm";
    if (flag)
        return err_set(err, TS_ENOTSUP, "%s: the %s backend has no kernel for it (run with the cpu backend)", flag,
                       be->name);
    if (d->flash && !(be->attention_flash_fwd && be->attention_flash_bwd))
        return err_set(err, TS_ENOTSUP,
                       "--attention-backend flash: the %s backend has only the unfused attention (give "
                       "--attention-backend unfused, or run with the cpu backend)",
                       be->name);
    return TS_OK;
}

/* Context parallelism: flash attention, a ring, T split in 2 cp chunks,
 * rope at a chunk's positions (TS_ENOTSUP / TS_EINVAL naming the flag). */
static int cp_check(const gpt_dims *d, const comm *cm, const backend *be, ts_err *err)
{
    int cp = cm->size[COMM_CP];
    if (cp == 1)
        return TS_OK;
    if (!d->flash)
        return err_set(err, TS_ENOTSUP,
                       "--context-parallel-size %d needs --attention-backend flash (ring attention keeps no scores)",
                       cp);
    if (!cm->cp_sendrecv)
        return err_set(err, TS_ENOTSUP, "--context-parallel-size %d: the %s comm has no context-parallel ring", cp,
                       cm->name);
    if (d->rope && !(be->rope_at_fwd && be->rope_at_bwd))
        return err_set(err, TS_ENOTSUP,
                       "--context-parallel-size %d with --position-embedding-type rope: the %s backend has no rope "
                       "kernel at given positions",
                       cp, be->name);
    return cp_split_check(d->seq, cp, err);
}

static int stage_ring_sendrecv(void *ud, const float *send, float *recv, size_t n, ts_err *err)
{
    comm *cm = ud;
    return cm->cp_sendrecv(cm, send, recv, n, err);
}

size_t gpt_att_floats(const gpt_stage *st)
{
    size_t bh = (size_t)st->B * (size_t)st->NHl;
    return st->d.flash ? bh * (size_t)st->Tl : bh * (size_t)st->T * (size_t)st->T;
}

int gpt_stage_create(const gpt_dims *d, int first_layer, int num_layers, bool embed, bool head, bool sp, uint64_t seed,
                     backend *be, comm *cm, gpt_stage **out, ts_err *err)
{
    *out = NULL;
    int t = cm->size[COMM_TP];
    int rc = gpt_dims_check(d, t, sp, err);
    if (rc)
        return rc;
    if ((rc = backend_check(d, be, err)) || (rc = cp_check(d, cm, be, err)))
        return rc;
    if (first_layer < 0 || num_layers < 0 || first_layer + num_layers > d->layers)
        return err_set(err, TS_EINVAL, "stage layers [%d, %d) outside the model's %d layers", first_layer,
                       first_layer + num_layers, d->layers);
    gpt_stage *st = calloc(1, sizeof *st);
    if (!st)
        return err_set(err, TS_ENOMEM, "gpt stage: out of memory");
    st->d = *d;
    st->t = t;
    st->tr = cm->rank[COMM_TP];
    st->cp = cm->size[COMM_CP];
    st->cr = cm->rank[COMM_CP];
    st->ring = (cp_ring){.size = st->cp, .rank = st->cr, .ud = cm, .sendrecv = stage_ring_sendrecv};
    st->sp = sp && t > 1;
    st->l0 = first_layer;
    st->nl = num_layers;
    st->embed = embed;
    st->head = head;
    st->be = be;
    st->cm = cm;
    st->seed = seed;
    st->B = d->batch;
    st->T = d->seq;
    st->C = d->hidden;
    st->Cl = d->hidden / t;
    st->F = d->ffn;
    st->Fl = d->ffn / t;
    st->NHl = d->heads / t;
    st->hs = d->hidden / d->heads;
    st->NKVl = gpt_dims_groups(d) / t;
    st->Wl = (st->NHl + 2 * st->NKVl) * st->hs;
    st->Fu = d->swiglu ? 2 * st->Fl : st->Fl;
    st->V = d->vocab;
    st->Tl = d->seq / st->cp;
    st->N = (size_t)d->batch * st->Tl;
    st->Ns = st->sp ? st->N / t : st->N;

    int maxt = 2 + num_layers * GP_LAYER_COUNT + 3;
    st->tens = calloc((size_t)maxt, sizeof *st->tens);
    st->pw = calloc((size_t)num_layers * GP_LAYER_COUNT + 1, sizeof *st->pw);
    st->pg = calloc((size_t)num_layers * GP_LAYER_COUNT + 1, sizeof *st->pg);
    if (!st->tens || !st->pw || !st->pg) {
        gpt_stage_free(st);
        return err_set(err, TS_ENOMEM, "gpt stage: out of memory");
    }
    if (embed) {
        add_tensor(st, GP_WTE, -1);
        add_tensor(st, GP_WPE, -1);
    }
    for (int li = 0; li < num_layers; li++)
        for (int k = GP_LAYER_FIRST; k < GP_LAYER_FIRST + GP_LAYER_COUNT; k++)
            add_tensor(st, (gpt_pkind)k, first_layer + li);
    if (head) {
        add_tensor(st, GP_LNFW, -1);
        add_tensor(st, GP_LNFB, -1);
        add_tensor(st, GP_WOUT, -1);
    }
    size_t n = st->nparams, dp = (size_t)cm->size[COMM_DP];
    st->shard = d->dist_optim ? (n + dp - 1) / dp : n;
    st->npad = d->dist_optim ? st->shard * dp : n;
    if ((rc = be_alloc(be, st->npad, XMEM_WEIGHTS, &st->params, err)) ||
        (rc = be_alloc(be, st->npad, XMEM_GRADS, &st->grads, err)) ||
        (rc = be_alloc(be, st->shard, XMEM_OPTIM, &st->m, err)) ||
        (rc = be_alloc(be, st->shard, XMEM_OPTIM, &st->v, err)) ||
        (d->dist_optim && dp > 1 && (rc = be_alloc(be, st->shard, XMEM_BUFFERS, &st->gshard, err))))
        goto fail;

    /* initial values, computed on the host from full-model indices */
    float *host = malloc((n ? n : 1) * sizeof(float));
    if (!host) {
        rc = err_set(err, TS_ENOMEM, "gpt stage: out of memory for %zu parameters", n);
        goto fail;
    }
    for (int i = 0; i < st->ntens; i++) {
        gpt_tensor *tt = &st->tens[i];
        gpt_pkind ik = tt->copy ? GP_WTE : tt->kind; /* a copy starts as what it copies */
        size_t base = gpt_full_offset(d, ik, tt->layer, NULL);
        for (size_t j = 0; j < tt->n; j++)
            host[tt->offset + j] = init_value(d, ik, seed, base + local_to_full(d, ik, t, st->tr, j));
        float *w = st->params + tt->offset, *g = st->grads + tt->offset;
        if (tt->layer >= 0) {
            int li = tt->layer - first_layer;
            LW(st, li, tt->kind) = w;
            LG(st, li, tt->kind) = g;
        } else {
            switch (tt->kind) {
            case GP_WTE:
                st->wte = w, st->gwte = g;
                break;
            case GP_WPE:
                st->wpe = w, st->gwpe = g;
                break;
            case GP_LNFW:
                st->lnfw = w, st->glnfw = g;
                break;
            case GP_LNFB:
                st->lnfb = w, st->glnfb = g;
                break;
            default:
                st->wout = w, st->gwout = g;
                break;
            }
        }
    }
    if (d->tie_embed && embed && head) /* one stage: the output layer is the embedding itself */
        st->wout = st->wte, st->gwout = st->gwte;
    be->to_device(be, st->params, host, n);
    free(host);

    /* scratch */
    size_t N = st->N, Ns = st->Ns, C = st->C;
    size_t natt = gpt_att_floats(st), ndatt = d->flash ? 0 : natt; /* flash: no score gradients */
    st->scratch_n = N * C + Ns * C + Ns * C + N * st->Fl + N * st->Cl + ndatt + (d->recompute_attn ? natt : 0);
    if ((rc = be_alloc(be, st->scratch_n, XMEM_BUFFERS, &st->scratch, err)))
        goto fail;
    float *p = st->scratch;
    st->s_part = p, p += N * C;
    st->s_red = p, p += Ns * C;
    st->s_dres = p, p += Ns * C;
    st->s_dfchg = p, p += N * st->Fl;
    st->s_datty = p, p += N * st->Cl;
    st->s_datt = d->flash ? NULL : p, p += ndatt;
    st->s_att = d->recompute_attn ? p : NULL;
    /* the fused backward's one-layer cache */
    st->fused.nfloats = gpt_cache_layout(st, &st->fused, num_layers > 0 ? 1 : 0, NULL);
    st->fused.L = calloc(1, sizeof *st->fused.L);
    if (!st->fused.L) {
        rc = err_set(err, TS_ENOMEM, "gpt stage: out of memory");
        goto fail;
    }
    if ((rc = be_alloc(be, st->fused.nfloats, XMEM_BUFFERS, &st->fused.mem, err)))
        goto fail;
    gpt_cache_layout(st, &st->fused, num_layers > 0 ? 1 : 0, st->fused.mem);
    if ((rc = gpt_rc_setup(st, err)) || (rc = gpt_moe_create(st, err)))
        goto fail;
    *out = st;
    return TS_OK;
fail:
    gpt_stage_free(st);
    return rc;
}

void gpt_stage_set_prof(gpt_stage *st, gpt_prof_fn fn, void *ud)
{
    st->prof = fn;
    st->prof_ud = ud;
}

size_t gpt_stage_io_floats(const gpt_stage *st)
{
    return st->Ns * (size_t)st->C;
}
size_t gpt_stage_num_params(const gpt_stage *st)
{
    return st->nparams;
}
const gpt_tensor *gpt_stage_tensors(const gpt_stage *st, int *count)
{
    *count = st->ntens;
    return st->tens;
}
float *gpt_stage_params(gpt_stage *st)
{
    return st->params;
}
float *gpt_stage_grads(gpt_stage *st)
{
    return st->grads;
}

size_t gpt_cache_layout(const gpt_stage *st, gpt_cache *c, int layers, float *base)
{
    size_t cur = 0, N = st->N, Ns = st->Ns, C = st->C;
    size_t nln = Ns * C;
#define TAKE(ptr, cnt)                                                                                                 \
    do {                                                                                                               \
        if (base)                                                                                                      \
            (ptr) = base + cur;                                                                                        \
        cur += (cnt);                                                                                                  \
    } while (0)
    for (int li = 0; li < layers; li++) {
        /* cppcheck-suppress uninitvar ; TAKE writes through k only when base is set (k is then not &dummy) */
        gpt_lcache dummy, *k = base ? &c->L[li] : &dummy;
        TAKE(k->dqkv, N * st->Wl);
        TAKE(k->dprojo, N * C);
        TAKE(k->dfch, N * st->Fu);
        TAKE(k->dfcprojo, N * C);
        TAKE(k->dln1, st->sp ? nln : N * C);
        TAKE(k->dln2, st->sp ? nln : N * C);
    }
    if (st->head) {
        TAKE(c->dlogits, N * st->V);
        TAKE(c->dlnf, nln);
    }
    if (st->embed)
        TAKE(c->dx0, nln);
    return cur;
}

int gpt_acts_create(gpt_stage *st, gpt_acts **out, ts_err *err)
{
    *out = NULL;
    gpt_acts *a = calloc(1, sizeof *a);
    gpt_lacts *L = calloc((size_t)st->nl + 1, sizeof *L);
    if (!a || !L) {
        free(a);
        free(L);
        return err_set(err, TS_ENOMEM, "gpt activations: out of memory");
    }
    a->L = L;
    size_t N = st->N, Ns = st->Ns, C = st->C;
    for (int pass = 0; pass < 2; pass++) {
        float *base = a->mem;
        size_t cur = 0;
        TAKE(a->in0, Ns * C);
        for (int li = 0; li < st->nl; li++) { /* kept layers: their own allocations, in their forward */
            bool res3 = li + 1 < st->nl || st->head;
            if (st->rc_lo[li] >= 0 && res3 && li == st->rc_hi[li] - 1) {
                TAKE(L[li].res3, Ns * C); /* a recompute group keeps its output only (the next one's input) */
            }
        }
        if (pass == 0) {
            a->nfloats = cur;
            int rc = be_alloc(st->be, cur, XMEM_ACTS, &a->mem, err);
            if (rc) {
                free(L);
                free(a);
                return rc;
            }
        }
    }
#undef TAKE
    a->tokens = st->be->alloc_int(st->be, (size_t)st->B * st->T); /* the whole sequences (embed picks the rank's) */
    a->targets = st->be->alloc_int(st->be, N);
    if (!a->tokens || !a->targets) {
        gpt_acts_free(st, a);
        return err_set(err, TS_ENOMEM, "gpt activations: out of memory for token ids");
    }
    *out = a; /* the head's activations come with its forward (gpt_head_acts_alloc) */
    return TS_OK;
}

int gpt_layer_acts_alloc(gpt_stage *st, gpt_acts *a, int li, ts_err *err)
{
    gpt_lacts *A = &a->L[li];
    if (st->rc_lo[li] >= 0 || A->mem || A->wmem)
        return TS_OK;
    bool last = li + 1 == st->nl && st->head; /* res3: the final norm's input, freed with the head's */
    bool res3 = li + 1 < st->nl;
    bool moe = gpt_layer_is_moe(&st->d, st->l0 + li);
    A->wfloats = gpt_lacts_w_floats(st, moe);
    A->nfloats = gpt_lacts_carve(st, A, NULL, NULL, res3, moe) - A->wfloats;
    int rc = be_alloc(st->be, A->wfloats, XMEM_ACTS, &A->wmem, err);
    if (!rc)
        rc = be_alloc(st->be, A->nfloats, XMEM_ACTS, &A->mem, err);
    if (!rc && last)
        rc = be_alloc(st->be, st->Ns * (size_t)st->C, XMEM_ACTS, &A->xmem, err);
    if (!rc) {
        gpt_lacts_carve(st, A, A->wmem, A->mem, res3, moe);
        if (last)
            A->res3 = A->xmem;
    }
    return rc;
}

void gpt_layer_acts_free_input(gpt_stage *st, gpt_acts *a, int li)
{
    gpt_lacts *A = &a->L[li];
    be_free(st->be, A->mem, A->nfloats, XMEM_ACTS);
    A->mem = NULL;
}

void gpt_layer_acts_free_output(gpt_stage *st, gpt_acts *a, int li)
{
    gpt_lacts *A = &a->L[li];
    if (!A->xmem)
        return;
    be_free(st->be, A->xmem, st->Ns * (size_t)st->C, XMEM_ACTS);
    A->xmem = A->res3 = NULL;
}

void gpt_layer_acts_free(gpt_stage *st, gpt_acts *a, int li)
{
    gpt_lacts *A = &a->L[li];
    be_free(st->be, A->mem, A->nfloats, XMEM_ACTS);
    be_free(st->be, A->wmem, A->wfloats, XMEM_ACTS);
    A->mem = A->wmem = NULL;
    gpt_layer_acts_free_output(st, a, li);
    moe_saved_free(A->moe); /* (the MoE backward has freed it already unless it did not run) */
    A->moe = NULL;
}

int gpt_head_acts_alloc(gpt_stage *st, gpt_acts *a, ts_err *err)
{
    size_t N = st->N, Ns = st->Ns, C = st->C, nm = st->d.rmsnorm ? 0 : Ns;
    int rc = TS_OK;
    if (!st->head)
        return TS_OK;
    if (!a->head_w) {
        a->head_wn = Ns * C + nm + Ns + (st->sp ? N * C : 0);
        if ((rc = be_alloc(st->be, a->head_wn, XMEM_ACTS, &a->head_w, err)))
            return rc;
        a->lnf = a->head_w;
        a->lnfm = a->lnf + Ns * C;
        a->lnfr = a->lnfm + nm;
        a->lnfg = st->sp ? a->lnfr + Ns : NULL;
    }
    if (!a->head_i) {
        a->head_in = N * (size_t)st->V + N;
        if ((rc = be_alloc(st->be, a->head_in, XMEM_ACTS, &a->head_i, err)))
            return rc;
        a->probs = a->head_i;
        a->losses = a->probs + N * (size_t)st->V;
    }
    return TS_OK;
}

void gpt_head_acts_free(gpt_stage *st, gpt_acts *a, bool weight_part)
{
    if (weight_part) {
        be_free(st->be, a->head_w, a->head_wn, XMEM_ACTS);
        a->head_w = a->lnf = a->lnfm = a->lnfr = a->lnfg = NULL;
    } else {
        be_free(st->be, a->head_i, a->head_in, XMEM_ACTS);
        a->head_i = a->probs = a->losses = NULL;
    }
}

void gpt_acts_free(gpt_stage *st, gpt_acts *a)
{
    if (!a)
        return;
    if (a->have_cache)
        free_cache_mem(st, &a->cache);
    be_free(st->be, a->rc_mem, a->rc_n, XMEM_ACTS);
    be_free(st->be, a->mem, a->nfloats, XMEM_ACTS);
    gpt_head_acts_free(st, a, false);
    gpt_head_acts_free(st, a, true);
    for (int li = 0; li < st->nl; li++)
        gpt_layer_acts_free(st, a, li);
    if (a->tokens)
        st->be->free_int(st->be, a->tokens);
    if (a->targets)
        st->be->free_int(st->be, a->targets);
    free(a->L);
    free(a);
}

void gpt_stage_zero_grads(gpt_stage *st)
{
    st->be->zero(st->be, st->grads, st->nparams);
    gpt_moe_zero_grads(st);
}

float *gpt_stage_tied_grad(gpt_stage *st, size_t *n)
{
    *n = (size_t)st->d.vocab * (size_t)st->d.hidden;
    if (!st->d.tie_embed || st->embed == st->head)
        return NULL;
    return st->embed ? st->gwte : st->gwout;
}

void gpt_stage_grad_shard(const gpt_stage *st, size_t *lo, size_t *hi)
{
    size_t q = st->d.dist_optim ? (size_t)st->cm->rank[COMM_DP] : 0;
    *lo = q * st->shard;
    *hi = *lo + st->shard < st->nparams ? *lo + st->shard : st->nparams;
    if (*lo > *hi)
        *lo = *hi; /* a shard wholly in the padding */
}

int gpt_stage_reduce_grads(gpt_stage *st, ts_err *err)
{
    int rc = gpt_moe_reduce_grads(st, err);
    if (st->t > 1) /* (without sp only the q/k norms' are partial) */
        for (int i = 0; i < st->ntens && !rc; i++)
            if (st->tens[i].tp_partial)
                rc = st->cm->all_reduce(st->cm, COMM_TP, st->grads + st->tens[i].offset, st->tens[i].n, err);
    if (rc || st->cm->size[COMM_DP] == 1)
        return rc;
    if (!st->d.dist_optim)
        return st->cm->all_reduce(st->cm, COMM_DP, st->grads, st->nparams, err);
    /* Megatron's distributed optimizer: each rank gets the sum of its shard */
    rc = st->cm->reduce_scatter(st->cm, COMM_DP, st->gshard, st->grads, st->shard, err);
    if (!rc)
        st->be->copy(st->be, st->grads + (size_t)st->cm->rank[COMM_DP] * st->shard, st->gshard, st->shard);
    return rc;
}

int gpt_stage_adam(gpt_stage *st, float lr, float b1, float b2, float eps, float wd, int step, ts_err *err)
{
    size_t lo, hi;
    gpt_stage_grad_shard(st, &lo, &hi);
    if (hi > lo)
        st->be->adam(st->be, st->params + lo, st->grads + lo, st->m, st->v, hi - lo, lr, b1, b2, eps, wd, step);
    gpt_moe_adam(st, lr, b1, b2, eps, wd, step);
    if (!st->d.dist_optim || st->cm->size[COMM_DP] == 1)
        return TS_OK;
    size_t q0 = (size_t)st->cm->rank[COMM_DP] * st->shard;
    st->be->copy(st->be, st->gshard, st->params + q0, st->shard);
    return st->cm->all_gather(st->cm, COMM_DP, st->params, st->gshard, st->shard, err);
}

int gpt_stage_export(gpt_stage *st, bool grads, bool write_replicated, float *full, ts_err *err)
{
    return gpt_stage_export_range(st, grads, write_replicated, 0, st->nparams, full, err);
}

int gpt_stage_export_range(gpt_stage *st, bool grads, bool write_replicated, size_t lo, size_t hi, float *full,
                           ts_err *err)
{
    float *host = malloc((st->nparams ? st->nparams : 1) * sizeof(float));
    if (!host)
        return err_set(err, TS_ENOMEM, "gpt export: out of memory for %zu floats", st->nparams);
    st->be->to_host(st->be, host, grads ? st->grads : st->params, st->nparams);
    for (int i = 0; i < st->ntens; i++) {
        gpt_tensor *tt = &st->tens[i];
        pshape s = shape_of(&st->d, tt->kind);
        if (tt->copy || ((s.split == SPLIT_NONE || st->t == 1) && !write_replicated))
            continue;
        size_t base = gpt_full_offset(&st->d, tt->kind, tt->layer, NULL);
        for (size_t j = 0; j < tt->n; j++)
            if (tt->offset + j >= lo && tt->offset + j < hi)
                full[base + local_to_full(&st->d, tt->kind, st->t, st->tr, j)] = host[tt->offset + j];
    }
    free(host);
    return TS_OK;
}
