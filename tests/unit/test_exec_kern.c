/* Unit tests for exec/cpu/kern (and the CPU backend's GEMM): every backward
 * kernel against central finite differences of a scalar probe
 * L = sum_i R_i * out_i (R fixed pseudo-random), in fp32.
 *
 * Tolerance: an fp32 forward rounds each output to ~6e-8 relative, so the
 * probe L (|L| ~ 1..10) carries ~1e-6 of noise; with h = 1e-2 the central
 * difference has rounding error ~1e-6 / 2e-2 = 5e-5 and truncation error
 * O(h^2 f''') ~ 1e-4 on these O(1)-curvature functions. We accept
 * |analytic - fd| <= 1e-3 + 1e-2 |fd|: ten times that budget, and far below
 * any real mistake (a dropped term moves gradients by O(0.1..1)). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/core/backend.h"
#include "exec/cpu/backend_cpu.h"
#include "exec/cpu/kern.h"

#include "tests/unit/fd_check.h"

/* ---------------------------------------------------------------- layernorm */
typedef struct {
    float *out, *mean, *rstd, *inp, *w, *b;
    size_t N;
    int C;
} ln_ctx;
static void ln_f(void *p)
{
    ln_ctx *c = p;
    kern_layernorm_fwd(c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N, c->C);
}
Test(exec_kern, layernorm_backward_matches_fd)
{
    ln_ctx c = {.N = 3, .C = 8};
    size_t n = c.N * c.C;
    c.inp = rvec(n, 1, 1.0f);
    c.w = rvec(c.C, 2, 1.0f);
    c.b = rvec(c.C, 3, 1.0f);
    c.out = calloc(n, 4);
    c.mean = calloc(c.N, 4);
    c.rstd = calloc(c.N, 4);
    float *R = rvec(n, 4, 1.0f), *dinp = calloc(n, 4), *dw = calloc(c.C, 4), *db = calloc(c.C, 4);
    ln_f(&c);
    kern_layernorm_bwd_input(dinp, R, c.inp, c.w, c.mean, c.rstd, c.N, c.C);
    kern_layernorm_bwd_weight(dw, db, R, c.inp, c.mean, c.rstd, c.N, c.C);
    check_fd("layernorm dinp", ln_f, &c, c.inp, dinp, n, c.out, R, n);
    check_fd("layernorm dw", ln_f, &c, c.w, dw, c.C, c.out, R, n);
    check_fd("layernorm db", ln_f, &c, c.b, db, c.C, c.out, R, n);
}

/* ---------------------------------------------------------------- softmax */
typedef struct {
    float *x, *y;
    int T;
    float scale;
} sm_ctx;
static void sm_f(void *p)
{
    sm_ctx *c = p;
    memcpy(c->y, c->x, sizeof(float) * c->T * c->T);
    kern_softmax_causal_fwd(c->y, c->T, c->scale);
}
Test(exec_kern, softmax_causal_backward_matches_fd)
{
    sm_ctx c = {.T = 5, .scale = 0.7f};
    size_t n = (size_t)c.T * c.T;
    c.x = rvec(n, 5, 2.0f);
    c.y = calloc(n, 4);
    float *R = rvec(n, 6, 1.0f), *dx = calloc(n, 4);
    sm_f(&c);
    for (int t = 0; t < c.T; t++) { /* the mask: rows sum to 1 over j <= t, 0 beyond */
        double s = 0.0;
        for (int j = 0; j < c.T; j++) {
            if (j > t)
                cr_assert_eq(c.y[t * c.T + j], 0.0f);
            s += c.y[t * c.T + j];
        }
        cr_assert(fabs(s - 1.0) < 1e-6);
    }
    kern_softmax_causal_bwd(dx, c.y, R, c.T, c.scale);
    check_fd("softmax dx", sm_f, &c, c.x, dx, n, c.y, R, n);
}

