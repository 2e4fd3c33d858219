/* GPU test: the CUDA backend's Llama-architecture kernels (RMSNorm, the
 * q/k norm, SwiGLU, RoPE at T and at given positions, grouped-query
 * attention) and its
 * flash-style attention (one rank, and a ring of 2 ranks on one GPU, one
 * thread and one backend per rank, the exchange through host memory as
 * cp_mpi's) against the CPU backend through the same table, on random
 * inputs; then a Llama GPT stage, unfused and flash (and unfused with
 * --qk-layernorm), forward + backward on each backend.
 *
 * Sizes are not multiples of the launch blocks (rows 37, width 70, T 13)
 * so the edge threads are exercised.
 *
 * Tolerances (|got - want| <= atol + rtol |want|):
 *   element-wise / norm / rope: both fp32, differences are summation order
 *     (warp sums against a sequential loop) and expf: atol 1e-5, rtol 1e-4;
 *     the q/k norm runs the twin's loops in its order (bit-identical in
 *     tests/emu), here products may fuse into FMAs: the same limits;
 *     rope takes its angles in double on both sides;
 *   flash attention: both sides are cp_attn's recurrence in double with the
 *     same per-thread order (the CPU's loop order); only exp/log may differ
 *     in the last ulp of a double: atol 1e-5, rtol 1e-4 (a wrong mask or
 *     rescale gives O(1e-1));
 *   grouped-query (unfused) attention: its GEMMs round fp32 to bf16
 *     (cugemm.h), so relative norm error ||got - want|| / ||want||, ~2^-9
 *     expected, allowed 1e-2 (a wrong head mapping gives O(1));
 *   whole stage: as test_backend_cuda's, loss within 1e-2 relative,
 *     gradients within a relative norm of 3e-2. */
#include <math.h>
#include <pthread.h>

#include "exec/core/backend.h"
#include "exec/core/comm.h"
#include "exec/core/cp_split.h"
#include "exec/core/data.h"
#include "exec/core/gpt.h"
#include "exec/cpu/backend_cpu.h"
#include "exec/cuda/backend_cuda.h"
#include "tests/gpu/gpu_check.h"

static backend *CPU, *GPU;

/* A tensor on both backends with the same contents. */
typedef struct {
    float *c, *g;
    size_t n;
} pair;

static pair mk(size_t n, uint32_t seed, float scale)
{
    pair p = {CPU->alloc(CPU, n), GPU->alloc(GPU, n), n};
    float *h = gc_rand(n, seed, scale);
    memcpy(p.c, h, n * 4);
    GPU->to_device(GPU, p.g, h, n);
    free(h);
    return p;
}

static void rm(pair *p)
{
    CPU->free(CPU, p->c);
    GPU->free(GPU, p->g);
}

static void cmp(const char *what, const pair *p, double atol, double rtol)
{
    float *h = malloc(p->n * 4);
    GPU->to_host(GPU, h, p->g, p->n);
    gc_close(what, h, p->c, p->n, atol, rtol);
    free(h);
}

static double rel_norm(const float *got, const float *want, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
        den += (double)want[i] * want[i];
    }
    return den > 0 ? sqrt(num / den) : INFINITY;
}

static void cmp_norm(const char *what, const pair *p, double lim)
{
    float *h = malloc(p->n * 4);
    GPU->to_host(GPU, h, p->g, p->n);
    double rel = rel_norm(h, p->c, p->n);
    char msg[96];
    snprintf(msg, sizeof msg, "relative norm error %.3g (limit %.1e), n=%zu", rel, lim, p->n);
    gc_result(rel <= lim, what, msg);
    free(h);
}

#define AT 1e-5
#define RT 1e-4

static void status_check(const char *what)
{
    GPU->sync(GPU);
    ts_err e;
    err_clear(&e);
    gc_result(backend_cuda_status(GPU, &e) == TS_OK, what, e.msg);
}

