/* moe — MoE MLP layer: router, dispatch, experts, combine, and backward. */
#include "exec/core/moe.h"

#include "sim/util/ckd.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The largest top-k the executor takes (Megatron presets use k <= 8; the
 * routing and combine ops walk a token's k slots once per slot, O(k^2)). */
#define MOE_MAX_TOPK 64
/* Per-expert scratch of the auxiliary loss, on the stack (DeepSeek-V3: 256). */
#define MOE_MAX_EXPERTS 1024

/* The forward's state, kept for the backward: routing, orders and the rows
 * in backend memory (activations, counted by be_alloc), the plan's small
 * per-rank counts on the host. */
struct moe_saved {
    size_t n, nk, nsend, nrecv, nb; /* tokens, assignments, rows sent and received, staging rows */
    int E, C, F, Fu;
    const float *x;               /* borrowed [n, C] */
    float *logits, *wk;           /* [n, E], [nk] the kept weights (0 when dropped) */
    int *idx, *keep, *slot, *pos; /* [nk] each: experts, kept flags, send order, place in it */
    int *eorder;                  /* [nrecv] received row of each expert-ordered row */
    float *xe, *he, *ae, *yback;  /* [nrecv, C], [nrecv, Fu], [nrecv, F], [nsend, C] */
    float *sbuf, *rbuf;           /* [nb, C] exchange staging, nb = max(nsend, nrecv) */
    int *counts;                  /* host [E] kept assignments per expert */
    int *send_rows, *recv_rows;   /* host [ep] each */
    int *recv_ecnt;               /* host [ep * El] */
    size_t *eoff;                 /* host [El + 1] */
    backend *be;
};

static int local_ints(void *ud, const int *send, int *recv, int per, ts_err *err)
{
    (void)ud;
    (void)err;
    memcpy(recv, send, (size_t)per * sizeof *recv);
    return TS_OK;
}

static int local_rows(void *ud, const float *send, const int *send_rows, float *recv, const int *recv_rows, int width,
                      ts_err *err)
{
    backend *be = ud;
    if (send_rows[0] != recv_rows[0])
        return err_set(err, TS_ESTATE, "moe local exchange: %d rows sent, %d expected", send_rows[0], recv_rows[0]);
    be->copy(be, recv, send, (size_t)send_rows[0] * (size_t)width);
    return TS_OK;
}

moe_xchg moe_xchg_local(backend *be)
{
    moe_xchg x = {.size = 1, .rank = 0, .ud = be, .ints = local_ints, .rows = local_rows};
    return x;
}

/* splitmix64 of (seed, global index) to a uniform in [-a, a]. */
static float init_val(uint64_t seed, uint64_t i, float a)
{
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 1;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    double u = (double)(z >> 11) / 9007199254740992.0; /* [0, 1) */
    return (float)((2.0 * u - 1.0) * a);
}

/* Floats of the local weights: router, W1 and W2 of the El local experts. */
static void local_floats(const moe_layer *L, size_t *nr, size_t *n1, size_t *n2)
{
    *nr = (size_t)L->rc.num_experts * (size_t)L->C;
    *n1 = (size_t)L->El * (size_t)L->Fu * (size_t)L->C;
    *n2 = (size_t)L->El * (size_t)L->C * (size_t)L->F;
}

void moe_layer_free(moe_layer *L)
{
    if (!L)
        return;
    size_t nr, n1, n2;
    local_floats(L, &nr, &n1, &n2);
    be_free(L->be, L->wr, nr, XMEM_WEIGHTS);
    be_free(L->be, L->gwr, nr, XMEM_GRADS);
    be_free(L->be, L->w1, n1, XMEM_WEIGHTS);
    be_free(L->be, L->gw1, n1, XMEM_GRADS);
    be_free(L->be, L->w2, n2, XMEM_WEIGHTS);
    be_free(L->be, L->gw2, n2, XMEM_GRADS);
    free(L->tok_per_expert);
    free(L->tok_accum);
    free(L);
}

