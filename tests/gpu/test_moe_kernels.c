/* GPU test: the MoE routing and dispatch kernels of kernels/moe.cu (cuk.h,
 * "MoE routing and dispatch") on a device against their CPU twins:
 * exec/core/moe_route.c's moe_route and moe_route_send_order and
 * exec/cpu/kern_moe.c's row permutes, combine and backward (the CPU
 * backend's MoE ops, as tests/emu/test_moe_emu.cpp uses them). Each kernel is fed the
 * twin's inputs (the routing of moe_route, its undropped weights for the
 * capacity kernel), so each check covers one kernel. Cases mix capacity
 * factors, force balance, and logits on a 0.5 grid (exact ties); two are
 * micro-batch sized (N 8192, k 8, E 64 and 256: 65,536 assignments, the
 * capacity and send-order sorts over many blocks, thousands dropped).
 *
 * Tolerances: indices, keep flags, counts, send order and pure copies
 * exact; the weights, combine and router backward are the twin's operations
 * in its order with the device's expf/exp (CUDA math: expf within 2 ulp,
 * exp within 1 ulp), summed over at most k = 8 terms: atol = rtol = 1e-6.
 * tests/emu/test_moe_emu.cpp checks the same bodies bit-exact on the CPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/core/moe_route.h"
#include "exec/cpu/kern_moe.h"
#include "kernels/cuk.h"
#include "tests/gpu/gpu_check.h"

#define TOL 1e-6

/* Every launch and copy after a failure is skipped (st keeps the first
 * error), so one path releases everything. */
#define RUN(expr)                                                                                                      \
    do {                                                                                                               \
        if (st == cudaSuccess)                                                                                         \
            st = (expr);                                                                                               \
    } while (0)

static cudaStream_t S;

static void *dev_copy(const void *h, size_t bytes)
{
    void *d = NULL;
    if (cudaMalloc(&d, bytes ? bytes : 1) != cudaSuccess)
        return NULL;
    if (bytes)
        cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
    return d;
}

static void *host_copy(const void *d, size_t bytes)
{
    void *h = calloc(1, bytes ? bytes : 1);
    if (bytes)
        cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost);
    return h;
}

static void same_ints(const char *what, const int *got, const int *want, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += got[i] != want[i];
    char msg[64];
    snprintf(msg, sizeof msg, "n=%zu, %zu differ (exact)", n, bad);
    gc_result(bad == 0, what, msg);
}

