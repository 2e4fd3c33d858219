#include "exec/microbench.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exec/core/backend.h"
#include "exec/cpu/backend_cpu.h"
#include "exec/cpu/kern.h"
#include "exec/runtime.h"
#include "exec/watchdog.h"
#include "sim/util/afile.h"
#include "sim/util/csvio.h"

#define REPS 5
/* Repeat an op until one sample spans COMPUTE_SAMPLE_NS: long enough that
 * on a shared machine a sample sees the same share of the cores as a
 * training iteration does (a 0.5 ms sample fits in one scheduler slice and
 * measures the unshared speed). Messages: MSG_SAMPLE_NS. */
#define COMPUTE_SAMPLE_NS 40000000
#define MSG_SAMPLE_NS     4000000

typedef struct {
    FILE *f; /* rank 0's memory stream, NULL elsewhere */
    ts_err *err;
    int rc;
} sink;

/* A number, or an empty cell for 0 (the column does not apply). */
static void cell_int(char *buf, int64_t v)
{
    if (v)
        snprintf(buf, 40, "%lld", (long long)v);
    else
        buf[0] = '\0';
}

static void put_row(sink *s, const char *kind, const char *name, int64_t m, int64_t n, int64_t k, int64_t bytes,
                    int ranks, int rep, double ns)
{
    if (!s->f || s->rc)
        return;
    char c[11][40];
    const char *cells[11];
    snprintf(c[0], 40, "%s", kind);
    snprintf(c[1], 40, "%s", name);
    snprintf(c[2], 40, "fp32");
    cell_int(c[3], m);
    cell_int(c[4], n);
    cell_int(c[5], k);
    cell_int(c[6], m ? 1 : 0);
    cell_int(c[7], bytes);
    snprintf(c[8], 40, "%d", ranks);
    snprintf(c[9], 40, "%d", rep);
    csvio_fmt_double(c[10], 40, ns);
    for (int i = 0; i < 11; i++)
        cells[i] = c[i];
    s->rc = csvio_write_row(s->f, 11, cells, s->err);
}

/* ---------------------------------------------------------------- GEMMs */
/* Successive calls of one GEMM shape read their A and B operands from
 * different places of a ROT_FLOATS pool (64 MiB, above this machine's 35.8
 * MiB L3 and typical last-level caches), so that, as in the model, whose
 * layers read their weights and activations fresh from memory, the operands
 * are not already in cache (repeating one GEMM on the same buffers measured
 * 40-100 GFLOP/s where the model's GEMMs ran at 35-40). */
#define ROT_FLOATS ((size_t)16 << 20)
typedef struct {
    int m, n, k;
    bool ta, tb;
} gemm_shape;

static double time_gemm(backend *be, const gemm_shape *g, float *pool, float *C)
{
    int lda = g->ta ? g->m : g->k, ldb = g->tb ? g->k : g->n;
    size_t a = (size_t)g->m * g->k, ab = a + (size_t)g->k * g->n;
    ab = (ab + 15) & ~(size_t)15; /* 64-byte aligned operand sets */
    size_t sets = ROT_FLOATS / ab;
    if (sets < 1)
        sets = 1;
    int iters = 0;
    int64_t t0 = rt_now_ns(), t1;
    do {
        float *A = pool + (size_t)iters % sets * ab, *B = A + a;
        be->gemm(be, g->ta, g->tb, g->m, g->n, g->k, 1.0f, A, lda, B, ldb, 0.0f, C, g->n);
        iters++;
        t1 = rt_now_ns();
    } while (t1 - t0 < COMPUTE_SAMPLE_NS);
    return (double)(t1 - t0) / iters;
}

