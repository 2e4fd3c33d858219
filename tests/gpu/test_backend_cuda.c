/* GPU test: the CUDA backend (exec/cuda/backend_cuda) against the CPU
 * backend, op by op through the same table, then a whole GPT stage
 * (exec/core/gpt) forward + backward on each, then per-op CUDA-event timing.
 *
 * Tolerances (|got - want| <= atol + rtol |want|):
 *   element-wise / norm / loss ops: both fp32; differences are summation
 *     order and __expf/tanhf (a few ulp): atol 1e-5, rtol 1e-4;
 *   GEMM: cuBLASLt rounds fp32 operands to bf16 (up to 2^-8 relative per
 *     product; the inputs here are not bf16-exact on purpose), and outputs
 *     near 0 come from cancellation, so GEMMs are compared by the relative
 *     norm error ||got - want|| / ||want||, expected ~2^-9 = 2e-3 for
 *     random-sign rounding errors, allowed 1e-2 (a wrong transpose or
 *     leading dimension gives O(1));
 *   whole stage: every GEMM rounds its operands to bf16, so the loss may
 *     differ by ~1e-3 relative (allowed 1e-2) and the gradient vector by a
 *     relative norm of a few 1e-3 (allowed 3e-2); a wrong op or index gives
 *     O(1). */
#include <math.h>

#include "exec/core/backend.h"
#include "exec/core/comm.h"
#include "exec/core/data.h"
#include "exec/core/gpt.h"
#include "exec/cpu/backend_cpu.h"
#include "exec/cuda/backend_cuda.h"
#include "tests/gpu/gpu_check.h"

static backend *CPU, *GPU;

/* A tensor on both backends with the same contents. */
typedef struct {
    float *c, *g;
    size_t n;
} pair;

static pair mk(size_t n, uint32_t seed, float scale)
{
    pair p = {CPU->alloc(CPU, n), GPU->alloc(GPU, n), n};
    float *h = gc_rand(n, seed, scale);
    for (size_t i = 0; i < n; i++) /* not bf16-exact: exercises the GEMM rounding */
        h[i] *= 1.0f + 1.0f / 1024.0f;
    memcpy(p.c, h, n * 4);
    GPU->to_device(GPU, p.g, h, n);
    free(h);
    return p;
}

static void rm(pair *p)
{
    CPU->free(CPU, p->c);
    GPU->free(GPU, p->g);
}

static void cmp(const char *what, const pair *p, double atol, double rtol)
{
    float *h = malloc(p->n * 4);
    GPU->to_host(GPU, h, p->g, p->n);
    gc_close(what, h, p->c, p->n, atol, rtol);
    free(h);
}

/* ||got - want|| / ||want|| <= lim */
static void cmp_norm(const char *what, const pair *p, double lim)
{
    float *h = malloc(p->n * 4);
    GPU->to_host(GPU, h, p->g, p->n);
    double num = 0, den = 0;
    for (size_t i = 0; i < p->n; i++) {
        num += ((double)h[i] - p->c[i]) * ((double)h[i] - p->c[i]);
        den += (double)p->c[i] * p->c[i];
    }
    double rel = den > 0 ? sqrt(num / den) : INFINITY;
    char msg[96];
    snprintf(msg, sizeof msg, "relative norm error %.3g (limit %.1e), n=%zu", rel, lim, p->n);
    gc_result(rel <= lim, what, msg);
    free(h);
}

#define AT 1e-5
#define RT 1e-4

