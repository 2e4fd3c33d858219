/* cudacal — GPU calibration measurements (experiments/gpu-calibrate.sh runs it).
 *
 *   cudacal sweep --out FILE   bf16 GEMMs (GPT-3 layer shapes at t = 1..8,
 *                              attention batches, squares), memory copies and
 *                              the launch overhead, as calibration CSV rows
 *                              (sim/model/calib.h's schema)
 *   cudacal layer --out FILE   one GPT layer shard forward + backward (bf16),
 *                              achieved TFLOP/s against the bf16 GEMM rate
 *   cudacal nccl --out FILE    NCCL collectives (run under mpirun, one rank per GPU)
 *
 * Every output is written atomically; progress goes to stderr. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <mpi.h>

#include "exec/cuda/comm_nccl.h"
#include "exec/cuda/cubench.h"
#include "exec/cuda/cugemm.h"
#include "exec/cuda/culayer.h"
#include "sim/util/afile.h"
#include "sim/util/csvio.h"
#include "sim/util/opt.h"

typedef struct {
    const char *out, *gpu;
    int repeats;
    /* layer */
    int hidden, heads, ffn, seq, mbs, tp;
    bool fused;
    double gemm_tflops;
    /* nccl */
    int64_t min_bytes, max_bytes;
} args;

static char gpu_name[128];

static void fail(const ts_err *e, int rank, int size)
{
    if (size > 1)
        fprintf(stderr, "cudacal (rank %d): %s\n", rank, e->msg);
    else
        fprintf(stderr, "cudacal: %s\n", e->msg);
}

/* Device 0's name with spaces as '-', unless --gpu names the kind. */
static int pick_gpu(args *a, int device, ts_err *e)
{
    int n = 0;
    cudaError_t st = cudaGetDeviceCount(&n);
    if (st != cudaSuccess || n == 0)
        return err_set(e, TS_ENOTSUP,
                       "no CUDA device (%s): cudacal measures a GPU and needs "
                       "one",
                       st != cudaSuccess ? cudaGetErrorString(st) : "0 devices");
    st = cudaSetDevice(device % n);
    if (st != cudaSuccess)
        return err_set(e, TS_ENOTSUP, "cudaSetDevice(%d): %s", device % n, cudaGetErrorString(st));
    if (a->gpu) {
        snprintf(gpu_name, sizeof gpu_name, "%s", a->gpu);
    } else {
        struct cudaDeviceProp p;
        cudaGetDeviceProperties(&p, device % n);
        snprintf(gpu_name, sizeof gpu_name, "%.127s", p.name);
        for (char *c = gpu_name; *c; c++)
            if (*c == ' ')
                *c = '-';
    }
    return TS_OK;
}

static int row(FILE *f, size_t n, const char *const *cells, ts_err *e)
{
    return csvio_write_row(f, n, cells, e);
}

/* ------------------------------------------------------------ sweep */

typedef struct {
    int m, n, k, batch;
} shape;

