/* Unit test of the executor's MoE layer (exec/core/moe.h) on one rank: the
 * backward (router, experts, input) against central finite differences of
 * L = sum(R . out) (+ the auxiliary load-balancing loss, coefficient 0.5, in
 * one case) for a fixed random R, dropless and with capacity dropping, with
 * GELU experts and (with capacity) SwiGLU experts.
 *
 * Tolerance: L sums 96 fp32 products of magnitude <= ~1, rounding to ~1e-6
 * absolute; with h = 2e-3 the central difference carries ~1e-6 / 4e-3 =
 * 2.5e-4 of noise plus O(h^2) curvature terms (GELU and softmax: second
 * derivatives O(1): ~4e-6 |g|). Accepted |g - fd| <= 1e-3 + 2e-2 |fd|.
 * Routing is piecewise constant: a step that swaps two experts makes the
 * difference jump (measured: errors of 0.4 at h = 1e-2), so the router is
 * scaled up and the smallest gap between a token's logits is checked to be
 * above 5x the largest change a step can make. A missing or wrong term moves
 * gradients by O(|g|) ~ 1e-1.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "exec/core/moe.h"
#include "exec/cpu/backend_cpu.h"

#define NT 12
#define CC 8
#define FF 6

static float lcg(unsigned *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 65536.0f * 2.0f - 1.0f;
}

static double loss(moe_layer *L, const float *x, const float *R)
{
    moe_xchg xc = moe_xchg_local(L->be);
    float out[NT * CC];
    moe_saved *s = NULL;
    ts_err e;
    cr_assert_eq(moe_forward(L, &xc, x, NT, out, &s, &e), TS_OK, "%s", e.msg);
    moe_saved_free(s);
    double l = L->aux_loss;
    for (int i = 0; i < NT * CC; i++)
        l += (double)R[i] * out[i];
    return l;
}

static void fd_check(double cf, double aux, bool swiglu)
{
    backend *be = NULL;
    ts_err e;
    cr_assert_eq(backend_cpu_create(1, &be, &e), TS_OK);
    moe_route_cfg rc = {.num_experts = 4, .topk = 2, .capacity_factor = cf};
    moe_layer *L = NULL;
    cr_assert_eq(moe_layer_create(&rc, CC, FF, swiglu, 1, 0, 3, be, &L, &e), TS_OK, "%s", e.msg);
    L->aux_coeff = aux;
    float x[NT * CC], R[NT * CC], out[NT * CC], dx[NT * CC];
    unsigned s = 77;
    for (int i = 0; i < NT * CC; i++) {
        x[i] = lcg(&s);
        R[i] = lcg(&s);
    }
    /* router scaled up so that every token's k-th and (k+1)-th logits are
     * far apart (checked below) */
    for (int i = 0; i < 4 * CC; i++)
        L->wr[i] *= 8.0f;
    double gap = 1e30;
    for (int t = 0; t < NT; t++) {
        float lg[4];
        for (int ex = 0; ex < 4; ex++) {
            lg[ex] = 0.0f;
            for (int c = 0; c < CC; c++)
                lg[ex] += x[t * CC + c] * L->wr[ex * CC + c];
        }
        for (int a = 0; a < 4; a++)
            for (int b = a + 1; b < 4; b++)
                gap = fmin(gap, fabs((double)lg[a] - lg[b]));
    }
    moe_xchg xc = moe_xchg_local(L->be);
    moe_saved *sv = NULL;
    cr_assert_eq(moe_forward(L, &xc, x, NT, out, &sv, &e), TS_OK);
    cr_assert_eq(moe_backward(L, &xc, sv, R, dx, &e), TS_OK);
    moe_saved_free(sv);
    if (aux > 0) /* closed form bound: aux >= coeff (equality at perfect balance) */
        cr_assert_geq(L->aux_loss, aux * (1.0 - 1e-6), "aux loss %g below its minimum %g", L->aux_loss, aux);
    if (cf > 0)
        cr_assert_gt(L->dropped, 0, "capacity %g dropped nothing: the test would not cover dropping", cf);
    const float h = 2e-3f;
    /* a step moves a logit by at most h * max|x| (router element) or
     * h * max|wr| * 1 (input element); keep every decision 10x away */
    float mx = 0.0f;
    for (int i = 0; i < 4 * CC; i++)
        mx = fmaxf(mx, fabsf(L->wr[i]));
    double step = (double)(h * fmaxf(mx, 1.0f));
    cr_assert_gt(gap, 5.0 * step, "logit gap %g too close to a step's change %g: finite differences would jump", gap,
                 step);

    struct {
        float *w, *g;
        size_t n;
    } P[4] = {{L->wr, L->gwr, 4 * CC},
              {L->w1, L->gw1, (size_t)4 * L->Fu * CC},
              {L->w2, L->gw2, 4 * CC * FF},
              {x, dx, NT * CC}};
    int checked = 0;
    double worst = 0.0;
    for (int p = 0; p < 4; p++)
        for (size_t i = 0; i < P[p].n; i++) {
            float w0 = P[p].w[i];
            P[p].w[i] = w0 + h;
            double lp = loss(L, x, R);
            P[p].w[i] = w0 - h;
            double lm = loss(L, x, R);
            P[p].w[i] = w0;
            double fd = (lp - lm) / (2.0 * h), g = P[p].g[i], d = fabs(g - fd);
            worst = fmax(worst, d);
            cr_expect(d <= 1e-3 + 2e-2 * fabs(fd), "tensor %d elem %zu: grad %g fd %g", p, i, g, fd);
            checked++;
        }
    cr_log_info("capacity %g%s: %d gradients checked, worst |g - fd| %.2e, dropped %zu", cf, swiglu ? " swiglu" : "",
                checked, worst, L->dropped);
    moe_layer_free(L);
    be->destroy(be);
}

Test(exec_moe, backward_matches_finite_differences_dropless)
{
    fd_check(0.0, 0.0, false);
}

Test(exec_moe, backward_matches_finite_differences_capacity)
{
    fd_check(1.0, 0.0, false);
}

Test(exec_moe, backward_matches_finite_differences_aux_loss)
{
    fd_check(0.0, 0.5, false);
}

Test(exec_moe, backward_matches_finite_differences_swiglu_experts)
{
    fd_check(1.0, 0.0, true);
}
