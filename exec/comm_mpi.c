#include "exec/comm_mpi.h"

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "exec/cp_mpi.h"
#include "exec/moe_mpi.h"
#include "exec/watchdog.h"
#include "sim/util/grow.h"

typedef struct {
    MPI_Comm g[COMM_NGROUPS];
    MPI_Comm base;    /* borrowed */
    moe_mpi_ctx moe;  /* expert-parallel and expert-data-parallel groups (MPI_COMM_NULL: none) */
    moe_xchg moe_xc;  /* over moe.comm */
    moe_edp moe_edp;  /* over moe.edp_comm */
    MPI_Request *req; /* request table; MPI_REQUEST_NULL = free slot */
    int nreq, capreq;
} mpi_ctx;

static int mpi_fail(ts_err *err, int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return err_set(err, TS_EIO, "MPI %s failed: %s", what, msg);
}

static const char *const GROUP_NAMES[COMM_NGROUPS] = {"tensor", "pipeline", "data", "context"};

static int big(size_t n, ts_err *err)
{
    if (n > (size_t)INT32_MAX)
        return err_set(err, TS_ENOTSUP, "MPI message of %zu floats exceeds 2^31-1", n);
    return TS_OK;
}

static int c_all_reduce(comm *c, comm_group g, float *buf, size_t n, ts_err *err)
{
    mpi_ctx *x = c->ctx;
    if (c->size[g] == 1 || n == 0)
        return TS_OK;
    if (big(n, err))
        return TS_ENOTSUP;
    wd_wait_begin(g == COMM_TP ? "tensor all-reduce" : g == COMM_PP ? "pipeline all-reduce" : "data all-reduce");
    int rc = MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, x->g[g]);
    wd_wait_end();
    return rc == MPI_SUCCESS ? TS_OK : mpi_fail(err, rc, GROUP_NAMES[g]);
}

static int c_all_gather(comm *c, comm_group g, float *out, const float *in, size_t n, ts_err *err)
{
    mpi_ctx *x = c->ctx;
    if (big(n, err))
        return TS_ENOTSUP;
    wd_wait_begin("all-gather");
    int rc = MPI_Allgather(in, (int)n, MPI_FLOAT, out, (int)n, MPI_FLOAT, x->g[g]);
    wd_wait_end();
    return rc == MPI_SUCCESS ? TS_OK : mpi_fail(err, rc, "all-gather");
}

static int c_reduce_scatter(comm *c, comm_group g, float *out, const float *in, size_t n, ts_err *err)
{
    mpi_ctx *x = c->ctx;
    if (big(n, err))
        return TS_ENOTSUP;
    wd_wait_begin("reduce-scatter");
    int rc = MPI_Reduce_scatter_block(in, out, (int)n, MPI_FLOAT, MPI_SUM, x->g[g]);
    wd_wait_end();
    return rc == MPI_SUCCESS ? TS_OK : mpi_fail(err, rc, "reduce-scatter");
}

static int new_req(mpi_ctx *x, ts_err *err)
{
    for (int i = 0; i < x->nreq; i++)
        if (x->req[i] == MPI_REQUEST_NULL)
            return i;
    /* NOLINTNEXTLINE(bugprone-sizeof-expression): the elements are pointers (MPI_Request) */
    if (x->nreq == x->capreq && grow_to_int((void **)&x->req, &x->capreq, x->nreq + 1, 64, sizeof *x->req))
        return err_set(err, TS_ENOMEM, "MPI comm: out of memory for requests");
    x->req[x->nreq] = MPI_REQUEST_NULL;
    return x->nreq++;
}

static int c_isend(comm *c, int peer, const float *buf, size_t n, int tag, int *req, ts_err *err)
{
    mpi_ctx *x = c->ctx;
    if (big(n, err))
        return TS_ENOTSUP;
    if (tag < 0 || tag >= (1 << 30))
        return err_set(err, TS_EINVAL, "pipeline send tag %d outside [0, 2^30)", tag);
    int i = new_req(x, err);
    if (i < 0)
        return i;
    int rc = MPI_Isend(buf, (int)n, MPI_FLOAT, peer, tag, x->g[COMM_PP], &x->req[i]);
    if (rc != MPI_SUCCESS)
        return mpi_fail(err, rc, "send");
    *req = i;
    return TS_OK;
}