static void test_ops(void)
{
    int N = 40, C = 96, V = 50, T = 8;
    size_t nc = (size_t)N * C;
    pair x = mk(nc, 51, 2.0f), w = mk(C, 52, 1.0f), b = mk(C, 53, 0.5f), y = mk(nc, 54, 0.0f);
    pair mean = mk(N, 55, 0.0f), rstd = mk(N, 56, 0.0f), dy = mk(nc, 57, 1.0f);
    pair dx = mk(nc, 58, 0.1f), dw = mk(C, 59, 0.1f), db = mk(C, 60, 0.1f);
#define BOTH(call_c, call_g) (call_c, call_g)
    BOTH(CPU->layernorm_fwd(CPU, y.c, mean.c, rstd.c, x.c, w.c, b.c, N, C),
         GPU->layernorm_fwd(GPU, y.g, mean.g, rstd.g, x.g, w.g, b.g, N, C));
    cmp("layernorm_fwd", &y, AT, RT);
    cmp("layernorm_fwd rstd", &rstd, AT, RT);
    BOTH(CPU->layernorm_bwd_input(CPU, dx.c, dy.c, x.c, w.c, mean.c, rstd.c, N, C),
         GPU->layernorm_bwd_input(GPU, dx.g, dy.g, x.g, w.g, mean.g, rstd.g, N, C));
    cmp("layernorm_bwd_input (+=)", &dx, AT, RT);
    BOTH(CPU->layernorm_bwd_weight(CPU, dw.c, db.c, dy.c, x.c, mean.c, rstd.c, N, C),
         GPU->layernorm_bwd_weight(GPU, dw.g, db.g, dy.g, x.g, mean.g, rstd.g, N, C));
    cmp("layernorm_bwd_weight dw (+=)", &dw, AT, RT);
    cmp("layernorm_bwd_weight db (+=)", &db, AT, RT);
    BOTH(CPU->gelu_fwd(CPU, y.c, x.c, nc), GPU->gelu_fwd(GPU, y.g, x.g, nc));
    cmp("gelu_fwd", &y, AT, RT);
    BOTH(CPU->gelu_bwd(CPU, dx.c, x.c, dy.c, nc), GPU->gelu_bwd(GPU, dx.g, x.g, dy.g, nc));
    cmp("gelu_bwd (+=)", &dx, AT, RT);
    BOTH(CPU->bias_fwd(CPU, y.c, b.c, N, C), GPU->bias_fwd(GPU, y.g, b.g, N, C));
    cmp("bias_fwd", &y, AT, RT);
    BOTH(CPU->bias_bwd(CPU, db.c, dy.c, N, C), GPU->bias_bwd(GPU, db.g, dy.g, N, C));
    cmp("bias_bwd (+=)", &db, AT, RT);
    BOTH(CPU->bias_residual_fwd(CPU, y.c, x.c, dy.c, b.c, N, C),
         GPU->bias_residual_fwd(GPU, y.g, x.g, dy.g, b.g, N, C));
    cmp("bias_residual_fwd", &y, AT, RT);
    BOTH(CPU->add(CPU, y.c, x.c, nc), GPU->add(GPU, y.g, x.g, nc));
    cmp("add", &y, AT, RT);

    /* GEMMs as the model calls them: forward, input and weight gradient */
    int OC = 64;
    pair W = mk((size_t)OC * C, 61, 1.0f), out = mk((size_t)N * OC, 62, 0.0f);
    pair dW = mk((size_t)OC * C, 63, 0.1f);
    BOTH(CPU->gemm(CPU, false, true, N, OC, C, 1.0f, x.c, C, W.c, C, 0.0f, out.c, OC),
         GPU->gemm(GPU, false, true, N, OC, C, 1.0f, x.g, C, W.g, C, 0.0f, out.g, OC));
    cmp_norm("gemm forward (x W^T)", &out, 1e-2);
    BOTH(CPU->gemm(CPU, false, false, N, C, OC, 1.0f, out.c, OC, W.c, C, 0.0f, dx.c, C),
         GPU->gemm(GPU, false, false, N, C, OC, 1.0f, out.g, OC, W.g, C, 0.0f, dx.g, C));
    cmp_norm("gemm input gradient (dy W)", &dx, 1e-2);
    BOTH(CPU->gemm(CPU, true, false, OC, C, N, 1.0f, out.c, OC, x.c, C, 1.0f, dW.c, C),
         GPU->gemm(GPU, true, false, OC, C, N, 1.0f, out.g, OC, x.g, C, 1.0f, dW.g, C));
    cmp_norm("gemm weight gradient (dW += dy^T x)", &dW, 1e-2);

    /* embedding and cross-entropy */
    int tok[40], tgt[40];
    for (int i = 0; i < N; i++) {
        tok[i] = (i * 13 + 5) % V;
        tgt[i] = (i * 7 + 3) % V;
    }
    int *tc = CPU->alloc_int(CPU, N), *tg = GPU->alloc_int(GPU, N);
    int *gc_ = CPU->alloc_int(CPU, N), *gg = GPU->alloc_int(GPU, N);
    CPU->int_to_device(CPU, tc, tok, N), GPU->int_to_device(GPU, tg, tok, N);
    CPU->int_to_device(CPU, gc_, tgt, N), GPU->int_to_device(GPU, gg, tgt, N);
    pair wte = mk((size_t)V * C, 64, 1.0f), wpe = mk((size_t)T * C, 65, 1.0f);
    pair dwte = mk((size_t)V * C, 66, 0.1f), dwpe = mk((size_t)T * C, 67, 0.1f);
    BOTH(CPU->embed_fwd(CPU, y.c, tc, wte.c, wpe.c, 8, 24, T, C),
         GPU->embed_fwd(GPU, y.g, tg, wte.g, wpe.g, 8, 24, T, C));
    cmp("embed_fwd rows 8..31", &y, AT, RT);
    BOTH(CPU->embed_bwd(CPU, dwte.c, dwpe.c, dy.c, tc, 8, 24, T, C),
         GPU->embed_bwd(GPU, dwte.g, dwpe.g, dy.g, tg, 8, 24, T, C));
    cmp("embed_bwd dwte (+=)", &dwte, AT, RT);
    cmp("embed_bwd dwpe (+=)", &dwpe, AT, RT);
    pair logits = mk((size_t)N * V, 68, 5.0f), probs = mk((size_t)N * V, 69, 0.0f);
    pair losses = mk(N, 70, 0.0f), dlog = mk((size_t)N * V, 71, 0.01f);
    BOTH(CPU->crossentropy_fwd(CPU, losses.c, probs.c, logits.c, gc_, N, V),
         GPU->crossentropy_fwd(GPU, losses.g, probs.g, logits.g, gg, N, V));
    cmp("crossentropy_fwd losses", &losses, AT, RT);
    cmp("crossentropy_fwd probs", &probs, 1e-7, RT);
    /* in place (probs = logits), as gpt_forward calls it: the same losses and probs */
    pair lin = mk((size_t)N * V, 68, 5.0f), lossin = mk(N, 70, 0.0f);
    BOTH(CPU->crossentropy_fwd(CPU, lossin.c, lin.c, lin.c, gc_, N, V),
         GPU->crossentropy_fwd(GPU, lossin.g, lin.g, lin.g, gg, N, V));
    cmp("crossentropy_fwd in place (probs = logits) losses", &lossin, AT, RT);
    cmp("crossentropy_fwd in place (probs = logits) probs", &lin, 1e-7, RT);
    rm(&lin), rm(&lossin);
    BOTH(CPU->crossentropy_bwd(CPU, dlog.c, probs.c, gc_, N, V, 1.0f / N),
         GPU->crossentropy_bwd(GPU, dlog.g, probs.g, gg, N, V, 1.0f / N));
    cmp("crossentropy_bwd (+=)", &dlog, 1e-7, RT);
    pair m = mk(nc, 72, 0.001f), v = mk(nc, 73, 0.0f);
    BOTH(CPU->adam(CPU, x.c, dy.c, m.c, v.c, nc, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1),
         GPU->adam(GPU, x.g, dy.g, m.g, v.g, nc, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1));
    cmp("adam params", &x, 1e-6, 1e-6);
    GPU->sync(GPU);
    ts_err e;
    err_clear(&e);
    gc_result(backend_cuda_status(GPU, &e) == TS_OK, "backend status after every op", e.msg);
    pair *all[] = {&x,  &w,   &b,   &y,    &mean, &rstd,   &dy,    &dx,     &dw,   &db, &W, &out,
                   &dW, &wte, &wpe, &dwte, &dwpe, &logits, &probs, &losses, &dlog, &m,  &v};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        rm(all[i]);
    CPU->free_int(CPU, tc), GPU->free_int(GPU, tg), CPU->free_int(CPU, gc_);
    GPU->free_int(GPU, gg);
}