static int sweep(const args *a, ts_err *e)
{
    cudaStream_t s;
    if (cudaStreamCreate(&s) != cudaSuccess)
        return err_set(e, TS_ENOTSUP, "cudaStreamCreate failed");
    cugemm *heur = NULL, *tuned = NULL;
    int rc = cugemm_create(false, &heur, e);
    if (rc == TS_OK)
        rc = cugemm_create(true, &tuned, e);
    shape sh[64];
    int ns = 0, h = a->hidden, N = a->seq * a->mbs;
    for (int t = 1; t <= 8; t *= 2) { /* the layer's four GEMMs, forward shapes */
        sh[ns++] = (shape){N, 3 * h / t, h, 1};
        sh[ns++] = (shape){N, h, h / t, 1};
        sh[ns++] = (shape){N, a->ffn / t, h, 1};
        sh[ns++] = (shape){N, h, a->ffn / t, 1};
    }
    int hs = h / a->heads;
    int hb = a->mbs * (a->heads / a->tp > 0 ? a->heads / a->tp : 1); /* heads of a shard */
    sh[ns++] = (shape){a->seq, a->seq, hs, hb};                      /* q k^T */
    sh[ns++] = (shape){a->seq, hs, a->seq, hb};                      /* att v */
    for (int sq = 512; sq <= 8192; sq *= 2)
        sh[ns++] = (shape){sq, sq, sq, 1};
    afile out;
    if (rc == TS_OK)
        rc = afile_open(&out, a->out, e);
    if (rc != TS_OK) {
        cugemm_destroy(heur);
        cugemm_destroy(tuned);
        cudaStreamDestroy(s);
        return rc;
    }
    static const char *const HDR[] = {
        "gpu",           "op",          "dtype", "m", "n", "k", "batch", "bytes", "time_ns", "achieved_tflops",
        "achieved_gbps", "heuristic_ns"};
    char c[12][48];
    const char *cells[12];
    for (int i = 0; i < 12; i++)
        cells[i] = c[i];
    rc = row(out.f, 12, HDR, e);
    double best_tflops = 0;
    for (int i = 0; i < ns && rc == TS_OK; i++) {
        double t_h = 0, t_b = 0;
        rc = cubench_gemm(heur, s, sh[i].m, sh[i].n, sh[i].k, sh[i].batch, a->repeats, &t_h, e);
        if (rc == TS_OK)
            rc = cubench_gemm(tuned, s, sh[i].m, sh[i].n, sh[i].k, sh[i].batch, a->repeats, &t_b, e);
        if (rc != TS_OK)
            break;
        double best = t_b < t_h ? t_b : t_h;
        double tf = 2.0 * sh[i].m * sh[i].n * (double)sh[i].k * sh[i].batch / best / 1e3;
        if (tf > best_tflops)
            best_tflops = tf;
        fprintf(stderr,
                "  gemm %5d x %5d x %5d (batch %3d): %9.1f us, %6.1f TFLOP/s; "
                "heuristic plan %.3fx the best of %d\n",
                sh[i].m, sh[i].n, sh[i].k, sh[i].batch, best / 1e3, tf, t_h / best, CUGEMM_TUNE_ALGOS);
        cells[0] = gpu_name;
        snprintf(c[1], 48, "gemm");
        snprintf(c[2], 48, "bf16");
        snprintf(c[3], 48, "%d", sh[i].m);
        snprintf(c[4], 48, "%d", sh[i].n);
        snprintf(c[5], 48, "%d", sh[i].k);
        snprintf(c[6], 48, "%d", sh[i].batch);
        c[7][0] = 0;
        csvio_fmt_double(c[8], 48, best);
        csvio_fmt_double(c[9], 48, tf);
        c[10][0] = 0;
        csvio_fmt_double(c[11], 48, t_h);
        rc = row(out.f, 12, cells, e);
    }
    for (size_t b = (size_t)1 << 20; b <= ((size_t)1 << 30) && rc == TS_OK; b <<= 2) {
        double t = 0;
        rc = cubench_memory(s, b, a->repeats, &t, e);
        if (rc != TS_OK)
            break;
        fprintf(stderr, "  copy %10zu bytes: %9.1f us, %7.1f GB/s\n", b, t / 1e3, 2.0 * b / t);
        memset(c, 0, sizeof c);
        cells[0] = gpu_name;
        snprintf(c[1], 48, "memory");
        snprintf(c[2], 48, "bf16");
        snprintf(c[7], 48, "%zu", 2 * b);
        csvio_fmt_double(c[8], 48, t);
        csvio_fmt_double(c[10], 48, 2.0 * b / t);
        rc = row(out.f, 12, cells, e);
    }
    double tl = 0;
    if (rc == TS_OK)
        rc = cubench_launch(s, a->repeats * 10, &tl, e);
    if (rc == TS_OK) {
        fprintf(stderr, "  launch: %.1f us\n", tl / 1e3);
        memset(c, 0, sizeof c);
        cells[0] = gpu_name;
        snprintf(c[1], 48, "launch");
        snprintf(c[2], 48, "bf16");
        csvio_fmt_double(c[8], 48, tl);
        rc = row(out.f, 12, cells, e);
    }
    if (rc == TS_OK) {
        fprintf(stderr, "  best bf16 GEMM rate: %.1f TFLOP/s\n", best_tflops);
        rc = afile_commit(&out, e);
    } else {
        afile_abort(&out);
    }
    cugemm_destroy(heur);
    cugemm_destroy(tuned);
    cudaStreamDestroy(s);
    return rc;
}

