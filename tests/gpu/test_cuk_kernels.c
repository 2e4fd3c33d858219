/* GPU test: every bf16 kernel of kernels/cuk.h against its CPU twin in
 * exec/cpu/kern.h (fp32), on inputs that are exactly representable in bf16
 * (so both sides see the same numbers).
 *
 * Tolerances (|got - want| <= atol + rtol |want|):
 *   bf16 outputs: the kernel computes in fp32 and rounds once to bf16, whose
 *     unit roundoff is 2^-8 = 3.9e-3; we allow rtol = 2^-7 = 7.8e-3 (two
 *     roundings' worth) and atol = 1e-3 for outputs near 0, where only fp32
 *     summation-order differences (~1e-6) remain. A wrong term (missing
 *     scale, wrong index, no mask) moves outputs by O(0.1..1).
 *   fp32 outputs (statistics, main grads, losses, Adam state): fp32 math in
 *     a different order and __expf (2 ulp): rtol = atol = 1e-4.
 * Backward kernels are fed the GPU forward's own (bf16) outputs on both
 * sides, so each test checks one kernel. */
#include <math.h>
#include <stdlib.h>

#include "exec/cpu/kern.h"
#include "kernels/cuk.h"
#include "tests/gpu/gpu_check.h"

#define RT_BF 7.8e-3
#define AT_BF 1e-3
#define RT_32 1e-4
#define AT_32 1e-4

static cudaStream_t S;

static void test_conversions(void)
{
    size_t n = 4099;
    float *h = gc_rand(n, 1, 3.0f);
    for (size_t i = 0; i < n; i++) /* not bf16-exact: exercises rounding, ties included */
        h[i] = h[i] * (1.0f + 1.0f / 512.0f) + (i % 7 == 0 ? 1.0f / 1024.0f : 0.0f);
    float *d = gc_dev_f32(h, n);
    uint16_t *b = NULL;
    GC_CUDA(cudaMalloc((void **)&b, n * 2));
    GC_CUDA(cuk_f32_to_bf16(b, d, n, S));
    GC_CUDA(cudaStreamSynchronize(S));
    float *got = gc_host_bf16(b, n), *want = malloc(n * sizeof *want);
    for (size_t i = 0; i < n; i++)
        want[i] = gc_bf2f(gc_f2bf(h[i]));
    gc_close("f32_to_bf16 (round to nearest even, exact)", got, want, n, 0.0, 0.0);
    GC_CUDA(cuk_bf16_to_f32(d, b, n, S));
    GC_CUDA(cuk_bf16_accum_f32(d, b, n, S)); /* d = 2 * bf16(h) */
    float *back = gc_host_f32(d, n);
    for (size_t i = 0; i < n; i++)
        want[i] *= 2.0f;
    gc_close("bf16_to_f32 + bf16_accum_f32 (exact)", back, want, n, 0.0, 0.0);
    free(h), free(got), free(want), free(back);
    cudaFree(d), cudaFree(b);
}

