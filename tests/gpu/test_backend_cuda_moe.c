/* GPU test: the CUDA backend's MoE routing and dispatch ops (backend.h's
 * moe_*, kernels/moe.cu behind backend_cuda_moe.c) and int_to_host against
 * the CPU backend's (moe_route.h's steps, kern_moe.h) through the same
 * table; then one MoE layer (exec/core/moe.h, one rank, moe_xchg_local(be))
 * forward and backward on each backend from the same seed and inputs.
 *
 * Part 1, the ops: every op of the CUDA backend is fed the CPU backend's
 * results of the steps before it (copied in with to_device /
 * int_to_device), so each check covers one op. Cases mix capacity factors,
 * force balance and logits on a 0.5 grid (exact ties); sizes are not
 * multiples of the launch blocks. Every int result is read back with
 * int_to_host right after its op (which must wait for it). Tolerances (|got - want| <= atol + rtol
 * |want|, gpu_check.h):
 *   indices, keep flags, counts, send order, positions and every pure copy
 *   (gather, scatter, the kept weights, dy = w dout, one product): exact;
 *   top-k weights, combine, router backward: the twin's operations in its
 *   order with the device's expf / exp (CUDA math: expf within 2 ulp, exp
 *   within 1 ulp) and at most k = 8 terms: atol = rtol = 1e-6, as
 *   test_moe_kernels;
 *   combine backward's g = dout . y over C = 40 columns: the device may
 *   contract the products into FMAs (one rounding fewer per term), so the
 *   sums differ by about sqrt(C) ulp of the partial sums (|sum| <= C):
 *   atol = rtol = 1e-5 (a wrong row or column gives O(1)).
 *
 * Part 2, the layer: the router's weights and the inputs are made
 * representable in bf16 so that the router GEMM (cugemm's bf16 inputs,
 * fp32 accumulation) gives the CPU's logits up to the accumulation order
 * (~1e-7 relative): both backends then route alike (checked exactly: rows
 * per expert and dropped assignments), and what remains is the expert
 * GEMMs' bf16 rounding of the weights (2^-9 relative each). Relative norm
 * error ||got - want|| / ||want||: out within 1e-2, dx and the gradients
 * within 3e-2 (test_backend_cuda's bounds for a stage; a wrong permutation
 * gives O(1)); the auxiliary loss within 1e-4 relative (a sum of n E
 * softmax terms in fp32 in either order: n E 2^-24 ~ 3e-5); the weights
 * exported before any step exactly (one host generator, copied). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/core/backend.h"
#include "exec/core/moe.h"
#include "exec/core/moe_route.h"
#include "exec/cpu/backend_cpu.h"
#include "exec/cuda/backend_cuda.h"
#include "tests/gpu/gpu_check.h"

#define TOL_EXP 1e-6 /* expf / exp-based floats */
#define TOL_DOT 1e-5 /* the C-term dot product of the combine backward */
#define TOL_OUT 1e-2 /* layer output, relative norm */
#define TOL_GRD 3e-2 /* layer dx and gradients, relative norm */
#define TOL_AUX 1e-4 /* auxiliary loss, relative */

static backend *CPU, *GPU;

/* A float or int tensor on both backends. */
typedef struct {
    float *c, *g;
    size_t n;
} fpair;
typedef struct {
    int *c, *g;
    size_t n;
} ipair;

static fpair fmk(size_t n)
{
    fpair p = {CPU->alloc(CPU, n), GPU->alloc(GPU, n), n};
    return p;
}

/* Random contents, the same on both. */
static fpair frand(size_t n, uint32_t seed, float scale)
{
    fpair p = fmk(n);
    float *h = gc_rand(n, seed, scale);
    CPU->to_device(CPU, p.c, h, n);
    GPU->to_device(GPU, p.g, h, n);
    free(h);
    return p;
}

static ipair imk(size_t n)
{
    ipair p = {CPU->alloc_int(CPU, n), GPU->alloc_int(GPU, n), n};
    return p;
}

/* The CPU's contents copied to the GPU's tensor (the input of the op under test). */
static void ifeed(ipair *p)
{
    GPU->int_to_device(GPU, p->g, p->c, p->n);
}

static void ffeed(fpair *p)
{
    GPU->to_device(GPU, p->g, p->c, p->n);
}

static void frm(fpair *p)
{
    CPU->free(CPU, p->c);
    GPU->free(GPU, p->g);
}

