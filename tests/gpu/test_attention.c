/* GPU test: causal attention, three ways, forward and backward:
 *   CPU   kern_attention_fwd/bwd (exec/cpu/kern.h, fp32) — the reference;
 *   fused cuk_flash_attn_fwd/bwd (bf16 storage, fp32 math, online softmax);
 *   unfused: the CUDA backend's attention_fwd/bwd (Megatron 2021: q k^T and
 *         att v as strided-batched cuBLASLt GEMMs around the causal softmax;
 *         fp32 storage, bf16 tensor-core GEMMs).
 * Inputs are bf16-exact. Tolerances (|got - want| <= atol + rtol |want|):
 *   fused vs CPU: one rounding of each output to bf16 (2^-8) plus the saved
 *     output's rounding inside the backward's row term (~1e-4 here):
 *     atol 1e-3, rtol 7.8e-3 (= 2^-7);
 *   unfused vs CPU: each GEMM rounds its fp32 operand (probabilities, dS)
 *     to bf16, ~2^-9 per product, summed over up to T products:
 *     atol 5e-3, rtol 2e-2;
 *   fused vs unfused: the sum of both.
 * Shapes: T not a multiple of the 32-row tiles; hs = 32, 64 and 128. */
#include <math.h>

#include "exec/core/backend.h"
#include "exec/cpu/kern.h"
#include "exec/cuda/backend_cuda.h"
#include "kernels/cuk.h"
#include "tests/gpu/gpu_check.h"

static cudaStream_t S;

typedef struct {
    int B, NH, T, hs;
} shape;