static int c_irecv(comm *c, int peer, float *buf, size_t n, int tag, int *req, ts_err *err)
{
    mpi_ctx *x = c->ctx;
    if (big(n, err))
        return TS_ENOTSUP;
    int i = new_req(x, err);
    if (i < 0)
        return i;
    int rc = MPI_Irecv(buf, (int)n, MPI_FLOAT, peer, tag, x->g[COMM_PP], &x->req[i]);
    if (rc != MPI_SUCCESS)
        return mpi_fail(err, rc, "receive");
    *req = i;
    return TS_OK;
}

/* Poll interval of a pipeline wait: short against the ms-scale ops, long
 * enough that the waiting rank leaves its core's execution units to the
 * other ranks. */
#define WAIT_POLL_NS 20000

/* Wait by polling with short sleeps rather than MPI_Wait's busy spin: on a
 * CPU testbed the ranks share cores (or hyperthread siblings), and a
 * spinning rank measurably slows a computing one (on the 2-vCPU reference
 * machine, a busy loop on the other vCPU stretched a 550 ms iteration to
 * 790 ms). A GPU rank that waits does not slow its peers, which is what the
 * simulator models. */
static int c_wait(comm *c, int req, ts_err *err)
{
    mpi_ctx *x = c->ctx;
    if (req < 0 || req >= x->nreq)
        return err_set(err, TS_ESTATE, "MPI comm: no request %d", req);
    wd_wait_begin("pipeline send/receive wait");
    for (;;) {
        int done = 0, rc = MPI_Test(&x->req[req], &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS || done) {
            wd_wait_end();
            return rc != MPI_SUCCESS ? mpi_fail(err, rc, "wait") : TS_OK;
        }
        struct timespec ts = {0, WAIT_POLL_NS};
        nanosleep(&ts, NULL);
    }
}

static int c_test(comm *c, int req, int *done, ts_err *err)
{
    mpi_ctx *x = c->ctx;
    if (req < 0 || req >= x->nreq)
        return err_set(err, TS_ESTATE, "MPI comm: no request %d", req);
    int rc = MPI_Test(&x->req[req], done, MPI_STATUS_IGNORE);
    return rc == MPI_SUCCESS ? TS_OK : mpi_fail(err, rc, "test");
}

static int c_wait_all(comm *c, ts_err *err)
{
    mpi_ctx *x = c->ctx;
    if (x->nreq == 0)
        return TS_OK;
    wd_wait_begin("pipeline wait-all");
    int rc = MPI_Waitall(x->nreq, x->req, MPI_STATUSES_IGNORE);
    wd_wait_end();
    return rc == MPI_SUCCESS ? TS_OK : mpi_fail(err, rc, "wait-all");
}

static void c_destroy(comm *c)
{
    if (!c)
        return;
    mpi_ctx *x = c->ctx;
    if (x) {
        for (int g = 0; g < COMM_NGROUPS; g++)
            if (x->g[g] != MPI_COMM_NULL)
                MPI_Comm_free(&x->g[g]);
        if (x->moe.comm != MPI_COMM_NULL)
            MPI_Comm_free(&x->moe.comm);
        if (x->moe.edp_comm != MPI_COMM_NULL)
            MPI_Comm_free(&x->moe.edp_comm);
        free(x->req);
        free(x);
    }
    free(c);
}

MPI_Comm comm_mpi_group(const comm *c, comm_group g)
{
    return ((const mpi_ctx *)c->ctx)->g[g];
}

static int c_cp_sendrecv(comm *c, const float *send, float *recv, size_t n, ts_err *err)
{
    cp_mpi_ctx ctx = {((mpi_ctx *)c->ctx)->g[COMM_CP]};
    cp_ring r = cp_mpi_ring(&ctx);
    return r.sendrecv(r.ud, send, recv, n, err);
}

int comm_mpi_create(MPI_Comm base, int t, int p, int d, comm **out, ts_err *err)
{
    return comm_mpi_create_cp(base, t, 1, p, d, out, err);
}