static void irm(ipair *p)
{
    CPU->free_int(CPU, p->c);
    GPU->free_int(GPU, p->g);
}

static void status_check(const char *what)
{
    ts_err e = {0};
    gc_result(backend_cuda_status(GPU, &e) == TS_OK, what, e.msg);
}

/* The first n elements, exact. */
static void isame(const char *what, const ipair *p, size_t n)
{
    int *h = malloc((n ? n : 1) * sizeof *h);
    GPU->int_to_host(GPU, h, p->g, n);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (h[i] != p->c[i] && bad++ == 0)
            first = i;
    char msg[128];
    if (bad)
        snprintf(msg, sizeof msg, "n=%zu, %zu differ (exact), first [%zu] got %d want %d", n, bad, first, h[first],
                 p->c[first]);
    else
        snprintf(msg, sizeof msg, "n=%zu (exact)", n);
    gc_result(bad == 0, what, msg);
    free(h);
}

static void fclose_(const char *what, const fpair *p, size_t n, double atol, double rtol)
{
    float *h = malloc((n ? n : 1) * sizeof *h);
    GPU->to_host(GPU, h, p->g, n);
    gc_close(what, h, p->c, n, atol, rtol);
    free(h);
}

static double rel_norm(const float *got, const float *want, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
        den += (double)want[i] * want[i];
    }
    return den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
}

static void norm_check(const char *what, const float *got, const float *want, size_t n, double lim)
{
    double r = rel_norm(got, want, n);
    char msg[96];
    snprintf(msg, sizeof msg, "n=%zu, relative norm error %.3g (allowed %.1e)", n, r, lim);
    gc_result(r <= lim, what, msg);
}

/* ------------------------------------------------------------ part 1: the ops */

