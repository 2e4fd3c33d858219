/* moe — MoE MLP layer: router, dispatch, experts, combine, and backward. */
#include "exec/core/moe.h"

#include "sim/util/ckd.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Per-token scratch of the router backward (Megatron presets use k <= 8). */
#define MOE_MAX_TOPK 64
/* Per-token scratch of the auxiliary loss's backward (DeepSeek-V3: 256). */
#define MOE_MAX_EXPERTS 1024

struct moe_saved {
    size_t n, nk, nsend, nrecv;
    const float *x;              /* borrowed [n, C] */
    float *logits, *wts;         /* [n, E], [nk] */
    int *idx, *keep, *counts;    /* [nk], [nk], [E] */
    int *order;                  /* [nk] */
    size_t *send_slot;           /* [nsend] */
    int *send_rows, *recv_rows;  /* [ep] each */
    int *recv_ecnt;              /* [ep * El] */
    size_t *eorder, *eoff;       /* [nrecv] recv row of each expert-ordered row, [El + 1] */
    float *xe, *he, *ae, *yback; /* [nrecv, C], [nrecv, Fu], [nrecv, F], [nsend, C] */
    float *sbuf, *rbuf;          /* [max(nsend, nrecv), C] exchange buffers */
    backend *be;                 /* whose accounting counts acct_bytes (activations) */
    size_t acct_bytes;
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
    (void)ud;
    if (send_rows[0] != recv_rows[0])
        return err_set(err, TS_ESTATE, "moe local exchange: %d rows sent, %d expected", send_rows[0], recv_rows[0]);
    memcpy(recv, send, (size_t)send_rows[0] * (size_t)width * sizeof *recv);
    return TS_OK;
}