static void test_layernorm(void)
{
    int N = 37, C = 300;
    size_t nc = (size_t)N * C;
    float *x = gc_rand(nc, 2, 2.0f), *w = gc_rand(C, 3, 1.0f), *bb = gc_rand(C, 4, 0.5f);
    float *dy = gc_rand(nc, 5, 1.0f);
    uint16_t *dx = gc_dev_bf16(x, nc), *dw = gc_dev_bf16(w, C), *db = gc_dev_bf16(bb, C);
    uint16_t *dout = NULL, *ddy = gc_dev_bf16(dy, nc), *ddx = NULL;
    float *dmean = NULL, *drstd = NULL;
    GC_CUDA(cudaMalloc((void **)&dout, nc * 2));
    GC_CUDA(cudaMalloc((void **)&ddx, nc * 2));
    GC_CUDA(cudaMalloc((void **)&dmean, N * 4));
    GC_CUDA(cudaMalloc((void **)&drstd, N * 4));
    GC_CUDA(cuk_layernorm_fwd(dout, dmean, drstd, dx, dw, db, N, C, CUK_F32_LN_EPS, S));
    GC_CUDA(cudaStreamSynchronize(S));
    float *out = malloc(nc * 4), *mean = malloc(N * 4), *rstd = malloc(N * 4);
    kern_layernorm_fwd(out, mean, rstd, x, w, bb, N, C);
    float *g_out = gc_host_bf16(dout, nc), *g_mean = gc_host_f32(dmean, N);
    float *g_rstd = gc_host_f32(drstd, N);
    gc_close("layernorm_fwd out", g_out, out, nc, AT_BF, RT_BF);
    gc_close("layernorm_fwd mean", g_mean, mean, N, AT_32, RT_32);
    gc_close("layernorm_fwd rstd", g_rstd, rstd, N, AT_32, RT_32);

    /* backward: accumulate into nonzero fp32 main grads */
    float *gw0 = gc_rand(C, 6, 0.1f), *gb0 = gc_rand(C, 7, 0.1f);
    float *dgw = gc_dev_f32(gw0, C), *dgb = gc_dev_f32(gb0, C);
    void *scratch = NULL;
    GC_CUDA(cudaMalloc(&scratch, cuk_colsum_scratch_bytes(N, C)));
    GC_CUDA(cuk_layernorm_bwd(ddx, dgw, dgb, ddy, dx, dw, dmean, drstd, N, C, scratch, S));
    GC_CUDA(cudaStreamSynchronize(S));
    float *dinp = calloc(nc, 4);
    kern_layernorm_bwd_input(dinp, dy, x, w, g_mean, g_rstd, N, C);
    kern_layernorm_bwd_weight(gw0, gb0, dy, x, g_mean, g_rstd, N, C);
    float *g_dinp = gc_host_bf16(ddx, nc), *g_gw = gc_host_f32(dgw, C), *g_gb = gc_host_f32(dgb, C);
    gc_close("layernorm_bwd dinp", g_dinp, dinp, nc, AT_BF, RT_BF);
    gc_close("layernorm_bwd dweight (+=)", g_gw, gw0, C, AT_32, RT_32);
    gc_close("layernorm_bwd dbias (+=)", g_gb, gb0, C, AT_32, RT_32);

    /* bias_grad: the same column sum as dbias */
    float *bg0 = gc_rand(C, 8, 0.1f), *dbg = gc_dev_f32(bg0, C);
    GC_CUDA(cuk_bias_grad(dbg, ddy, N, C, scratch, S));
    GC_CUDA(cudaStreamSynchronize(S));
    kern_bias_bwd(bg0, dy, N, C);
    float *g_bg = gc_host_f32(dbg, C);
    gc_close("bias_grad (+=)", g_bg, bg0, C, AT_32, RT_32);

    free(x), free(w), free(bb), free(dy), free(out), free(mean), free(rstd), free(g_out);
    free(g_mean), free(g_rstd), free(gw0), free(gb0), free(dinp), free(g_dinp), free(g_gw);
    free(g_gb), free(bg0), free(g_bg);
    cudaFree(dx), cudaFree(dw), cudaFree(db), cudaFree(dout), cudaFree(ddy), cudaFree(ddx);
    cudaFree(dmean), cudaFree(drstd), cudaFree(dgw), cudaFree(dgb), cudaFree(scratch);
    cudaFree(dbg);
}

static void test_softmax(void)
{
    int batch = 3, T = 70;
    size_t n = (size_t)batch * T * T;
    float scale = 0.125f;
    float *x = gc_rand(n, 9, 8.0f), *dy = gc_rand(n, 10, 1.0f);
    uint16_t *dx = gc_dev_bf16(x, n), *ddy = gc_dev_bf16(dy, n), *dy_out = NULL, *ddx = NULL;
    GC_CUDA(cudaMalloc((void **)&dy_out, n * 2));
    GC_CUDA(cudaMalloc((void **)&ddx, n * 2));
    GC_CUDA(cuk_causal_softmax_fwd(dy_out, dx, scale, batch, T, S));
    GC_CUDA(cudaStreamSynchronize(S));
    float *y = malloc(n * 4);
    memcpy(y, x, n * 4);
    for (int b = 0; b < batch; b++)
        kern_softmax_causal_fwd(y + (size_t)b * T * T, T, scale);
    float *g_y = gc_host_bf16(dy_out, n);
    gc_close("causal_softmax_fwd", g_y, y, n, AT_BF, RT_BF);
    GC_CUDA(cuk_causal_softmax_bwd(ddx, ddy, dy_out, scale, batch, T, S));
    GC_CUDA(cudaStreamSynchronize(S));
    float *dxw = malloc(n * 4);
    for (int b = 0; b < batch; b++) {
        size_t o = (size_t)b * T * T;
        kern_softmax_causal_bwd(dxw + o, g_y + o, dy + o, T, scale);
    }
    float *g_dx = gc_host_bf16(ddx, n);
    gc_close("causal_softmax_bwd", g_dx, dxw, n, AT_BF, RT_BF);
    /* in place (out aliases inp) must give the same bits */
    GC_CUDA(cuk_causal_softmax_fwd(dx, dx, scale, batch, T, S));
    GC_CUDA(cudaStreamSynchronize(S));
    float *g_inplace = gc_host_bf16(dx, n);
    gc_close("causal_softmax_fwd in place (exact)", g_inplace, g_y, n, 0.0, 0.0);
    free(x), free(dy), free(y), free(g_y), free(dxw), free(g_dx), free(g_inplace);
    cudaFree(dx), cudaFree(ddy), cudaFree(dy_out), cudaFree(ddx);
}