static void ops_case(size_t N, int E, int k, double cf, bool fb, bool grid)
{
    const int C = 40;
    size_t nk = N * (size_t)k;
    moe_route_cfg rc = {E, k, cf, fb};
    size_t cap = moe_route_capacity(&rc, N);
    char what[160], tag[96];
    snprintf(tag, sizeof tag, "N %zu E %d k %d cf %g%s%s", N, E, k, cf, fb ? " balance" : "", grid ? " ties" : "");

    fpair lg = fmk(N * (size_t)E);
    float *h = gc_rand(lg.n, (uint32_t)(N + 7 * (size_t)E + (size_t)k), 1.0f);
    for (size_t i = 0; grid && i < lg.n; i++)
        h[i] = roundf(h[i] * 2.0f) / 2.0f;
    CPU->to_device(CPU, lg.c, h, lg.n);
    GPU->to_device(GPU, lg.g, h, lg.n);
    free(h);

    /* top-k */
    ipair idx = imk(nk);
    fpair wts = fmk(nk);
    CPU->moe_topk(CPU, idx.c, wts.c, lg.c, N, E, k, fb);
    GPU->moe_topk(GPU, idx.g, wts.g, lg.g, N, E, k, fb);
    snprintf(what, sizeof what, "moe_topk experts, %s", tag);
    isame(what, &idx, nk);
    snprintf(what, sizeof what, "moe_topk weights, %s", tag);
    fclose_(what, &wts, nk, TOL_EXP, TOL_EXP);
    ifeed(&idx);
    ffeed(&wts);

    /* capacity: apart, then in place (wkept = wts, through the order scratch) */
    ipair keep = imk(nk), keep2 = imk(nk), order = imk(nk);
    fpair wk = fmk(nk), w2 = fmk(nk);
    CPU->moe_keep(CPU, keep.c, wk.c, idx.c, wts.c, nk, cap, order.c);
    GPU->moe_keep(GPU, keep.g, wk.g, idx.g, wts.g, nk, cap, order.g);
    CPU->copy(CPU, w2.c, wts.c, nk);
    GPU->copy(GPU, w2.g, wts.g, nk);
    CPU->moe_keep(CPU, keep2.c, w2.c, idx.c, w2.c, nk, cap, order.c);
    GPU->moe_keep(GPU, keep2.g, w2.g, idx.g, w2.g, nk, cap, order.g);
    snprintf(what, sizeof what, "moe_keep flags, %s, capacity %zu", tag, cap);
    isame(what, &keep, nk);
    snprintf(what, sizeof what, "moe_keep weights, %s", tag);
    fclose_(what, &wk, nk, 0.0, 0.0);
    snprintf(what, sizeof what, "moe_keep in place (wkept = wts) flags, %s", tag);
    isame(what, &keep2, nk);
    snprintf(what, sizeof what, "moe_keep in place weights, %s", tag);
    fclose_(what, &w2, nk, 0.0, 0.0);
    ifeed(&keep);
    ffeed(&wk);

    /* counts, send order */
    ipair cnt = imk((size_t)E), slot = imk(nk), pos = imk(nk);
    CPU->moe_counts(CPU, cnt.c, idx.c, keep.c, nk, E);
    GPU->moe_counts(GPU, cnt.g, idx.g, keep.g, nk, E);
    snprintf(what, sizeof what, "moe_counts, %s", tag);
    isame(what, &cnt, (size_t)E);
    size_t ns = 0;
    for (int e = 0; e < E; e++)
        ns += (size_t)cnt.c[e];
    CPU->moe_send_order(CPU, slot.c, pos.c, idx.c, keep.c, nk, E);
    GPU->moe_send_order(GPU, slot.g, pos.g, idx.g, keep.g, nk, E);
    snprintf(what, sizeof what, "moe_send_order slots (%zu sent), %s", ns, tag);
    isame(what, &slot, ns);
    snprintf(what, sizeof what, "moe_send_order positions, %s", tag);
    isame(what, &pos, nk);
    ifeed(&slot);
    ifeed(&pos);

    /* permutes: gather by send slot (div k), scatter by a permutation of the sent rows */
    fpair x = frand(N * (size_t)C, 3, 1.0f), xs = fmk(ns * (size_t)C);
    CPU->moe_gather(CPU, xs.c, x.c, slot.c, ns, k, C);
    GPU->moe_gather(GPU, xs.g, x.g, slot.g, ns, k, C);
    snprintf(what, sizeof what, "moe_gather by send slot, %s", tag);
    fclose_(what, &xs, xs.n, 0.0, 0.0);
    ipair perm = imk(ns);
    for (size_t r = 0; r < ns; r++)
        perm.c[r] = (int)r;
    uint64_t s = 12345u + ns;
    for (size_t r = ns; r > 1; r--) { /* Fisher-Yates */
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        size_t j = (size_t)(s >> 33) % r;
        int t = perm.c[r - 1];
        perm.c[r - 1] = perm.c[j];
        perm.c[j] = t;
    }
    ifeed(&perm);
    fpair sc = fmk(ns * (size_t)C);
    CPU->moe_scatter(CPU, sc.c, xs.c, perm.c, ns, C);
    GPU->moe_scatter(GPU, sc.g, xs.g, perm.g, ns, C);
    snprintf(what, sizeof what, "moe_scatter by a permutation, %s", tag);
    fclose_(what, &sc, sc.n, 0.0, 0.0);

    /* combine (weighted, and weight 1) and its backward */
    fpair y = frand(ns * (size_t)C, 5, 1.0f), out = fmk(N * (size_t)C), out1 = fmk(N * (size_t)C);
    CPU->moe_combine(CPU, out.c, y.c, wk.c, idx.c, pos.c, N, k, C);
    GPU->moe_combine(GPU, out.g, y.g, wk.g, idx.g, pos.g, N, k, C);
    CPU->moe_combine(CPU, out1.c, y.c, NULL, idx.c, pos.c, N, k, C);
    GPU->moe_combine(GPU, out1.g, y.g, NULL, idx.g, pos.g, N, k, C);
    snprintf(what, sizeof what, "moe_combine, %s", tag);
    fclose_(what, &out, out.n, TOL_EXP, TOL_EXP);
    snprintf(what, sizeof what, "moe_combine weight 1, %s", tag);
    fclose_(what, &out1, out1.n, TOL_EXP, TOL_EXP);
    fpair dout = frand(N * (size_t)C, 9, 1.0f), dy = fmk(ns * (size_t)C), g = fmk(nk);
    CPU->moe_combine_bwd(CPU, dy.c, g.c, dout.c, y.c, wk.c, slot.c, ns, k, C);
    GPU->moe_combine_bwd(GPU, dy.g, g.g, dout.g, y.g, wk.g, slot.g, ns, k, C);
    snprintf(what, sizeof what, "moe_combine_bwd dy, %s", tag);
    fclose_(what, &dy, dy.n, 0.0, 0.0);
    snprintf(what, sizeof what, "moe_combine_bwd g, %s", tag);
    fclose_(what, &g, nk, TOL_DOT, TOL_DOT);
    ffeed(&g);

    /* router backward */
    fpair dl = fmk(N * (size_t)E);
    CPU->moe_router_bwd(CPU, dl.c, lg.c, idx.c, keep.c, g.c, N, E, k);
    GPU->moe_router_bwd(GPU, dl.g, lg.g, idx.g, keep.g, g.g, N, E, k);
    snprintf(what, sizeof what, "moe_router_bwd, %s", tag);
    fclose_(what, &dl, dl.n, TOL_EXP, TOL_EXP);
    snprintf(what, sizeof what, "backend status after the MoE ops, %s", tag);
    status_check(what);

    fpair *fs[] = {&lg, &wts, &wk, &w2, &x, &xs, &sc, &y, &out, &out1, &dout, &dy, &g, &dl};
    for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++)
        frm(fs[i]);
    ipair *is[] = {&idx, &keep, &keep2, &order, &cnt, &slot, &pos, &perm};
    for (size_t i = 0; i < sizeof is / sizeof is[0]; i++)
        irm(is[i]);
}