moe_xchg moe_xchg_local(void)
{
    moe_xchg x = {.size = 1, .rank = 0, .ud = NULL, .ints = local_ints, .rows = local_rows};
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

void moe_layer_free(moe_layer *L)
{
    if (!L)
        return;
    if (L->counted_bytes) {
        be_count(L->be, XMEM_WEIGHTS, L->counted_bytes, false);
        be_count(L->be, XMEM_GRADS, L->counted_bytes, false);
    }
    free(L->wr);
    free(L->gwr);
    free(L->w1);
    free(L->gw1);
    free(L->w2);
    free(L->gw2);
    free(L->tok_per_expert);
    free(L->tok_accum);
    free(L);
}

size_t moe_full_floats(const moe_route_cfg *rc, int C, int F, bool swiglu)
{
    size_t E = (size_t)rc->num_experts;
    return E * (size_t)C + E * (size_t)(swiglu ? 3 : 2) * (size_t)F * (size_t)C;
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
    size_t E = (size_t)rc->num_experts, nr = E * (size_t)C, ne = (size_t)L->El * (size_t)F * (size_t)C,
           ne1 = (size_t)L->El * (size_t)L->Fu * (size_t)C;
    L->wr = calloc(nr, sizeof(float));
    L->gwr = calloc(nr, sizeof(float));
    L->w1 = calloc(ne1, sizeof(float));
    L->gw1 = calloc(ne1, sizeof(float));
    L->w2 = calloc(ne, sizeof(float));
    L->gw2 = calloc(ne, sizeof(float));
    L->tok_per_expert = calloc((size_t)L->El, sizeof(int));
    L->tok_accum = calloc((size_t)L->El, sizeof(int64_t));
    if (!L->wr || !L->gwr || !L->w1 || !L->gw1 || !L->w2 || !L->gw2 || !L->tok_per_expert || !L->tok_accum) {
        moe_layer_free(L);
        return err_set(err, TS_ENOMEM, "moe layer: out of memory (%zu expert floats)", ne);
    }
    float ac = 1.0f / sqrtf((float)C), af = 1.0f / sqrtf((float)F);
    for (size_t i = 0; i < nr; i++)
        L->wr[i] = init_val(seed, i, ac);
    size_t e0 = (size_t)er * (size_t)L->El, per = (size_t)F * (size_t)C, per1 = (size_t)L->Fu * (size_t)C;
    for (size_t i = 0; i < ne1; i++)
        L->w1[i] = init_val(seed, nr + e0 * per1 + i, ac);
    for (size_t i = 0; i < ne; i++)
        L->w2[i] = init_val(seed, nr + E * per1 + e0 * per + i, af);
    L->counted_bytes = (nr + ne1 + ne) * sizeof(float);
    be_count(be, XMEM_WEIGHTS, L->counted_bytes, true);
    be_count(be, XMEM_GRADS, L->counted_bytes, true);
    *out = L;
    return TS_OK;
}

void moe_saved_free(moe_saved *s)
{
    if (!s)
        return;
    if (s->acct_bytes)
        be_count(s->be, XMEM_ACTS, s->acct_bytes, false);
    free(s->logits);
    free(s->wts);
    free(s->idx);
    free(s->keep);
    free(s->counts);
    free(s->order);
    free(s->send_slot);
    free(s->send_rows);
    free(s->recv_rows);
    free(s->recv_ecnt);
    free(s->eorder);
    free(s->eoff);
    free(s->xe);
    free(s->he);
    free(s->ae);
    free(s->yback);
    free(s->sbuf);
    free(s->rbuf);
    free(s);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Route, count and exchange the counts; sizes the rest of s. */
static int plan(moe_layer *L, const moe_xchg *xc, moe_saved *s, ts_err *err)
{
    int E = L->rc.num_experts, El = L->El, ep = L->ep;
    moe_route(&L->rc, s->logits, s->n, s->idx, s->wts, s->keep, s->counts, L->rerun ? NULL : &L->dropped, s->order);
    s->nsend = 0;
    for (int e = 0; e < E; e++)
        for (size_t i = 0; i < s->nk; i++)
            if (s->keep[i] && s->idx[i] == e)
                s->send_slot[s->nsend++] = i;
    for (int d = 0; d < ep; d++) {
        s->send_rows[d] = 0;
        for (int e = 0; e < El; e++)
            s->send_rows[d] += s->counts[d * El + e];
    }
    int rc = xc->ints(xc->ud, s->counts, s->recv_ecnt, El, err);
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

/* Expert order of the received rows: for each local expert, its rows from
 * rank 0, then rank 1, ... (the receive buffer is by rank, then expert). */
static void expert_order(moe_layer *L, moe_saved *s)
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
                s->eorder[p++] = off + (size_t)i;
            base += (size_t)s->recv_rows[r];
        }
        if (!L->rerun) {
            L->tok_per_expert[e] = (int)(p - s->eoff[e]);
            L->tok_accum[e] += (int64_t)(p - s->eoff[e]);
        }
    }
    s->eoff[El] = p;
}

/* Auxiliary loss of the routed tokens (see moe.h); 0 when aux_coeff <= 0. */
static double aux_fwd(const moe_layer *L, const moe_saved *s)
{
    int E = L->rc.num_experts;
    if (!(L->aux_coeff > 0.0) || s->n == 0)
        return 0.0;
    double tot = 0.0;
    for (int e = 0; e < E; e++) {
        size_t c = 0;
        for (size_t i = 0; i < s->nk; i++)
            c += s->idx[i] == e;
        double ps = 0.0;
        for (size_t t = 0; t < s->n; t++) {
            const float *lg = s->logits + t * (size_t)E;
            double m = lg[0], z = 0.0;
            for (int f = 1; f < E; f++)
                m = fmax(m, lg[f]);
            for (int f = 0; f < E; f++)
                z += exp((double)lg[f] - m);
            ps += exp((double)lg[e] - m) / z;
        }
        tot += (double)c * ps;
    }
    return L->aux_coeff * E / ((double)L->rc.topk * (double)s->n * (double)s->n) * tot;
}

