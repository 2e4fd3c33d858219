/* GPU test: the bf16 layer shard that the calibration times (exec/cuda/culayer)
 * against the same layer composed on the CPU from the CPU twins
 * (exec/cpu/kern.h) and CBLAS, in fp32, from the GPU's own bf16 weights,
 * input and output gradient (read back). Dropout off (p = 0) so both sides
 * compute the same function; unfused and fused attention.
 *
 * Tolerance: the GPU stores every activation and activation gradient in bf16
 * (2^-9 rms relative per rounding) across ~15 chained ops, so the relative
 * norm error ||gpu - cpu|| / ||cpu|| is expected near 1e-2; allowed 5e-2.
 * The weights are U(-0.2, 0.2) so that the layer's contribution, not the
 * residual input, dominates the output. A mis-wired GEMM (wrong operand,
 * transpose or leading dimension) or a missing op gives O(1). */
#include <math.h>

#include "exec/cpu/kern.h"
#include "exec/cuda/culayer.h"
#include "tests/gpu/gpu_check.h"

#include <cblas.h>

#define TOL 5e-2

/* out[N,OC] = inp[N,IC] W[OC,IC]^T (+= when acc) */
static void lin(float *out, const float *inp, const float *W, int N, int OC, int IC, int acc)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, inp, IC, W, IC, acc ? 1.0f : 0.0f, out, OC);
}

/* dinp[N,IC] = dout W (overwrite); dW[OC,IC] += dout^T inp */
static void lin_bwd(float *dinp, float *dW, const float *dout, const float *inp, const float *W, int N, int OC, int IC)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IC, OC, 1.0f, dout, OC, W, IC, 0.0f, dinp, IC);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dW, IC);
}

static void norm_check(const char *what, const float *got, const float *want, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
        den += (double)want[i] * want[i];
    }
    double rel = den > 0 ? sqrt(num / den) : INFINITY;
    char msg[96];
    snprintf(msg, sizeof msg, "relative norm error %.3g (limit %.0e), n=%zu", rel, TOL, n);
    gc_result(rel <= TOL, what, msg);
}

