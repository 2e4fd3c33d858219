/* cugemm — cuBLASLt GEMMs with a per-shape plan cache. Contract in cugemm.h. */
#include "exec/cuda/cugemm.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>

#define CUGEMM_INIT_SLOTS 256u /* power of two; doubles at 50% load */
#define CUGEMM_TUNE_RUNS  3

typedef struct {
    int kind, ta, tb, M, N, K, lda, ldb, ldc, batch, beta_zero, align;
    long long sa, sb, sc;
} plan_key;

typedef struct {
    bool used;
    plan_key key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc; /* column-major views (see below); D = C */
    cublasLtMatmulAlgo_t algo;
} plan;

struct cugemm {
    cublasLtHandle_t lt;
    void *workspace;
    bool autotune;
    plan *slots;
    size_t nslots, nplans, hits;
};

static int lt_fail(ts_err *err, cublasStatus_t st, const char *what)
{
    return err_set(err, TS_ESTATE, "cuBLASLt %s failed: %s (status %d)", what, cublasLtGetStatusString(st), (int)st);
}

static int cuda_fail(ts_err *err, cudaError_t st, const char *what)
{
    return err_set(err, TS_ESTATE, "CUDA %s failed: %s", what, cudaGetErrorString(st));
}

int cugemm_create(bool autotune, cugemm **out, ts_err *err)
{
    *out = NULL;
    cugemm *g = calloc(1, sizeof *g);
    if (!g)
        return err_set(err, TS_ENOMEM, "cugemm: out of host memory");
    g->autotune = autotune;
    g->nslots = CUGEMM_INIT_SLOTS;
    g->slots = calloc(g->nslots, sizeof *g->slots);
    if (!g->slots) {
        free(g);
        return err_set(err, TS_ENOMEM, "cugemm: out of host memory for %u plans", CUGEMM_INIT_SLOTS);
    }
    cublasStatus_t st = cublasLtCreate(&g->lt);
    if (st != CUBLAS_STATUS_SUCCESS) {
        free(g->slots);
        free(g);
        return err_set(err, TS_ENOTSUP, "cuBLASLt handle could not be created: %s", cublasLtGetStatusString(st));
    }
    cudaError_t ce = cudaMalloc(&g->workspace, CUGEMM_WORKSPACE_BYTES);
    if (ce != cudaSuccess) {
        cublasLtDestroy(g->lt);
        free(g->slots);
        free(g);
        return err_set(err, TS_ENOMEM, "cugemm: %u bytes of GPU workspace: %s", CUGEMM_WORKSPACE_BYTES,
                       cudaGetErrorString(ce));
    }
    *out = g;
    return TS_OK;
}

static void plan_release(plan *p)
{
    if (!p->used)
        return;
    cublasLtMatrixLayoutDestroy(p->la);
    cublasLtMatrixLayoutDestroy(p->lb);
    cublasLtMatrixLayoutDestroy(p->lc);
    cublasLtMatmulDescDestroy(p->desc);
    p->used = false;
}

void cugemm_destroy(cugemm *g)
{
    if (!g)
        return;
    for (size_t i = 0; i < g->nslots; i++)
        plan_release(&g->slots[i]);
    free(g->slots);
    cudaFree(g->workspace);
    cublasLtDestroy(g->lt);
    free(g);
}

size_t cugemm_plans(const cugemm *g)
{
    return g->nplans;
}

size_t cugemm_hits(const cugemm *g)
{
    return g->hits;
}

/* FNV-1a over the key's bytes (the key is zero-initialised, padding included). */
static uint64_t key_hash(const plan_key *k)
{
    const unsigned char *b = (const unsigned char *)k;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof *k; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static plan *slot_find(plan *slots, size_t nslots, const plan_key *k)
{
    size_t i = (size_t)key_hash(k) & (nslots - 1);
    while (slots[i].used && memcmp(&slots[i].key, k, sizeof *k) != 0)
        i = (i + 1) & (nslots - 1);
    return &slots[i];
}

static int grow(cugemm *g, ts_err *err)
{
    size_t n = g->nslots * 2;
    plan *s = calloc(n, sizeof *s);
    if (!s)
        return err_set(err, TS_ENOMEM, "cugemm: out of host memory for %zu plans", n);
    for (size_t i = 0; i < g->nslots; i++)
        if (g->slots[i].used)
            *slot_find(s, n, &g->slots[i].key) = g->slots[i];
    free(g->slots);
    g->slots = s;
    g->nslots = n;
    return TS_OK;
}

/* Largest power of two (<= 256) dividing every operand address, and, for a
 * batch, every matrix's address (the strides in bytes). */
static int ptr_align(const cugemm_args *a)
{
    uintptr_t x = (uintptr_t)a->A | (uintptr_t)a->B | (uintptr_t)a->C | 256u;
    if (a->batch > 1) {
        uintptr_t eab = a->kind == CUGEMM_F32 ? 4 : 2, ec = a->kind == CUGEMM_BF16 ? 2 : 4;
        x |= (uintptr_t)a->stride_a * eab | (uintptr_t)a->stride_b * eab | (uintptr_t)a->stride_c * ec;
    }
    return (int)(x & (~x + 1));
}

static int layout(cublasLtMatrixLayout_t *l, cudaDataType_t t, int rows, int cols, int ld, int batch, long long stride,
                  ts_err *err)
{
    cublasStatus_t st = cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld);
    if (st != CUBLAS_STATUS_SUCCESS)
        return lt_fail(err, st, "matrix layout");
    if (batch > 1) {
        int32_t b = batch;
        int64_t s = stride;
        st = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s, sizeof s);
        if (st != CUBLAS_STATUS_SUCCESS) {
            cublasLtMatrixLayoutDestroy(*l);
            return lt_fail(err, st, "batched layout");
        }
    }
    return TS_OK;
}