/* dlog[n, E] += gradient of the auxiliary loss w.r.t. the logits. */
static void aux_bwd(const moe_layer *L, const moe_saved *s, float *dlog)
{
    int E = L->rc.num_experts;
    if (!(L->aux_coeff > 0.0) || s->n == 0 || E > MOE_MAX_EXPERTS)
        return;
    double a = L->aux_grad_scale * L->aux_coeff * E / ((double)L->rc.topk * (double)s->n * (double)s->n),
           dP[MOE_MAX_EXPERTS], P[MOE_MAX_EXPERTS];
    for (int e = 0; e < E; e++) {
        size_t c = 0;
        for (size_t i = 0; i < s->nk; i++)
            c += s->idx[i] == e;
        dP[e] = a * (double)c;
    }
    for (size_t t = 0; t < s->n; t++) {
        const float *lg = s->logits + t * (size_t)E;
        double m = lg[0], z = 0.0, dot = 0.0;
        for (int f = 1; f < E; f++)
            m = fmax(m, lg[f]);
        for (int f = 0; f < E; f++)
            z += P[f] = exp((double)lg[f] - m);
        for (int f = 0; f < E; f++) {
            P[f] /= z;
            dot += P[f] * dP[f];
        }
        for (int f = 0; f < E; f++)
            dlog[t * (size_t)E + (size_t)f] += (float)(P[f] * (dP[f] - dot));
    }
}

/* calloc cnt elements into p (ok = 0 on failure), adding their bytes to acct. */
#define ALLOC(p, cnt)                                                                                                  \
    do {                                                                                                               \
        size_t c_ = (cnt);                                                                                             \
        (p) = calloc(c_ > 0 ? c_ : 1, sizeof *(p));                                                                    \
        acct += c_ * sizeof *(p);                                                                                      \
        if (!(p))                                                                                                      \
            ok = 0;                                                                                                    \
    } while (0)

int moe_forward(moe_layer *L, const moe_xchg *xc, const float *x, size_t n, float *out, moe_saved **saved, ts_err *err)
{
    *saved = NULL;
    backend *be = L->be;
    int E = L->rc.num_experts, k = L->rc.topk, C = L->C, F = L->F, Fu = L->Fu, El = L->El, ep = L->ep;
    if (xc->size != ep || xc->rank != L->er)
        return err_set(err, TS_ESTATE, "moe_forward: exchange of %d ranks (rank %d), layer built for ep %d rank %d",
                       xc->size, xc->rank, ep, L->er);
    /* every buffer is at most ep * n * k rows of max(C, F, E) floats */
    int64_t big;
    int wmax = C > Fu ? C : Fu;
    wmax = wmax > E ? wmax : E;
    if (ckd_mul_i64(&big, (int64_t)n, (int64_t)ep * k) || ckd_mul_i64(&big, big, (int64_t)wmax) ||
        ckd_mul_i64(&big, big, (int64_t)sizeof(double)) || big > CKD_MAX_BYTES)
        return err_set(err, TS_EINVAL, "moe_forward: %zu tokens x ep %d x top-%d x width %d floats overflow", n, ep, k,
                       wmax);
    moe_saved *s = calloc(1, sizeof *s);
    if (!s)
        return err_set(err, TS_ENOMEM, "moe_forward: out of memory");
    int ok = 1, rc = TS_OK;
    size_t acct = 0;
    s->n = n;
    s->nk = n * (size_t)k;
    s->x = x;
    ALLOC(s->logits, n * (size_t)E);
    ALLOC(s->wts, s->nk);
    ALLOC(s->idx, s->nk);
    ALLOC(s->keep, s->nk);
    ALLOC(s->counts, (size_t)E);
    ALLOC(s->order, s->nk);
    ALLOC(s->send_slot, s->nk);
    ALLOC(s->send_rows, (size_t)ep);
    ALLOC(s->recv_rows, (size_t)ep);
    ALLOC(s->recv_ecnt, (size_t)ep * (size_t)El);
    ALLOC(s->eoff, (size_t)El + 1);
    if (!ok) {
        rc = err_set(err, TS_ENOMEM, "moe_forward: out of memory (%zu tokens)", n);
        goto done;
    }
    if (n)
        be->gemm(be, false, true, (int)n, E, C, 1.0f, x, C, L->wr, C, 0.0f, s->logits, E);
    if ((rc = plan(L, xc, s, err)))
        goto done;
    if (!L->rerun)
        L->aux_loss = aux_fwd(L, s);
    size_t nr = s->nrecv, nb = s->nsend > nr ? s->nsend : nr;
    ALLOC(s->eorder, nr);
    ALLOC(s->xe, nr * (size_t)C);
    ALLOC(s->he, nr * (size_t)Fu);
    ALLOC(s->ae, nr * (size_t)F);
    ALLOC(s->yback, s->nsend * (size_t)C);
    ALLOC(s->sbuf, nb * (size_t)C);
    ALLOC(s->rbuf, nb * (size_t)C);
    if (!ok) {
        rc = err_set(err, TS_ENOMEM, "moe_forward: out of memory (%zu received rows)", nr);
        goto done;
    }
    for (size_t p = 0; p < s->nsend; p++)
        memcpy(s->sbuf + p * (size_t)C, x + (s->send_slot[p] / (size_t)k) * (size_t)C, (size_t)C * sizeof(float));
    if ((rc = xc->rows(xc->ud, s->sbuf, s->send_rows, s->rbuf, s->recv_rows, C, err)))
        goto done;
    expert_order(L, s);
    for (size_t p = 0; p < nr; p++)
        memcpy(s->xe + p * (size_t)C, s->rbuf + s->eorder[p] * (size_t)C, (size_t)C * sizeof(float));
    float *ye = s->sbuf; /* expert-ordered outputs, then scattered into rbuf */
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
    for (size_t p = 0; p < nr; p++)
        memcpy(s->rbuf + s->eorder[p] * (size_t)C, ye + p * (size_t)C, (size_t)C * sizeof(float));
    if ((rc = xc->rows(xc->ud, s->rbuf, s->recv_rows, s->yback, s->send_rows, C, err)))
        goto done;
    memset(out, 0, n * (size_t)C * sizeof(float));
    for (size_t p = 0; p < s->nsend; p++) {
        size_t sl = s->send_slot[p];
        float w = s->wts[sl], *o = out + (sl / (size_t)k) * (size_t)C;
        const float *y = s->yback + p * (size_t)C;
        for (int c = 0; c < C; c++)
            o[c] += w * y[c];
    }
done:
    if (rc) {
        moe_saved_free(s);
        return rc;
    }
    s->be = be;
    s->acct_bytes = acct;
    be_count(be, XMEM_ACTS, acct, true);
    *saved = s;
    return TS_OK;
}