/* ------------------------------------------------------------ part 2: a layer */

/* Forward and backward of one layer of the given routing on backend be;
 * out, dx and the exported weights (before the step) and gradients go to
 * the host arrays; stats[E + 1]: rows per expert, then dropped. */
typedef struct {
    float *out, *dx, *w0, *grads;
    int *stats;
    double aux;
} layer_run;

static int run_layer(backend *be, const moe_route_cfg *rc, int C, int F, bool swiglu, double aux_coeff,
                     const float *x_h, const float *wr_h, const float *dout_h, size_t n, layer_run *r, ts_err *err)
{
    moe_layer *L = NULL;
    moe_saved *sv = NULL;
    moe_xchg xc = moe_xchg_local(be);
    float *x = be->alloc(be, n * (size_t)C), *out = be->alloc(be, n * (size_t)C);
    float *dout = be->alloc(be, n * (size_t)C), *dx = be->alloc(be, n * (size_t)C);
    int rc_ = (x && out && dout && dx) ? TS_OK : err_set(err, TS_ENOMEM, "test tensors on %s", be->name);
    if (!rc_)
        rc_ = moe_layer_create(rc, C, F, swiglu, 1, 0, 20240611u, be, &L, err);
    if (!rc_) {
        moe_layer_export(L, false, true, r->w0);
        L->aux_coeff = aux_coeff;
        be->to_device(be, L->wr, wr_h, (size_t)rc->num_experts * (size_t)C); /* bf16-exact router */
        be->to_device(be, x, x_h, n * (size_t)C);
        be->to_device(be, dout, dout_h, n * (size_t)C);
        rc_ = moe_forward(L, &xc, x, n, out, &sv, err);
    }
    if (!rc_)
        rc_ = moe_backward(L, &xc, sv, dout, dx, err);
    if (!rc_) {
        be->to_host(be, r->out, out, n * (size_t)C);
        be->to_host(be, r->dx, dx, n * (size_t)C);
        moe_layer_export(L, true, true, r->grads);
        for (int e = 0; e < L->El; e++)
            r->stats[e] = L->tok_per_expert[e];
        r->stats[L->El] = (int)L->dropped;
        r->aux = L->aux_loss;
    }
    moe_saved_free(sv);
    moe_layer_free(L);
    be->free(be, x);
    be->free(be, out);
    be->free(be, dout);
    be->free(be, dx);
    return rc_;
}