static void run(bool fused)
{
    culayer_dims d = {.hidden = 256,
                      .heads = 4,
                      .ffn = 1024,
                      .seq = 64,
                      .micro_batch = 2,
                      .tp = 2,
                      .fused_attention = fused,
                      .init_scale = 0.2f};
    int h = d.hidden, H = d.heads / d.tp, hs = h / d.heads, hl = H * hs, fl = d.ffn / d.tp;
    int B = d.micro_batch, T = d.seq, N = B * T;
    cudaStream_t s;
    cugemm *g = NULL;
    culayer *L = NULL;
    ts_err e;
    err_clear(&e);
    GC_CUDA(cudaStreamCreate(&s));
    int rc = cugemm_create(false, &g, &e);
    if (rc == TS_OK)
        rc = culayer_create(&d, g, s, &L, &e);
    if (rc == TS_OK)
        rc = culayer_forward(L, 1, &e);
    if (rc == TS_OK)
        rc = culayer_backward(L, &e);
    if (rc != TS_OK) {
        gc_result(0, fused ? "culayer (fused) run" : "culayer run", e.msg);
        culayer_free(L);
        cugemm_destroy(g);
        cudaStreamDestroy(s);
        return;
    }
    /* read everything back */
    size_t sz[CULAYER_NTENSORS] = {[CULAYER_LN1_W] = h,
                                   [CULAYER_LN1_B] = h,
                                   [CULAYER_QKV_W] = (size_t)3 * hl * h,
                                   [CULAYER_QKV_B] = 3 * hl,
                                   [CULAYER_PROJ_W] = (size_t)h * hl,
                                   [CULAYER_PROJ_B] = h,
                                   [CULAYER_LN2_W] = h,
                                   [CULAYER_LN2_B] = h,
                                   [CULAYER_FC1_W] = (size_t)fl * h,
                                   [CULAYER_FC1_B] = fl,
                                   [CULAYER_FC2_W] = (size_t)h * fl,
                                   [CULAYER_FC2_B] = h,
                                   [CULAYER_X] = (size_t)N * h,
                                   [CULAYER_DOUT] = (size_t)N * h,
                                   [CULAYER_OUT] = (size_t)N * h,
                                   [CULAYER_DX] = (size_t)N * h};
    for (int i = 0; i < 12; i++)
        sz[CULAYER_GRAD0 + i] = sz[i];
    float *t[CULAYER_NTENSORS];
    for (int i = 0; i < CULAYER_NTENSORS; i++) {
        t[i] = malloc(sz[i] * sizeof(float));
        if (rc == TS_OK)
            rc = culayer_read(L, (culayer_tensor)i, t[i], sz[i], &e);
    }
    if (rc != TS_OK)
        gc_result(0, "culayer_read", e.msg);
    /* the CPU layer, fp32 */
    size_t Nh = (size_t)N * h;
    float *ln1 = malloc(Nh * 4), *m1 = malloc(N * 4), *r1 = malloc(N * 4);
    float *qkv = malloc((size_t)N * 3 * hl * 4), *att = malloc((size_t)B * H * T * T * 4);
    float *attn = malloc((size_t)N * hl * 4), *x1 = malloc(Nh * 4), *ln2 = malloc(Nh * 4);
    float *m2 = malloc(N * 4), *r2 = malloc(N * 4), *fc1 = malloc((size_t)N * fl * 4);
    float *gl = malloc((size_t)N * fl * 4), *out = malloc(Nh * 4), *tmp = malloc(Nh * 4);
    const float *x = t[CULAYER_X];
    kern_layernorm_fwd(ln1, m1, r1, x, t[CULAYER_LN1_W], t[CULAYER_LN1_B], N, h);
    lin(qkv, ln1, t[CULAYER_QKV_W], N, 3 * hl, h, 0);
    kern_bias_fwd(qkv, t[CULAYER_QKV_B], N, 3 * hl);
    kern_attention_fwd(attn, att, qkv, B, T, H, hs);
    lin(tmp, attn, t[CULAYER_PROJ_W], N, h, hl, 0);
    kern_bias_residual_fwd(x1, x, tmp, t[CULAYER_PROJ_B], N, h);
    kern_layernorm_fwd(ln2, m2, r2, x1, t[CULAYER_LN2_W], t[CULAYER_LN2_B], N, h);
    lin(fc1, ln2, t[CULAYER_FC1_W], N, fl, h, 0);
    kern_bias_fwd(fc1, t[CULAYER_FC1_B], N, fl);
    kern_gelu_fwd(gl, fc1, (size_t)N * fl);
    lin(tmp, gl, t[CULAYER_FC2_W], N, h, fl, 0);
    kern_bias_residual_fwd(out, x1, tmp, t[CULAYER_FC2_B], N, h);
    char name[80];
    snprintf(name, sizeof name, "layer forward output (%s attention)", fused ? "fused" : "unfused");
    norm_check(name, t[CULAYER_OUT], out, Nh);

    /* backward */
    float *gr[12];
    for (int i = 0; i < 12; i++)
        gr[i] = calloc(sz[i], sizeof(float));
    const float *dout = t[CULAYER_DOUT];
    float *dg = calloc((size_t)N * fl, 4), *dfc1 = calloc((size_t)N * fl, 4);
    float *dln2 = malloc(Nh * 4), *dx1 = calloc(Nh, 4), *dattn = malloc((size_t)N * hl * 4);
    float *datt = malloc((size_t)B * H * T * T * 4), *dqkv = calloc((size_t)N * 3 * hl, 4);
    float *dln1 = malloc(Nh * 4), *dx = calloc(Nh, 4);
    kern_bias_bwd(gr[CULAYER_FC2_B], dout, N, h);
    lin_bwd(dg, gr[CULAYER_FC2_W], dout, gl, t[CULAYER_FC2_W], N, h, fl);
    kern_gelu_bwd(dfc1, fc1, dg, (size_t)N * fl);
    kern_bias_bwd(gr[CULAYER_FC1_B], dfc1, N, fl);
    lin_bwd(dln2, gr[CULAYER_FC1_W], dfc1, ln2, t[CULAYER_FC1_W], N, fl, h);
    kern_layernorm_bwd_input(dx1, dln2, x1, t[CULAYER_LN2_W], m2, r2, N, h);
    kern_layernorm_bwd_weight(gr[CULAYER_LN2_W], gr[CULAYER_LN2_B], dln2, x1, m2, r2, N, h);
    kern_add(dx1, dout, Nh);
    kern_bias_bwd(gr[CULAYER_PROJ_B], dx1, N, h);
    lin_bwd(dattn, gr[CULAYER_PROJ_W], dx1, attn, t[CULAYER_PROJ_W], N, h, hl);
    kern_attention_bwd(dqkv, datt, dattn, qkv, att, B, T, H, hs);
    kern_bias_bwd(gr[CULAYER_QKV_B], dqkv, N, 3 * hl);
    lin_bwd(dln1, gr[CULAYER_QKV_W], dqkv, ln1, t[CULAYER_QKV_W], N, 3 * hl, h);
    kern_layernorm_bwd_input(dx, dln1, x, t[CULAYER_LN1_W], m1, r1, N, h);
    kern_layernorm_bwd_weight(gr[CULAYER_LN1_W], gr[CULAYER_LN1_B], dln1, x, m1, r1, N, h);
    kern_add(dx, dx1, Nh);
    snprintf(name, sizeof name, "layer backward dx (%s attention)", fused ? "fused" : "unfused");
    norm_check(name, t[CULAYER_DX], dx, Nh);
    static const char *const GN[12] = {"ln1 w", "ln1 b", "qkv w", "qkv b", "proj w", "proj b",
                                       "ln2 w", "ln2 b", "fc1 w", "fc1 b", "fc2 w",  "fc2 b"};
    for (int i = 0; i < 12; i++) {
        snprintf(name, sizeof name, "main grad %s (%s attention)", GN[i], fused ? "fused" : "unfused");
        norm_check(name, t[CULAYER_GRAD0 + i], gr[i], sz[i]);
    }
    for (int i = 0; i < CULAYER_NTENSORS; i++)
        free(t[i]);
    for (int i = 0; i < 12; i++)
        free(gr[i]);
    float *all[] = {ln1, m1,  r1, qkv,  att,  attn, x1,    ln2,  m2,   r2,   fc1, gl,
                    out, tmp, dg, dfc1, dln2, dx1,  dattn, datt, dqkv, dln1, dx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
    culayer_free(L);
    cugemm_destroy(g);
    cudaStreamDestroy(s);
}

int main(void)
{
    gpu_check_start("test_culayer");
    run(false);
    run(true);
    /* bad shapes are refused before any allocation */
    culayer_dims bad = {.hidden = 256, .heads = 3, .ffn = 1024, .seq = 8, .micro_batch = 1, .tp = 1};
    culayer *L = NULL;
    ts_err e;
    err_clear(&e);
    int rc = culayer_create(&bad, NULL, 0, &L, &e);
    gc_result(rc == TS_EINVAL && strstr(e.msg, "--num-attention-heads") != NULL,
              "hidden not divisible by heads refused", e.msg);
    return gpu_check_finish();
}
