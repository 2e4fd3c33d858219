/* GPU test: cuBLASLt GEMMs (exec/cuda/cugemm) against CBLAS (OpenBLAS).
 *
 * Inputs are exactly representable in bf16, so the only differences from an
 * fp32 CBLAS reference are the accumulation order (fp32 both sides) and, for
 * bf16 outputs, the final rounding. Per element, with R = |A| |B| (the sum
 * of |a_ik b_kj|, computed by CBLAS on absolute values):
 *   fp32 outputs: |got - want| <= 1e-4 R + 1e-6 (fp32 sums of <= 512 terms
 *     differ by a few 1e-7 R in practice; 1e-4 leaves room, a wrong operand
 *     or transpose is off by O(R));
 *   bf16 outputs: additionally 2^-8 |want| (one rounding to bf16).
 * Leading dimensions are padded (multiples of 8 elements, 16-byte rows). */
#include <math.h>

#include <cblas.h>

#include "exec/cuda/cugemm.h"
#include "tests/gpu/gpu_check.h"

static cudaStream_t S;

static int ld_for(int cols)
{
    return (cols + 7) / 8 * 8 + 8;
}

typedef struct {
    const char *name;
    cugemm_kind kind;
    bool ta, tb;
    int M, N, K, batch;
    float alpha, beta;
} gcase;

static void run_case(cugemm *g, const gcase *c)
{
    int ar = c->ta ? c->K : c->M, ac = c->ta ? c->M : c->K; /* stored shapes */
    int br = c->tb ? c->N : c->K, bc = c->tb ? c->K : c->N;
    int lda = ld_for(ac), ldb = ld_for(bc), ldc = ld_for(c->N);
    long long sa = (long long)ar * lda, sb = (long long)br * ldb, sc = (long long)c->M * ldc;
    size_t na = (size_t)sa * c->batch, nb = (size_t)sb * c->batch, ncc = (size_t)sc * c->batch;
    float *A = gc_rand(na, 31, 1.0f), *B = gc_rand(nb, 32, 1.0f), *C0 = gc_rand(ncc, 33, 1.0f);
    float *want = malloc(ncc * 4), *R = calloc(ncc, 4), *aA = malloc(na * 4), *aB = malloc(nb * 4);
    memcpy(want, C0, ncc * 4);
    for (size_t i = 0; i < na; i++)
        aA[i] = fabsf(A[i]);
    for (size_t i = 0; i < nb; i++)
        aB[i] = fabsf(B[i]);
    bool bf_out = c->kind == CUGEMM_BF16, bf_in = c->kind != CUGEMM_F32;
    if (bf_out) /* the GPU's C starts as bf16(C0) */
        for (size_t i = 0; i < ncc; i++)
            want[i] = gc_bf2f(gc_f2bf(C0[i]));
    for (int b = 0; b < c->batch; b++) {
        cblas_sgemm(CblasRowMajor, c->ta ? CblasTrans : CblasNoTrans, c->tb ? CblasTrans : CblasNoTrans, c->M, c->N,
                    c->K, c->alpha, A + b * sa, lda, B + b * sb, ldb, c->beta, want + b * sc, ldc);
        cblas_sgemm(CblasRowMajor, c->ta ? CblasTrans : CblasNoTrans, c->tb ? CblasTrans : CblasNoTrans, c->M, c->N,
                    c->K, fabsf(c->alpha), aA + b * sa, lda, aB + b * sb, ldb, 0.0f, R + b * sc, ldc);
    }
    void *dA = bf_in ? (void *)gc_dev_bf16(A, na) : (void *)gc_dev_f32(A, na);
    void *dB = bf_in ? (void *)gc_dev_bf16(B, nb) : (void *)gc_dev_f32(B, nb);
    void *dC = bf_out ? (void *)gc_dev_bf16(C0, ncc) : (void *)gc_dev_f32(C0, ncc);
    cugemm_args a = {.kind = c->kind,
                     .trans_a = c->ta,
                     .trans_b = c->tb,
                     .M = c->M,
                     .N = c->N,
                     .K = c->K,
                     .alpha = c->alpha,
                     .beta = c->beta,
                     .A = dA,
                     .lda = lda,
                     .stride_a = sa,
                     .B = dB,
                     .ldb = ldb,
                     .stride_b = sb,
                     .C = dC,
                     .ldc = ldc,
                     .stride_c = sc,
                     .batch = c->batch};
    ts_err e;
    err_clear(&e);
    int rc = cugemm_run(g, &a, S, &e);
    cudaError_t st = cudaStreamSynchronize(S);
    if (rc != TS_OK || st != cudaSuccess) {
        gc_result(0, c->name, rc != TS_OK ? e.msg : cudaGetErrorString(st));
    } else {
        float *got = bf_out ? gc_host_bf16(dC, ncc) : gc_host_f32(dC, ncc);
        size_t bad = 0, worst = 0;
        double worst_ex = -INFINITY;
        for (int b = 0; b < c->batch; b++)
            for (int i = 0; i < c->M; i++)
                for (int j = 0; j < c->N; j++) { /* padding columns are not compared */
                    size_t k = (size_t)b * sc + (size_t)i * ldc + j;
                    /* NOLINTNEXTLINE(clang-analyzer-unix.Malloc): every case has batch, M, N >= 1 */
                    double lim = 1e-4 * R[k] + 1e-6 + (bf_out ? ldexp(fabs(want[k]), -8) : 0.0);
                    double ex = fabs((double)got[k] - want[k]) - lim;
                    if (!(ex <= 0.0))
                        bad++;
                    if (ex > worst_ex || isnan(ex)) {
                        worst_ex = ex;
                        worst = k;
                    }
                }
        char msg[200];
        snprintf(msg, sizeof msg, "%zu bad; worst [%zu] got %.6g want %.6g (R %.3g)", bad, worst,
                 /* NOLINTNEXTLINE(clang-analyzer-unix.Malloc): as above */
                 got[worst], want[worst], R[worst]);
        gc_result(bad == 0, c->name, msg);
        free(got);
    }
    free(A), free(B), free(C0), free(want), free(R), free(aA), free(aB);
    cudaFree(dA), cudaFree(dB), cudaFree(dC);
}