/* ------------------------------------------------------------ layer */

static int layer(const args *a, ts_err *e)
{
    cudaStream_t s;
    if (cudaStreamCreate(&s) != cudaSuccess)
        return err_set(e, TS_ENOTSUP, "cudaStreamCreate failed");
    cugemm *g = NULL;
    int rc = cugemm_create(true, &g, e);
    double gemm_tf = a->gemm_tflops;
    for (int sq = 4096; sq <= 8192 && rc == TS_OK && a->gemm_tflops == 0; sq *= 2) {
        double t = 0;
        rc = cubench_gemm(g, s, sq, sq, sq, 1, a->repeats, &t, e);
        double tf = 2.0 * sq * sq * (double)sq / t / 1e3;
        if (rc == TS_OK && tf > gemm_tf)
            gemm_tf = tf;
    }
    culayer_dims d = {.hidden = a->hidden,
                      .heads = a->heads,
                      .ffn = a->ffn,
                      .seq = a->seq,
                      .micro_batch = a->mbs,
                      .tp = a->tp,
                      .fused_attention = a->fused,
                      .attention_dropout = 0.1f,
                      .hidden_dropout = 0.1f};
    double fwd = 0, bwd = 0;
    if (rc == TS_OK)
        rc = cubench_layer(&d, g, s, a->repeats, &fwd, &bwd, e);
    afile out;
    if (rc == TS_OK)
        rc = afile_open(&out, a->out, e);
    if (rc == TS_OK) {
        double flop = culayer_flops(&d), tf = flop / (fwd + bwd) / 1e3;
        fprintf(stderr,
                "  layer h=%d heads=%d f=%d s=%d b=%d t=%d (%s attention): forward "
                "%.3f ms, backward %.3f ms, %.1f TFLOP/s = %.1f%% of the %.1f TFLOP/s bf16 "
                "GEMM rate\n",
                a->hidden, a->heads, a->ffn, a->seq, a->mbs, a->tp, a->fused ? "fused" : "unfused", fwd / 1e6,
                bwd / 1e6, tf, 100 * tf / gemm_tf, gemm_tf);
        static const char *const HDR[] = {"gpu",         "hidden",          "heads",       "ffn",
                                          "seq",         "micro_batch",     "tp",          "attention",
                                          "fwd_ns",      "bwd_ns",          "model_tflop", "achieved_tflops",
                                          "gemm_tflops", "fraction_of_gemm"};
        char c[14][48];
        const char *cells[14];
        for (int i = 0; i < 14; i++)
            cells[i] = c[i];
        cells[0] = gpu_name;
        snprintf(c[1], 48, "%d", a->hidden);
        snprintf(c[2], 48, "%d", a->heads);
        snprintf(c[3], 48, "%d", a->ffn);
        snprintf(c[4], 48, "%d", a->seq);
        snprintf(c[5], 48, "%d", a->mbs);
        snprintf(c[6], 48, "%d", a->tp);
        snprintf(c[7], 48, "%s", a->fused ? "fused" : "unfused");
        csvio_fmt_double(c[8], 48, fwd);
        csvio_fmt_double(c[9], 48, bwd);
        csvio_fmt_double(c[10], 48, flop / 1e12);
        csvio_fmt_double(c[11], 48, tf);
        csvio_fmt_double(c[12], 48, gemm_tf);
        csvio_fmt_double(c[13], 48, tf / gemm_tf);
        rc = row(out.f, 14, HDR, e);
        if (rc == TS_OK)
            rc = row(out.f, 14, cells, e);
        if (rc == TS_OK)
            rc = afile_commit(&out, e);
        else
            afile_abort(&out);
    }
    cugemm_destroy(g);
    cudaStreamDestroy(s);
    return rc;
}

/* ------------------------------------------------------------ NCCL */