static void run(backend *be, const shape *sh)
{
    int B = sh->B, NH = sh->NH, T = sh->T, hs = sh->hs, C = NH * hs;
    size_t N = (size_t)B * T, nqkv = N * 3 * C, nout = N * C;
    size_t natt = (size_t)B * NH * T * T, per = (size_t)B * NH * T * hs;
    char name[96];
    float *qkv = gc_rand(nqkv, 41, 1.0f), *dout = gc_rand(nout, 42, 1.0f);

    /* CPU reference */
    float *out = malloc(nout * 4), *att = malloc(natt * 4), *datt = malloc(natt * 4);
    float *dqkv = calloc(nqkv, 4);
    kern_attention_fwd(out, att, qkv, B, T, NH, hs);
    kern_attention_bwd(dqkv, datt, dout, qkv, att, B, T, NH, hs);

    /* fused (bf16) */
    uint16_t *d_qkv = gc_dev_bf16(qkv, nqkv), *d_dout = gc_dev_bf16(dout, nout);
    uint16_t *q = NULL, *o = NULL, *ob = NULL, *dq = NULL, *d_dqkv = NULL;
    float *lse = NULL;
    void *scratch = NULL;
    GC_CUDA(cudaMalloc((void **)&q, 7 * per * 2)); /* q k v | dO | dq dk dv */
    GC_CUDA(cudaMalloc((void **)&o, per * 2));
    GC_CUDA(cudaMalloc((void **)&ob, nout * 2));
    GC_CUDA(cudaMalloc((void **)&d_dqkv, nqkv * 2));
    GC_CUDA(cudaMalloc((void **)&lse, (size_t)B * NH * T * 4));
    GC_CUDA(cudaMalloc(&scratch, cuk_flash_attn_scratch_bytes(B, NH, T)));
    uint16_t *k = q + per, *v = k + per, *dO = v + per;
    dq = dO + per;
    uint16_t *dk = dq + per, *dv = dk + per;
    float scale = 1.0f / sqrtf((float)hs);
    GC_CUDA(cuk_qkv_split(q, k, v, d_qkv, B, T, NH, hs, S));
    GC_CUDA(cuk_flash_attn_fwd(o, lse, q, k, v, B, NH, T, hs, scale, S));
    GC_CUDA(cuk_bhtd_to_bthd(ob, o, B, NH, T, hs, S));
    GC_CUDA(cuk_bthd_to_bhtd(dO, d_dout, B, NH, T, hs, S));
    GC_CUDA(cuk_flash_attn_bwd(dq, dk, dv, dO, o, lse, q, k, v, B, NH, T, hs, scale, scratch, S));
    GC_CUDA(cuk_qkv_merge(d_dqkv, dq, dk, dv, B, T, NH, hs, S));
    GC_CUDA(cudaStreamSynchronize(S));
    float *f_out = gc_host_bf16(ob, nout), *f_dqkv = gc_host_bf16(d_dqkv, nqkv);
    snprintf(name, sizeof name, "fused fwd vs CPU (B=%d NH=%d T=%d hs=%d)", B, NH, T, hs);
    gc_close(name, f_out, out, nout, 1e-3, 7.8e-3);
    snprintf(name, sizeof name, "fused bwd dqkv vs CPU (B=%d NH=%d T=%d hs=%d)", B, NH, T, hs);
    gc_close(name, f_dqkv, dqkv, nqkv, 1e-3, 7.8e-3);

    /* unfused (the backend's path, fp32 tensors) */
    float *b_qkv = be->alloc(be, nqkv), *b_out = be->alloc(be, nout);
    float *b_att = be->alloc(be, natt), *b_datt = be->alloc(be, natt);
    float *b_dout = be->alloc(be, nout), *b_dqkv = be->alloc(be, nqkv);
    if (!b_qkv || !b_out || !b_att || !b_datt || !b_dout || !b_dqkv) {
        gc_result(0, "backend alloc", "out of GPU memory");
    } else {
        be->to_device(be, b_qkv, qkv, nqkv);
        be->to_device(be, b_dout, dout, nout);
        be->attention_fwd(be, b_out, b_att, b_qkv, B, T, NH, hs);
        be->attention_bwd(be, b_dqkv, b_datt, b_dout, b_qkv, b_att, B, T, NH, hs);
        float *u_out = malloc(nout * 4), *u_att = malloc(natt * 4), *u_dqkv = malloc(nqkv * 4);
        be->to_host(be, u_out, b_out, nout);
        be->to_host(be, u_att, b_att, natt);
        be->to_host(be, u_dqkv, b_dqkv, nqkv);
        ts_err e;
        err_clear(&e);
        int rc = backend_cuda_status(be, &e);
        gc_result(rc == TS_OK, "backend status after attention", e.msg);
        snprintf(name, sizeof name, "unfused fwd vs CPU (T=%d hs=%d)", T, hs);
        gc_close(name, u_out, out, nout, 5e-3, 2e-2);
        snprintf(name, sizeof name, "unfused saved probabilities vs CPU (T=%d)", T);
        gc_close(name, u_att, att, natt, 1e-4, 1e-3); /* fp32 softmax of bf16-exact q, k */
        snprintf(name, sizeof name, "unfused bwd dqkv vs CPU (T=%d hs=%d)", T, hs);
        gc_close(name, u_dqkv, dqkv, nqkv, 5e-3, 2e-2);
        snprintf(name, sizeof name, "fused vs unfused fwd (T=%d hs=%d)", T, hs);
        gc_close(name, f_out, u_out, nout, 6e-3, 2.8e-2);
        snprintf(name, sizeof name, "fused vs unfused bwd (T=%d hs=%d)", T, hs);
        gc_close(name, f_dqkv, u_dqkv, nqkv, 6e-3, 2.8e-2);
        free(u_out), free(u_att), free(u_dqkv);
    }
    be->free(be, b_qkv), be->free(be, b_out), be->free(be, b_att), be->free(be, b_datt);
    be->free(be, b_dout), be->free(be, b_dqkv);
    free(qkv), free(dout), free(out), free(att), free(datt), free(dqkv), free(f_out);
    free(f_dqkv);
    cudaFree(d_qkv), cudaFree(d_dout), cudaFree(q), cudaFree(o), cudaFree(ob);
    cudaFree(d_dqkv), cudaFree(lse), cudaFree(scratch);
}

int main(void)
{
    gpu_check_start("test_attention");
    if (cudaStreamCreate(&S) != cudaSuccess) {
        printf("FAIL cudaStreamCreate\n0 passed, 1 failed\n");
        return 1;
    }
    backend *be = NULL;
    ts_err e;
    err_clear(&e);
    if (backend_cuda_create(0, false, &be, &e) != TS_OK) {
        gc_result(0, "backend_cuda_create", e.msg);
        return gpu_check_finish();
    }
    /* T a multiple of 8 (16-byte fp32 rows for cuBLASLt), not of the 32-row tiles */
    static const shape SHAPES[] = {{2, 3, 72, 64}, {1, 2, 40, 128}, {1, 1, 8, 32}};
    for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++)
        run(be, &SHAPES[i]);
    be->destroy(be);
    cudaStreamDestroy(S);
    return gpu_check_finish();
}
