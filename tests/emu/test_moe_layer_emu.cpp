/* Host-emulation test of the MoE layer as the CUDA backend runs it: exec/
 * core/moe.c's moe_forward / moe_backward on a backend whose MoE ops
 * (backend.h: top-k, capacity, counts, send order, permutes, combine, its
 * backward, router backward) are kernels/moe.cu's, compiled as host C++
 * against tests/emu/kernels/common.cuh, and whose GEMMs, activations and
 * memory are the CPU backend's; against the same layer on the CPU backend
 * (moe_route.h's steps and kern_moe.h's loops). Only cuBLAS, device memory
 * and the NCCL exchange are not in this test (tests/gpu/ has them).
 *
 * Tolerance: the kernels compute in their twins' order (sums per token in
 * ascending expert order, the router backward in double) with the same
 * libm here: TOL_LAYER 0, bit-identical. Cases: GELU and SwiGLU experts,
 * dropless and capacity 0.5 / 1, force balance, E 4 and 8, k 1, 2 and E,
 * the auxiliary loss on and off; the test requires that some case dropped
 * assignments. */
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

/* ---- the MoE ops of the emulated device: kernels/moe.cu on stream 0 */
static void emu_topk(backend *, int *idx, float *wts, const float *logits, size_t N, int E, int k, bool fb)
{
    cuk_f32_moe_topk(idx, wts, logits, N, E, k, fb, 0);
}
static void emu_keep(backend *, int *keep, float *wkept, const int *idx, const float *wts, size_t nk, size_t cap, int *)
{
    std::vector<char> scratch(cuk_moe_scratch_bytes(nk));
    cuk_f32_moe_capacity(keep, wkept, idx, wts, nk, cap, scratch.data(), 0);
}
static void emu_counts(backend *, int *counts, const int *idx, const int *keep, size_t nk, int E)
{
    cuk_moe_counts(counts, idx, keep, nk, E, 0);
}
static void emu_send_order(backend *, int *slot, int *pos, const int *idx, const int *keep, size_t nk, int)
{
    std::vector<char> scratch(cuk_moe_scratch_bytes(nk));
    cuk_moe_send_order(slot, pos, idx, keep, nk, scratch.data(), 0);
}
static void emu_gather(backend *, float *dst, const float *src, const int *rows, size_t nrows, int div, int C)
{
    cuk_f32_moe_gather(dst, src, rows, nrows, div, C, 0);
}
static void emu_scatter(backend *, float *dst, const float *src, const int *rows, size_t nrows, int C)
{
    cuk_f32_moe_scatter(dst, src, rows, nrows, C, 0);
}
static void emu_combine(backend *, float *out, const float *y, const float *wts, const int *idx, const int *pos,
                        size_t N, int k, int C)
{
    cuk_f32_moe_combine(out, y, wts, idx, pos, N, k, C, 0);
}
static void emu_combine_bwd(backend *, float *dy, float *g, const float *dout, const float *y, const float *wts,
                            const int *slot, size_t nsend, int k, int C)
{
    cuk_f32_moe_combine_bwd(dy, g, dout, y, wts, slot, nsend, k, C, 0);
}
static void emu_router_bwd(backend *, float *dlog, const float *logits, const int *idx, const int *keep,
                           const float *g, size_t N, int E, int k)
{
    cuk_f32_moe_router_bwd(dlog, logits, idx, keep, g, N, E, k, 0);
}

static void use_kernels(backend *be)
{
    be->moe_topk = emu_topk;
    be->moe_keep = emu_keep;
    be->moe_counts = emu_counts;
    be->moe_send_order = emu_send_order;
    be->moe_gather = emu_gather;
    be->moe_scatter = emu_scatter;
    be->moe_combine = emu_combine;
    be->moe_combine_bwd = emu_combine_bwd;
    be->moe_router_bwd = emu_router_bwd;
}