int moe_backward(moe_layer *L, const moe_xchg *xc, moe_saved *s, const float *dout, float *dx, ts_err *err)
{
    backend *be = L->be;
    int E = L->rc.num_experts, k = L->rc.topk, C = L->C, F = L->F, Fu = L->Fu, El = L->El;
    size_t n = s->n, nr = s->nrecv;
    int ok = 1, rc = TS_OK;
    size_t acct = 0;
    float *g = NULL, *dlog = NULL, *dxe = NULL, *dh = NULL, *dA = NULL;
    ALLOC(g, s->nk);
    ALLOC(dlog, n * (size_t)E);
    ALLOC(dxe, nr * (size_t)C);
    ALLOC(dh, nr * (size_t)Fu);
    ALLOC(dA, nr * (size_t)F);
    if (!ok) {
        acct = 0;
        rc = err_set(err, TS_ENOMEM, "moe_backward: out of memory");
        goto done;
    }
    be_count(be, XMEM_BUFFERS, acct, true);
    /* combine: dw = dout . y, dy = w dout */
    for (size_t p = 0; p < s->nsend; p++) {
        size_t sl = s->send_slot[p];
        const float *d = dout + (sl / (size_t)k) * (size_t)C, *y = s->yback + p * (size_t)C;
        float *dy = s->sbuf + p * (size_t)C, acc = 0.0f;
        for (int c = 0; c < C; c++) {
            acc += d[c] * y[c];
            dy[c] = s->wts[sl] * d[c];
        }
        g[sl] = acc;
    }
    if ((rc = xc->rows(xc->ud, s->sbuf, s->send_rows, s->rbuf, s->recv_rows, C, err)))
        goto done;
    float *dye = s->sbuf; /* expert order; sbuf is free again */
    for (size_t p = 0; p < nr; p++)
        memcpy(dye + p * (size_t)C, s->rbuf + s->eorder[p] * (size_t)C, (size_t)C * sizeof(float));
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
    for (size_t p = 0; p < nr; p++)
        memcpy(s->rbuf + s->eorder[p] * (size_t)C, dxe + p * (size_t)C, (size_t)C * sizeof(float));
    if ((rc = xc->rows(xc->ud, s->rbuf, s->recv_rows, s->sbuf, s->send_rows, C, err)))
        goto done;
    memset(dx, 0, n * (size_t)C * sizeof(float));
    for (size_t p = 0; p < s->nsend; p++) {
        float *o = dx + (s->send_slot[p] / (size_t)k) * (size_t)C;
        const float *d = s->sbuf + p * (size_t)C;
        for (int c = 0; c < C; c++)
            o[c] += d[c];
    }
    /* router: w_j = keep_j softmax_j(selected logits) */
    for (size_t t = 0; t < n; t++) {
        const float *lg = s->logits + t * (size_t)E;
        const int *id = s->idx + t * (size_t)k;
        double sm[MOE_MAX_TOPK], mx = lg[id[0]], z = 0.0, G = 0.0;
        for (int j = 1; j < k; j++)
            mx = fmax(mx, lg[id[j]]);
        for (int j = 0; j < k; j++)
            z += sm[j] = exp((double)lg[id[j]] - mx);
        for (int j = 0; j < k; j++) {
            sm[j] /= z;
            size_t sl = t * (size_t)k + (size_t)j;
            G += s->keep[sl] ? (double)g[sl] * sm[j] : 0.0;
        }
        for (int j = 0; j < k; j++) {
            size_t sl = t * (size_t)k + (size_t)j;
            double gj = s->keep[sl] ? (double)g[sl] : 0.0;
            dlog[t * (size_t)E + (size_t)id[j]] = (float)(sm[j] * (gj - G));
        }
    }
    aux_bwd(L, s, dlog);
    if (n) {
        be->gemm(be, true, false, E, C, (int)n, 1.0f, dlog, E, s->x, C, 1.0f, L->gwr, C);
        be->gemm(be, false, false, (int)n, C, E, 1.0f, dlog, E, L->wr, C, 1.0f, dx, C);
    }
done:
    if (acct)
        be_count(be, XMEM_BUFFERS, acct, false);
    free(g);
    free(dlog);
    free(dxe);
    free(dh);
    free(dA);
    return rc;
}

