/* Unit tests for exec/cpu/kern_llama (and the CPU backend's grouped-query
 * attention): every backward kernel against central finite differences of
 * a scalar probe L = sum_i R_i * out_i (R fixed pseudo-random), in fp32,
 * and each forward against a simple reference (the formula, multi-head
 * attention with the shared K/V heads copied out, a rotation's invariants).
 *
 * Tolerance as in test_exec_kern.c: h = 1e-2, |analytic - fd| <= 1e-3 +
 * 1e-2 |fd| (fp32 rounding of the probe ~1e-6 / 2e-2 = 5e-5, truncation
 * O(h^2) ~ 1e-4 on these O(1)-curvature functions); a dropped term moves
 * gradients by O(0.1..1). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/core/backend.h"
#include "exec/cpu/backend_cpu.h"
#include "exec/cpu/kern.h"
#include "exec/cpu/kern_llama.h"

#include "tests/unit/fd_check.h"

/* ---------------------------------------------------------------- rmsnorm */
typedef struct {
    float *out, *rstd, *inp, *w;
    size_t N;
    int C;
} rms_ctx;
static void rms_f(void *p)
{
    rms_ctx *c = p;
    kern_rmsnorm_fwd(c->out, c->rstd, c->inp, c->w, c->N, c->C);
}
Test(exec_kern_llama, rmsnorm_forward_is_the_formula_and_backward_matches_fd)
{
    rms_ctx c = {.N = 3, .C = 8};
    size_t n = c.N * c.C;
    c.inp = rvec(n, 1, 1.0f);
    c.w = rvec(c.C, 2, 1.0f);
    c.out = calloc(n, 4);
    c.rstd = calloc(c.N, 4);
    float *R = rvec(n, 4, 1.0f), *dinp = calloc(n, 4), *dw = calloc(c.C, 4);
    rms_f(&c);
    for (size_t r = 0; r < c.N; r++) {
        double ms = 0.0;
        for (int j = 0; j < c.C; j++)
            ms += (double)c.inp[r * c.C + j] * c.inp[r * c.C + j];
        double s = 1.0 / sqrt(ms / c.C + 1e-5);
        for (int j = 0; j < c.C; j++)
            cr_assert(fabs(c.out[r * c.C + j] - c.inp[r * c.C + j] * s * c.w[j]) < 1e-6, "rmsnorm out[%zu, %d]", r, j);
    }
    kern_rmsnorm_bwd_input(dinp, R, c.inp, c.w, c.rstd, c.N, c.C);
    kern_rmsnorm_bwd_weight(dw, R, c.inp, c.rstd, c.N, c.C);
    check_fd("rmsnorm dinp", rms_f, &c, c.inp, dinp, n, c.out, R, n);
    check_fd("rmsnorm dw", rms_f, &c, c.w, dw, c.C, c.out, R, n);
}

/* ---------------------------------------------------------------- swiglu */
typedef struct {
    float *out, *inp;
    size_t N;
    int F;
} sw_ctx;
static void sw_f(void *p)
{
    sw_ctx *c = p;
    kern_swiglu_fwd(c->out, c->inp, c->N, c->F);
}
Test(exec_kern_llama, swiglu_forward_is_silu_gate_times_up_and_backward_matches_fd)
{
    sw_ctx c = {.N = 3, .F = 6};
    size_t nin = c.N * 2 * c.F, nout = c.N * c.F;
    c.inp = rvec(nin, 5, 3.0f);
    c.out = calloc(nout, 4);
    float *R = rvec(nout, 6, 1.0f), *d = calloc(nin, 4);
    sw_f(&c);
    for (size_t r = 0; r < c.N; r++)
        for (int j = 0; j < c.F; j++) {
            double g = c.inp[r * 2 * c.F + j], u = c.inp[r * 2 * c.F + c.F + j];
            cr_assert(fabs(c.out[r * c.F + j] - g / (1.0 + exp(-g)) * u) < 1e-5, "swiglu out[%zu, %d]", r, j);
        }
    kern_swiglu_bwd(d, c.inp, R, c.N, c.F);
    check_fd("swiglu dinp", sw_f, &c, c.inp, d, nin, c.out, R, nout);
}