/* cuBLASLt is column-major: row-major C = op(A) op(B) is column-major
 * C^T = op(B)^T op(A)^T, so the column-major problem is m = N, n = M, k = K
 * with first operand B (transposed when trans_b) and second operand A. */
static int plan_build(cugemm *g, plan *p, const plan_key *k, ts_err *err)
{
    cudaDataType_t tab = k->kind == CUGEMM_F32 ? CUDA_R_32F : CUDA_R_16BF;
    cudaDataType_t tc = k->kind == CUGEMM_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasComputeType_t ct = k->kind == CUGEMM_F32 ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F;
    memset(p, 0, sizeof *p);
    cublasStatus_t st = cublasLtMatmulDescCreate(&p->desc, ct, CUDA_R_32F);
    if (st != CUBLAS_STATUS_SUCCESS)
        return lt_fail(err, st, "matmul descriptor");
    cublasOperation_t op1 = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op2 = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op1, sizeof op1);
    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op2, sizeof op2);
    int m = k->N, n = k->M, kk = k->K;
    int rc = layout(&p->la, tab, k->tb ? kk : m, k->tb ? m : kk, k->ldb, k->batch, k->sb, err);
    if (rc == TS_OK) {
        rc = layout(&p->lb, tab, k->ta ? n : kk, k->ta ? kk : n, k->lda, k->batch, k->sa, err);
        if (rc == TS_OK) {
            rc = layout(&p->lc, tc, m, n, k->ldc, k->batch, k->sc, err);
            if (rc != TS_OK)
                cublasLtMatrixLayoutDestroy(p->lb);
        }
        if (rc != TS_OK)
            cublasLtMatrixLayoutDestroy(p->la);
    }
    if (rc != TS_OK) {
        cublasLtMatmulDescDestroy(p->desc);
        return rc;
    }
    p->key = *k;
    p->used = true;
    (void)g;
    return TS_OK;
}

static int heuristic(cugemm *g, plan *p, cublasLtMatmulHeuristicResult_t *res, int *nres, ts_err *err)
{
    cublasLtMatmulPreference_t pref;
    cublasStatus_t st = cublasLtMatmulPreferenceCreate(&pref);
    if (st != CUBLAS_STATUS_SUCCESS)
        return lt_fail(err, st, "preference");
    uint64_t ws = CUGEMM_WORKSPACE_BYTES;
    uint32_t al = (uint32_t)p->key.align;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al);
    st = cublasLtMatmulAlgoGetHeuristic(g->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, CUGEMM_TUNE_ALGOS, res, nres);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS)
        return lt_fail(err, st, "heuristic");
    if (*nres == 0)
        return err_set(err, TS_ENOTSUP,
                       "cuBLASLt has no algorithm for GEMM M=%d N=%d K=%d batch=%d "
                       "(alignment %d bytes)",
                       p->key.M, p->key.N, p->key.K, p->key.batch, p->key.align);
    return TS_OK;
}

static cublasStatus_t matmul(cugemm *g, const plan *p, const cublasLtMatmulAlgo_t *algo, const cugemm_args *a,
                             cudaStream_t s)
{
    return cublasLtMatmul(g->lt, p->desc, &a->alpha, a->B, p->la, a->A, p->lb, &a->beta, a->C, p->lc, a->C, p->lc, algo,
                          g->workspace, CUGEMM_WORKSPACE_BYTES, s);
}

/* Time the candidates (beta == 0 only: the output is overwritten, so
 * repeated runs are harmless) and return the index of the fastest. */