static int gemm_shapes(gemm_shape *out, int cap)
{
    int n = 0;
    static const int sq[] = {64, 128, 256, 512, 1024};
    for (size_t i = 0; i < sizeof sq / sizeof sq[0] && n < cap; i++)
        out[n++] = (gemm_shape){sq[i], sq[i], sq[i], false, false};
    static const int Ns[] = {64, 128, 256, 512}, hs[] = {256, 384, 512, 768};
    for (size_t a = 0; a < 4; a++)
        for (size_t b = 0; b < 4 && n + 6 <= cap; b++) {
            int N = Ns[a], h = hs[b];
            out[n++] = (gemm_shape){N, 3 * h, h, false, true};  /* qkv forward */
            out[n++] = (gemm_shape){N, h, h, false, true};      /* projection */
            out[n++] = (gemm_shape){N, 4 * h, h, false, true};  /* fc1 */
            out[n++] = (gemm_shape){N, h, 4 * h, false, false}; /* fc1 input gradient */
            out[n++] = (gemm_shape){4 * h, h, N, true, false};  /* fc1 weight gradient */
            out[n++] = (gemm_shape){h, 4 * h, N, true, false};  /* fc2 weight gradient */
        }
    static const int Ts[] = {64, 128, 256, 512}, hd[] = {32, 64};
    for (size_t a = 0; a < 4; a++)
        for (size_t b = 0; b < 2 && n + 2 <= cap; b++) {
            out[n++] = (gemm_shape){Ts[a], Ts[a], hd[b], false, true};  /* q k^T */
            out[n++] = (gemm_shape){Ts[a], hd[b], Ts[a], false, false}; /* att v */
        }
    static const int lv[][3] = {{128, 8192, 384}, {256, 8192, 512}, {128, 8192, 512}, {64, 4096, 512}};
    for (size_t a = 0; a < 4 && n < cap; a++)
        out[n++] = (gemm_shape){lv[a][0], lv[a][1], lv[a][2], false, true}; /* logits */
    return n;
}

static int bench_gemms(backend *be, sink *s, FILE *progress, ts_err *err)
{
    gemm_shape sh[128];
    int ns = gemm_shapes(sh, 128);
    size_t maxab = 0, maxc = 0;
    for (int i = 0; i < ns; i++) {
        size_t ab = (size_t)sh[i].m * sh[i].k + (size_t)sh[i].k * sh[i].n + 16, c = (size_t)sh[i].m * sh[i].n;
        maxab = ab > maxab ? ab : maxab;
        maxc = c > maxc ? c : maxc;
    }
    size_t npool = maxab > ROT_FLOATS ? maxab : ROT_FLOATS;
    float *pool, *C;
    int rc = be_alloc(be, npool, XMEM_BUFFERS, &pool, err);
    if (!rc && (rc = be_alloc(be, maxc, XMEM_BUFFERS, &C, err)))
        be_free(be, pool, npool, XMEM_BUFFERS);
    if (rc)
        return rc;
    for (size_t i = 0; i < npool; i++)
        pool[i] = (float)(i % 7) * 0.1f;
    for (int i = 0; i < ns; i++) {
        for (int r = 0; r < REPS; r++)
            put_row(s, "gemm", "gemm", sh[i].m, sh[i].n, sh[i].k, 0, 1, r, time_gemm(be, &sh[i], pool, C));
        if (progress && (i % 10 == 9 || i == ns - 1)) {
            fprintf(progress, "microbench: gemm %d/%d\n", i + 1, ns);
            (void)fflush(progress); /* progress only */
        }
    }
    be_free(be, pool, npool, XMEM_BUFFERS);
    be_free(be, C, maxc, XMEM_BUFFERS);
    return s->rc;
}

/* ---------------------------------------------------------------- element-wise */
enum { MK_GELU = 0, MK_RESID, MK_LN, MK_SOFTMAX, MK_ADAM, MK_COPY, MK_COUNT };
static const char *const MK_NAMES[MK_COUNT] = {"gelu", "bias_residual", "layernorm", "softmax", "adam", "copy"};
/* bytes read + written per element */
static const int MK_BYTES[MK_COUNT] = {8, 12, 8, 8, 28, 8};

static void run_mem(backend *be, int kind, size_t n, float **x)
{
    switch (kind) {
    case MK_GELU:
        be->gelu_fwd(be, x[1], x[0], n);
        break;
    case MK_RESID:
        be->bias_residual_fwd(be, x[2], x[0], x[1], NULL, 1, (int)n);
        break;
    case MK_LN: {
        int C = n >= 512 ? 512 : (int)n;
        be->layernorm_fwd(be, x[1], x[2], x[3], x[0], x[4], x[4], n / (size_t)C, C);
        break;
    }
    case MK_SOFTMAX: {
        int T = 1;
        while ((size_t)(T + 1) * (T + 1) <= n)
            T++;
        kern_softmax_causal_fwd(x[1], T, 0.125f);
        break;
    }
    case MK_ADAM:
        be->adam(be, x[0], x[1], x[2], x[3], n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, 1);
        break;
    default:
        be->copy(be, x[1], x[0], n);
        break;
    }
}