/* ---------------------------------------------------------------- rope */
typedef struct {
    float *x, *y;
    size_t N, n;
    int T, NH, NKV, hs;
} rope_ctx;
static void rope_f(void *p)
{
    rope_ctx *c = p;
    memcpy(c->y, c->x, c->n * sizeof(float));
    kern_rope_fwd(c->y, c->N, c->T, c->NH, c->NKV, c->hs, KERN_ROPE_BASE);
}
Test(exec_kern_llama, rope_rotates_q_and_k_only_and_backward_matches_fd)
{
    rope_ctx c = {.N = 6, .T = 3, .NH = 2, .NKV = 1, .hs = 4};
    size_t W = (size_t)(c.NH + 2 * c.NKV) * c.hs;
    c.n = c.N * W;
    c.x = rvec(c.n, 7, 1.0f);
    c.y = calloc(c.n, 4);
    rope_f(&c);
    for (size_t r = 0; r < c.N; r++) {
        size_t pos = r % (size_t)c.T;
        for (int h = 0; h < c.NH + 2 * c.NKV; h++) {
            const float *x = c.x + r * W + (size_t)h * c.hs, *y = c.y + r * W + (size_t)h * c.hs;
            for (int i = 0; i < c.hs / 2; i++) {
                double ang = (double)pos * pow(10000.0, -2.0 * i / c.hs);
                double e1 = h < c.NH + c.NKV ? x[i] * cos(ang) - x[i + c.hs / 2] * sin(ang) : x[i];
                double e2 = h < c.NH + c.NKV ? x[i + c.hs / 2] * cos(ang) + x[i] * sin(ang) : x[i + c.hs / 2];
                cr_assert(fabs(y[i] - e1) < 1e-6 && fabs(y[i + c.hs / 2] - e2) < 1e-6, "row %zu head %d pair %d", r, h,
                          i);
            }
        }
    }
    /* position 0 is the identity */
    for (size_t i = 0; i < W; i++)
        cr_assert_eq(c.x[i], c.y[i]);
    float *R = rvec(c.n, 8, 1.0f), *d = malloc(c.n * 4);
    memcpy(d, R, c.n * 4);
    kern_rope_bwd(d, c.N, c.T, c.NH, c.NKV, c.hs, KERN_ROPE_BASE);
    check_fd("rope dinp", rope_f, &c, c.x, d, c.n, c.y, R, c.n);
}

/* Rope at given positions (a context-parallel rank's chunk): rows at positions
 * pos0.. rotate as the rows at those positions of a whole sequence do, bitwise,
 * forward and backward. */
Test(exec_kern_llama, rope_at_positions_equals_rope_of_the_sequence)
{
    enum { T = 8, NH = 2, NKV = 1, HS = 4, W = (NH + 2 * NKV) * HS, P0 = 3, K = 4 };
    float *x = rvec((size_t)T * W, 9, 1.0f), *full = malloc((size_t)T * W * 4), *part = malloc((size_t)K * W * 4);
    for (int bwd = 0; bwd < 2; bwd++) {
        memcpy(full, x, (size_t)T * W * 4);
        memcpy(part, x + (size_t)P0 * W, (size_t)K * W * 4);
        if (bwd) {
            kern_rope_bwd(full, T, T, NH, NKV, HS, KERN_ROPE_BASE);
            kern_rope_at_bwd(part, K, P0, NH, NKV, HS, KERN_ROPE_BASE);
        } else {
            kern_rope_fwd(full, T, T, NH, NKV, HS, KERN_ROPE_BASE);
            kern_rope_at_fwd(part, K, P0, NH, NKV, HS, KERN_ROPE_BASE);
        }
        int moved = 0;
        for (size_t i = 0; i < (size_t)K * W; i++) {
            cr_assert_eq(part[i], full[(size_t)P0 * W + i], "row %zu, element %zu (backward %d)", P0 + i / W, i % W,
                         bwd);
            moved += part[i] != x[(size_t)P0 * W + i];
        }
        cr_assert_gt(moved, 0, "rotated");
    }
    free(x);
    free(full);
    free(part);
}

/* ---------------------------------------------------------------- attention */
typedef struct {
    float *out, *att, *qkv;
    int B, T, NH, NKV, hs;
} ga_ctx;
static void ga_f(void *p)
{
    ga_ctx *c = p;
    kern_attention_gqa_fwd(c->out, c->att, c->qkv, c->B, c->T, c->NH, c->NKV, c->hs);
}
Test(exec_kern_llama, gqa_attention_backward_matches_fd)
{
    ga_ctx c = {.B = 2, .T = 4, .NH = 4, .NKV = 2, .hs = 3};
    size_t W = (size_t)(c.NH + 2 * c.NKV) * c.hs, n = (size_t)c.B * c.T * W;
    size_t nout = (size_t)c.B * c.T * c.NH * c.hs, natt = (size_t)c.B * c.NH * c.T * c.T;
    c.qkv = rvec(n, 9, 1.0f);
    c.out = calloc(nout, 4);
    c.att = calloc(natt, 4);
    float *R = rvec(nout, 10, 1.0f), *dqkv = calloc(n, 4), *datt = calloc(natt, 4);
    ga_f(&c);
    kern_attention_gqa_bwd(dqkv, datt, R, c.qkv, c.att, c.B, c.T, c.NH, c.NKV, c.hs);
    check_fd("gqa attention dqkv", ga_f, &c, c.qkv, dqkv, n, c.out, R, nout);
}