void moe_layer_sgd(moe_layer *L, float lr)
{
    size_t nr = (size_t)L->rc.num_experts * (size_t)L->C, ne = (size_t)L->El * (size_t)L->F * (size_t)L->C,
           ne1 = (size_t)L->El * (size_t)L->Fu * (size_t)L->C;
    for (size_t i = 0; i < nr; i++) {
        L->wr[i] -= lr * L->gwr[i];
        L->gwr[i] = 0.0f;
    }
    for (size_t i = 0; i < ne1; i++) {
        L->w1[i] -= lr * L->gw1[i];
        L->gw1[i] = 0.0f;
    }
    for (size_t i = 0; i < ne; i++) {
        L->w2[i] -= lr * L->gw2[i];
        L->gw2[i] = 0.0f;
    }
}

void moe_layer_export(const moe_layer *L, bool grads, bool write_router, float *full)
{
    size_t E = (size_t)L->rc.num_experts, nr = E * (size_t)L->C, per1 = (size_t)L->Fu * (size_t)L->C,
           per = (size_t)L->F * (size_t)L->C, e0 = (size_t)L->er * (size_t)L->El;
    if (write_router)
        memcpy(full, grads ? L->gwr : L->wr, nr * sizeof(float));
    memcpy(full + nr + e0 * per1, grads ? L->gw1 : L->w1, (size_t)L->El * per1 * sizeof(float));
    memcpy(full + nr + E * per1 + e0 * per, grads ? L->gw2 : L->w2, (size_t)L->El * per * sizeof(float));
}

int moe_layer_reduce_experts(moe_layer *L, const moe_edp *e, ts_err *err)
{
    if (!e || e->edp_size <= 1 || !e->edp_sum)
        return TS_OK;
    int rc = e->edp_sum(e->ud, L->gw1, (size_t)L->El * (size_t)L->Fu * (size_t)L->C, err);
    if (!rc)
        rc = e->edp_sum(e->ud, L->gw2, (size_t)L->El * (size_t)L->F * (size_t)L->C, err);
    return rc;
}