static int bench_mem(backend *be, sink *s, FILE *progress, ts_err *err)
{
    static const size_t sizes[] = {1024, 16384, 131072, 1048576, 4194304};
    size_t nmax = sizes[sizeof sizes / sizeof sizes[0] - 1];
    float *x[5] = {0};
    int rc = TS_OK;
    for (int i = 0; i < 5 && !rc; i++)
        rc = be_alloc(be, nmax, XMEM_BUFFERS, &x[i], err);
    if (rc)
        goto out;
    for (size_t i = 0; i < nmax; i++)
        x[0][i] = x[1][i] = (float)(i % 13) * 0.01f + 0.01f;
    for (int k = 0; k < MK_COUNT; k++) {
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            size_t n = sizes[si];
            for (int r = 0; r < REPS; r++) {
                int iters = 0;
                int64_t t0 = rt_now_ns(), t1;
                do {
                    run_mem(be, k, n, x);
                    iters++;
                    t1 = rt_now_ns();
                } while (t1 - t0 < COMPUTE_SAMPLE_NS);
                put_row(s, "memory", MK_NAMES[k], 0, 0, 0, (int64_t)n * MK_BYTES[k], 1, r, (double)(t1 - t0) / iters);
            }
        }
        if (progress) {
            fprintf(progress, "microbench: memory %s\n", MK_NAMES[k]);
            (void)fflush(progress); /* progress only */
        }
    }
    /* launch: the smallest call */
    for (int r = 0; r < REPS; r++) {
        int iters = 0;
        int64_t t0 = rt_now_ns(), t1;
        do {
            be->gelu_fwd(be, x[1], x[0], 1);
            iters++;
            t1 = rt_now_ns();
        } while (t1 - t0 < COMPUTE_SAMPLE_NS / 8);
        put_row(s, "launch", "gelu1", 0, 0, 0, 0, 1, r, (double)(t1 - t0) / iters);
    }
    rc = s->rc;
out:
    for (int i = 0; i < 5; i++)
        be_free(be, x[i], nmax, XMEM_BUFFERS);
    return rc;
}

/* ---------------------------------------------------------------- messages */
static int bench_msgs(MPI_Comm world, sink *s, FILE *progress, ts_err *err)
{
    int rank, size;
    MPI_Comm_rank(world, &rank);
    MPI_Comm_size(world, &size);
    const size_t maxb = (size_t)64 << 20;
    float *buf = malloc(maxb), *buf2 = malloc(maxb);
    if (!buf || !buf2) {
        free(buf);
        free(buf2);
        return err_set(err, TS_ENOMEM, "microbench: out of memory for messages");
    }
    memset(buf, 0, maxb);
    memset(buf2, 0, maxb);
    for (size_t bytes = 1024; bytes <= maxb; bytes *= 4) {
        int n = (int)(bytes / sizeof(float));
        for (int r = 0; r < REPS; r++) {
            if (size >= 2) {
                wd_wait_begin("microbench barrier");
                MPI_Barrier(world);
                wd_wait_end();
                int iters = 0;
                int64_t t0 = rt_now_ns(), el = 0;
                int more = 1;
                while (more) {
                    wd_wait_begin("microbench p2p send/receive");
                    if (rank == 0) {
                        MPI_Send(buf, n, MPI_FLOAT, 1, 7, world);
                        MPI_Recv(buf2, n, MPI_FLOAT, 1, 7, world, MPI_STATUS_IGNORE);
                    } else if (rank == 1) {
                        MPI_Recv(buf2, n, MPI_FLOAT, 0, 7, world, MPI_STATUS_IGNORE);
                        MPI_Send(buf, n, MPI_FLOAT, 0, 7, world);
                    }
                    wd_wait_end();
                    iters++;
                    el = rt_now_ns() - t0;
                    more = el < MSG_SAMPLE_NS;
                    wd_wait_begin("microbench broadcast");
                    MPI_Bcast(&more, 1, MPI_INT, 0, world);
                    wd_wait_end();
                }
                put_row(s, "p2p", "sendrecv", 0, 0, 0, (int64_t)bytes, 2, r, (double)el / iters / 2.0);
            }
            wd_wait_begin("microbench barrier");
            MPI_Barrier(world);
            wd_wait_end();
            int iters = 0, more = 1;
            int64_t t0 = rt_now_ns(), el = 0;
            while (more) {
                wd_wait_begin("microbench all-reduce");
                MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, world);
                wd_wait_end();
                iters++;
                el = rt_now_ns() - t0;
                more = el < MSG_SAMPLE_NS;
                wd_wait_begin("microbench broadcast");
                MPI_Bcast(&more, 1, MPI_INT, 0, world);
                wd_wait_end();
            }
            put_row(s, "allreduce", "allreduce", 0, 0, 0, (int64_t)bytes, size, r, (double)el / iters);
        }
        if (progress) {
            fprintf(progress, "microbench: messages of %zu bytes\n", bytes);
            (void)fflush(progress); /* progress only */
        }
    }
    free(buf);
    free(buf2);
    return s->rc;
}

