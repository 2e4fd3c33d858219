/* GPU test: inference with a KV cache on the CUDA backend.
 *   kernels: embed_pos_fwd, kv_append and attention_kv_fwd (kernels/kvcache.cu,
 *     fp32 storage and math) against their CPU twins (exec/cpu/kern.h) over a
 *     prefill of n rows then decode steps of 1 row. Same operations in the
 *     same order except expf (the device's differs from glibc's by a few
 *     ulp) and fused multiply-adds: atol 1e-5, rtol 1e-5 (values ~1).
 *   model: the CUDA backend's cached decode gives, at every step, the logits
 *     of a forward over the whole prefix (a fresh cache, one step): both run
 *     the same bf16 tensor-core GEMMs on the same operands, differing only in
 *     the GEMMs' row counts (cuBLASLt may pick another algorithm, fp32
 *     accumulation in another order): atol 1e-4 (logits ~0.1). */
#include <math.h>

#include "exec/core/backend.h"
#include "exec/core/comm.h"
#include "exec/core/gpt.h"
#include "exec/core/gpt_infer.h"
#include "exec/cpu/kern.h"
#include "exec/cuda/backend_cuda.h"
#include "tests/gpu/gpu_check.h"

static void kernels(backend *be)
{
    enum { B = 2, NH = 3, hs = 32, Tmax = 40, V = 17, PRE = 13, STEPS = 5 };
    int C = NH * hs;
    size_t nq = (size_t)B * PRE * 3 * C, ncache = (size_t)B * NH * Tmax * hs, natt = (size_t)B * NH * PRE * Tmax;
    float *wte = gc_rand((size_t)V * C, 7, 1.0f), *wpe = gc_rand((size_t)Tmax * C, 8, 1.0f);
    float *kc = calloc(ncache, 4), *vc = calloc(ncache, 4), *out = malloc((size_t)B * PRE * C * 4);
    float *att = malloc(natt * 4), *emb = malloc((size_t)B * PRE * C * 4), *got = malloc(ncache * 4);
    float *d_wte = be->alloc(be, (size_t)V * C), *d_wpe = be->alloc(be, (size_t)Tmax * C);
    float *d_kc = be->alloc(be, ncache), *d_vc = be->alloc(be, ncache), *d_qkv = be->alloc(be, nq);
    float *d_out = be->alloc(be, (size_t)B * PRE * C), *d_att = be->alloc(be, natt);
    float *d_emb = be->alloc(be, (size_t)B * PRE * C);
    int *d_tok = be->alloc_int(be, (size_t)B * PRE);
    be->to_device(be, d_wte, wte, (size_t)V * C);
    be->to_device(be, d_wpe, wpe, (size_t)Tmax * C);
    char name[96];
    int pos = 0;
    for (int s = 0; s <= STEPS; s++) {
        int n = s == 0 ? PRE : 1;
        size_t rows = (size_t)B * n;
        int tok[B * PRE];
        for (size_t i = 0; i < rows; i++)
            tok[i] = (int)((3 * i + 5 * (size_t)s) % V);
        float *qkv = gc_rand(rows * 3 * C, 100 + s, 1.0f);
        be->int_to_device(be, d_tok, tok, rows);
        be->to_device(be, d_qkv, qkv, rows * 3 * C);
        kern_embed_pos_fwd(emb, tok, wte, wpe, B, n, pos, C);
        be->embed_pos_fwd(be, d_emb, d_tok, d_wte, d_wpe, B, n, pos, C);
        kern_kv_append(kc, vc, qkv, B, n, pos, Tmax, NH, hs);
        be->kv_append(be, d_kc, d_vc, d_qkv, B, n, pos, Tmax, NH, hs);
        kern_attention_kv_fwd(out, att, qkv, kc, vc, B, n, pos, Tmax, NH, hs);
        be->attention_kv_fwd(be, d_out, d_att, d_qkv, d_kc, d_vc, B, n, pos, Tmax, NH, hs);
        float *h = malloc(rows * C * 4);
        be->to_host(be, h, d_emb, rows * C);
        snprintf(name, sizeof name, "embed_pos_fwd step %d (n=%d, pos0=%d)", s, n, pos);
        gc_close(name, h, emb, rows * C, 0, 0);
        be->to_host(be, got, d_kc, ncache);
        snprintf(name, sizeof name, "kv_append keys step %d", s);
        gc_close(name, got, kc, ncache, 0, 0);
        be->to_host(be, got, d_vc, ncache);
        snprintf(name, sizeof name, "kv_append values step %d", s);
        gc_close(name, got, vc, ncache, 0, 0);
        be->to_host(be, h, d_out, rows * C);
        snprintf(name, sizeof name, "attention_kv_fwd step %d (n=%d, pos0=%d)", s, n, pos);
        gc_close(name, h, out, rows * C, 1e-5, 1e-5);
        free(h);
        free(qkv);
        pos += n;
    }
    ts_err e;
    err_clear(&e);
    int rc = backend_cuda_status(be, &e);
    gc_result(rc == TS_OK, "backend status after the cache kernels", e.msg);
    be->free(be, d_wte), be->free(be, d_wpe), be->free(be, d_kc), be->free(be, d_vc), be->free(be, d_qkv);
    be->free(be, d_out), be->free(be, d_att), be->free(be, d_emb);
    be->free_int(be, d_tok);
    free(wte), free(wpe), free(kc), free(vc), free(out), free(att), free(emb), free(got);
}

