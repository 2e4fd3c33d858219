/* Host-emulation test that kernels/moe.cu composes to the MoE layer: one
 * expert-parallel rank's forward and backward built the way a CUDA layer
 * would run them (router GEMM, cuk top-k, capacity, counts to the host, send
 * order, gather, per-expert GEMMs and activation on the counted segments,
 * combine; backward: combine backward, expert GEMMs, unweighted combine for
 * dx, router backward, router GEMMs), with the kernels compiled as host C++
 * (tests/emu/kernels/common.cuh) and the GEMMs and activations of the CPU
 * backend, against exec/core/moe.c's moe_forward / moe_backward on the same
 * backend and weights (one rank: the exchange is the identity, the received
 * order is the send order).
 *
 * Tolerance: the composition performs the twin's operations in the twin's
 * order (the same GEMM calls on the same segments, sums per token in
 * ascending expert order, the router backward in double): TOL_LAYER 0,
 * bit-identical. Cases: GELU and SwiGLU experts, dropless and capacity 0.5 /
 * 1, force balance, E 4 and 8, k 1, 2 and E; the test requires that some
 * case dropped assignments. */
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "kernels/cuk.h"

extern "C" {
#include "exec/core/moe.h"
#include "exec/cpu/backend_cpu.h"
}

#define TOL_LAYER 0.0

typedef std::vector<float> vec;

static int passes, fails;
static size_t total_dropped;

static vec rnd(size_t n, unsigned s, float scale)
{
    vec v(n);
    for (auto &x : v) {
        s = s * 1664525u + 1013904223u;
        x = scale * ((float)((s >> 8) & 0xffff) / 32768.0f - 1.0f);
    }
    return v;
}

static void check(const char *what, const float *got, const float *want, size_t n)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = std::fabs((double)got[i] - want[i]);
        worst = std::isnan(d) ? INFINITY : std::fmax(worst, d);
    }
    bool ok = worst <= TOL_LAYER;
    ok ? passes++ : fails++;
    std::printf("%s %s: worst %.3g (limit %.0e, n %zu)\n", ok ? "PASS" : "FAIL", what, worst, TOL_LAYER, n);
}

/* The layer composed from the kernels, gradients added into C's. */
static void composed(moe_layer *L, const float *x, size_t N, const float *dout, float *out, float *dx)
{
    backend *be = L->be;
    int E = L->rc.num_experts, k = L->rc.topk, C = L->C, F = L->F, Fu = L->Fu;
    size_t nk = N * (size_t)k;
    vec logits(N * E), wts(nk), wk(nk), g(nk, 0.0f), dlog(N * E);
    std::vector<int> idx(nk), keep(nk), counts(E);
    std::vector<int> slot(nk), pos(nk);
    be->gemm(be, false, true, (int)N, E, C, 1.0f, x, C, L->wr, C, 0.0f, logits.data(), E);
    cuk_f32_moe_topk(idx.data(), wts.data(), logits.data(), N, E, k, L->rc.force_balance, 0);
    cuk_f32_moe_capacity(keep.data(), wk.data(), idx.data(), wts.data(), nk, moe_route_capacity(&L->rc, N), 0);
    cuk_moe_counts(counts.data(), idx.data(), keep.data(), nk, E, 0);
    cuk_moe_send_order(slot.data(), pos.data(), idx.data(), keep.data(), nk, 0);
    std::vector<size_t> off(E + 1, 0); /* the counts on the host size the segments */
    for (int e = 0; e < E; e++)
        off[e + 1] = off[e] + (size_t)counts[e];
    size_t ns = off[E];
    vec xe(ns * C + 1), he(ns * Fu + 1), ae(ns * F + 1), ye(ns * C + 1), dy(ns * C + 1), dA(ns * F + 1),
        dh(ns * Fu + 1), dxe(ns * C + 1);
    cuk_f32_moe_gather(xe.data(), x, slot.data(), ns, k, C, 0);
    for (int e = 0; e < E; e++) {
        size_t a = off[e], m = off[e + 1] - a;
        if (!m)
            continue;
        const float *w1 = L->w1 + (size_t)e * Fu * C, *w2 = L->w2 + (size_t)e * C * F;
        be->gemm(be, false, true, (int)m, Fu, C, 1.0f, &xe[a * C], C, w1, C, 0.0f, &he[a * Fu], Fu);
        if (L->swiglu)
            be->swiglu_fwd(be, &ae[a * F], &he[a * Fu], m, F);
        else
            be->gelu_fwd(be, &ae[a * F], &he[a * F], m * (size_t)F);
        be->gemm(be, false, true, (int)m, C, F, 1.0f, &ae[a * F], F, w2, F, 0.0f, &ye[a * C], C);
    }
    cuk_f32_moe_combine(out, ye.data(), wk.data(), idx.data(), pos.data(), N, k, C, 0);
    /* backward */
    cuk_f32_moe_combine_bwd(dy.data(), g.data(), dout, ye.data(), wk.data(), slot.data(), ns, k, C, 0);
    for (int e = 0; e < E; e++) {
        size_t a = off[e], m = off[e + 1] - a;
        if (!m)
            continue;
        const float *w1 = L->w1 + (size_t)e * Fu * C, *w2 = L->w2 + (size_t)e * C * F;
        float *gw1 = L->gw1 + (size_t)e * Fu * C, *gw2 = L->gw2 + (size_t)e * C * F;
        be->gemm(be, true, false, C, F, (int)m, 1.0f, &dy[a * C], C, &ae[a * F], F, 1.0f, gw2, F);
        be->gemm(be, false, false, (int)m, F, C, 1.0f, &dy[a * C], C, w2, F, 0.0f, &dA[a * F], F);
        if (L->swiglu)
            be->swiglu_bwd(be, &dh[a * Fu], &he[a * Fu], &dA[a * F], m, F);
        else
            be->gelu_bwd(be, &dh[a * F], &he[a * F], &dA[a * F], m * (size_t)F);
        be->gemm(be, true, false, Fu, C, (int)m, 1.0f, &dh[a * Fu], Fu, &xe[a * C], C, 1.0f, gw1, C);
        be->gemm(be, false, false, (int)m, C, Fu, 1.0f, &dh[a * Fu], Fu, w1, C, 0.0f, &dxe[a * C], C);
    }
    cuk_f32_moe_combine(dx, dxe.data(), nullptr, idx.data(), pos.data(), N, k, C, 0);
    cuk_f32_moe_router_bwd(dlog.data(), logits.data(), idx.data(), keep.data(), g.data(), N, E, k, 0);
    be->gemm(be, true, false, E, C, (int)N, 1.0f, dlog.data(), E, x, C, 1.0f, L->gwr, C);
    be->gemm(be, false, false, (int)N, C, E, 1.0f, dlog.data(), E, L->wr, C, 1.0f, dx, C);
}

