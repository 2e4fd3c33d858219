#include "exec/xout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sched/sched.h"
#include "sim/util/afile.h"
#include "sim/util/csvio.h"

enum { ST_COMPUTE = 0, ST_TP, ST_PP_SEND, ST_PP_RECV, ST_DP, ST_COUNT };
static const char *const STREAM_NAMES[ST_COUNT] = {"compute", "tp", "pp-send", "pp-recv", "dp"};

void xout_rank_init(xout_rank *r, int rank, const comm *cm, const backend *be)
{
    memset(r, 0, sizeof *r);
    r->rank = rank;
    r->tp = cm->rank[COMM_TP];
    r->pp = cm->rank[COMM_PP];
    r->dp = cm->rank[COMM_DP] / cm->size[COMM_CP]; /* the replica */
    r->cp = cm->rank[COMM_CP];
    r->peak_bytes = (int64_t)be->peak_total_bytes;
    for (int c = 0; c < XMEM_NCAT; c++)
        r->cat_bytes[c] = (int64_t)be->at_peak_bytes[c];
}

static bool is_compute_action(const char *name)
{
    return !strcmp(name, "F") || !strcmp(name, "B") || !strcmp(name, "I") || !strcmp(name, "W") ||
           !strcmp(name, "OPTIM") || !strcmp(name, "REDUCE_GRAD");
}

int64_t xout_compute_ns(const rt_span *sp, size_t n, int iter)
{
    int64_t s = 0;
    for (size_t i = 0; i < n; i++)
        if (!sp[i].is_op && sp[i].iter == iter && is_compute_action(sp[i].name))
            s += sp[i].t1_ns - sp[i].t0_ns;
    return s;
}

/* Stream and category of a span, as the simulator's trace names them. */
static void classify(const rt_span *x, int *stream, const char **cat)
{
    const char *n = x->name;
    if (!strncmp(n, "tp_", 3)) {
        *stream = ST_TP, *cat = "tp";
    } else if (!strcmp(n, "SEND_F") || !strcmp(n, "SEND_B")) {
        *stream = ST_PP_SEND, *cat = "pp";
    } else if (!strcmp(n, "RECV_F") || !strcmp(n, "RECV_B")) {
        *stream = ST_PP_RECV, *cat = "pp";
    } else if (!strcmp(n, "REDUCE_GRAD")) {
        *stream = ST_DP, *cat = "dp";
    } else if (!strcmp(n, "OPTIM")) {
        *stream = ST_COMPUTE, *cat = "optimizer";
    } else if (!x->is_op) {
        *stream = ST_COMPUTE, *cat = !strcmp(n, "F") ? "forward" : "backward";
    } else {
        *stream = ST_COMPUTE;
        *cat = strstr(n, "bwd") ? "backward" : "forward";
    }
}

/* Gather each rank's text onto rank 0 of world, in rank order. *all (rank 0
 * only) is malloc'd and NUL-terminated. */
static int gather_text(MPI_Comm world, const char *mine, size_t len, char **all, ts_err *err)
{
    int rank, size;
    MPI_Comm_rank(world, &rank);
    MPI_Comm_size(world, &size);
    int n = (int)len, *lens = NULL, *offs = NULL;
    if (rank == 0) {
        lens = calloc((size_t)size, sizeof *lens);
        offs = calloc((size_t)size, sizeof *offs);
    }
    MPI_Gather(&n, 1, MPI_INT, lens, 1, MPI_INT, 0, world);
    size_t total = 0;
    if (rank == 0)
        for (int i = 0; i < size; i++) {
            offs[i] = (int)total;
            total += (size_t)lens[i];
        }
    char *buf = rank == 0 ? malloc(total + 1) : NULL;
    MPI_Gatherv(mine, n, MPI_CHAR, buf, lens, offs, MPI_CHAR, 0, world);
    free(lens);
    free(offs);
    if (rank == 0) {
        if (!buf)
            return err_set(err, TS_ENOMEM, "trace: out of memory for %zu bytes", total);
        buf[total] = '\0';
        *all = buf;
    }
    return TS_OK;
}

/* rank 0: write text to path atomically */
static int write_file(const char *path, const char *head, const char *body, const char *tail, ts_err *err)
{
    afile a;
    int rc = afile_open(&a, path, err);
    if (rc)
        return rc;
    fputs(head, a.f);
    fputs(body, a.f);
    fputs(tail, a.f);
    return afile_commit(&a, err);
}

static int agree(MPI_Comm world, int rc, ts_err *err)
{
    int r = rc;
    MPI_Bcast(&r, 1, MPI_INT, 0, world);
    if (r && !rc)
        return err_set(err, r, "rank 0 could not write an output file");
    return r;
}