/* ---------------------------------------------------------------- attention */
typedef struct {
    float *out, *att, *qkv;
    int B, T, NH, hs;
} at_ctx;
static void at_f(void *p)
{
    at_ctx *c = p;
    kern_attention_fwd(c->out, c->att, c->qkv, c->B, c->T, c->NH, c->hs);
}
Test(exec_kern, attention_backward_matches_fd)
{
    at_ctx c = {.B = 2, .T = 4, .NH = 2, .hs = 3};
    size_t C = (size_t)c.NH * c.hs, n = (size_t)c.B * c.T * 3 * C, nout = (size_t)c.B * c.T * C;
    size_t natt = (size_t)c.B * c.NH * c.T * c.T;
    c.qkv = rvec(n, 7, 1.0f);
    c.out = calloc(nout, 4);
    c.att = calloc(natt, 4);
    float *R = rvec(nout, 8, 1.0f), *dqkv = calloc(n, 4), *datt = calloc(natt, 4);
    at_f(&c);
    kern_attention_bwd(dqkv, datt, R, c.qkv, c.att, c.B, c.T, c.NH, c.hs);
    check_fd("attention dqkv", at_f, &c, c.qkv, dqkv, n, c.out, R, nout);
}

Test(exec_kern, attention_is_causal)
{
    /* changing a later token's k and v leaves earlier outputs unchanged */
    int B = 1, T = 4, NH = 1, hs = 2;
    size_t n = (size_t)T * 3 * hs;
    float *qkv = rvec(n, 9, 1.0f), out1[8], out2[8], att[16];
    kern_attention_fwd(out1, att, qkv, B, T, NH, hs);
    for (int i = hs; i < 3 * hs; i++)
        qkv[(T - 1) * 3 * hs + i] += 0.5f;
    kern_attention_fwd(out2, att, qkv, B, T, NH, hs);
    for (int i = 0; i < (T - 1) * hs; i++)
        cr_assert_eq(out1[i], out2[i], "output %d changed with a later token", i);
    cr_assert_neq(out1[(T - 1) * hs], out2[(T - 1) * hs]);
}

/* ---------------------------------------------------------------- gelu */
typedef struct {
    float *out, *inp;
    size_t n;
} ge_ctx;
static void ge_f(void *p)
{
    ge_ctx *c = p;
    kern_gelu_fwd(c->out, c->inp, c->n);
}
Test(exec_kern, gelu_backward_matches_fd)
{
    ge_ctx c = {.n = 40};
    c.inp = rvec(c.n, 10, 4.0f);
    c.out = calloc(c.n, 4);
    float *R = rvec(c.n, 11, 1.0f), *d = calloc(c.n, 4);
    ge_f(&c);
    cr_assert(fabsf(c.out[0] - 0.5f * c.inp[0] * (1.0f + erff(c.inp[0] / sqrtf(2.0f)))) < 2e-3,
              "tanh GELU far from the exact one");
    kern_gelu_bwd(d, c.inp, R, c.n);
    check_fd("gelu dinp", ge_f, &c, c.inp, d, c.n, c.out, R, c.n);
}

/* ---------------------------------------------------------------- bias + residual */
typedef struct {
    float *out, *a, *b, *bias;
    size_t N;
    int OC;
} br_ctx;
static void br_f(void *p)
{
    br_ctx *c = p;
    kern_bias_residual_fwd(c->out, c->a, c->b, c->bias, c->N, c->OC);
}
Test(exec_kern, bias_residual_backward_matches_fd)
{
    br_ctx c = {.N = 3, .OC = 5};
    size_t n = c.N * c.OC;
    c.a = rvec(n, 12, 1.0f);
    c.b = rvec(n, 13, 1.0f);
    c.bias = rvec(c.OC, 14, 1.0f);
    c.out = calloc(n, 4);
    float *R = rvec(n, 15, 1.0f), *dbias = calloc(c.OC, 4);
    br_f(&c);
    kern_bias_bwd(dbias, R, c.N, c.OC);
    check_fd("residual da", br_f, &c, c.a, R, n, c.out, R, n);
    check_fd("residual db", br_f, &c, c.b, R, n, c.out, R, n);
    check_fd("bias dbias", br_f, &c, c.bias, dbias, c.OC, c.out, R, n);
}