static void one_case(backend *be, int E, int k, double cf, bool fb, bool swiglu)
{
    const int C = 12, F = 10;
    const size_t N = 29;
    moe_route_cfg rc = {E, k, cf, fb};
    moe_layer *A = nullptr, *B = nullptr;
    ts_err err;
    if (moe_layer_create(&rc, C, F, swiglu, 1, 0, 5, be, &A, &err) ||
        moe_layer_create(&rc, C, F, swiglu, 1, 0, 5, be, &B, &err)) {
        std::printf("FAIL layer: %s\n", err.msg);
        fails++;
        moe_layer_free(A);
        return;
    }
    for (size_t i = 0; i < (size_t)E * C; i++) /* spread the logits: distinct choices */
        A->wr[i] = B->wr[i] = A->wr[i] * 4.0f;
    vec x = rnd(N * C, 11 + (unsigned)E * 3 + (unsigned)k, 1.0f), dout = rnd(N * C, 21, 1.0f);
    vec o1(N * C), o2(N * C, 7.0f), d1(N * C), d2(N * C, 7.0f);
    moe_xchg xc = moe_xchg_local();
    moe_saved *s = nullptr;
    if (moe_forward(A, &xc, x.data(), N, o1.data(), &s, &err) ||
        moe_backward(A, &xc, s, dout.data(), d1.data(), &err)) {
        std::printf("FAIL moe_forward/backward: %s\n", err.msg);
        fails++;
    }
    moe_saved_free(s);
    total_dropped += A->dropped;
    composed(B, x.data(), N, dout.data(), o2.data(), d2.data());
    char what[128];
    const char *tag = swiglu ? "swiglu" : "gelu";
    size_t ne1 = (size_t)E * A->Fu * C, ne2 = (size_t)E * C * F;
    std::snprintf(what, sizeof what, "%s E %d k %d cf %g%s: out", tag, E, k, cf, fb ? " balance" : "");
    check(what, o2.data(), o1.data(), N * C);
    std::snprintf(what, sizeof what, "%s E %d k %d cf %g%s: dx", tag, E, k, cf, fb ? " balance" : "");
    check(what, d2.data(), d1.data(), N * C);
    std::snprintf(what, sizeof what, "%s E %d k %d cf %g%s: router grad", tag, E, k, cf, fb ? " balance" : "");
    check(what, B->gwr, A->gwr, (size_t)E * C);
    std::snprintf(what, sizeof what, "%s E %d k %d cf %g%s: W1 grad", tag, E, k, cf, fb ? " balance" : "");
    check(what, B->gw1, A->gw1, ne1);
    std::snprintf(what, sizeof what, "%s E %d k %d cf %g%s: W2 grad", tag, E, k, cf, fb ? " balance" : "");
    check(what, B->gw2, A->gw2, ne2);
    moe_layer_free(A);
    moe_layer_free(B);
}

int main(void)
{
    backend *be = nullptr;
    ts_err err;
    if (backend_cpu_create(1, &be, &err)) {
        std::printf("FAIL cpu backend: %s\n0 passed, 1 failed\n", err.msg);
        return 1;
    }
    const int ek[][2] = {{4, 1}, {4, 2}, {8, 2}, {4, 4}};
    for (bool swiglu : {false, true})
        for (const auto &p : ek)
            for (double cf : {0.0, 0.5, 1.0})
                for (bool fb : {false, true})
                    one_case(be, p[0], p[1], cf, fb, swiglu);
    bool dropped = total_dropped > 0;
    dropped ? passes++ : fails++;
    std::printf("%s capacity drops exercised: %zu assignments dropped\n", dropped ? "PASS" : "FAIL", total_dropped);
    be->destroy(be);
    std::printf("%d passed, %d failed\n", passes, fails);
    return fails ? 1 : 0;
}