static int nccl(const args *a, int rank, int size, ts_err *e)
{
    if (size < 2)
        return err_set(e, TS_EINVAL,
                       "cudacal nccl: %d MPI rank: run it under mpirun with one "
                       "rank per GPU (at least 2)",
                       size);
    cudaStream_t s;
    if (cudaStreamCreate(&s) != cudaSuccess)
        return err_set(e, TS_ENOTSUP, "cudaStreamCreate failed");
    comm *tp = NULL, *pp = NULL;
    int rc = comm_nccl_create(MPI_COMM_WORLD, size, 1, 1, s, &tp, e);
    if (rc == TS_OK)
        rc = comm_nccl_create(MPI_COMM_WORLD, 1, size, 1, s, &pp, e);
    afile out;
    bool open = false;
    if (rc == TS_OK && rank == 0) {
        rc = afile_open(&out, a->out, e);
        open = rc == TS_OK;
        static const char *const HDR[] = {"gpu",     "op",         "ranks",      "bytes",
                                          "time_ns", "algbw_gbps", "busbw_gbps", "correct"};
        if (rc == TS_OK)
            rc = row(out.f, 8, HDR, e);
    }
    int all_ok = 1;
    for (int op = CUBENCH_ALLREDUCE; op <= CUBENCH_SENDRECV && rc == TS_OK; op++)
        for (int64_t b = a->min_bytes; b <= a->max_bytes && rc == TS_OK; b *= 4) {
            double t = 0;
            bool ok = false;
            comm *cm = op == CUBENCH_SENDRECV ? pp : tp;
            int64_t bytes = b / (4 * size) * (4 * size); /* whole floats per rank */
            rc = cubench_coll_run(cm, MPI_COMM_WORLD, s, (cubench_coll)op, (size_t)bytes, a->repeats, &t, &ok, e);
            if (rc != TS_OK || rank != 0)
                continue;
            all_ok &= ok;
            double alg = bytes / t, bus = alg * cubench_busbw_factor((cubench_coll)op, size);
            fprintf(stderr, "  %-14s %2d ranks %11lld bytes: %10.1f us, bus %7.1f GB/s%s\n",
                    cubench_coll_name((cubench_coll)op), size, (long long)bytes, t / 1e3, bus,
                    ok ? "" : "  WRONG RESULT");
            char c[8][48];
            const char *cells[8];
            for (int i = 0; i < 8; i++)
                cells[i] = c[i];
            cells[0] = gpu_name;
            snprintf(c[1], 48, "%s", cubench_coll_name((cubench_coll)op));
            snprintf(c[2], 48, "%d", size);
            snprintf(c[3], 48, "%lld", (long long)bytes);
            csvio_fmt_double(c[4], 48, t);
            csvio_fmt_double(c[5], 48, alg);
            csvio_fmt_double(c[6], 48, bus);
            snprintf(c[7], 48, "%s", ok ? "yes" : "no");
            rc = row(out.f, 8, cells, e);
        }
    if (open) {
        if (rc == TS_OK)
            rc = afile_commit(&out, e);
        else
            afile_abort(&out);
    }
    if (rc == TS_OK && !all_ok)
        rc = err_set(e, TS_ESTATE,
                     "cudacal nccl: some collectives gave wrong results (see "
                     "'correct' in %s)",
                     a->out);
    if (pp)
        pp->destroy(pp);
    if (tp)
        tp->destroy(tp);
    cudaStreamDestroy(s);
    return rc;
}

/* ------------------------------------------------------------ main */