/* ---------------------------------------------------------------- embedding */
typedef struct {
    float *out, *wte, *wpe;
    int *tok;
    int T, C;
    size_t n;
} em_ctx;
static void em_f(void *p)
{
    em_ctx *c = p;
    kern_embed_fwd(c->out, c->tok, c->wte, c->wpe, 0, c->n, c->T, c->C);
}
Test(exec_kern, embedding_backward_matches_fd)
{
    int V = 5;
    em_ctx c = {.T = 3, .C = 4, .n = 6};
    int tok[6] = {1, 4, 1, 0, 4, 4};
    c.tok = tok;
    c.wte = rvec((size_t)V * c.C, 16, 1.0f);
    c.wpe = rvec((size_t)c.T * c.C, 17, 1.0f);
    c.out = calloc(c.n * c.C, 4);
    float *R = rvec(c.n * c.C, 18, 1.0f), *dwte = calloc((size_t)V * c.C, 4), *dwpe = calloc((size_t)c.T * c.C, 4);
    em_f(&c);
    kern_embed_bwd(dwte, dwpe, R, c.tok, 0, c.n, c.T, c.C);
    check_fd("embedding dwte", em_f, &c, c.wte, dwte, (size_t)V * c.C, c.out, R, c.n * c.C);
    check_fd("embedding dwpe", em_f, &c, c.wpe, dwpe, (size_t)c.T * c.C, c.out, R, c.n * c.C);
    /* a row offset reads the same rows */
    float *o2 = calloc(2 * (size_t)c.C, 4);
    kern_embed_fwd(o2, c.tok, c.wte, c.wpe, 4, 2, c.T, c.C);
    cr_assert_eq(memcmp(o2, c.out + 4 * c.C, 2 * sizeof(float) * c.C), 0);
}

/* ---------------------------------------------------------------- cross-entropy */
typedef struct {
    float *losses, *probs, *logits;
    int *tgt;
    size_t N;
    int V;
} ce_ctx;
static void ce_f(void *p)
{
    ce_ctx *c = p;
    kern_crossentropy_fwd(c->losses, c->probs, c->logits, c->tgt, c->N, c->V);
}
Test(exec_kern, crossentropy_backward_matches_fd)
{
    ce_ctx c = {.N = 3, .V = 6};
    int tgt[3] = {0, 5, 2};
    c.tgt = tgt;
    size_t n = c.N * c.V;
    c.logits = rvec(n, 19, 3.0f);
    c.probs = calloc(n, 4);
    c.losses = calloc(c.N, 4);
    float R[3] = {0.25f, 0.25f, 0.25f}, *d = calloc(n, 4);
    ce_f(&c);
    kern_crossentropy_bwd(d, c.probs, c.tgt, c.N, c.V, 0.25f);
    check_fd("cross-entropy dlogits", ce_f, &c, c.logits, d, n, c.losses, R, c.N);
    /* in place (probs aliasing logits) gives the same losses */
    float *l2 = malloc(n * 4), loss2[3];
    memcpy(l2, c.logits, n * 4);
    kern_crossentropy_fwd(loss2, l2, l2, c.tgt, c.N, c.V);
    free(l2);
    /* NOLINTNEXTLINE(bugprone-suspicious-memory-comparison,cert-exp42-c,cert-flp37-c): bit-identical on purpose */
    cr_assert_eq(memcmp(loss2, c.losses, sizeof loss2), 0);
}

/* ---------------------------------------------------------------- adam */
Test(exec_kern, adam_matches_double_reference)
{
    size_t n = 7;
    float *p = rvec(n, 20, 1.0f), *g = rvec(n, 21, 0.1f), *m = calloc(n, 4), *v = calloc(n, 4);
    double P[7], M[7] = {0}, Vv[7] = {0};
    for (size_t i = 0; i < n; i++)
        P[i] = p[i];
    double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
    for (int t = 1; t <= 3; t++) {
        kern_adam(p, g, m, v, n, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, t);
        for (size_t i = 0; i < n; i++) {
            M[i] = b1 * M[i] + (1 - b1) * g[i];
            Vv[i] = b2 * Vv[i] + (1 - b2) * (double)g[i] * g[i];
            double mh = M[i] / (1 - pow(b1, t)), vh = Vv[i] / (1 - pow(b2, t));
            P[i] -= lr * (mh / (sqrt(vh) + eps) + wd * P[i]);
        }
    }
    for (size_t i = 0; i < n; i++)
        cr_assert(fabs(p[i] - P[i]) < 1e-6, "param %zu: %.8g vs %.8g", i, p[i], P[i]);
}