size_t moe_full_floats(const moe_route_cfg *rc, int C, int F, bool swiglu)
{
    size_t E = (size_t)rc->num_experts;
    return E * (size_t)C + E * (size_t)(swiglu ? 3 : 2) * (size_t)F * (size_t)C;
}

/* The backend's MoE ops, all present. */
static bool has_moe_ops(const backend *be)
{
    return be->moe_topk && be->moe_keep && be->moe_counts && be->moe_send_order && be->moe_gather && be->moe_scatter &&
           be->moe_combine && be->moe_combine_bwd && be->moe_router_bwd && be->int_to_host;
}

/* n weights from index i0 of the full layer into backend memory p, through
 * the host buffer tmp (at least n floats). */
static void init_weights(backend *be, float *p, float *tmp, size_t n, uint64_t seed, uint64_t i0, float a)
{
    for (size_t i = 0; i < n; i++)
        tmp[i] = init_val(seed, i0 + i, a);
    be->to_device(be, p, tmp, n);
}

int moe_layer_create(const moe_route_cfg *rc, int C, int F, bool swiglu, int ep, int er, uint64_t seed, backend *be,
                     moe_layer **out, ts_err *err)
{
    *out = NULL;
    int rcode = moe_route_check(rc, ep, err);
    if (rcode)
        return rcode;
    if (rc->topk > MOE_MAX_TOPK)
        return err_set(err, TS_EINVAL, "--moe-router-topk %d: the executor supports at most %d", rc->topk,
                       MOE_MAX_TOPK);
    if (rc->num_experts > MOE_MAX_EXPERTS)
        return err_set(err, TS_EINVAL, "--num-experts %d: the executor supports at most %d", rc->num_experts,
                       MOE_MAX_EXPERTS);
    if (C < 1 || F < 1 || er < 0 || er >= ep)
        return err_set(err, TS_EINVAL, "moe layer: hidden %d, ffn %d, ep rank %d of %d (valid: >= 1, >= 1, [0, ep))", C,
                       F, er, ep);
    if (!has_moe_ops(be))
        return err_set(err, TS_ENOTSUP, "--num-experts: the %s backend has no MoE routing and dispatch ops", be->name);
    if (swiglu && !(be->swiglu_fwd && be->swiglu_bwd))
        return err_set(err, TS_ENOTSUP, "--swiglu experts: the %s backend has no SwiGLU kernel", be->name);
    moe_layer *L = calloc(1, sizeof *L);
    if (!L)
        return err_set(err, TS_ENOMEM, "moe layer: out of memory");
    L->swiglu = swiglu;
    L->Fu = swiglu ? 2 * F : F;
    L->aux_grad_scale = 1.0;
    L->rc = *rc;
    L->C = C;
    L->F = F;
    L->ep = ep;
    L->er = er;
    L->El = rc->num_experts / ep;
    L->be = be;
    size_t E = (size_t)rc->num_experts, nr, n1, n2;
    local_floats(L, &nr, &n1, &n2);
    size_t nmax = nr > n1 ? nr : n1;
    nmax = nmax > n2 ? nmax : n2;
    float *tmp = malloc(nmax * sizeof(float));
    L->tok_per_expert = calloc((size_t)L->El, sizeof(int));
    L->tok_accum = calloc((size_t)L->El, sizeof(int64_t));
    int r = tmp && L->tok_per_expert && L->tok_accum
                ? TS_OK
                : err_set(err, TS_ENOMEM, "moe layer: out of memory (%zu expert floats)", n1 + n2);
    if (!r && !(r = be_alloc(be, nr, XMEM_WEIGHTS, &L->wr, err)) && !(r = be_alloc(be, nr, XMEM_GRADS, &L->gwr, err)) &&
        !(r = be_alloc(be, n1, XMEM_WEIGHTS, &L->w1, err)) && !(r = be_alloc(be, n1, XMEM_GRADS, &L->gw1, err)) &&
        !(r = be_alloc(be, n2, XMEM_WEIGHTS, &L->w2, err)))
        r = be_alloc(be, n2, XMEM_GRADS, &L->gw2, err);
    if (!r) { /* every element from its index in the full layer: EP shards are its slices */
        float ac = 1.0f / sqrtf((float)C), af = 1.0f / sqrtf((float)F);
        size_t e0 = (size_t)er * (size_t)L->El, per = (size_t)F * (size_t)C, per1 = (size_t)L->Fu * (size_t)C;
        init_weights(be, L->wr, tmp, nr, seed, 0, ac);
        init_weights(be, L->w1, tmp, n1, seed, nr + e0 * per1, ac);
        init_weights(be, L->w2, tmp, n2, seed, nr + E * per1 + e0 * per, af);
        be->sync(be); /* tmp is freed below */
    }
    free(tmp);
    if (r) {
        moe_layer_free(L);
        return r;
    }
    *out = L;
    return TS_OK;
}