static int add_flags(opt_table *t, args *a, ts_err *e)
{
    const opt_spec specs[] = {
        {.name = "--out", .type = OPT_STRING, .target = &a->out, .metavar = "FILE", .help = "CSV written (atomically)"},
        {.name = "--gpu",
         .type = OPT_STRING,
         .target = &a->gpu,
         .metavar = "KIND",
         .defval = "the device name",
         .help = "GPU kind written in the gpu column "
                 "(topologies/gpus.csv names, e.g. H100-SXM5-80GB)"},
        {.name = "--repeats",
         .type = OPT_INT,
         .target = &a->repeats,
         .min = 1,
         .max = 1000,
         .unit = "runs",
         .help = "timed runs per measurement (median reported)"},
        {.name = "--hidden-size",
         .type = OPT_INT,
         .target = &a->hidden,
         .min = 64,
         .max = 1 << 17,
         .unit = "elements",
         .help = "h of the layer and of the sweep's shapes"},
        {.name = "--num-attention-heads",
         .type = OPT_INT,
         .target = &a->heads,
         .min = 1,
         .max = 4096,
         .unit = "heads",
         .help = "attention heads of the whole model"},
        {.name = "--ffn-hidden-size",
         .type = OPT_INT,
         .target = &a->ffn,
         .min = 1,
         .max = 1 << 20,
         .unit = "elements",
         .help = "MLP width of the whole model"},
        {.name = "--seq-length",
         .type = OPT_INT,
         .target = &a->seq,
         .min = 1,
         .max = 1 << 20,
         .unit = "tokens",
         .help = "sequence length"},
        {.name = "--micro-batch-size",
         .type = OPT_INT,
         .target = &a->mbs,
         .min = 1,
         .max = 4096,
         .unit = "sequences",
         .help = "micro-batch"},
        {.name = "--tensor-model-parallel-size",
         .type = OPT_INT,
         .target = &a->tp,
         .min = 1,
         .max = 1024,
         .unit = "GPUs",
         .help = "t: the layer shard is 1/t of the layer"},
        {.name = "--fused-attention",
         .type = OPT_BOOL,
         .target = &a->fused,
         .help = "layer: the fused attention kernel instead of cuBLAS batched GEMMs"},
        {.name = "--gemm-tflops",
         .type = OPT_DOUBLE,
         .target = &a->gemm_tflops,
         .min = 0,
         .max = 1e5,
         .unit = "TFLOP/s",
         .defval = "measured (4096^3 and 8192^3 bf16 GEMMs)",
         .help = "layer: the bf16 GEMM rate the layer is compared with"},
        {.name = "--min-bytes",
         .type = OPT_INT64,
         .target = &a->min_bytes,
         .min = 4096,
         .max = 1e12,
         .unit = "bytes",
         .help = "nccl: smallest message"},
        {.name = "--max-bytes",
         .type = OPT_INT64,
         .target = &a->max_bytes,
         .min = 4096,
         .max = 1e12,
         .unit = "bytes",
         .help = "nccl: largest message (x4 steps)"},
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        int rc = opt_add(t, &specs[i], e);
        if (rc != TS_OK)
            return rc;
    }
    return TS_OK;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    args a = {.repeats = 20,
              .hidden = 12288,
              .heads = 96,
              .ffn = 4 * 12288,
              .seq = 2048,
              .mbs = 1,
              .tp = 8,
              .min_bytes = 1 << 20,
              .max_bytes = (int64_t)1 << 30};
    ts_err e;
    err_clear(&e);
    opt_table t;
    opt_table_init(&t, "cudacal sweep|layer|nccl",
                   "GPU calibration measurements: bf16 GEMM/memory/launch sweep (calibration "
                   "CSV), one GPT layer shard forward+backward, NCCL collectives (under "
                   "mpirun). Defaults: GPT-3 175B, t = 8.");
    t.max_positional = 1;
    int rc = add_flags(&t, &a, &e);
    if (rc == TS_OK)
        rc = opt_parse(&t, argc, argv, &e);
    const char *mode = t.n_positional ? t.positional[0] : NULL;
    if (rc == TS_OK && t.help_requested) {
        if (rank == 0)
            opt_help(&t, stdout);
    } else if (rc == TS_OK) {
        if (!mode || (strcmp(mode, "sweep") && strcmp(mode, "layer") && strcmp(mode, "nccl")))
            rc = err_set(&e, TS_EINVAL, "mode '%s': valid are sweep, layer, nccl", mode ? mode : "(none)");
        else if (!a.out)
            rc = err_set(&e, TS_EINVAL, "--out FILE is required");
        else if (strcmp(mode, "nccl") && size > 1)
            rc = err_set(&e, TS_EINVAL, "mode %s runs on one GPU: start it without mpirun", mode);
        if (rc == TS_OK)
            rc = pick_gpu(&a, rank, &e);
        if (rc == TS_OK && !strcmp(mode, "sweep"))
            rc = sweep(&a, &e);
        else if (rc == TS_OK && !strcmp(mode, "layer"))
            rc = layer(&a, &e);
        else if (rc == TS_OK)
            rc = nccl(&a, rank, size, &e);
    }
    opt_table_free(&t);
    if (rc != TS_OK)
        fail(&e, rank, size);
    MPI_Finalize();
    return rc == TS_OK ? 0 : (rc == TS_ENOTSUP ? 3 : 1);
}