static void test_gelu_bias_dropout(void)
{
    int N = 33, C = 257;
    size_t n = (size_t)N * C;
    float *x = gc_rand(n, 11, 3.0f), *bias = gc_rand(C, 12, 0.5f), *dy = gc_rand(n, 13, 1.0f);
    float *res = gc_rand(n, 14, 1.0f);
    uint16_t *dx = gc_dev_bf16(x, n), *dbias = gc_dev_bf16(bias, C), *ddy = gc_dev_bf16(dy, n);
    uint16_t *dres = gc_dev_bf16(res, n), *dout = NULL;
    uint8_t *dmask = NULL;
    GC_CUDA(cudaMalloc((void **)&dout, n * 2));
    GC_CUDA(cudaMalloc((void **)&dmask, n));

    /* GELU(x + bias): CPU twin = kern_bias_fwd then kern_gelu_fwd */
    float *xb = malloc(n * 4), *want = malloc(n * 4);
    memcpy(xb, x, n * 4);
    kern_bias_fwd(xb, bias, N, C);
    kern_gelu_fwd(want, xb, n);
    GC_CUDA(cuk_bias_gelu_fwd(dout, dx, dbias, N, C, S));
    GC_CUDA(cudaStreamSynchronize(S));
    float *got = gc_host_bf16(dout, n);
    gc_close("bias_gelu_fwd", got, want, n, AT_BF, RT_BF);
    free(got);
    memset(want, 0, n * 4);
    kern_gelu_bwd(want, xb, dy, n);
    GC_CUDA(cuk_bias_gelu_bwd(dout, ddy, dx, dbias, N, C, S));
    GC_CUDA(cudaStreamSynchronize(S));
    got = gc_host_bf16(dout, n);
    gc_close("bias_gelu_bwd", got, want, n, AT_BF, RT_BF);
    free(got);

    /* bias + residual (p = 0): kern_bias_residual_fwd(out, a = residual, b = x, bias) */
    kern_bias_residual_fwd(want, res, x, bias, N, C);
    GC_CUDA(cuk_bias_dropout_add_fwd(dout, NULL, dx, dbias, dres, 0.0f, 0, N, C, S));
    GC_CUDA(cudaStreamSynchronize(S));
    got = gc_host_bf16(dout, n);
    gc_close("bias_dropout_add_fwd p=0 (bias + residual)", got, want, n, AT_BF, RT_BF);
    free(got);

    /* p = 0.1: the mask is reproducible on the host from cuk_rand_uniform */
    float p = 0.1f;
    uint64_t seed = 1234;
    GC_CUDA(cuk_bias_dropout_add_fwd(dout, dmask, dx, dbias, dres, p, seed, N, C, S));
    GC_CUDA(cudaStreamSynchronize(S));
    uint8_t *mask = malloc(n);
    GC_CUDA(cudaMemcpy(mask, dmask, n, cudaMemcpyDeviceToHost));
    size_t wrong = 0, kept = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t k = cuk_rand_uniform(seed, i) >= p;
        wrong += mask[i] != k;
        kept += k;
        want[i] = res[i] + (k ? (x[i] + bias[i % C]) / (1.0f - p) : 0.0f);
    }
    char msg[128];
    snprintf(msg, sizeof msg, "%zu of %zu mask bits differ", wrong, n);
    gc_result(wrong == 0, "dropout mask = host cuk_rand_uniform", msg);
    /* kept fraction 0.9 within 5 sigma (sigma = sqrt(p(1-p)/n) = 3.2e-3) */
    double frac = (double)kept / n, sig = sqrt(p * (1 - p) / n);
    snprintf(msg, sizeof msg, "kept %.4f, expected %.4f +- %.4f", frac, 1 - p, 5 * sig);
    gc_result(fabs(frac - (1 - p)) <= 5 * sig, "dropout keep rate", msg);
    got = gc_host_bf16(dout, n);
    gc_close("bias_dropout_add_fwd p=0.1", got, want, n, AT_BF, RT_BF);
    free(got);
    GC_CUDA(cuk_dropout_bwd(dout, ddy, dmask, p, n, S));
    GC_CUDA(cudaStreamSynchronize(S));
    for (size_t i = 0; i < n; i++)
        want[i] = mask[i] ? dy[i] / (1.0f - p) : 0.0f;
    got = gc_host_bf16(dout, n);
    gc_close("dropout_bwd", got, want, n, AT_BF, RT_BF);
    free(got);

    free(x), free(bias), free(dy), free(res), free(xb), free(want), free(mask);
    cudaFree(dx), cudaFree(dbias), cudaFree(ddy), cudaFree(dres), cudaFree(dout);
    cudaFree(dmask);
}