/* One forward and backward of a layer on be; outputs and gradients out. */
static bool run(backend *be, const moe_route_cfg *rc, bool swiglu, double aux, const vec &x, const vec &dout, size_t N,
                vec &out, vec &dx, vec &grads, double &aux_loss, size_t &dropped)
{
    const int C = 12, F = 10;
    moe_layer *L = nullptr;
    moe_saved *s = nullptr;
    ts_err err;
    moe_xchg xc = moe_xchg_local(be);
    bool ok = moe_layer_create(rc, C, F, swiglu, 1, 0, 5, be, &L, &err) == TS_OK;
    if (ok) {
        size_t nr = (size_t)rc->num_experts * C;
        for (size_t i = 0; i < nr; i++) /* spread the logits: distinct choices */
            L->wr[i] *= 4.0f;
        L->aux_coeff = aux;
        out.assign(N * C, 7.0f);
        dx.assign(N * C, 7.0f);
        ok = moe_forward(L, &xc, x.data(), N, out.data(), &s, &err) == TS_OK &&
             moe_backward(L, &xc, s, dout.data(), dx.data(), &err) == TS_OK;
    }
    if (!ok)
        std::printf("FAIL layer on the %s backend: %s\n", be->name, err.msg);
    else {
        grads.assign(moe_full_floats(rc, C, F, swiglu), 0.0f);
        moe_layer_export(L, true, true, grads.data());
        aux_loss = L->aux_loss;
        dropped = L->dropped;
    }
    moe_saved_free(s);
    moe_layer_free(L);
    return ok;
}

static void one_case(backend *cpu, backend *emu, int E, int k, double cf, bool fb, bool swiglu, double aux)
{
    const int C = 12;
    const size_t N = 29;
    moe_route_cfg rc = {E, k, cf, fb};
    vec x = rnd(N * C, 11 + (unsigned)E * 3 + (unsigned)k, 1.0f), dout = rnd(N * C, 21, 1.0f);
    vec o1, o2, d1, d2, g1, g2;
    double a1 = 0, a2 = 0;
    size_t dr1 = 0, dr2 = 0;
    if (!run(cpu, &rc, swiglu, aux, x, dout, N, o1, d1, g1, a1, dr1) ||
        !run(emu, &rc, swiglu, aux, x, dout, N, o2, d2, g2, a2, dr2)) {
        fails++;
        return;
    }
    total_dropped += dr1;
    char what[160], tag[96];
    std::snprintf(tag, sizeof tag, "%s E %d k %d cf %g%s%s", swiglu ? "swiglu" : "gelu", E, k, cf,
                  fb ? " balance" : "", aux > 0 ? " aux" : "");
    std::snprintf(what, sizeof what, "%s: out", tag);
    check(what, o2.data(), o1.data(), o1.size());
    std::snprintf(what, sizeof what, "%s: dx", tag);
    check(what, d2.data(), d1.data(), d1.size());
    std::snprintf(what, sizeof what, "%s: gradients (router, W1, W2)", tag);
    check(what, g2.data(), g1.data(), g1.size());
    bool same = a1 == a2 && dr1 == dr2;
    same ? passes++ : fails++;
    std::printf("%s %s: aux loss %.17g vs %.17g, dropped %zu vs %zu\n", same ? "PASS" : "FAIL", tag, a2, a1, dr2, dr1);
}

int main(void)
{
    backend *cpu = nullptr, *emu = nullptr;
    ts_err err;
    if (backend_cpu_create(1, &cpu, &err) || backend_cpu_create(1, &emu, &err)) {
        std::printf("FAIL cpu backend: %s\n0 passed, 1 failed\n", err.msg);
        return 1;
    }
    use_kernels(emu);
    const int ek[][2] = {{4, 1}, {4, 2}, {8, 2}, {4, 4}};
    for (bool swiglu : {false, true})
        for (const auto &p : ek)
            for (double cf : {0.0, 0.5, 1.0})
                for (bool fb : {false, true})
                    one_case(cpu, emu, p[0], p[1], cf, fb, swiglu, 0.0);
    one_case(cpu, emu, 8, 2, 1.0, false, true, 1e-2);
    one_case(cpu, emu, 4, 2, 0.0, false, false, 1e-2);
    bool dropped = total_dropped > 0;
    dropped ? passes++ : fails++;
    std::printf("%s capacity drops exercised: %zu assignments dropped\n", dropped ? "PASS" : "FAIL", total_dropped);
    cpu->destroy(cpu);
    emu->destroy(emu);
    std::printf("%d passed, %d failed\n", passes, fails);
    return fails ? 1 : 0;
}