int comm_mpi_create_cp(MPI_Comm base, int t, int cp, int p, int d, comm **out, ts_err *err)
{
    *out = NULL;
    int size, rank;
    MPI_Comm_size(base, &size);
    MPI_Comm_rank(base, &rank);
    if (t < 1 || cp < 1 || p < 1 || d < 1 || (long)t * cp * p * d != size)
        return err_set(err, TS_EINVAL,
                       "layout t=%d x cp=%d x p=%d x d=%d needs %ld ranks; mpirun started %d "
                       "(run mpirun -np %ld, or change --tensor-model-parallel-size / "
                       "--context-parallel-size / --pipeline-model-parallel-size)",
                       t, cp, p, d, (long)t * cp * p * d, size, (long)t * cp * p * d);
    comm *c = calloc(1, sizeof *c);
    mpi_ctx *x = calloc(1, sizeof *x);
    if (!c || !x) {
        free(c);
        free(x);
        return err_set(err, TS_ENOMEM, "MPI comm: out of memory");
    }
    c->ctx = x;
    for (int g = 0; g < COMM_NGROUPS; g++)
        x->g[g] = MPI_COMM_NULL;
    x->base = base;
    x->moe.comm = x->moe.edp_comm = MPI_COMM_NULL;
    int tp = rank % t, cr = (rank / t) % cp, dp = (rank / (t * cp)) % d, pp = rank / (t * cp * d);
    int color[COMM_NGROUPS] = {cr + cp * (dp + d * pp), tp + t * (cr + cp * dp), tp + t * pp, tp + t * (dp + d * pp)};
    int key[COMM_NGROUPS] = {tp, pp, cr + cp * dp, cr};
    int sz[COMM_NGROUPS] = {t, p, cp * d, cp};
    for (int g = 0; g < COMM_NGROUPS; g++) {
        int rc = MPI_Comm_split(base, color[g], key[g], &x->g[g]);
        if (rc != MPI_SUCCESS) {
            c_destroy(c);
            return mpi_fail(err, rc, "communicator split");
        }
        c->size[g] = sz[g];
        c->rank[g] = key[g];
    }
    c->name = "mpi";
    c->all_reduce = c_all_reduce;
    c->all_gather = c_all_gather;
    c->reduce_scatter = c_reduce_scatter;
    c->isend = c_isend;
    c->irecv = c_irecv;
    c->wait = c_wait;
    c->test = c_test;
    c->wait_all = c_wait_all;
    c->cp_sendrecv = c_cp_sendrecv;
    c->destroy = c_destroy;
    *out = c;
    return TS_OK;
}

int comm_mpi_set_ep(comm *c, int ep, ts_err *err)
{
    mpi_ctx *x = c->ctx;
    int t = c->size[COMM_TP], p = c->size[COMM_PP], cp = c->size[COMM_CP], d = c->size[COMM_DP] / cp;
    if (ep < 1 || (t * cp * d) % ep)
        return err_set(err, TS_EINVAL,
                       "--expert-model-parallel-size %d must divide tensor x context x data parallel ranks %d x %d x "
                       "%d = %d (experts fold into them)",
                       ep, t, cp, d, t * cp * d);
    if (x->moe.comm != MPI_COMM_NULL)
        return err_set(err, TS_ESTATE, "comm_mpi_set_ep: expert parallelism already set");
    /* Megatron-core's expert fold etp-ep-edp-pp (etp = 1) over the ranks of the dense
     * tp-cp-dp-pp order: within a pipeline stage, xi = tp + t * (cp rank + cp * dp) (the
     * data group's rank, cp rank + cp * dp), ep the innermost xi % ep, edp xi / ep. */
    int xi = c->rank[COMM_TP] + t * c->rank[COMM_DP], pp = c->rank[COMM_PP];
    int rc = MPI_Comm_split(x->base, pp + p * (xi / ep), xi % ep, &x->moe.comm);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_split(x->base, pp + p * (xi % ep), xi / ep, &x->moe.edp_comm);
    if (rc != MPI_SUCCESS)
        return mpi_fail(err, rc, "expert-parallel communicator split");
    x->moe_xc = moe_mpi_xchg(&x->moe);
    x->moe_edp = moe_mpi_edp(&x->moe);
    c->moe_xc = &x->moe_xc;
    c->moe_edp = &x->moe_edp;
    return TS_OK;
}
