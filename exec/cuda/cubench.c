/* cubench — GPU microbenchmarks for calibration. Contract in cubench.h. */
#include "exec/cuda/cubench.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuk.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* A timer: `reps` event pairs recorded around runs of fn on stream s. */
typedef int (*run_fn)(void *ctx, ts_err *err);

static int time_median(cudaStream_t s, run_fn fn, void *ctx, int reps, double *out_ns, ts_err *err)
{
    if (reps < 1 || reps > 10000)
        return err_set(err, TS_EINVAL, "cubench: repeats %d: valid are 1..10000", reps);
    int rc = TS_OK;
    for (int i = 0; i < CUBENCH_WARMUP && rc == TS_OK; i++)
        rc = fn(ctx, err);
    /* NOLINTNEXTLINE(bugprone-sizeof-expression): the elements are pointers (cudaEvent_t) */
    cudaEvent_t *ev = calloc(2 * (size_t)reps, sizeof *ev);
    double *t = calloc((size_t)reps, sizeof *t);
    if (!ev || !t) {
        free(ev);
        free(t);
        return err_set(err, TS_ENOMEM, "cubench: out of host memory");
    }
    int made = 0;
    cudaError_t st = cudaSuccess;
    for (; made < 2 * reps && st == cudaSuccess; made++)
        st = cudaEventCreate(&ev[made]);
    if (st != cudaSuccess) {
        made--;
        rc = err_set(err, TS_ESTATE, "cubench: event creation: %s", cudaGetErrorString(st));
    }
    for (int i = 0; i < reps && rc == TS_OK; i++) {
        cudaEventRecord(ev[2 * i], s);
        rc = fn(ctx, err);
        cudaEventRecord(ev[2 * i + 1], s);
    }
    if (rc == TS_OK && (st = cudaStreamSynchronize(s)) != cudaSuccess)
        rc = err_set(err, TS_ESTATE, "cubench: stream: %s", cudaGetErrorString(st));
    for (int i = 0; i < reps && rc == TS_OK; i++) {
        float ms = 0;
        st = cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]);
        if (st != cudaSuccess)
            rc = err_set(err, TS_ESTATE, "cubench: event time: %s", cudaGetErrorString(st));
        t[i] = ms * 1e6;
    }
    if (rc == TS_OK)
        *out_ns = median(t, reps);
    for (int i = 0; i < made; i++)
        cudaEventDestroy(ev[i]);
    free(ev);
    free(t);
    return rc;
}

/* ------------------------------------------------------------ GEMM */

typedef struct {
    cugemm *g;
    cudaStream_t s;
    cugemm_args a;
} gemm_ctx;

static int gemm_once(void *ctx, ts_err *err)
{
    gemm_ctx *c = ctx;
    return cugemm_run(c->g, &c->a, c->s, err);
}

int cubench_gemm(cugemm *g, cudaStream_t s, int M, int N, int K, int batch, int reps, double *median_ns, ts_err *err)
{
    if (M <= 0 || N <= 0 || K <= 0 || batch <= 0)
        return err_set(err, TS_EINVAL, "cubench gemm: m=%d n=%d k=%d batch=%d: all must be > 0", M, N, K, batch);
    size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
    uint16_t *A = NULL, *B = NULL, *C = NULL;
    cudaError_t st = cudaMalloc((void **)&A, na * batch * 2);
    if (st == cudaSuccess)
        st = cudaMalloc((void **)&B, nb * batch * 2);
    if (st == cudaSuccess)
        st = cudaMalloc((void **)&C, nc * batch * 2);
    if (st == cudaSuccess)
        st = cuk_fill_uniform_bf16(A, na * batch, 1, 1.0f, s);
    if (st == cudaSuccess)
        st = cuk_fill_uniform_bf16(B, nb * batch, 2, 1.0f, s);
    int rc = TS_OK;
    if (st != cudaSuccess)
        rc =
            err_set(err, TS_ENOMEM, "cubench gemm m=%d n=%d k=%d batch=%d: %s", M, N, K, batch, cudaGetErrorString(st));
    if (rc == TS_OK) {
        gemm_ctx c = {g,
                      s,
                      {.kind = CUGEMM_BF16,
                       .M = M,
                       .N = N,
                       .K = K,
                       .alpha = 1.0f,
                       .A = A,
                       .lda = K,
                       .stride_a = (long long)na,
                       .B = B,
                       .ldb = N,
                       .stride_b = (long long)nb,
                       .C = C,
                       .ldc = N,
                       .stride_c = (long long)nc,
                       .batch = batch}};
        rc = time_median(s, gemm_once, &c, reps, median_ns, err);
    }
    cudaFree(A);
    cudaFree(B);
    cudaFree(C);
    return rc;
}