int microbench_run(MPI_Comm world, const char *path, int threads, FILE *progress, ts_err *err)
{
    int rank;
    MPI_Comm_rank(world, &rank);
    backend *be = NULL;
    char *text = NULL;
    size_t len = 0;
    sink s = {.f = NULL, .err = err, .rc = TS_OK};
    int rc = backend_cpu_create(threads, &be, err);
    /* rank 0 checks the output path first, so a bad path fails before minutes of work */
    afile a = {0};
    if (!rc && rank == 0)
        rc = afile_open(&a, path, err);
    int anyrc = rc;
    wd_action("microbench start-up", -1, -1);
    wd_wait_begin("microbench start-up agreement");
    MPI_Allreduce(MPI_IN_PLACE, &anyrc, 1, MPI_INT, MPI_MIN, world);
    wd_wait_end();
    if (anyrc) {
        if (be)
            be->destroy(be);
        afile_abort(&a);
        return rc ? rc : err_set(err, TS_EIO, "another rank failed to start the microbenchmark");
    }
    if (rank == 0) {
        s.f = open_memstream(&text, &len);
        if (!s.f)
            rc = err_set(err, TS_ENOMEM, "microbench: cannot open a memory stream");
        else
            fputs("kind,name,dtype,m,n,k,batch,bytes,ranks,rep,time_ns\n", s.f);
    }
    wd_action("microbench GEMMs and memory kernels", -1, -1);
    if (!rc)
        rc = bench_gemms(be, &s, progress, err);
    if (!rc)
        rc = bench_mem(be, &s, progress, err);
    /* the message sweep is collective: every rank runs it, or none does (a
     * rank that failed above would otherwise leave its peers waiting) */
    int msgrc = rc;
    wd_action("microbench messages", -1, -1);
    wd_wait_begin("microbench agreement before the messages");
    MPI_Allreduce(MPI_IN_PLACE, &msgrc, 1, MPI_INT, MPI_MIN, world);
    wd_wait_end();
    if (!rc && msgrc)
        rc = err_set(err, TS_EIO, "microbench: another rank failed in the GEMM or memory sweep");
    if (!rc)
        rc = bench_msgs(world, &s, progress, err);
    if (s.f) { /* a memory stream: a write or the last flush can run out of memory */
        int bad = ferror(s.f);
        if ((fclose(s.f) != 0 || bad) && !rc)
            rc = err_set(err, TS_ENOMEM, "microbench: out of memory formatting the results");
    }
    if (rank == 0) {
        if (!rc) {
            fwrite(text, 1, len, a.f);
            rc = afile_commit(&a, err);
        } else {
            afile_abort(&a);
        }
        if (!rc && progress)
            fprintf(progress, "microbench: wrote %s\n", path);
    }
    free(text);
    be->destroy(be);
    return rc;
}