static void test_embedding(void)
{
    int B = 3, T = 16, C = 96, V = 50;
    int N = B * T;
    size_t nc = (size_t)N * C;
    float *wte = gc_rand((size_t)V * C, 15, 1.0f), *wpe = gc_rand((size_t)T * C, 16, 1.0f);
    float *dy = gc_rand(nc, 17, 1.0f);
    int *tok = malloc(N * sizeof *tok);
    for (int i = 0; i < N; i++)
        tok[i] = (i * 7 + i / 5) % V; /* repeats: exercises the accumulation */
    int *dtok = NULL;
    GC_CUDA(cudaMalloc((void **)&dtok, N * sizeof *dtok));
    GC_CUDA(cudaMemcpy(dtok, tok, N * sizeof *tok, cudaMemcpyHostToDevice));
    uint16_t *dwte = gc_dev_bf16(wte, (size_t)V * C), *dwpe = gc_dev_bf16(wpe, (size_t)T * C);
    uint16_t *dout = NULL, *ddy = gc_dev_bf16(dy, nc);
    GC_CUDA(cudaMalloc((void **)&dout, nc * 2));
    float *want = malloc(nc * 4);
    kern_embed_fwd(want, tok, wte, wpe, 0, N, T, C);
    GC_CUDA(cuk_embedding_fwd(dout, dtok, dwte, dwpe, N, T, C, 0, V, S));
    GC_CUDA(cudaStreamSynchronize(S));
    float *got = gc_host_bf16(dout, nc);
    gc_close("embedding_fwd", got, want, nc, AT_BF, RT_BF);
    free(got);

    /* vocabulary shard [20, 45): other tokens contribute 0 (+ no wpe on this shard) */
    int v0 = 20, Vs = 25;
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) {
            int r = tok[i] - v0;
            want[(size_t)i * C + c] = (r >= 0 && r < Vs) ? wte[(size_t)tok[i] * C + c] : 0.0f;
        }
    GC_CUDA(cuk_embedding_fwd(dout, dtok, dwte + (size_t)v0 * C, NULL, N, T, C, v0, Vs, S));
    GC_CUDA(cudaStreamSynchronize(S));
    got = gc_host_bf16(dout, nc);
    gc_close("embedding_fwd vocabulary shard", got, want, nc, 0.0, 0.0);
    free(got);

    float *gwte = gc_rand((size_t)V * C, 18, 0.1f), *gwpe = gc_rand((size_t)T * C, 19, 0.1f);
    float *dgwte = gc_dev_f32(gwte, (size_t)V * C), *dgwpe = gc_dev_f32(gwpe, (size_t)T * C);
    GC_CUDA(cuk_embedding_bwd(dgwte, dgwpe, ddy, dtok, N, T, C, 0, V, S));
    GC_CUDA(cudaStreamSynchronize(S));
    kern_embed_bwd(gwte, gwpe, dy, tok, 0, N, T, C);
    float *g1 = gc_host_f32(dgwte, (size_t)V * C), *g2 = gc_host_f32(dgwpe, (size_t)T * C);
    gc_close("embedding_bwd dwte (+=)", g1, gwte, (size_t)V * C, AT_32, RT_32);
    gc_close("embedding_bwd dwpe (+=)", g2, gwpe, (size_t)T * C, AT_32, RT_32);
    free(wte), free(wpe), free(dy), free(tok), free(want), free(gwte), free(gwpe), free(g1);
    free(g2);
    cudaFree(dtok), cudaFree(dwte), cudaFree(dwpe), cudaFree(dout), cudaFree(ddy);
    cudaFree(dgwte), cudaFree(dgwpe);
}