/* ------------------------------------------------------------ memory, launch */

typedef struct {
    cudaStream_t s;
    void *dst, *src;
    size_t bytes;
} copy_ctx;

static int copy_once(void *ctx, ts_err *err)
{
    copy_ctx *c = ctx;
    cudaError_t st = cudaMemcpyAsync(c->dst, c->src, c->bytes, cudaMemcpyDeviceToDevice, c->s);
    return st == cudaSuccess ? TS_OK : err_set(err, TS_ESTATE, "cubench copy: %s", cudaGetErrorString(st));
}

int cubench_memory(cudaStream_t s, size_t bytes, int reps, double *median_ns, ts_err *err)
{
    copy_ctx c = {s, NULL, NULL, bytes};
    cudaError_t st = cudaMalloc(&c.src, bytes);
    if (st == cudaSuccess)
        st = cudaMalloc(&c.dst, bytes);
    if (st == cudaSuccess)
        st = cudaMemsetAsync(c.src, 0, bytes, s);
    int rc = st == cudaSuccess
                 ? time_median(s, copy_once, &c, reps, median_ns, err)
                 : err_set(err, TS_ENOMEM, "cubench memory: %zu bytes: %s", bytes, cudaGetErrorString(st));
    cudaFree(c.src);
    cudaFree(c.dst);
    return rc;
}

static int noop_once(void *ctx, ts_err *err)
{
    cudaError_t st = cuk_noop(*(cudaStream_t *)ctx);
    return st == cudaSuccess ? TS_OK : err_set(err, TS_ESTATE, "cubench launch: %s", cudaGetErrorString(st));
}

int cubench_launch(cudaStream_t s, int reps, double *median_ns, ts_err *err)
{
    return time_median(s, noop_once, &s, reps, median_ns, err);
}

/* ------------------------------------------------------------ layer */

typedef struct {
    culayer *L;
    uint64_t seed;
} layer_ctx;

static int layer_fwd_once(void *ctx, ts_err *err)
{
    layer_ctx *c = ctx;
    return culayer_forward(c->L, c->seed++, err);
}

static int layer_bwd_once(void *ctx, ts_err *err)
{
    return culayer_backward(((layer_ctx *)ctx)->L, err);
}

int cubench_layer(const culayer_dims *d, cugemm *g, cudaStream_t s, int reps, double *fwd_ns, double *bwd_ns,
                  ts_err *err)
{
    layer_ctx c = {NULL, 1};
    int rc = culayer_create(d, g, s, &c.L, err);
    if (rc != TS_OK)
        return rc;
    /* the backward reads the saved activations of the last forward; running
     * it repeatedly on the same ones is the same work */
    rc = time_median(s, layer_fwd_once, &c, reps, fwd_ns, err);
    if (rc == TS_OK)
        rc = time_median(s, layer_bwd_once, &c, reps, bwd_ns, err);
    culayer_free(c.L);
    return rc;
}

/* ------------------------------------------------------------ collectives */

static const char *const COLL_NAMES[] = {"all_reduce", "all_gather", "reduce_scatter", "send_recv"};

const char *cubench_coll_name(cubench_coll op)
{
    return (unsigned)op <= CUBENCH_SENDRECV ? COLL_NAMES[op] : "?";
}

double cubench_busbw_factor(cubench_coll op, int n)
{
    if (op == CUBENCH_SENDRECV || n < 2)
        return 1.0;
    return op == CUBENCH_ALLREDUCE ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
}

typedef struct {
    comm *c;
    cubench_coll op;
    float *in, *out;
    size_t n; /* per-rank elements of the op's unit (see the contract) */
} coll_ctx;

static int coll_once(void *ctx, ts_err *err)
{
    coll_ctx *x = ctx;
    comm *c = x->c;
    int g = c->size[COMM_TP];
    switch (x->op) {
    case CUBENCH_ALLREDUCE:
        return c->all_reduce(c, COMM_TP, x->out, x->n, err);
    case CUBENCH_ALLGATHER:
        return c->all_gather(c, COMM_TP, x->out, x->in, x->n / g, err);
    case CUBENCH_REDUCESCATTER:
        return c->reduce_scatter(c, COMM_TP, x->out, x->in, x->n / g, err);
    case CUBENCH_SENDRECV: {
        int me = c->rank[COMM_PP], req = -1, rc = TS_OK;
        if (me == 0)
            rc = c->isend(c, 1, x->in, x->n, 0, &req, err);
        else if (me == 1)
            rc = c->irecv(c, 0, x->out, x->n, 0, &req, err);
        return rc == TS_OK && req >= 0 ? c->wait(c, req, err) : rc;
    }
    }
    return err_set(err, TS_EINVAL, "cubench: collective %d unknown", (int)x->op);
}