void moe_saved_free(moe_saved *s)
{
    if (!s)
        return;
    backend *be = s->be;
    size_t nk = s->nk, nr = s->nrecv;
    be_free(be, s->logits, s->n * (size_t)s->E, XMEM_ACTS);
    be_free(be, s->wk, nk, XMEM_ACTS);
    be_free_ints(be, s->idx, nk, XMEM_ACTS);
    be_free_ints(be, s->keep, nk, XMEM_ACTS);
    be_free_ints(be, s->slot, nk, XMEM_ACTS);
    be_free_ints(be, s->pos, nk, XMEM_ACTS);
    be_free_ints(be, s->eorder, nr, XMEM_ACTS);
    be_free(be, s->xe, nr * (size_t)s->C, XMEM_ACTS);
    be_free(be, s->he, nr * (size_t)s->Fu, XMEM_ACTS);
    be_free(be, s->ae, nr * (size_t)s->F, XMEM_ACTS);
    be_free(be, s->yback, s->nsend * (size_t)s->C, XMEM_ACTS);
    be_free(be, s->sbuf, s->nb * (size_t)s->C, XMEM_ACTS);
    be_free(be, s->rbuf, s->nb * (size_t)s->C, XMEM_ACTS);
    free(s->counts);
    free(s->send_rows);
    free(s->recv_rows);
    free(s->recv_ecnt);
    free(s->eoff);
    free(s);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Route on the backend (top-k, capacity, counts, send order), bring the
 * counts to the host and exchange them; sizes the rest of s. */
static int plan(moe_layer *L, const moe_xchg *xc, moe_saved *s, ts_err *err)
{
    backend *be = L->be;
    int E = L->rc.num_experts, k = L->rc.topk, El = L->El, ep = L->ep;
    size_t nk = s->nk;
    int *dcounts = NULL;
    int rc = be_alloc_ints(be, (size_t)E, XMEM_BUFFERS, &dcounts, err);
    if (!rc) {
        if (s->n) { /* the weights into wk, kept there in place; slot is the sort's scratch until its order */
            be->moe_topk(be, s->idx, s->wk, s->logits, s->n, E, k, L->rc.force_balance);
            be->moe_keep(be, s->keep, s->wk, s->idx, s->wk, nk, moe_route_capacity(&L->rc, s->n), s->slot);
        }
        be->moe_counts(be, dcounts, s->idx, s->keep, nk, E);
        be->moe_send_order(be, s->slot, s->pos, s->idx, s->keep, nk, E);
        be->int_to_host(be, s->counts, dcounts, (size_t)E);
    }
    be_free_ints(be, dcounts, (size_t)E, XMEM_BUFFERS);
    if (rc)
        return rc;
    s->nsend = 0;
    for (int e = 0; e < E; e++)
        s->nsend += (size_t)s->counts[e];
    if (!L->rerun)
        L->dropped = nk - s->nsend;
    for (int d = 0; d < ep; d++) {
        s->send_rows[d] = 0;
        for (int e = 0; e < El; e++)
            s->send_rows[d] += s->counts[d * El + e];
    }
    rc = xc->ints(xc->ud, s->counts, s->recv_ecnt, El, err);
    if (rc)
        return rc;
    s->nrecv = 0;
    for (int r = 0; r < ep; r++) {
        s->recv_rows[r] = 0;
        for (int e = 0; e < El; e++)
            s->recv_rows[r] += s->recv_ecnt[r * El + e];
        s->nrecv += (size_t)s->recv_rows[r];
    }
    return TS_OK;
}

/* Expert order of the received rows into eorder (host, [nrecv]): for each
 * local expert, its rows from rank 0, then rank 1, ... (the receive buffer
 * is by rank, then expert). */
static void expert_order(moe_layer *L, moe_saved *s, int *eorder)
{
    int El = L->El, ep = L->ep;
    size_t p = 0;
    for (int e = 0; e < El; e++) {
        s->eoff[e] = p;
        size_t base = 0;
        for (int r = 0; r < ep; r++) {
            size_t off = base;
            for (int q = 0; q < e; q++)
                off += (size_t)s->recv_ecnt[r * El + q];
            for (int i = 0; i < s->recv_ecnt[r * El + e]; i++)
                eorder[p++] = (int)(off + (size_t)i);
            base += (size_t)s->recv_rows[r];
        }
        if (!L->rerun) {
            L->tok_per_expert[e] = (int)(p - s->eoff[e]);
            L->tok_accum[e] += (int64_t)(p - s->eoff[e]);
        }
    }
    s->eoff[El] = p;
}

/* The routed tokens' logits and experts on the host (lg [n, E], idx
 * [nk]) for the auxiliary loss, computed there: a scalar of O(n E) work. */
static int aux_host(const moe_layer *L, const moe_saved *s, float **lg, int **idx, ts_err *err)
{
    *lg = malloc((s->n * (size_t)L->rc.num_experts + 1) * sizeof **lg);
    *idx = malloc((s->nk + 1) * sizeof **idx);
    if (!*lg || !*idx) {
        free(*lg);
        free(*idx);
        *lg = NULL;
        *idx = NULL;
        return err_set(err, TS_ENOMEM, "moe auxiliary loss: out of memory (%zu tokens)", s->n);
    }
    L->be->to_host(L->be, *lg, s->logits, s->n * (size_t)L->rc.num_experts);
    L->be->int_to_host(L->be, *idx, s->idx, s->nk);
    return TS_OK;
}

/* The auxiliary loss's per-expert factors from host copies: c[e] the
 * (token, slot) assignments of expert e before capacity. */
static void aux_counts(const moe_saved *s, const int *idx, int E, size_t *c)
{
    for (int e = 0; e < E; e++)
        c[e] = 0;
    for (size_t i = 0; i < s->nk; i++)
        c[idx[i]]++;
}

/* P[f] = softmax over all E logits of one token (lg), in double. */
static void aux_softmax(const float *lg, int E, double *P)
{
    double m = lg[0], z = 0.0;
    for (int f = 1; f < E; f++)
        m = fmax(m, lg[f]);
    for (int f = 0; f < E; f++)
        z += P[f] = exp((double)lg[f] - m);
    for (int f = 0; f < E; f++)
        P[f] /= z;
}

/* Auxiliary loss of the routed tokens (see moe.h) from host copies. */
static double aux_fwd(const moe_layer *L, const moe_saved *s, const float *logits, const int *idx)
{
    int E = L->rc.num_experts;
    size_t c[MOE_MAX_EXPERTS];
    double P[MOE_MAX_EXPERTS], ps[MOE_MAX_EXPERTS] = {0}, tot = 0.0;
    aux_counts(s, idx, E, c);
    for (size_t t = 0; t < s->n; t++) { /* each expert's sum over the tokens, in token order */
        aux_softmax(logits + t * (size_t)E, E, P);
        for (int e = 0; e < E; e++)
            ps[e] += P[e];
    }
    for (int e = 0; e < E; e++)
        tot += (double)c[e] * ps[e];
    return L->aux_coeff * E / ((double)L->rc.topk * (double)s->n * (double)s->n) * tot;
}

/* The auxiliary loss's gradient w.r.t. the logits into daux [n, E] (host,
 * overwritten), from host copies. */
static void aux_bwd(const moe_layer *L, const moe_saved *s, const float *logits, const int *idx, float *daux)
{
    int E = L->rc.num_experts;
    size_t c[MOE_MAX_EXPERTS];
    double a = L->aux_grad_scale * L->aux_coeff * E / ((double)L->rc.topk * (double)s->n * (double)s->n),
           dP[MOE_MAX_EXPERTS], P[MOE_MAX_EXPERTS];
    aux_counts(s, idx, E, c);
    for (int e = 0; e < E; e++)
        dP[e] = a * (double)c[e];
    for (size_t t = 0; t < s->n; t++) {
        double dot = 0.0;
        aux_softmax(logits + t * (size_t)E, E, P);
        for (int f = 0; f < E; f++)
            dot += P[f] * dP[f];
        for (int f = 0; f < E; f++)
            daux[t * (size_t)E + (size_t)f] = (float)(P[f] * (dP[f] - dot));
    }
}

/* be_alloc / be_alloc_ints of cnt elements into p under cat, while rc is
 * TS_OK. */
#define BE_F(p, cnt, cat)                                                                                              \
    do {                                                                                                               \
        if (!rc)                                                                                                       \
            rc = be_alloc(be, (cnt), (cat), &(p), err);                                                                \
    } while (0)
#define BE_I(p, cnt, cat)                                                                                              \
    do {                                                                                                               \
        if (!rc)                                                                                                       \
            rc = be_alloc_ints(be, (cnt), (cat), &(p), err);                                                           \
    } while (0)

int moe_forward(moe_layer *L, const moe_xchg *xc, const float *x, size_t n, float *out, moe_saved **saved, ts_err *err)
{
    *saved = NULL;
    backend *be = L->be;
    int E = L->rc.num_experts, k = L->rc.topk, C = L->C, F = L->F, Fu = L->Fu, El = L->El, ep = L->ep;
    if (xc->size != ep || xc->rank != L->er)
        return err_set(err, TS_ESTATE, "moe_forward: exchange of %d ranks (rank %d), layer built for ep %d rank %d",
                       xc->size, xc->rank, ep, L->er);
    /* every buffer is at most ep * n * k rows of max(C, Fu, E) floats; rows are int indices */
    int64_t rows, big;
    int wmax = C > Fu ? C : Fu;
    wmax = wmax > E ? wmax : E;
    if (ckd_mul_i64(&rows, (int64_t)n, (int64_t)ep * k) || rows > INT_MAX || ckd_mul_i64(&big, rows, (int64_t)wmax) ||
        ckd_mul_i64(&big, big, (int64_t)sizeof(double)) || big > CKD_MAX_BYTES)
        return err_set(err, TS_EINVAL,
                       "moe_forward: %zu tokens x ep %d x top-%d rows of width %d overflow (at most %d rows)", n, ep, k,
                       wmax, INT_MAX);
    moe_saved *s = calloc(1, sizeof *s);
    if (!s)
        return err_set(err, TS_ENOMEM, "moe_forward: out of memory");
    int rc = TS_OK, *eorder = NULL;
    float *alg = NULL;
    int *aidx = NULL;
    s->be = be;
    s->n = n;
    s->nk = n * (size_t)k;
    s->E = E;
    s->C = C;
    s->F = F;
    s->Fu = Fu;
    s->x = x;
    s->counts = calloc((size_t)E, sizeof(int));
    s->send_rows = calloc((size_t)ep, sizeof(int));
    s->recv_rows = calloc((size_t)ep, sizeof(int));
    s->recv_ecnt = calloc((size_t)ep * (size_t)El, sizeof(int));
    s->eoff = calloc((size_t)El + 1, sizeof(size_t));
    if (!s->counts || !s->send_rows || !s->recv_rows || !s->recv_ecnt || !s->eoff)
        rc = err_set(err, TS_ENOMEM, "moe_forward: out of memory (%d experts, ep %d)", E, ep);
    BE_F(s->logits, n * (size_t)E, XMEM_ACTS);
    BE_F(s->wk, s->nk, XMEM_ACTS);
    BE_I(s->idx, s->nk, XMEM_ACTS);
    BE_I(s->keep, s->nk, XMEM_ACTS);
    BE_I(s->slot, s->nk, XMEM_ACTS);
    BE_I(s->pos, s->nk, XMEM_ACTS);
    if (rc)
        goto done;
    if (n)
        be->gemm(be, false, true, (int)n, E, C, 1.0f, x, C, L->wr, C, 0.0f, s->logits, E);
    if ((rc = plan(L, xc, s, err)))
        goto done;
    if (!L->rerun && L->aux_coeff > 0.0 && n) {
        if ((rc = aux_host(L, s, &alg, &aidx, err)))
            goto done;
        L->aux_loss = aux_fwd(L, s, alg, aidx);
    } else if (!L->rerun)
        L->aux_loss = 0.0;
    size_t nr = s->nrecv;
    s->nb = s->nsend > nr ? s->nsend : nr;
    eorder = malloc((nr + 1) * sizeof *eorder);
    if (!eorder) {
        rc = err_set(err, TS_ENOMEM, "moe_forward: out of memory (%zu received rows)", nr);
        goto done;
    }
    BE_I(s->eorder, nr, XMEM_ACTS);
    BE_F(s->xe, nr * (size_t)C, XMEM_ACTS);
    BE_F(s->he, nr * (size_t)Fu, XMEM_ACTS);
    BE_F(s->ae, nr * (size_t)F, XMEM_ACTS);
    BE_F(s->yback, s->nsend * (size_t)C, XMEM_ACTS);
    BE_F(s->sbuf, s->nb * (size_t)C, XMEM_ACTS);
    BE_F(s->rbuf, s->nb * (size_t)C, XMEM_ACTS);
    if (rc)
        goto done;
    expert_order(L, s, eorder);
    if (nr)
        be->int_to_device(be, s->eorder, eorder, nr);
    be->moe_gather(be, s->sbuf, x, s->slot, s->nsend, k, C);
    if ((rc = xc->rows(xc->ud, s->sbuf, s->send_rows, s->rbuf, s->recv_rows, C, err)))
        goto done;
    be->moe_gather(be, s->xe, s->rbuf, s->eorder, nr, 1, C);
    float *ye = s->sbuf; /* expert-ordered outputs, then scattered into rbuf */
    be->sync(be);
    double t0 = now_s();
    for (int e = 0; e < El; e++) {
        size_t a = s->eoff[e], m = s->eoff[e + 1] - a;
        if (!m)
            continue;
        const float *w1 = L->w1 + (size_t)e * (size_t)Fu * (size_t)C, *w2 = L->w2 + (size_t)e * (size_t)C * (size_t)F;
        be->gemm(be, false, true, (int)m, Fu, C, 1.0f, s->xe + a * C, C, w1, C, 0.0f, s->he + a * Fu, Fu);
        if (L->swiglu)
            be->swiglu_fwd(be, s->ae + a * F, s->he + a * Fu, m, F);
        else
            be->gelu_fwd(be, s->ae + a * F, s->he + a * F, m * (size_t)F);
        be->gemm(be, false, true, (int)m, C, F, 1.0f, s->ae + a * F, F, w2, F, 0.0f, ye + a * C, C);
    }
    be->sync(be);
    L->expert_gemm_s += now_s() - t0;
    be->moe_scatter(be, s->rbuf, ye, s->eorder, nr, C);
    if ((rc = xc->rows(xc->ud, s->rbuf, s->recv_rows, s->yback, s->send_rows, C, err)))
        goto done;
    be->moe_combine(be, out, s->yback, s->wk, s->idx, s->pos, n, k, C);
done:
    be->sync(be); /* the host arrays below may be read by ops still queued */
    free(eorder);
    free(alg);
    free(aidx);
    if (rc) {
        moe_saved_free(s);
        return rc;
    }
    *saved = s;
    return TS_OK;
}

int moe_backward(moe_layer *L, const moe_xchg *xc, moe_saved *s, const float *dout, float *dx, ts_err *err)
{
    backend *be = L->be;
    int E = L->rc.num_experts, k = L->rc.topk, C = L->C, F = L->F, Fu = L->Fu, El = L->El;
    size_t n = s->n, nr = s->nrecv, nk = s->nk;
    int rc = TS_OK, *aidx = NULL;
    float *g = NULL, *dlog = NULL, *dxe = NULL, *dh = NULL, *dA = NULL, *alg = NULL, *daux = NULL, *ddaux = NULL;
    BE_F(g, nk, XMEM_BUFFERS);
    BE_F(dlog, n * (size_t)E, XMEM_BUFFERS);
    BE_F(dxe, nr * (size_t)C, XMEM_BUFFERS);
    BE_F(dh, nr * (size_t)Fu, XMEM_BUFFERS);
    BE_F(dA, nr * (size_t)F, XMEM_BUFFERS);
    if (rc)
        goto done;
    /* combine: g = dout . y per kept slot, dy = w dout per sent row */
    be->moe_combine_bwd(be, s->sbuf, g, dout, s->yback, s->wk, s->slot, s->nsend, k, C);
    if ((rc = xc->rows(xc->ud, s->sbuf, s->send_rows, s->rbuf, s->recv_rows, C, err)))
        goto done;
    float *dye = s->sbuf; /* expert order; sbuf is free again */
    be->moe_gather(be, dye, s->rbuf, s->eorder, nr, 1, C);
    be->sync(be);
    double t0 = now_s();
    for (int e = 0; e < El; e++) {
        size_t a = s->eoff[e], m = s->eoff[e + 1] - a;
        if (!m)
            continue;
        const float *w1 = L->w1 + (size_t)e * (size_t)Fu * (size_t)C, *w2 = L->w2 + (size_t)e * (size_t)C * (size_t)F;
        float *gw1 = L->gw1 + (size_t)e * (size_t)Fu * (size_t)C, *gw2 = L->gw2 + (size_t)e * (size_t)C * (size_t)F;
        be->gemm(be, true, false, C, F, (int)m, 1.0f, dye + a * C, C, s->ae + a * F, F, 1.0f, gw2, F);
        be->gemm(be, false, false, (int)m, F, C, 1.0f, dye + a * C, C, w2, F, 0.0f, dA + a * F, F);
        if (L->swiglu)
            be->swiglu_bwd(be, dh + a * Fu, s->he + a * Fu, dA + a * F, m, F);
        else
            be->gelu_bwd(be, dh + a * F, s->he + a * F, dA + a * F, m * (size_t)F);
        be->gemm(be, true, false, Fu, C, (int)m, 1.0f, dh + a * Fu, Fu, s->xe + a * C, C, 1.0f, gw1, C);
        be->gemm(be, false, false, (int)m, C, Fu, 1.0f, dh + a * Fu, Fu, w1, C, 0.0f, dxe + a * C, C);
    }
    be->sync(be);
    L->expert_gemm_s += now_s() - t0;
    be->moe_scatter(be, s->rbuf, dxe, s->eorder, nr, C);
    if ((rc = xc->rows(xc->ud, s->rbuf, s->recv_rows, s->sbuf, s->send_rows, C, err)))
        goto done;
    be->moe_combine(be, dx, s->sbuf, NULL, s->idx, s->pos, n, k, C); /* each token's returned row gradients */
    if (!n)
        goto done;
    be->moe_router_bwd(be, dlog, s->logits, s->idx, s->keep, g, n, E, k);
    if (L->aux_coeff > 0.0) { /* dlog += the auxiliary loss's gradient, computed on the host */
        if ((rc = aux_host(L, s, &alg, &aidx, err)))
            goto done;
        daux = malloc(n * (size_t)E * sizeof *daux);
        if (!daux) {
            rc = err_set(err, TS_ENOMEM, "moe auxiliary loss: out of memory (%zu tokens)", n);
            goto done;
        }
        aux_bwd(L, s, alg, aidx, daux);
        BE_F(ddaux, n * (size_t)E, XMEM_BUFFERS);
        if (rc)
            goto done;
        be->to_device(be, ddaux, daux, n * (size_t)E);
        be->add(be, dlog, ddaux, n * (size_t)E);
    }
    be->gemm(be, true, false, E, C, (int)n, 1.0f, dlog, E, s->x, C, 1.0f, L->gwr, C);
    be->gemm(be, false, false, (int)n, C, E, 1.0f, dlog, E, L->wr, C, 1.0f, dx, C);
done:
    be->sync(be);
    be_free(be, g, nk, XMEM_BUFFERS);
    be_free(be, dlog, n * (size_t)E, XMEM_BUFFERS);
    be_free(be, dxe, nr * (size_t)C, XMEM_BUFFERS);
    be_free(be, dh, nr * (size_t)Fu, XMEM_BUFFERS);
    be_free(be, dA, nr * (size_t)F, XMEM_BUFFERS);
    be_free(be, ddaux, n * (size_t)E, XMEM_BUFFERS);
    free(alg);
    free(aidx);
    free(daux);
    return rc;
}

/* p[i] -= lr g[i], then g zeroed, through host copies (n floats). */
static int sgd_host(backend *be, float *p, float *g, size_t n, float lr)
{
    float *hp = malloc((n + 1) * sizeof *hp), *hg = malloc((n + 1) * sizeof *hg);
    if (!hp || !hg) {
        free(hp);
        free(hg);
        return TS_ENOMEM;
    }
    be->to_host(be, hp, p, n);
    be->to_host(be, hg, g, n);
    for (size_t i = 0; i < n; i++)
        hp[i] -= lr * hg[i];
    be->to_device(be, p, hp, n);
    be->zero(be, g, n);
    be->sync(be);
    free(hp);
    free(hg);
    return TS_OK;
}

int moe_layer_sgd(moe_layer *L, float lr, ts_err *err)
{
    size_t nr, n1, n2;
    local_floats(L, &nr, &n1, &n2);
    if (sgd_host(L->be, L->wr, L->gwr, nr, lr) || sgd_host(L->be, L->w1, L->gw1, n1, lr) ||
        sgd_host(L->be, L->w2, L->gw2, n2, lr))
        return err_set(err, TS_ENOMEM, "moe_layer_sgd: out of memory (%zu floats)", nr + n1 + n2);
    return TS_OK;
}

void moe_layer_export(const moe_layer *L, bool grads, bool write_router, float *full)
{
    size_t E = (size_t)L->rc.num_experts, nr, n1, n2, per1 = (size_t)L->Fu * (size_t)L->C,
           per = (size_t)L->F * (size_t)L->C, e0 = (size_t)L->er * (size_t)L->El;
    local_floats(L, &nr, &n1, &n2);
    backend *be = L->be;
    if (write_router)
        be->to_host(be, full, grads ? L->gwr : L->wr, nr);
    be->to_host(be, full + nr + e0 * per1, grads ? L->gw1 : L->w1, n1);
    be->to_host(be, full + nr + E * per1 + e0 * per, grads ? L->gw2 : L->w2, n2);
}

int moe_layer_reduce_experts(moe_layer *L, const moe_edp *e, ts_err *err)
{
    if (!e || e->edp_size <= 1 || !e->edp_sum)
        return TS_OK;
    size_t nr, n1, n2;
    local_floats(L, &nr, &n1, &n2);
    int rc = e->edp_sum(e->ud, L->gw1, n1, err);
    if (!rc)
        rc = e->edp_sum(e->ud, L->gw2, n2, err);
    return rc;
}