static void test_crossentropy(void)
{
    int N = 29, V = 1000;
    size_t nv = (size_t)N * V;
    float *logits = gc_rand(nv, 20, 6.0f);
    int *tgt = malloc(N * sizeof *tgt), *dtgt = NULL;
    for (int i = 0; i < N; i++)
        tgt[i] = (i * 131 + 7) % V;
    GC_CUDA(cudaMalloc((void **)&dtgt, N * sizeof *dtgt));
    GC_CUDA(cudaMemcpy(dtgt, tgt, N * sizeof *tgt, cudaMemcpyHostToDevice));
    uint16_t *dl = gc_dev_bf16(logits, nv);
    float *dloss = NULL, *dlse = NULL;
    GC_CUDA(cudaMalloc((void **)&dloss, N * 4));
    GC_CUDA(cudaMalloc((void **)&dlse, N * 4));
    float *losses = malloc(N * 4), *probs = malloc(nv * 4);
    kern_crossentropy_fwd(losses, probs, logits, tgt, N, V);
    GC_CUDA(cuk_crossentropy_fwd(dloss, dlse, dl, dtgt, N, V, S));
    GC_CUDA(cudaStreamSynchronize(S));
    float *g_loss = gc_host_f32(dloss, N);
    gc_close("crossentropy_fwd losses", g_loss, losses, N, AT_32, RT_32);
    float scale = 1.0f / N, *want = calloc(nv, 4);
    kern_crossentropy_bwd(want, probs, tgt, N, V, scale);
    GC_CUDA(cuk_crossentropy_bwd(dl, dl, dlse, dtgt, scale, N, V, S)); /* in place */
    GC_CUDA(cudaStreamSynchronize(S));
    float *got = gc_host_bf16(dl, nv);
    /* gradients are ~1/(N V): scale atol to them */
    gc_close("crossentropy_bwd (in place)", got, want, nv, AT_BF * scale, RT_BF);
    free(logits), free(tgt), free(losses), free(probs), free(g_loss), free(want), free(got);
    cudaFree(dtgt), cudaFree(dl), cudaFree(dloss), cudaFree(dlse);
}

static void test_adamw(void)
{
    size_t n = 10007;
    float *p = gc_rand(n, 21, 1.0f), *g = gc_rand(n, 22, 0.01f);
    float *m = gc_rand(n, 23, 0.001f), *v = calloc(n, 4);
    for (size_t i = 0; i < n; i++)
        v[i] = fabsf(m[i]) * 1e-3f;
    float *dp = gc_dev_f32(p, n), *dg = gc_dev_f32(g, n), *dm = gc_dev_f32(m, n);
    float *dv = gc_dev_f32(v, n);
    uint16_t *dparam = NULL;
    GC_CUDA(cudaMalloc((void **)&dparam, n * 2));
    float lr = 3e-4f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    for (int step = 1; step <= 3; step++) {
        kern_adam(p, g, m, v, n, lr, b1, b2, eps, wd, step);
        GC_CUDA(cuk_adamw(dparam, dp, dg, dm, dv, n, lr, b1, b2, eps, wd, step, 1.0f, S));
    }
    GC_CUDA(cudaStreamSynchronize(S));
    float *gp = gc_host_f32(dp, n), *gm = gc_host_f32(dm, n), *gv = gc_host_f32(dv, n);
    float *gb = gc_host_bf16(dparam, n);
    /* updates are lr-sized on O(1) weights: compare the masters to 1e-6 */
    gc_close("adamw master weights (3 steps)", gp, p, n, 1e-6, 1e-6);
    gc_close("adamw m", gm, m, n, 1e-9, 1e-5);
    gc_close("adamw v", gv, v, n, 1e-12, 1e-5);
    for (size_t i = 0; i < n; i++)
        p[i] = gc_bf2f(gc_f2bf(gp[i]));
    gc_close("adamw bf16 copy = bf16(master) (exact)", gb, p, n, 0.0, 0.0);
    free(p), free(g), free(m), free(v), free(gp), free(gm), free(gv), free(gb);
    cudaFree(dp), cudaFree(dg), cudaFree(dm), cudaFree(dv), cudaFree(dparam);
}

int main(void)
{
    gpu_check_start("test_cuk_kernels");
    if (cudaStreamCreate(&S) != cudaSuccess) {
        printf("FAIL cudaStreamCreate\n0 passed, 1 failed\n");
        return 1;
    }
    test_conversions();
    test_layernorm();
    test_softmax();
    test_gelu_bias_dropout();
    test_embedding();
    test_crossentropy();
    test_adamw();
    cudaStreamDestroy(S);
    return gpu_check_finish();
}