int xout_write_spans(MPI_Comm world, const comm *cm, const rt_span *sp, size_t n, int iter, int64_t shift_ns,
                     const char *trace_path, const char *ops_path, ts_err *err)
{
    int rank;
    MPI_Comm_rank(world, &rank);
    int rc = TS_OK;
    for (int pass = 0; pass < 2; pass++) {
        const char *path = pass == 0 ? trace_path : ops_path;
        if (!path)
            continue;
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (!f)
            return err_set(err, TS_ENOMEM, "trace: cannot open a memory stream");
        if (pass == 0) {
            fprintf(f,
                    ",\n{\"ph\": \"M\", \"pid\": %d, \"name\": \"process_name\", \"args\": "
                    "{\"name\": \"rank %d (tp %d, pp %d, dp %d)\"}}",
                    rank, rank, cm->rank[COMM_TP], cm->rank[COMM_PP], cm->rank[COMM_DP] / cm->size[COMM_CP]);
            for (int s = 0; s < ST_COUNT; s++)
                fprintf(f,
                        ",\n{\"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"name\": "
                        "\"thread_name\", \"args\": {\"name\": \"%s\"}}",
                        rank, s, STREAM_NAMES[s]);
        }
        for (size_t i = 0; i < n && !rc; i++) {
            const rt_span *x = &sp[i];
            if (x->iter != iter || x->t1_ns < 0)
                continue;
            int64_t t0 = x->t0_ns - shift_ns, t1 = x->t1_ns - shift_ns;
            if (pass == 0) {
                int stream;
                const char *cat;
                classify(x, &stream, &cat);
                fprintf(f,
                        ",\n{\"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"name\": \"%s\", "
                        "\"cat\": \"%s\", \"ts\": %.3f, \"dur\": %.3f, \"args\": "
                        "{\"mb\": %d, \"stage\": %d, \"layer\": %d}}",
                        rank, stream, x->name, cat, t0 / 1e3, (t1 - t0) / 1e3, x->mb, x->stage, x->layer);
            } else {
                char c[14][32];
                snprintf(c[0], 32, "%d", rank);
                snprintf(c[1], 32, "%d", cm->rank[COMM_TP]);
                snprintf(c[2], 32, "%d", cm->rank[COMM_PP]);
                snprintf(c[3], 32, "%d", cm->rank[COMM_DP] / cm->size[COMM_CP]); /* the replica */
                snprintf(c[4], 32, "%d", x->iter);
                snprintf(c[5], 32, "%s", x->is_op ? "op" : "action");
                snprintf(c[6], 32, "%s", x->name);
                snprintf(c[7], 32, "%d", x->mb);
                snprintf(c[8], 32, "%d", x->chunk);
                snprintf(c[9], 32, "%d", x->stage);
                snprintf(c[10], 32, "%d", x->layer);
                snprintf(c[11], 32, "%lld", (long long)t0);
                snprintf(c[12], 32, "%lld", (long long)t1);
                snprintf(c[13], 32, "%lld", (long long)(t1 - t0));
                const char *cells[14];
                for (int k = 0; k < 14; k++)
                    cells[k] = c[k];
                rc = csvio_write_row(f, 14, cells, err);
            }
        }
        int bad = ferror(f); /* a memory stream: a write or the last flush can run out of memory */
        if ((fclose(f) != 0 || bad) && !rc)
            rc = err_set(err, TS_ENOMEM, "%s: out of memory formatting the trace", path);
        char *all = NULL;
        int grc = gather_text(world, text ? text : "", text ? len : 0, &all, err);
        free(text);
        if (!rc)
            rc = grc;
        if (rank == 0 && !rc) {
            if (pass == 0) {
                /* every rank's part starts with ",\n": drop the first comma */
                rc = write_file(path, "{\"traceEvents\": [\n", all[0] ? all + 2 : all,
                                "\n], \"displayTimeUnit\": \"ms\"}\n", err);
            } else {
                rc = write_file(path,
                                "rank,tp,pp,dp,iter,level,name,mb,chunk,stage,layer,start_ns,"
                                "end_ns,dur_ns\n",
                                all, "", err);
            }
        }
        free(all);
        if ((rc = agree(world, rc, err)))
            return rc;
    }
    return rc;
}

int xout_write_report(MPI_Comm world, const xout_rank *r, const char *path, xout_rank **all, ts_err *err)
{
    int rank, size;
    MPI_Comm_rank(world, &rank);
    MPI_Comm_size(world, &size);
    xout_rank *v = rank == 0 ? calloc((size_t)size, sizeof *v) : NULL;
    MPI_Gather(r, (int)sizeof *r, MPI_BYTE, v, (int)sizeof *r, MPI_BYTE, 0, world);
    int rc = TS_OK;
    if (rank == 0 && path) {
        afile a = {0};
        rc = afile_open(&a, path, err);
        bool opened = rc == TS_OK;
        static const char *const head[15] = {"rank",
                                             "tp",
                                             "pp",
                                             "dp",
                                             "iterations",
                                             "iteration_ns",
                                             "compute_ns",
                                             "bubble_ns",
                                             "peak_bytes",
                                             "weights_bytes",
                                             "gradients_bytes",
                                             "optimizer_bytes",
                                             "activations_bytes",
                                             "buffers_bytes",
                                             "cpu_ns"};
        if (!rc)
            rc = csvio_write_row(a.f, 15, head, err);
        for (int i = 0; i < size && !rc; i++) {
            const xout_rank *x = &v[i];
            char c[15][32];
            const char *cells[15];
            snprintf(c[0], 32, "%d", x->rank);
            snprintf(c[1], 32, "%d", x->tp);
            snprintf(c[2], 32, "%d", x->pp);
            snprintf(c[3], 32, "%d", x->dp);
            snprintf(c[4], 32, "%d", x->iterations);
            csvio_fmt_double(c[5], 32, x->iteration_ns);
            csvio_fmt_double(c[6], 32, x->compute_ns);
            csvio_fmt_double(c[7], 32, x->iteration_ns - x->compute_ns);
            snprintf(c[8], 32, "%lld", (long long)x->peak_bytes);
            for (int k = 0; k < XMEM_NCAT; k++)
                snprintf(c[9 + k], 32, "%lld", (long long)x->cat_bytes[k]);
            csvio_fmt_double(c[14], 32, x->cpu_ns);
            for (int k = 0; k < 15; k++)
                cells[k] = c[k];
            rc = csvio_write_row(a.f, 15, cells, err);
        }
        if (opened && rc)
            afile_abort(&a);
        else if (opened)
            rc = afile_commit(&a, err);
    }
    if (rank == 0 && all)
        *all = v;
    else
        free(v);
    return agree(world, rc, err);
}