/* ---------------------------------------------------------------- GEMM */
Test(exec_kern, cpu_backend_gemm_all_transposes)
{
    backend *be;
    ts_err e;
    cr_assert_eq(backend_cpu_create(1, &be, &e), TS_OK);
    int M = 3, N = 4, K = 5;
    float *A = rvec((size_t)M * K, 22, 1.0f), *B = rvec((size_t)K * N, 23, 1.0f);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            float C[12];
            for (int i = 0; i < 12; i++)
                C[i] = 1.0f;
            /* A stored as [M,K] or (transposed) [K,M]; same logical matrix */
            float At[15], Bt[20];
            for (int i = 0; i < M; i++)
                for (int k = 0; k < K; k++)
                    At[k * M + i] = A[i * K + k];
            for (int k = 0; k < K; k++)
                for (int j = 0; j < N; j++)
                    Bt[j * K + k] = B[k * N + j];
            be->gemm(be, ta, tb, M, N, K, 2.0f, ta ? At : A, ta ? M : K, tb ? Bt : B, tb ? K : N, 1.0f, C, N);
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    double s = 0;
                    for (int k = 0; k < K; k++)
                        s += (double)A[i * K + k] * B[k * N + j];
                    cr_assert(fabs(C[i * N + j] - (2 * s + 1)) < 1e-5, "ta=%d tb=%d", ta, tb);
                }
        }
    /* accounting: alloc/free move current bytes and keep the peak */
    float *x;
    cr_assert_eq(be_alloc(be, 100, XMEM_ACTS, &x, &e), TS_OK);
    cr_assert_eq(be->cur_bytes[XMEM_ACTS], 400u);
    be_free(be, x, 100, XMEM_ACTS);
    cr_assert_eq(be->cur_bytes[XMEM_ACTS], 0u);
    cr_assert_eq(be->peak_bytes[XMEM_ACTS], 400u);
    be->destroy(be);
}

/* The CPU backend's attention (GEMMs around the softmax) equals the loops. */
Test(exec_kern, cpu_backend_attention_matches_reference_loops)
{
    backend *be;
    ts_err e;
    cr_assert_eq(backend_cpu_create(1, &be, &e), TS_OK);
    int B = 2, T = 5, NH = 3, hs = 4;
    size_t C = (size_t)NH * hs, n = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    size_t natt = (size_t)B * NH * T * T;
    float *qkv = rvec(n, 30, 1.0f), *dout = rvec(nout, 31, 1.0f);
    float *o1 = calloc(nout, 4), *o2 = calloc(nout, 4), *a1 = calloc(natt, 4), *a2 = calloc(natt, 4),
          *d1 = calloc(n, 4), *d2 = calloc(n, 4), *s1 = calloc(natt, 4), *s2 = calloc(natt, 4);
    kern_attention_fwd(o1, a1, qkv, B, T, NH, hs);
    be->attention_fwd(be, o2, a2, qkv, B, T, NH, hs);
    for (size_t i = 0; i < nout; i++)
        cr_assert(fabsf(o1[i] - o2[i]) < 1e-5f, "out[%zu] %g vs %g", i, o1[i], o2[i]);
    for (size_t i = 0; i < natt; i++)
        cr_assert(fabsf(a1[i] - a2[i]) < 1e-6f, "att[%zu]", i);
    kern_attention_bwd(d1, s1, dout, qkv, a1, B, T, NH, hs);
    be->attention_bwd(be, d2, s2, dout, qkv, a1, B, T, NH, hs);
    for (size_t i = 0; i < n; i++)
        cr_assert(fabsf(d1[i] - d2[i]) < 1e-5f, "dqkv[%zu] %g vs %g", i, d1[i], d2[i]);
    be->destroy(be);
}