static int tune(cugemm *g, const plan *p, const cublasLtMatmulHeuristicResult_t *res, int nres, const cugemm_args *a,
                cudaStream_t s, ts_err *err)
{
    cudaEvent_t e0, e1;
    cudaError_t ce = cudaEventCreate(&e0);
    if (ce != cudaSuccess)
        return cuda_fail(err, ce, "event create");
    ce = cudaEventCreate(&e1);
    if (ce != cudaSuccess) {
        cudaEventDestroy(e0);
        return cuda_fail(err, ce, "event create");
    }
    int best = 0;
    float best_ms = 0.0f;
    for (int i = 0; i < nres; i++) {
        if (matmul(g, p, &res[i].algo, a, s) != CUBLAS_STATUS_SUCCESS) /* warm-up */
            continue;
        cudaEventRecord(e0, s);
        for (int r = 0; r < CUGEMM_TUNE_RUNS; r++)
            matmul(g, p, &res[i].algo, a, s);
        cudaEventRecord(e1, s);
        float ms = 0.0f;
        if (cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess)
            continue;
        if (i == 0 || ms < best_ms) {
            best = i;
            best_ms = ms;
        }
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return best;
}

static int check_args(const cugemm_args *a, ts_err *err)
{
    if (a->M <= 0 || a->N <= 0 || a->K <= 0)
        return err_set(err, TS_EINVAL, "cugemm: M=%d N=%d K=%d: every dimension must be > 0", a->M, a->N, a->K);
    if (a->batch < 1)
        return err_set(err, TS_EINVAL, "cugemm: batch=%d: must be >= 1", a->batch);
    int a_cols = a->trans_a ? a->M : a->K, b_cols = a->trans_b ? a->K : a->N;
    if (a->lda < a_cols || a->ldb < b_cols || a->ldc < a->N)
        return err_set(err, TS_EINVAL,
                       "cugemm: leading dimensions lda=%d ldb=%d ldc=%d: row-major needs "
                       "lda >= %d, ldb >= %d, ldc >= %d",
                       a->lda, a->ldb, a->ldc, a_cols, b_cols, a->N);
    if (!a->A || !a->B || !a->C)
        return err_set(err, TS_EINVAL, "cugemm: NULL operand (A %p, B %p, C %p)", a->A, a->B, a->C);
    if ((int)a->kind < CUGEMM_F32 || a->kind > CUGEMM_BF16_F32C)
        return err_set(err, TS_EINVAL, "cugemm: kind %d: valid are 0..2", (int)a->kind);
    return TS_OK;
}

int cugemm_run(cugemm *g, const cugemm_args *a, cudaStream_t stream, ts_err *err)
{
    int rc = check_args(a, err);
    if (rc != TS_OK)
        return rc;
    plan_key k;
    memset(&k, 0, sizeof k);
    k.kind = (int)a->kind;
    k.ta = a->trans_a;
    k.tb = a->trans_b;
    k.M = a->M;
    k.N = a->N;
    k.K = a->K;
    k.lda = a->lda;
    k.ldb = a->ldb;
    k.ldc = a->ldc;
    k.batch = a->batch;
    if (a->batch > 1) {
        k.sa = a->stride_a;
        k.sb = a->stride_b;
        k.sc = a->stride_c;
    }
    k.beta_zero = a->beta == 0.0f;
    k.align = ptr_align(a);

    plan *p = slot_find(g->slots, g->nslots, &k);
    if (p->used) {
        g->hits++;
        cublasStatus_t st = matmul(g, p, &p->algo, a, stream);
        return st == CUBLAS_STATUS_SUCCESS ? TS_OK : lt_fail(err, st, "matmul");
    }
    if (2 * (g->nplans + 1) > g->nslots) {
        rc = grow(g, err);
        if (rc != TS_OK)
            return rc;
        p = slot_find(g->slots, g->nslots, &k);
    }
    rc = plan_build(g, p, &k, err);
    if (rc != TS_OK)
        return rc;
    cublasLtMatmulHeuristicResult_t res[CUGEMM_TUNE_ALGOS];
    int nres = 0;
    rc = heuristic(g, p, res, &nres, err);
    if (rc != TS_OK) {
        plan_release(p);
        return rc;
    }
    int pick = (g->autotune && k.beta_zero && nres > 1) ? tune(g, p, res, nres, a, stream, err) : 0;
    if (pick < 0) {
        plan_release(p);
        return pick;
    }
    p->algo = res[pick].algo;
    g->nplans++;
    cublasStatus_t st = matmul(g, p, &p->algo, a, stream);
    return st == CUBLAS_STATUS_SUCCESS ? TS_OK : lt_fail(err, st, "matmul");
}