/* Fill n floats of device memory with v (host chunks of 1 Mi floats). */
static cudaError_t fill_value(float *d, size_t n, float v, cudaStream_t s)
{
    size_t chunk = (size_t)1 << 20;
    float *h = malloc(chunk * sizeof *h);
    if (!h)
        return cudaErrorMemoryAllocation;
    for (size_t i = 0; i < chunk; i++)
        h[i] = v;
    cudaError_t st = cudaSuccess;
    for (size_t o = 0; o < n && st == cudaSuccess; o += chunk)
        st = cudaMemcpyAsync(d + o, h, (n - o < chunk ? n - o : chunk) * sizeof *h, cudaMemcpyHostToDevice, s);
    if (st == cudaSuccess)
        st = cudaStreamSynchronize(s);
    free(h);
    return st;
}

/* Every element of d[0..n) equals v? (copied back in chunks) */
static bool all_equal(const float *d, size_t n, float v)
{
    size_t chunk = (size_t)1 << 20;
    float *h = malloc(chunk * sizeof *h);
    bool ok = h != NULL;
    for (size_t o = 0; o < n && ok; o += chunk) {
        size_t m = n - o < chunk ? n - o : chunk;
        ok = cudaMemcpy(h, d + o, m * sizeof *h, cudaMemcpyDeviceToHost) == cudaSuccess;
        for (size_t i = 0; i < m && ok; i++)
            ok = h[i] == v;
    }
    free(h);
    return ok;
}

int cubench_coll_run(comm *c, MPI_Comm world, cudaStream_t compute, cubench_coll op, size_t bytes, int reps,
                     double *median_ns, bool *correct, ts_err *err)
{
    int g = op == CUBENCH_SENDRECV ? c->size[COMM_PP] : c->size[COMM_TP];
    int me = op == CUBENCH_SENDRECV ? c->rank[COMM_PP] : c->rank[COMM_TP];
    size_t n = bytes / sizeof(float);
    if (g < 2 || n < (size_t)g || (op != CUBENCH_ALLREDUCE && op != CUBENCH_SENDRECV && n % g))
        return err_set(err, TS_EINVAL,
                       "cubench %s: %zu bytes over %d ranks: need >= 2 ranks "
                       "and a whole number of floats per rank",
                       cubench_coll_name(op), bytes, g);
    coll_ctx x = {c, op, NULL, NULL, n};
    size_t in_n = op == CUBENCH_ALLGATHER ? n / g : n;
    size_t out_n = op == CUBENCH_REDUCESCATTER ? n / g : n;
    cudaError_t st = cudaMalloc((void **)&x.in, in_n * sizeof(float));
    if (st == cudaSuccess)
        st = cudaMalloc((void **)&x.out, out_n * sizeof(float));
    int rc = st == cudaSuccess ? TS_OK
                               : err_set(err, TS_ENOMEM, "cubench %s: %zu bytes: %s", cubench_coll_name(op), bytes,
                                         cudaGetErrorString(st));
    /* correctness run: rank r contributes r + 1 */
    float v = (float)(me + 1);
    if (rc == TS_OK && ((st = fill_value(x.in, in_n, v, compute)) != cudaSuccess ||
                        (st = fill_value(x.out, out_n, op == CUBENCH_ALLREDUCE ? v : 0.0f, compute)) != cudaSuccess))
        rc = err_set(err, TS_ESTATE, "cubench: fill: %s", cudaGetErrorString(st));
    if (rc == TS_OK)
        rc = coll_once(&x, err);
    if (rc == TS_OK && (st = cudaStreamSynchronize(compute)) != cudaSuccess)
        rc = err_set(err, TS_ESTATE, "cubench: stream: %s", cudaGetErrorString(st));
    int ok = 1;
    if (rc == TS_OK) {
        float sum = (float)g * (g + 1) / 2;
        switch (op) {
        case CUBENCH_ALLREDUCE:
        case CUBENCH_REDUCESCATTER:
            ok = all_equal(x.out, out_n, sum);
            break;
        case CUBENCH_ALLGATHER:
            for (int r = 0; r < g && ok; r++)
                ok = all_equal(x.out + (size_t)r * (n / g), n / g, (float)(r + 1));
            break;
        case CUBENCH_SENDRECV:
            ok = me != 1 || all_equal(x.out, n, 1.0f);
            break;
        }
    }
    int all_ok = ok;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, world);
    *correct = all_ok != 0;
    double t = 0;
    if (rc == TS_OK)
        rc = time_median(compute, coll_once, &x, reps, &t, err);
    /* the slowest rank's median is the collective's time */
    double tmax = t;
    MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, world);
    *median_ns = tmax;
    cudaFree(x.in);
    cudaFree(x.out);
    return rc;
}