static void layer_case(int E, int k, double cf, bool fb, bool swiglu, double aux_coeff)
{
    const int C = 48, F = 40;
    const size_t n = 70;
    moe_route_cfg rc = {E, k, cf, fb};
    char what[160], tag[112];
    snprintf(tag, sizeof tag, "layer n %zu C %d F %d E %d k %d cf %g%s%s aux %g", n, C, F, E, k, cf,
             fb ? " balance" : "", swiglu ? " swiglu" : " gelu", aux_coeff);
    size_t full = moe_full_floats(&rc, C, F, swiglu), nr = (size_t)E * (size_t)C;
    float *x = gc_rand(n * (size_t)C, 21, 1.0f), *dout = gc_rand(n * (size_t)C, 23, 1.0f);
    float *wr = gc_rand(nr, 25, 1.0f / sqrtf((float)C));
    layer_run r[2];
    int rcs[2];
    backend *be[2] = {CPU, GPU};
    ts_err e[2] = {{0}, {0}};
    for (int i = 0; i < 2; i++) {
        r[i].out = calloc(n * (size_t)C, sizeof(float));
        r[i].dx = calloc(n * (size_t)C, sizeof(float));
        r[i].w0 = calloc(full, sizeof(float));
        r[i].grads = calloc(full, sizeof(float));
        r[i].stats = calloc((size_t)E + 1, sizeof(int));
        r[i].aux = 0.0;
        rcs[i] = run_layer(be[i], &rc, C, F, swiglu, aux_coeff, x, wr, dout, n, &r[i], &e[i]);
    }
    snprintf(what, sizeof what, "%s: runs on the CPU backend", tag);
    gc_result(rcs[0] == TS_OK, what, e[0].msg);
    snprintf(what, sizeof what, "%s: runs on the CUDA backend", tag);
    gc_result(rcs[1] == TS_OK, what, e[1].msg);
    snprintf(what, sizeof what, "backend status after the %s", tag);
    status_check(what);
    if (rcs[0] == TS_OK && rcs[1] == TS_OK) {
        snprintf(what, sizeof what, "%s: weights exported (before the step)", tag);
        gc_close(what, r[1].w0, r[0].w0, full, 0.0, 0.0);
        size_t bad = 0;
        for (int i = 0; i <= E; i++)
            bad += r[0].stats[i] != r[1].stats[i];
        char msg[96];
        snprintf(msg, sizeof msg, "%d experts, %d dropped on the CPU (exact)", E, r[0].stats[E]);
        snprintf(what, sizeof what, "%s: same routing (rows per expert, dropped)", tag);
        gc_result(bad == 0, what, msg);
        snprintf(what, sizeof what, "%s: out", tag);
        norm_check(what, r[1].out, r[0].out, n * (size_t)C, TOL_OUT);
        snprintf(what, sizeof what, "%s: dx", tag);
        norm_check(what, r[1].dx, r[0].dx, n * (size_t)C, TOL_GRD);
        snprintf(what, sizeof what, "%s: router gradient", tag);
        norm_check(what, r[1].grads, r[0].grads, nr, TOL_GRD);
        snprintf(what, sizeof what, "%s: expert gradients", tag);
        norm_check(what, r[1].grads + nr, r[0].grads + nr, full - nr, TOL_GRD);
        if (aux_coeff > 0) {
            double d = fabs(r[1].aux - r[0].aux), lim = TOL_AUX * fabs(r[0].aux);
            snprintf(msg, sizeof msg, "got %.9g want %.9g (rtol %.0e)", r[1].aux, r[0].aux, TOL_AUX);
            snprintf(what, sizeof what, "%s: auxiliary loss", tag);
            gc_result(r[0].aux > 0 && d <= lim, what, msg);
        }
    }
    for (int i = 0; i < 2; i++) {
        free(r[i].out);
        free(r[i].dx);
        free(r[i].w0);
        free(r[i].grads);
        free(r[i].stats);
    }
    free(x);
    free(dout);
    free(wr);
}

int main(void)
{
    gpu_check_start("test_backend_cuda_moe");
    ts_err e = {0};
    if (backend_cpu_create(1, &CPU, &e) != TS_OK || backend_cuda_create(0, false, &GPU, &e) != TS_OK) {
        printf("FAIL backend creation: %s\n0 passed, 1 failed\n", e.msg);
        return 1;
    }
    ops_case(64, 8, 2, 1.0, false, false);
    ops_case(61, 8, 2, 0.5, false, true);
    ops_case(257, 16, 4, 1.25, false, false);
    ops_case(33, 4, 4, 0.0, false, true);
    ops_case(64, 8, 2, 1.0, true, false);
    ops_case(100, 64, 8, 1.0, false, true);

    layer_case(8, 2, 0.0, true, false, 0.0);   /* forced balance, dropless: routing independent of the logits */
    layer_case(8, 2, 1.0, false, false, 1e-2); /* top-k with capacity dropping and the auxiliary loss */
    layer_case(4, 2, 0.0, false, true, 0.0);   /* SwiGLU experts */
    GPU->destroy(GPU);
    CPU->destroy(CPU);
    return gpu_check_finish();
}