static int nprof, badprof;
static void on_op(void *ud, const backend_cuda_op *op)
{
    (void)ud;
    nprof++;
    if (!op->op || op->dur_ns < 0 || op->start_ns < 0 || op->start_mono_ns <= 0)
        badprof++;
}

/* One micro-batch forward + backward of the same model on both backends. */
static void test_stage(void)
{
    static const gpt_dims D = {.vocab = 64, .seq = 16, .hidden = 64, .heads = 4, .ffn = 256, .layers = 2, .batch = 2};
    int N = D.batch * D.seq, tok[32], tgt[32];
    data_microbatch(7, 0, 1, 0, D.batch, D.seq, D.vocab, tok, tgt);
    backend *bes[2] = {CPU, GPU};
    double loss[2] = {0, 0};
    size_t np = gpt_num_params(&D);
    float *grads[2] = {calloc(np, 4), calloc(np, 4)};
    ts_err e;
    err_clear(&e);
    for (int i = 0; i < 2; i++) {
        comm *cm = NULL;
        gpt_stage *st = NULL;
        gpt_acts *a = NULL;
        int rc = comm_local_create(&cm, &e);
        if (rc == TS_OK)
            rc = gpt_stage_create(&D, 0, D.layers, true, true, false, 42, bes[i], cm, &st, &e);
        if (rc == TS_OK && i == 1)
            gpt_stage_set_prof(st, backend_cuda_prof, GPU);
        if (rc == TS_OK)
            rc = gpt_acts_create(st, &a, &e);
        if (rc == TS_OK) {
            gpt_stage_zero_grads(st);
            rc = gpt_forward(st, a, tok, tgt, NULL, NULL, &loss[i], &e);
        }
        if (rc == TS_OK)
            rc = gpt_backward(st, a, NULL, 1.0f / N, NULL, &e);
        if (rc == TS_OK)
            rc = gpt_stage_export(st, true, true, grads[i], &e);
        if (rc == TS_OK && i == 1) {
            size_t dropped = 0;
            rc = backend_cuda_prof_collect(GPU, on_op, NULL, &dropped, &e);
            char msg[96];
            snprintf(msg, sizeof msg, "%d ops timed, %d malformed, %zu dropped", nprof, badprof, dropped);
            gc_result(rc == TS_OK && nprof > 20 && badprof == 0 && dropped == 0, "per-op CUDA event timing of a stage",
                      msg);
        }
        if (rc != TS_OK)
            gc_result(0, i ? "cuda stage" : "cpu stage", e.msg);
        if (a)
            gpt_acts_free(st, a);
        gpt_stage_free(st);
        if (cm)
            cm->destroy(cm);
    }
    char msg[128];
    snprintf(msg, sizeof msg, "cpu %.6f, cuda %.6f", loss[0] / N, loss[1] / N);
    gc_result(fabs(loss[1] - loss[0]) <= 1e-2 * fabs(loss[0]) && loss[0] > 0, "stage forward loss", msg);
    double num = 0, den = 0;
    for (size_t i = 0; i < np; i++) {
        num += ((double)grads[1][i] - grads[0][i]) * ((double)grads[1][i] - grads[0][i]);
        den += (double)grads[0][i] * grads[0][i];
    }
    double rel = den > 0 ? sqrt(num / den) : INFINITY;
    snprintf(msg, sizeof msg, "relative norm error %.3g over %zu parameters", rel, np);
    gc_result(rel <= 3e-2, "stage gradients", msg);
    free(grads[0]), free(grads[1]);
}

int main(void)
{
    gpu_check_start("test_backend_cuda");
    ts_err e;
    err_clear(&e);
    if (backend_cpu_create(1, &CPU, &e) != TS_OK || backend_cuda_create(0, true, &GPU, &e) != TS_OK) {
        gc_result(0, "backend creation", e.msg);
        return gpu_check_finish();
    }
    /* a device index out of range is refused with the valid range */
    backend *bad = NULL;
    int rc = backend_cuda_create(999, false, &bad, &e);
    gc_result(rc == TS_EINVAL && strstr(e.msg, "valid are") != NULL, "device 999 refused", e.msg);
    test_ops();
    test_stage();
    GPU->destroy(GPU);
    CPU->destroy(CPU);
    return gpu_check_finish();
}