static void model(backend *be)
{
    static const gpt_dims D = {.vocab = 64, .seq = 16, .hidden = 64, .heads = 2, .ffn = 128, .layers = 2, .batch = 2};
    enum { B = 2, V = 64, PROMPT = 4, STEPS = 6 };
    ts_err e;
    err_clear(&e);
    comm *cm = NULL;
    gpt_stage *st = NULL;
    gpt_kv *kv = NULL;
    int rc = comm_local_create(&cm, &e);
    if (!rc)
        rc = gpt_stage_create(&D, 0, D.layers, true, true, false, 3, be, cm, &st, &e);
    if (!rc)
        rc = gpt_kv_create(st, PROMPT, &kv, &e);
    gc_result(rc == TS_OK, "model and cache on the GPU", e.msg);
    if (rc)
        return;
    int seq[B][16] = {{0}}, tok[B * 16], next[B];
    for (int b = 0; b < B; b++)
        for (int i = 0; i < PROMPT; i++)
            seq[b][i] = tok[b * PROMPT + i] = (11 * b + 3 * i + 1) % V;
    float lc[B * V], lr[B * V];
    rc = gpt_infer_step(st, kv, tok, PROMPT, lc, &e);
    for (int s = 0; s <= STEPS && !rc; s++) {
        int len = PROMPT + s;
        gpt_kv *fresh = NULL;
        rc = gpt_kv_create(st, len, &fresh, &e);
        for (int b = 0; b < B && !rc; b++)
            for (int i = 0; i < len; i++)
                tok[b * len + i] = seq[b][i];
        if (!rc)
            rc = gpt_infer_step(st, fresh, tok, len, lr, &e);
        gpt_kv_free(st, fresh);
        char name[64];
        snprintf(name, sizeof name, "cached decode = full recompute, %d positions", len);
        gc_close(name, lc, lr, (size_t)B * V, 1e-4, 0);
        gpt_argmax(lc, B, V, next);
        for (int b = 0; b < B; b++)
            seq[b][len] = next[b];
        if (!rc && s < STEPS)
            rc = gpt_infer_step(st, kv, next, 1, lc, &e);
    }
    if (!rc)
        rc = backend_cuda_status(be, &e);
    gc_result(rc == TS_OK, "decode steps and backend status", e.msg);
    gpt_kv_free(st, kv);
    gpt_stage_free(st);
    cm->destroy(cm);
}

int main(void)
{
    gpu_check_start("test_kvcache");
    backend *be = NULL;
    ts_err e;
    err_clear(&e);
    if (backend_cuda_create(0, false, &be, &e) != TS_OK) {
        gc_result(0, "backend_cuda_create", e.msg);
        return gpu_check_finish();
    }
    kernels(be);
    model(be);
    be->destroy(be);
    return gpu_check_finish();
}