/* Grouped-query attention equals multi-head attention with every K/V head
 * copied to the query heads of its group; its K/V gradients are the sums
 * of the copies' gradients. The CPU backend's GEMM version equals both. */
Test(exec_kern_llama, gqa_attention_equals_mha_with_shared_heads_copied)
{
    backend *be;
    ts_err e;
    cr_assert_eq(backend_cpu_create(1, &be, &e), TS_OK);
    int B = 2, T = 5, NH = 6, NKV = 2, hs = 4, per = NH / NKV;
    size_t rows = (size_t)B * T, W = (size_t)(NH + 2 * NKV) * hs, C = (size_t)NH * hs;
    size_t natt = (size_t)B * NH * T * T, nout = rows * C;
    float *qkv = rvec(rows * W, 11, 1.0f), *dout = rvec(nout, 12, 1.0f), *mha = calloc(rows * 3 * C, 4);
    for (size_t r = 0; r < rows; r++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < hs; i++) {
                const float *src = qkv + r * W;
                float *dst = mha + r * 3 * C;
                dst[(size_t)h * hs + i] = src[(size_t)h * hs + i];
                dst[C + (size_t)h * hs + i] = src[C + (size_t)(h / per) * hs + i];
                dst[2 * C + (size_t)h * hs + i] = src[C + (size_t)NKV * hs + (size_t)(h / per) * hs + i];
            }
    float *o1 = calloc(nout, 4), *o2 = calloc(nout, 4), *o3 = calloc(nout, 4), *a1 = calloc(natt, 4),
          *a2 = calloc(natt, 4), *a3 = calloc(natt, 4), *s = calloc(natt, 4);
    kern_attention_fwd(o1, a1, mha, B, T, NH, hs);
    kern_attention_gqa_fwd(o2, a2, qkv, B, T, NH, NKV, hs);
    be->attention_gqa_fwd(be, o3, a3, qkv, B, T, NH, NKV, hs);
    for (size_t i = 0; i < nout; i++) {
        cr_assert_eq(o1[i], o2[i], "out[%zu]: %g (mha) vs %g (gqa)", i, o1[i], o2[i]);
        cr_assert(fabsf(o1[i] - o3[i]) < 1e-5f, "out[%zu]: %g vs backend %g", i, o1[i], o3[i]);
    }
    float *dm = calloc(rows * 3 * C, 4), *dg = calloc(rows * W, 4), *db = calloc(rows * W, 4);
    kern_attention_bwd(dm, s, dout, mha, a1, B, T, NH, hs);
    kern_attention_gqa_bwd(dg, s, dout, qkv, a2, B, T, NH, NKV, hs);
    be->attention_gqa_bwd(be, db, s, dout, qkv, a2, B, T, NH, NKV, hs);
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < W; j++) {
            double ref = 0.0;
            if (j < C) {
                ref = dm[r * 3 * C + j];
            } else {
                size_t kv = j - C, part = kv / ((size_t)NKV * hs), g = kv % ((size_t)NKV * hs) / hs, i = kv % hs;
                for (int h = (int)g * per; h < (int)(g + 1) * per; h++)
                    ref += dm[r * 3 * C + (part + 1) * C + (size_t)h * hs + i];
            }
            cr_assert(fabs(dg[r * W + j] - ref) < 1e-5, "dqkv[%zu, %zu]: %g vs %g", r, j, dg[r * W + j], ref);
            cr_assert(fabs(db[r * W + j] - ref) < 1e-5, "backend dqkv[%zu, %zu]: %g vs %g", r, j, db[r * W + j], ref);
        }
    be->destroy(be);
}

Test(exec_kern_llama, embedding_without_position_table)
{
    int tok[3] = {2, 0, 2};
    float *wte = rvec(12, 13, 1.0f), out[12], dwte[12] = {0}, dout[12];
    for (int i = 0; i < 12; i++)
        dout[i] = (float)i;
    kern_embed_fwd(out, tok, wte, NULL, 0, 3, 3, 4);
    for (int i = 0; i < 3; i++)
        for (int c = 0; c < 4; c++)
            cr_assert_eq(out[4 * i + c], wte[4 * tok[i] + c]);
    kern_embed_bwd(dwte, NULL, dout, tok, 0, 3, 3, 4);
    cr_assert_eq(dwte[8], 0.0f + 8.0f);
    cr_assert_eq(dwte[0], 4.0f);
    cr_assert_eq(dwte[4], 0.0f);
}