static void one_case(size_t N, int E, int k, double cf, bool fb, bool grid, int C)
{
    size_t nk = N * (size_t)k;
    moe_route_cfg rc = {E, k, cf, fb}, rc0 = {E, k, 0.0, fb};
    char what[128], tag[80];
    snprintf(tag, sizeof tag, "N %zu E %d k %d cf %g%s%s", N, E, k, cf, fb ? " balance" : "", grid ? " ties" : "");
    cudaError_t st = cudaSuccess;
    float *lg = gc_rand(N * (size_t)E, (uint32_t)(N + 7 * E + k), 1.0f);
    for (size_t i = 0; grid && i < N * (size_t)E; i++)
        lg[i] = roundf(lg[i] * 2.0f) / 2.0f;
    int *ridx = malloc(nk * sizeof *ridx), *rkeep = malloc(nk * sizeof *rkeep),
        *rcnt = malloc((size_t)E * sizeof *rcnt);
    float *rw = malloc(nk * sizeof *rw), *rw0 = malloc(nk * sizeof *rw0);
    int *order = malloc(nk * sizeof *order);
    size_t dropped = 0;
    moe_route(&rc0, lg, N, ridx, rw0, rkeep, rcnt, NULL, order); /* undropped weights */
    moe_route(&rc, lg, N, ridx, rw, rkeep, rcnt, &dropped, order);

    float *d_lg = dev_copy(lg, N * (size_t)E * 4), *d_w = dev_copy(NULL, nk * 4), *d_w0 = dev_copy(rw0, nk * 4);
    int *d_idx = dev_copy(NULL, nk * 4), *d_ridx = dev_copy(ridx, nk * 4), *d_keep = dev_copy(NULL, nk * 4);
    int *d_rkeep = dev_copy(rkeep, nk * 4), *d_cnt = dev_copy(NULL, (size_t)E * 4);
    float *d_wk = dev_copy(NULL, nk * 4);
    void *d_ws = dev_copy(NULL, cuk_moe_scratch_bytes(nk));
    RUN(cuk_f32_moe_topk(d_idx, d_w, d_lg, N, E, k, fb, S));
    RUN(cuk_f32_moe_capacity(d_keep, d_wk, d_ridx, d_w0, nk, moe_route_capacity(&rc, N), d_ws, S));
    RUN(cuk_moe_counts(d_cnt, d_ridx, d_rkeep, nk, E, S));
    RUN(cudaStreamSynchronize(S));
    if (st != cudaSuccess) {
        printf("FAIL %s: %s\n", tag, cudaGetErrorString(st));
        gc_fail++;
    }
    int *idx = host_copy(d_idx, nk * 4), *keep = host_copy(d_keep, nk * 4), *cnt = host_copy(d_cnt, (size_t)E * 4);
    float *w = host_copy(d_w, nk * 4), *wk = host_copy(d_wk, nk * 4);
    snprintf(what, sizeof what, "topk experts, %s", tag);
    same_ints(what, idx, ridx, nk);
    snprintf(what, sizeof what, "topk weights (undropped), %s", tag);
    gc_close(what, w, rw0, nk, TOL, TOL);
    snprintf(what, sizeof what, "capacity keep, %s (%zu dropped)", tag, dropped);
    same_ints(what, keep, rkeep, nk);
    snprintf(what, sizeof what, "capacity weights, %s", tag);
    gc_close(what, wk, rw, nk, 0.0, 0.0);
    snprintf(what, sizeof what, "counts, %s", tag);
    same_ints(what, cnt, rcnt, (size_t)E);

    /* send order, permute, combine and backward on the twin's routing */
    int *rslot = malloc((nk + 1) * sizeof *rslot), *rpos = malloc((nk + 1) * sizeof *rpos);
    moe_route_send_order(ridx, rkeep, nk, E, rslot, rpos);
    size_t ns = 0;
    for (size_t i = 0; i < nk; i++)
        ns += rkeep[i] != 0;
    int *d_slot = dev_copy(NULL, nk * sizeof(int)), *d_pos = dev_copy(NULL, nk * sizeof(int));
    float *x = gc_rand(N * C, 3, 1.0f), *y = gc_rand(ns * C, 5, 1.0f), *dout = gc_rand(N * C, 9, 1.0f);
    float *d_x = dev_copy(x, N * C * 4), *d_y = dev_copy(y, ns * C * 4), *d_dout = dev_copy(dout, N * C * 4);
    float *d_rw = dev_copy(rw, nk * 4), *d_xs = dev_copy(NULL, ns * C * 4), *d_out = dev_copy(NULL, N * C * 4);
    float *d_dy = dev_copy(NULL, ns * C * 4), *d_g = dev_copy(NULL, nk * 4), *d_dl = dev_copy(NULL, N * E * 4);
    RUN(cudaMemset(d_g, 0, nk * 4));
    RUN(cuk_moe_send_order(d_slot, d_pos, d_ridx, d_rkeep, nk, d_ws, S));
    RUN(cudaStreamSynchronize(S));
    int *slot = host_copy(d_slot, ns * sizeof(int));
    RUN(cuk_f32_moe_gather(d_xs, d_x, d_slot, ns, k, C, S));
    RUN(cuk_f32_moe_combine(d_out, d_y, d_rw, d_ridx, d_pos, N, k, C, S));
    RUN(cuk_f32_moe_combine_bwd(d_dy, d_g, d_dout, d_y, d_rw, d_slot, ns, k, C, S));
    RUN(cudaStreamSynchronize(S));
    float *g = host_copy(d_g, nk * 4);
    RUN(cuk_f32_moe_router_bwd(d_dl, d_lg, d_ridx, d_rkeep, d_g, N, E, k, S));
    RUN(cudaStreamSynchronize(S));
    float *xs = host_copy(d_xs, ns * C * 4), *out = host_copy(d_out, N * C * 4), *dy = host_copy(d_dy, ns * C * 4),
          *dl = host_copy(d_dl, N * E * 4);
    float *wxs = calloc(ns * C + 1, 4), *wout = calloc(N * C + 1, 4), *wdy = calloc(ns * C + 1, 4),
          *wg = calloc(nk + 1, 4), *wdl = calloc(N * E + 1, 4);
    size_t bad = 0;
    for (size_t p = 0; p < ns; p++)
        bad += slot[p] != rslot[p];
    /* the CPU twins (kern_moe.h) on the twin's routing; the router backward on the device's g */
    kern_moe_gather(wxs, x, rslot, ns, k, C);
    kern_moe_combine(wout, y, rw, ridx, rpos, N, k, C);
    kern_moe_combine_bwd(wdy, wg, dout, y, rw, rslot, ns, k, C);
    kern_moe_router_bwd(wdl, lg, ridx, rkeep, g, N, E, k);
    if (st != cudaSuccess) {
        printf("FAIL %s (dispatch): %s\n", tag, cudaGetErrorString(st));
        gc_fail++;
    }
    snprintf(what, sizeof what, "send order, %s", tag);
    gc_result(bad == 0, what, bad ? "differs" : "exact");
    snprintf(what, sizeof what, "gather by send slot, %s", tag);
    gc_close(what, xs, wxs, ns * C, 0.0, 0.0);
    snprintf(what, sizeof what, "combine, %s", tag);
    gc_close(what, out, wout, N * C, TOL, TOL);
    snprintf(what, sizeof what, "combine backward dy, %s", tag);
    gc_close(what, dy, wdy, ns * C, 0.0, 0.0);
    snprintf(what, sizeof what, "combine backward g, %s", tag);
    gc_close(what, g, wg, nk, TOL, TOL);
    snprintf(what, sizeof what, "router backward, %s", tag);
    gc_close(what, dl, wdl, N * E, TOL, TOL);

    void *dev[] = {d_lg, d_w, d_w0,   d_idx, d_ridx, d_keep, d_rkeep, d_cnt, d_wk, d_slot, d_pos,
                   d_x,  d_y, d_dout, d_rw,  d_xs,   d_out,  d_dy,    d_g,   d_dl, d_ws};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        cudaFree(dev[i]);
    void *host[] = {lg, ridx, rkeep, rcnt, rw, rw0, order, idx, keep, cnt, w,    wk,  rslot, rpos,
                    x,  y,    dout,  slot, g,  xs,  out,   dy,  dl,   wxs, wout, wdy, wg,    wdl};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        free(host[i]);
}

int main(void)
{
    gpu_check_start("test_moe_kernels");
    if (cudaStreamCreate(&S) != cudaSuccess) {
        printf("FAIL cudaStreamCreate\n0 passed, 1 failed\n");
        return 1;
    }
    one_case(64, 8, 2, 1.0, false, false, 64);
    one_case(64, 8, 2, 0.5, false, true, 64);
    one_case(257, 16, 4, 1.25, false, false, 64);
    one_case(33, 4, 4, 0.0, false, true, 64);
    one_case(64, 8, 2, 1.0, true, false, 64);
    one_case(100, 64, 8, 1.0, false, true, 64);
    one_case(8192, 64, 8, 1.0, false, true, 8);
    one_case(8192, 256, 8, 0.5, false, false, 8);
    cudaStreamDestroy(S);
    return gpu_check_finish();
}