static void test_norm_act_rope(void)
{
    int N = 37, C = 70, F = 45, T = 13, NH = 4, NKV = 2, hs = 8, W = (NH + 2 * NKV) * hs;
    size_t nc = (size_t)N * C;
    pair x = mk(nc, 1, 2.0f), w = mk(C, 2, 1.0f), y = mk(nc, 3, 0.0f), rstd = mk(N, 4, 0.0f);
    pair dy = mk(nc, 5, 1.0f), dx = mk(nc, 6, 0.1f), dw = mk(C, 7, 0.1f);
    CPU->rmsnorm_fwd(CPU, y.c, rstd.c, x.c, w.c, N, C), GPU->rmsnorm_fwd(GPU, y.g, rstd.g, x.g, w.g, N, C);
    cmp("rmsnorm_fwd", &y, AT, RT);
    cmp("rmsnorm_fwd rstd", &rstd, AT, RT);
    CPU->rmsnorm_bwd_input(CPU, dx.c, dy.c, x.c, w.c, rstd.c, N, C);
    GPU->rmsnorm_bwd_input(GPU, dx.g, dy.g, x.g, w.g, rstd.g, N, C);
    cmp("rmsnorm_bwd_input (+=)", &dx, AT, RT);
    CPU->rmsnorm_bwd_weight(CPU, dw.c, dy.c, x.c, rstd.c, N, C);
    GPU->rmsnorm_bwd_weight(GPU, dw.g, dy.g, x.g, rstd.g, N, C);
    cmp("rmsnorm_bwd_weight (+=)", &dw, AT, RT);

    size_t nf = (size_t)N * F;
    pair g = mk(2 * nf, 8, 3.0f), o = mk(nf, 9, 0.0f), dO = mk(nf, 10, 1.0f), dg = mk(2 * nf, 11, 0.1f);
    CPU->swiglu_fwd(CPU, o.c, g.c, N, F), GPU->swiglu_fwd(GPU, o.g, g.g, N, F);
    cmp("swiglu_fwd", &o, AT, RT);
    CPU->swiglu_bwd(CPU, dg.c, g.c, dO.c, N, F), GPU->swiglu_bwd(GPU, dg.g, g.g, dO.g, N, F);
    cmp("swiglu_bwd (+=)", &dg, AT, RT);

    /* rope in place on q and k (v untouched), then back: the input again */
    size_t nq = (size_t)N * W;
    pair q = mk(nq, 12, 1.0f);
    CPU->rope_fwd(CPU, q.c, N, T, NH, NKV, hs, 10000.0f), GPU->rope_fwd(GPU, q.g, N, T, NH, NKV, hs, 10000.0f);
    cmp("rope_fwd (positions n % T)", &q, AT, RT);
    CPU->rope_bwd(CPU, q.c, N, T, NH, NKV, hs, 10000.0f), GPU->rope_bwd(GPU, q.g, N, T, NH, NKV, hs, 10000.0f);
    cmp("rope_bwd", &q, AT, RT);
    float *orig = gc_rand(nq, 12, 1.0f), *back = malloc(nq * 4);
    GPU->to_host(GPU, back, q.g, nq);
    gc_close("rope_bwd(rope_fwd(x)) = x", back, orig, nq, 1e-5, 1e-5);
    CPU->rope_at_fwd(CPU, q.c, N, 1000, NH, NKV, hs, 500000.0f);
    GPU->rope_at_fwd(GPU, q.g, N, 1000, NH, NKV, hs, 500000.0f);
    cmp("rope_at_fwd (positions 1000 + n, base 5e5)", &q, AT, RT);
    CPU->rope_at_bwd(CPU, q.c, N, 7, NH, NKV, hs, 10000.0f), GPU->rope_at_bwd(GPU, q.g, N, 7, NH, NKV, hs, 10000.0f);
    cmp("rope_at_bwd (positions 7 + n)", &q, AT, RT);
    free(orig), free(back);
    status_check("backend status after the norm, activation and rope ops");
    pair *all[] = {&x, &w, &y, &rstd, &dy, &dx, &dw, &g, &o, &dO, &dg, &q};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        rm(all[i]);
}

/* The q/k norm (LayerNorm, or RMSNorm: mean NULL) on NH query and NKV key
 * heads: forward in place (v untouched) with its saved tensors, weight
 * gradients accumulated onto nonzero values, input gradient in place. */