static const gcase CASES[] = {
    {"f32 (bf16 tensor cores) NN", CUGEMM_F32, false, false, 67, 45, 129, 1, 1.0f, 0.0f},
    {"f32 NT", CUGEMM_F32, false, true, 67, 45, 129, 1, 1.0f, 0.0f},
    {"f32 TN", CUGEMM_F32, true, false, 67, 45, 129, 1, 1.0f, 0.0f},
    {"f32 TT", CUGEMM_F32, true, true, 67, 45, 129, 1, 1.0f, 0.0f},
    {"f32 alpha=0.5 beta=1 (accumulate)", CUGEMM_F32, false, true, 64, 96, 80, 1, 0.5f, 1.0f},
    {"f32 strided batch=5 (q k^T)", CUGEMM_F32, false, true, 33, 33, 16, 5, 1.0f, 0.0f},
    {"bf16 NN", CUGEMM_BF16, false, false, 128, 96, 256, 1, 1.0f, 0.0f},
    {"bf16 NT", CUGEMM_BF16, false, true, 128, 96, 256, 1, 1.0f, 0.0f},
    {"bf16 strided batch=4 (att v)", CUGEMM_BF16, false, false, 64, 32, 64, 4, 1.0f, 0.0f},
    {"bf16 -> fp32 main grad TN beta=1", CUGEMM_BF16_F32C, true, false, 96, 64, 512, 1, 1.0f, 1.0f},
};

int main(void)
{
    gpu_check_start("test_cugemm");
    if (cudaStreamCreate(&S) != cudaSuccess) {
        printf("FAIL cudaStreamCreate\n0 passed, 1 failed\n");
        return 1;
    }
    ts_err e;
    err_clear(&e);
    for (int tuned = 0; tuned <= 1; tuned++) {
        cugemm *g = NULL;
        if (cugemm_create(tuned, &g, &e) != TS_OK) {
            gc_result(0, "cugemm_create", e.msg);
            break;
        }
        printf("-- %s\n", tuned ? "autotuned plans" : "heuristic plans");
        size_t ncases = sizeof CASES / sizeof CASES[0];
        for (size_t i = 0; i < ncases; i++)
            run_case(g, &CASES[i]);
        /* the plan cache: running the cases again builds no plan */
        size_t plans = cugemm_plans(g), hits = cugemm_hits(g);
        for (size_t i = 0; i < ncases; i++)
            run_case(g, &CASES[i]);
        char msg[160];
        snprintf(msg, sizeof msg, "plans %zu -> %zu, hits %zu -> %zu", plans, cugemm_plans(g), hits, cugemm_hits(g));
        gc_result(cugemm_plans(g) == plans && cugemm_hits(g) == hits + ncases, "plan cache: second pass all hits", msg);
        /* a bad shape is refused with a message naming it */
        cugemm_args bad = {.kind = CUGEMM_F32,
                           .M = 0,
                           .N = 4,
                           .K = 4,
                           .lda = 4,
                           .ldb = 4,
                           .ldc = 4,
                           .batch = 1,
                           .A = g,
                           .B = g,
                           .C = g};
        int rc = cugemm_run(g, &bad, S, &e);
        gc_result(rc == TS_EINVAL && strstr(e.msg, "M=0") != NULL, "M=0 refused", e.msg);
        cugemm_destroy(g);
    }
    cudaStreamDestroy(S);
    return gpu_check_finish();
}