static void test_qknorm(int NH, int NKV, bool rms)
{
    int N = 37, hs = 70, heads = NH + NKV, W = (NH + 2 * NKV) * hs;
    size_t nh = (size_t)N * heads;
    pair qkv = mk((size_t)N * W, 40, 2.0f), xin = mk(nh * hs, 41, 0.0f), mean = mk(nh, 42, 0.0f),
         rstd = mk(nh, 43, 0.0f);
    pair qw = mk(hs, 44, 1.0f), qb = mk(hs, 45, 0.5f), kw = mk(hs, 46, 1.0f), kb = mk(hs, 47, 0.5f);
    pair dqkv = mk((size_t)N * W, 48, 1.0f), dqw = mk(hs, 49, 0.1f), dqb = mk(hs, 50, 0.1f), dkw = mk(hs, 51, 0.1f),
         dkb = mk(hs, 52, 0.1f);
    char what[96];
    const char *tag = rms ? "RMSNorm" : "LayerNorm";
    CPU->qknorm_fwd(CPU, qkv.c, xin.c, rms ? NULL : mean.c, rstd.c, qw.c, qb.c, kw.c, kb.c, N, NH, NKV, hs);
    GPU->qknorm_fwd(GPU, qkv.g, xin.g, rms ? NULL : mean.g, rstd.g, qw.g, qb.g, kw.g, kb.g, N, NH, NKV, hs);
    snprintf(what, sizeof what, "qknorm_fwd %s %d/%d heads: qkv", tag, NH, NKV);
    cmp(what, &qkv, AT, RT);
    snprintf(what, sizeof what, "qknorm_fwd %s %d/%d heads: xin", tag, NH, NKV);
    cmp(what, &xin, 0, 0);
    snprintf(what, sizeof what, "qknorm_fwd %s %d/%d heads: rstd", tag, NH, NKV);
    cmp(what, &rstd, AT, RT);
    snprintf(what, sizeof what, "qknorm_fwd %s %d/%d heads: mean", tag, NH, NKV);
    cmp(what, &mean, AT, RT);
    /* both backwards from the CPU's saved tensors, on each side's copy */
    GPU->to_device(GPU, xin.g, xin.c, xin.n), GPU->to_device(GPU, mean.g, mean.c, mean.n);
    GPU->to_device(GPU, rstd.g, rstd.c, rstd.n);
    CPU->qknorm_bwd_weight(CPU, dqw.c, rms ? NULL : dqb.c, dkw.c, rms ? NULL : dkb.c, dqkv.c, xin.c,
                           rms ? NULL : mean.c, rstd.c, N, NH, NKV, hs);
    GPU->qknorm_bwd_weight(GPU, dqw.g, rms ? NULL : dqb.g, dkw.g, rms ? NULL : dkb.g, dqkv.g, xin.g,
                           rms ? NULL : mean.g, rstd.g, N, NH, NKV, hs);
    pair *gw[] = {&dqw, &dqb, &dkw, &dkb};
    const char *gn[] = {"dqw", "dqb", "dkw", "dkb"};
    for (int i = 0; i < 4; i++) {
        snprintf(what, sizeof what, "qknorm_bwd_weight %s %d/%d heads: %s (+=)", tag, NH, NKV, gn[i]);
        cmp(what, gw[i], AT, RT);
    }
    CPU->qknorm_bwd_input(CPU, dqkv.c, xin.c, rms ? NULL : mean.c, rstd.c, qw.c, kw.c, N, NH, NKV, hs);
    GPU->qknorm_bwd_input(GPU, dqkv.g, xin.g, rms ? NULL : mean.g, rstd.g, qw.g, kw.g, N, NH, NKV, hs);
    snprintf(what, sizeof what, "qknorm_bwd_input %s %d/%d heads: dqkv (in place)", tag, NH, NKV);
    cmp(what, &dqkv, AT, RT);
    snprintf(what, sizeof what, "backend status after the qknorm ops (%s)", tag);
    status_check(what);
    pair *all[] = {&qkv, &xin, &mean, &rstd, &qw, &qb, &kw, &kb, &dqkv, &dqw, &dqb, &dkw, &dkb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        rm(all[i]);
}

/* Unfused grouped-query attention (GEMMs) and flash attention on one rank,
 * each against the CPU backend's. */
static void test_attention(int NH, int NKV)
{
    int B = 2, T = 13, hs = 8, C = NH * hs, W = (NH + 2 * NKV) * hs;
    size_t nq = (size_t)B * T * W, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    pair qkv = mk(nq, 21, 1.0f), out = mk(no, 22, 0.0f), att = mk(na, 23, 0.0f), dout = mk(no, 24, 1.0f);
    pair dqkv = mk(nq, 25, 0.1f), datt = mk(na, 26, 0.0f);
    char what[128];
    CPU->attention_gqa_fwd(CPU, out.c, att.c, qkv.c, B, T, NH, NKV, hs);
    GPU->attention_gqa_fwd(GPU, out.g, att.g, qkv.g, B, T, NH, NKV, hs);
    snprintf(what, sizeof what, "attention_gqa_fwd NH %d NKV %d: out", NH, NKV);
    cmp_norm(what, &out, 1e-2);
    snprintf(what, sizeof what, "attention_gqa_fwd NH %d NKV %d: probabilities", NH, NKV);
    cmp_norm(what, &att, 1e-2);
    CPU->attention_gqa_bwd(CPU, dqkv.c, datt.c, dout.c, qkv.c, att.c, B, T, NH, NKV, hs);
    GPU->attention_gqa_bwd(GPU, dqkv.g, datt.g, dout.g, qkv.g, att.g, B, T, NH, NKV, hs);
    snprintf(what, sizeof what, "attention_gqa_bwd NH %d NKV %d: dqkv (+=)", NH, NKV);
    cmp_norm(what, &dqkv, 1e-2);

    pair fo = mk(no, 27, 0.0f), lse = mk((size_t)B * NH * T, 28, 0.0f), fd = mk(nq, 29, 0.1f);
    cp_ring one = {.size = 1, .rank = 0};
    ts_err e;
    err_clear(&e);
    int rc = CPU->attention_flash_fwd(CPU, &one, fo.c, lse.c, qkv.c, B, T, NH, NKV, hs, NULL, &e);
    if (rc == TS_OK)
        rc = GPU->attention_flash_fwd(GPU, &one, fo.g, lse.g, qkv.g, B, T, NH, NKV, hs, NULL, &e);
    snprintf(what, sizeof what, "attention_flash_fwd NH %d NKV %d, one rank: status", NH, NKV);
    gc_result(rc == TS_OK, what, e.msg);
    snprintf(what, sizeof what, "attention_flash_fwd NH %d NKV %d, one rank: out", NH, NKV);
    cmp(what, &fo, AT, RT);
    snprintf(what, sizeof what, "attention_flash_fwd NH %d NKV %d, one rank: log-sum-exp", NH, NKV);
    cmp(what, &lse, AT, RT);
    rc = CPU->attention_flash_bwd(CPU, &one, fd.c, dout.c, fo.c, lse.c, qkv.c, B, T, NH, NKV, hs, NULL, &e);
    if (rc == TS_OK)
        rc = GPU->attention_flash_bwd(GPU, &one, fd.g, dout.g, fo.g, lse.g, qkv.g, B, T, NH, NKV, hs, NULL, &e);
    snprintf(what, sizeof what, "attention_flash_bwd NH %d NKV %d, one rank: dqkv (+=)", NH, NKV);
    if (rc != TS_OK)
        gc_result(0, what, e.msg);
    else
        cmp(what, &fd, AT, RT);
    /* an argument out of range is refused with a status, nothing launched */
    rc = GPU->attention_flash_fwd(GPU, &one, fo.g, lse.g, qkv.g, B, T, 3, 2, hs, NULL, &e);
    gc_result(rc == TS_EINVAL && strstr(e.msg, "must divide") != NULL, "flash: 3 query heads over 2 refused", e.msg);
    status_check("backend status after the attention ops");
    pair *all[] = {&qkv, &out, &att, &dout, &dqkv, &datt, &fo, &lse, &fd};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        rm(all[i]);
}

/* ------------------------------------------------------------ a ring of 2 on one GPU */

enum { RB = 2, RT_ = 12, RNH = 4, RNKV = 2, RHS = 8, RCP = 2 };

typedef struct {
    pthread_barrier_t bar;
    float *mail[RCP];        /* each rank's outgoing block (host) */
    const float *qkv, *dout; /* the full sequences: [RB*RT_, W], [RB*RT_, C] */
    float *out[RCP], *lse[RCP], *dqkv[RCP];
    int rc[RCP];
    ts_err err[RCP];
} ring_world;

typedef struct {
    ring_world *w;
    int rank;
    backend *be; /* created by the main thread, so that no rank enters the ring without one */
} ring_rank;

/* cp_ring.sendrecv between threads: post, wait for everyone, read the
 * previous rank's, wait again before the mailboxes are reused. */
static int thread_sendrecv(void *ud, const float *send, float *recv, size_t n, ts_err *err)
{
    ring_rank *me = ud;
    (void)err;
    me->w->mail[me->rank] = (float *)send;
    pthread_barrier_wait(&me->w->bar);
    memcpy(recv, me->w->mail[(me->rank + RCP - 1) % RCP], n * sizeof(float));
    pthread_barrier_wait(&me->w->bar);
    return TS_OK;
}

/* Local row i of rank r: global row b*T + cp_global_pos. */
static size_t grow(int r, size_t row)
{
    int Tl = RT_ / RCP;
    return row / Tl * RT_ + (size_t)cp_global_pos(RT_, RCP, r, (int)(row % Tl));
}

static void *ring_main(void *arg)
{
    ring_rank *me = arg;
    ring_world *w = me->w;
    int r = me->rank, Tl = RT_ / RCP, C = RNH * RHS, W = (RNH + 2 * RNKV) * RHS;
    size_t rows = (size_t)RB * Tl;
    backend *be = me->be;
    ts_err e;
    err_clear(&e);
    int rc = TS_OK;
    float *hq = malloc(rows * W * 4), *hd = malloc(rows * C * 4);
    for (size_t i = 0; i < rows; i++) {
        memcpy(hq + i * W, w->qkv + grow(r, i) * W, (size_t)W * 4);
        memcpy(hd + i * C, w->dout + grow(r, i) * C, (size_t)C * 4);
    }
    cp_ring ring = {.size = RCP, .rank = r, .ud = me, .sendrecv = thread_sendrecv};
    size_t nf = cp_attn_ring_floats(RB, RT_, RCP, RNKV, RHS, false),
           nb = cp_attn_ring_floats(RB, RT_, RCP, RNKV, RHS, true);
    float *q = be->alloc(be, rows * W), *d = be->alloc(be, rows * C), *o = be->alloc(be, rows * C);
    float *l = be->alloc(be, (size_t)RB * RNH * Tl), *g = be->alloc(be, rows * W);
    float *wf = be->alloc(be, nf), *wb = be->alloc(be, nb);
    be->to_device(be, q, hq, rows * W);
    be->to_device(be, d, hd, rows * C);
    rc = be->attention_flash_fwd(be, &ring, o, l, q, RB, RT_, RNH, RNKV, RHS, wf, &e);
    /* both ranks enter the backward's ring, or neither */
    w->rc[r] = rc;
    pthread_barrier_wait(&w->bar);
    for (int s = 0; s < RCP; s++)
        if (w->rc[s] != TS_OK && rc == TS_OK)
            rc = err_set(&e, TS_ESTATE, "rank %d's forward failed", s);
    pthread_barrier_wait(&w->bar);
    if (rc == TS_OK) /* the ring's buffer left NULL: the backend allocates its own */
        rc = be->attention_flash_bwd(be, &ring, g, d, o, l, q, RB, RT_, RNH, RNKV, RHS, r ? NULL : wb, &e);
    if (rc == TS_OK) {
        be->to_host(be, w->out[r], o, rows * C);
        be->to_host(be, w->lse[r], l, (size_t)RB * RNH * Tl);
        be->to_host(be, w->dqkv[r], g, rows * W);
        rc = backend_cuda_status(be, &e);
    }
    w->rc[r] = rc;
    w->err[r] = e;
    float *ps[] = {q, d, o, l, g, wf, wb};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        be->free(be, ps[i]);
    free(hq), free(hd);
    return NULL;
}

static void test_ring(void)
{
    int Tl = RT_ / RCP, C = RNH * RHS, W = (RNH + 2 * RNKV) * RHS;
    size_t N = (size_t)RB * RT_, rows = (size_t)RB * Tl;
    ring_world w;
    memset(&w, 0, sizeof w);
    float *qkv = gc_rand(N * W, 31, 1.0f), *dout = gc_rand(N * C, 32, 1.0f);
    w.qkv = qkv, w.dout = dout;
    for (int r = 0; r < RCP; r++) {
        w.out[r] = calloc(rows * C, 4), w.lse[r] = calloc((size_t)RB * RNH * Tl, 4);
        w.dqkv[r] = calloc(rows * W, 4);
    }
    /* the reference: the CPU backend's flash attention on the whole sequence */
    float *ro = calloc(N * C, 4), *rl = calloc((size_t)RB * RNH * RT_, 4), *rg = calloc(N * W, 4);
    cp_ring one = {.size = 1, .rank = 0};
    ts_err e;
    err_clear(&e);
    int rc = CPU->attention_flash_fwd(CPU, &one, ro, rl, qkv, RB, RT_, RNH, RNKV, RHS, NULL, &e);
    if (rc == TS_OK)
        rc = CPU->attention_flash_bwd(CPU, &one, rg, dout, ro, rl, qkv, RB, RT_, RNH, RNKV, RHS, NULL, &e);
    gc_result(rc == TS_OK, "ring reference on the cpu backend", e.msg);
    ring_rank rr[RCP];
    for (int r = 0; r < RCP; r++) {
        rr[r] = (ring_rank){&w, r, NULL};
        if (rc == TS_OK)
            rc = backend_cuda_create(0, false, &rr[r].be, &e);
    }
    if (rc != TS_OK) {
        gc_result(0, "ring: a backend per rank", e.msg);
    } else {
        pthread_barrier_init(&w.bar, NULL, RCP);
        pthread_t th[RCP];
        for (int r = 0; r < RCP; r++)
            pthread_create(&th[r], NULL, ring_main, &rr[r]);
        for (int r = 0; r < RCP; r++)
            pthread_join(th[r], NULL);
        pthread_barrier_destroy(&w.bar);
    }
    for (int r = 0; r < RCP; r++)
        if (rr[r].be)
            rr[r].be->destroy(rr[r].be);
    for (int r = 0; r < RCP && rc == TS_OK; r++) {
        char what[96];
        snprintf(what, sizeof what, "flash ring cp=2, rank %d: status", r);
        gc_result(w.rc[r] == TS_OK, what, w.err[r].msg);
        float *wo = malloc(rows * C * 4), *wl = malloc((size_t)RB * RNH * Tl * 4), *wg = malloc(rows * W * 4);
        for (size_t i = 0; i < rows; i++) {
            size_t gr = grow(r, i), b = i / Tl;
            memcpy(wo + i * C, ro + gr * C, (size_t)C * 4);
            memcpy(wg + i * W, rg + gr * W, (size_t)W * 4);
            for (int h = 0; h < RNH; h++)
                wl[(b * RNH + h) * Tl + i % Tl] = rl[(b * RNH + h) * RT_ + gr % RT_];
        }
        snprintf(what, sizeof what, "flash ring cp=2, rank %d: out = the whole sequence's rows", r);
        gc_close(what, w.out[r], wo, rows * C, AT, RT);
        snprintf(what, sizeof what, "flash ring cp=2, rank %d: log-sum-exp", r);
        gc_close(what, w.lse[r], wl, (size_t)RB * RNH * Tl, AT, RT);
        snprintf(what, sizeof what, "flash ring cp=2, rank %d: dqkv (dk, dv home after the last hop)", r);
        gc_close(what, w.dqkv[r], wg, rows * W, AT, RT);
        free(wo), free(wl), free(wg);
    }
    for (int r = 0; r < RCP; r++)
        free(w.out[r]), free(w.lse[r]), free(w.dqkv[r]);
    free(ro), free(rl), free(rg), free(qkv), free(dout);
}

/* ------------------------------------------------------------ a Llama stage */

static void test_stage(bool flash, bool qk_norm)
{
    gpt_dims D = {.vocab = 64,
                  .seq = 16,
                  .hidden = 64,
                  .heads = 4,
                  .ffn = 96,
                  .layers = 2,
                  .batch = 2,
                  .groups = 2,
                  .rmsnorm = true,
                  .swiglu = true,
                  .no_bias = true,
                  .rope = true,
                  .tie_embed = true,
                  .flash = flash,
                  .qk_norm = qk_norm};
    int N = D.batch * D.seq, tok[32], tgt[32];
    data_microbatch(7, 0, 1, 0, D.batch, D.seq, D.vocab, tok, tgt);
    backend *bes[2] = {CPU, GPU};
    double loss[2] = {0, 0};
    size_t np = gpt_num_params(&D);
    float *grads[2] = {calloc(np, 4), calloc(np, 4)};
    ts_err e;
    err_clear(&e);
    const char *name = qk_norm ? "llama stage, unfused attention, --qk-layernorm"
                       : flash ? "llama stage, flash attention"
                               : "llama stage, unfused attention";
    for (int i = 0; i < 2; i++) {
        comm *cm = NULL;
        gpt_stage *st = NULL;
        gpt_acts *a = NULL;
        int rc = comm_local_create(&cm, &e);
        if (rc == TS_OK)
            rc = gpt_stage_create(&D, 0, D.layers, true, true, false, 42, bes[i], cm, &st, &e);
        if (rc == TS_OK)
            rc = gpt_acts_create(st, &a, &e);
        if (rc == TS_OK) {
            gpt_stage_zero_grads(st);
            rc = gpt_forward(st, a, tok, tgt, NULL, NULL, &loss[i], &e);
        }
        if (rc == TS_OK)
            rc = gpt_backward(st, a, NULL, 1.0f / N, NULL, &e);
        if (rc == TS_OK)
            rc = gpt_stage_export(st, true, true, grads[i], &e);
        if (rc != TS_OK)
            gc_result(0, name, e.msg);
        if (a)
            gpt_acts_free(st, a);
        gpt_stage_free(st);
        if (cm)
            cm->destroy(cm);
    }
    char what[96], msg[128];
    snprintf(what, sizeof what, "%s: forward loss", name);
    snprintf(msg, sizeof msg, "cpu %.6f, cuda %.6f", loss[0] / N, loss[1] / N);
    gc_result(fabs(loss[1] - loss[0]) <= 1e-2 * fabs(loss[0]) && loss[0] > 0, what, msg);
    double rel = rel_norm(grads[1], grads[0], np);
    snprintf(what, sizeof what, "%s: gradients", name);
    snprintf(msg, sizeof msg, "relative norm error %.3g over %zu parameters", rel, np);
    gc_result(rel <= 3e-2, what, msg);
    free(grads[0]), free(grads[1]);
}

int main(void)
{
    gpu_check_start("test_backend_cuda_llama");
    ts_err e;
    err_clear(&e);
    if (backend_cpu_create(1, &CPU, &e) != TS_OK || backend_cuda_create(0, true, &GPU, &e) != TS_OK) {
        gc_result(0, "backend creation", e.msg);
        return gpu_check_finish();
    }
    test_norm_act_rope();
    test_qknorm(4, 4, false); /* multi-head, LayerNorm */
    test_qknorm(4, 2, true);  /* grouped-query, RMSNorm */
    test_qknorm(6, 1, false); /* multi-query, LayerNorm */
    test_attention(4, 2);     /* grouped-query */
    test_attention(4, 4);     /* multi-head through the same kernels */
    test_attention(4, 1);     /* multi-query */
    test_ring();
    test_stage(false, false);
    test_stage(true, false);
    test_stage(false, true);
    status_check("backend status at the end");
    GPU->destroy(GPU);
    CPU->destroy(CPU);
    return gpu_check_finish();
}
