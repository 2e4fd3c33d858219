/* comm_nccl — comm.h over NCCL. Contract in comm_nccl.h. */
#include "exec/cuda/comm_nccl.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

#include "exec/cuda/moe_nccl.h"
#include "exec/cuda/nccl_boot.h"

/* Tag of the context-parallel ring's messages (one ring in flight per communicator; exec/cp_mpi.c's value). */
#define NCCL_CP_RING_TAG 7100

typedef struct {
    bool send;
    int peer;
    float *buf;
    size_t n;
} p2p_op;

typedef struct {
    bool used, launched;
    cudaEvent_t done;
} req_slot;

typedef struct {
    ncclComm_t nc[COMM_NGROUPS]; /* NULL for a group of one rank */
    MPI_Comm mpi[COMM_NGROUPS];
    cudaStream_t compute, coll, p2p;
    cudaEvent_t ready, coll_done;
    req_slot req[COMM_NCCL_MAX_REQ];
    p2p_op queue[COMM_NCCL_MAX_REQ];
    int queued_req[COMM_NCCL_MAX_REQ];
    int nqueued;
    MPI_Comm base; /* borrowed */
    bool has_moe;  /* comm_nccl_set_ep done: moe holds the expert groups */
    moe_nccl_ctx moe;
    moe_xchg moe_xc; /* over moe's expert-parallel group */
    moe_edp moe_edp; /* over moe's expert-data-parallel group */
} nccl_ctx;

static const char *const GROUP_NAMES[COMM_NGROUPS] = {"tensor", "pipeline", "data", "context"};

static nccl_ctx *X(comm *c)
{
    return (nccl_ctx *)c->ctx;
}

static int nccl_fail(ts_err *err, ncclResult_t r, const char *what, comm_group g)
{
    return err_set(err, TS_ESTATE, "NCCL %s on the %s-parallel group failed: %s", what, GROUP_NAMES[g],
                   ncclGetErrorString(r));
}

static int cuda_fail(ts_err *err, cudaError_t st, const char *what)
{
    return err_set(err, TS_ESTATE, "nccl comm: %s: %s", what, cudaGetErrorString(st));
}

/* Make the communication stream s wait for the compute stream's work. */
static int after_compute(nccl_ctx *x, cudaStream_t s, ts_err *err)
{
    cudaError_t st = cudaEventRecord(x->ready, x->compute);
    if (st == cudaSuccess)
        st = cudaStreamWaitEvent(s, x->ready, 0);
    return st == cudaSuccess ? TS_OK : cuda_fail(err, st, "stream dependency");
}

/* Make the compute stream wait for the collective just issued. */
static int join_compute(nccl_ctx *x, ts_err *err)
{
    cudaError_t st = cudaEventRecord(x->coll_done, x->coll);
    if (st == cudaSuccess)
        st = cudaStreamWaitEvent(x->compute, x->coll_done, 0);
    return st == cudaSuccess ? TS_OK : cuda_fail(err, st, "stream dependency");
}

static int check_group(comm *c, comm_group g, ts_err *err)
{
    if ((unsigned)g >= COMM_NGROUPS)
        return err_set(err, TS_EINVAL, "nccl comm: group %d: valid are 0..%d", (int)g, COMM_NGROUPS - 1);
    if (c->size[g] > 1 && !X(c)->nc[g])
        return err_set(err, TS_EINVAL,
                       "nccl comm: the %s-parallel group has no NCCL communicator (only its ring hop, over MPI)",
                       GROUP_NAMES[g]);
    return TS_OK;
}

static int nc_all_reduce(comm *c, comm_group g, float *buf, size_t n, ts_err *err)
{
    int rc = check_group(c, g, err);
    if (rc != TS_OK || c->size[g] == 1 || n == 0)
        return rc;
    nccl_ctx *x = X(c);
    rc = after_compute(x, x->coll, err);
    if (rc != TS_OK)
        return rc;
    ncclResult_t r = ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, x->nc[g], x->coll);
    return r == ncclSuccess ? join_compute(x, err) : nccl_fail(err, r, "all-reduce", g);
}

/* All-gather (gather = true) or reduce-scatter of n floats: a device copy
 * when the group has one rank, else the NCCL collective on the comm stream. */
static int gather_or_scatter(comm *c, comm_group g, float *out, const float *in, size_t n, bool gather, ts_err *err)
{
    const char *what = gather ? "all-gather" : "reduce-scatter";
    int rc = check_group(c, g, err);
    if (rc != TS_OK || n == 0)
        return rc;
    nccl_ctx *x = X(c);
    if (c->size[g] == 1) {
        cudaError_t st = cudaMemcpyAsync(out, in, n * sizeof(float), cudaMemcpyDeviceToDevice, x->compute);
        return st == cudaSuccess ? TS_OK : cuda_fail(err, st, gather ? "all-gather copy" : "reduce-scatter copy");
    }
    rc = after_compute(x, x->coll, err);
    if (rc != TS_OK)
        return rc;
    ncclResult_t r = gather ? ncclAllGather(in, out, n, ncclFloat, x->nc[g], x->coll)
                            : ncclReduceScatter(in, out, n, ncclFloat, ncclSum, x->nc[g], x->coll);
    return r == ncclSuccess ? join_compute(x, err) : nccl_fail(err, r, what, g);
}

static int nc_all_gather(comm *c, comm_group g, float *out, const float *in, size_t n, ts_err *err)
{
    return gather_or_scatter(c, g, out, in, n, true, err);
}

static int nc_reduce_scatter(comm *c, comm_group g, float *out, const float *in, size_t n, ts_err *err)
{
    return gather_or_scatter(c, g, out, in, n, false, err);
}

static int queue_p2p(comm *c, bool send, int peer, float *buf, size_t n, int tag, int *req, ts_err *err)
{
    nccl_ctx *x = X(c);
    const char *what = send ? "isend" : "irecv";
    if (peer < 0 || peer >= c->size[COMM_PP] || peer == c->rank[COMM_PP])
        return err_set(err, TS_EINVAL,
                       "nccl comm %s: peer %d: valid are the other pipeline "
                       "ranks 0..%d (this rank is %d)",
                       what, peer, c->size[COMM_PP] - 1, c->rank[COMM_PP]);
    if (tag < 0 || tag >= 32768)
        return err_set(err, TS_EINVAL, "nccl comm %s: tag %d: valid are 0..32767", what, tag);
    int id = -1;
    for (int i = 0; i < COMM_NCCL_MAX_REQ && id < 0; i++)
        if (!x->req[i].used)
            id = i;
    if (id < 0 || x->nqueued >= COMM_NCCL_MAX_REQ)
        return err_set(err, TS_ESTATE,
                       "nccl comm %s: more than %d transfers in flight; "
                       "wait for some first",
                       what, COMM_NCCL_MAX_REQ);
    x->req[id].used = true;
    x->req[id].launched = false;
    x->queue[x->nqueued] = (p2p_op){.send = send, .peer = peer, .buf = buf, .n = n};
    x->queued_req[x->nqueued++] = id;
    *req = id;
    return TS_OK;
}

static int nc_isend(comm *c, int peer, const float *buf, size_t n, int tag, int *req, ts_err *err)
{
    return queue_p2p(c, true, peer, (float *)(size_t)buf, n, tag, req, err);
}

static int nc_irecv(comm *c, int peer, float *buf, size_t n, int tag, int *req, ts_err *err)
{
    return queue_p2p(c, false, peer, buf, n, tag, req, err);
}

/* Launch every queued transfer in one NCCL group on the p2p stream. */
static int flush(comm *c, ts_err *err)
{
    nccl_ctx *x = X(c);
    if (x->nqueued == 0)
        return TS_OK;
    int rc = after_compute(x, x->p2p, err);
    if (rc != TS_OK)
        return rc;
    ncclResult_t r = ncclGroupStart();
    for (int i = 0; i < x->nqueued && r == ncclSuccess; i++) {
        p2p_op *o = &x->queue[i];
        r = o->send ? ncclSend(o->buf, o->n, ncclFloat, o->peer, x->nc[COMM_PP], x->p2p)
                    : ncclRecv(o->buf, o->n, ncclFloat, o->peer, x->nc[COMM_PP], x->p2p);
    }
    ncclResult_t r2 = ncclGroupEnd();
    if (r == ncclSuccess)
        r = r2;
    if (r != ncclSuccess)
        return nccl_fail(err, r, "send/recv", COMM_PP);
    for (int i = 0; i < x->nqueued; i++) {
        req_slot *s = &x->req[x->queued_req[i]];
        cudaError_t st = cudaEventRecord(s->done, x->p2p);
        if (st != cudaSuccess)
            return cuda_fail(err, st, "p2p event");
        s->launched = true;
    }
    x->nqueued = 0;
    return TS_OK;
}

static int nc_wait(comm *c, int req, ts_err *err)
{
    nccl_ctx *x = X(c);
    if (req < 0 || req >= COMM_NCCL_MAX_REQ || !x->req[req].used)
        return err_set(err, TS_EINVAL, "nccl comm wait: no request %d in flight", req);
    int rc = flush(c, err);
    if (rc != TS_OK)
        return rc;
    cudaError_t st = cudaStreamWaitEvent(x->compute, x->req[req].done, 0);
    x->req[req].used = false;
    return st == cudaSuccess ? TS_OK : cuda_fail(err, st, "wait");
}

static int nc_wait_all(comm *c, ts_err *err)
{
    nccl_ctx *x = X(c);
    int rc = flush(c, err);
    for (int i = 0; i < COMM_NCCL_MAX_REQ && rc == TS_OK; i++)
        if (x->req[i].used)
            rc = nc_wait(c, i, err);
    return rc;
}

/* The context-parallel ring's hop (comm.h's cp_sendrecv) over the group's
 * MPI communicator, on host memory: the CUDA backend's flash attention
 * stages the ring's blocks through the host (backend_cuda.h). */
static int nc_cp_sendrecv(comm *c, const float *send, float *recv, size_t n, ts_err *err)
{
    MPI_Comm m = X(c)->mpi[COMM_CP];
    int size = c->size[COMM_CP], rank = c->rank[COMM_CP];
    if (n > 0x7fffffffu)
        return err_set(err, TS_EINVAL, "context-parallel ring: %zu floats exceed MPI's int count", n);
    int e = MPI_Sendrecv(send, (int)n, MPI_FLOAT, (rank + 1) % size, NCCL_CP_RING_TAG, recv, (int)n, MPI_FLOAT,
                         (rank + size - 1) % size, NCCL_CP_RING_TAG, m, MPI_STATUS_IGNORE);
    return e == MPI_SUCCESS ? TS_OK : err_set(err, TS_ESTATE, "context-parallel ring: MPI error %d", e);
}

static void nc_destroy(comm *c)
{
    if (!c)
        return;
    nccl_ctx *x = X(c);
    if (x) {
        if (x->coll)
            cudaStreamSynchronize(x->coll);
        if (x->p2p)
            cudaStreamSynchronize(x->p2p);
        if (x->has_moe)
            moe_nccl_free(&x->moe);
        for (int g = 0; g < COMM_NGROUPS; g++) {
            if (x->nc[g])
                ncclCommDestroy(x->nc[g]);
            if (x->mpi[g] != MPI_COMM_NULL)
                MPI_Comm_free(&x->mpi[g]);
        }
        for (int i = 0; i < COMM_NCCL_MAX_REQ; i++)
            if (x->req[i].done)
                cudaEventDestroy(x->req[i].done);
        if (x->ready)
            cudaEventDestroy(x->ready);
        if (x->coll_done)
            cudaEventDestroy(x->coll_done);
        if (x->coll)
            cudaStreamDestroy(x->coll);
        if (x->p2p)
            cudaStreamDestroy(x->p2p);
        free(x);
    }
    free(c);
}

/* MPI sub-communicator and NCCL communicator of group g. */
static int make_group(comm *c, MPI_Comm base, comm_group g, int color, ts_err *err)
{
    nccl_ctx *x = X(c);
    if (MPI_Comm_split(base, color, c->rank[g], &x->mpi[g]) != MPI_SUCCESS)
        return err_set(err, TS_ESTATE,
                       "nccl comm: MPI_Comm_split of the %s-parallel group "
                       "failed",
                       GROUP_NAMES[g]);
    if (c->size[g] == 1)
        return TS_OK;
    char group[32];
    snprintf(group, sizeof group, "%s-parallel", GROUP_NAMES[g]);
    return nccl_boot_comm(x->mpi[g], c->size[g], c->rank[g], group, &x->nc[g], err);
}

int comm_nccl_create(MPI_Comm base, int t, int p, int d, cudaStream_t compute, comm **out, ts_err *err)
{
    return comm_nccl_create_cp(base, t, 1, p, d, compute, out, err);
}

int comm_nccl_create_cp(MPI_Comm base, int t, int cp, int p, int d, cudaStream_t compute, comm **out, ts_err *err)
{
    *out = NULL;
    int size = 0, g = 0;
    MPI_Comm_size(base, &size);
    MPI_Comm_rank(base, &g);
    if (t < 1 || cp < 1 || p < 1 || d < 1 || (long long)t * cp * p * d != size)
        return err_set(err, TS_EINVAL,
                       "nccl comm: t=%d cp=%d p=%d d=%d: t*cp*p*d must equal the %d "
                       "MPI ranks",
                       t, cp, p, d, size);
    comm *c = calloc(1, sizeof *c);
    nccl_ctx *x = calloc(1, sizeof *x);
    if (!c || !x) {
        free(c);
        free(x);
        return err_set(err, TS_ENOMEM, "nccl comm: out of host memory");
    }
    for (int i = 0; i < COMM_NGROUPS; i++)
        x->mpi[i] = MPI_COMM_NULL;
    c->name = "nccl";
    c->ctx = x;
    /* Megatron-core's order tp-cp-dp-pp (comm.h, as comm_mpi_create_cp): the data-parallel group
     * holds the cp x d ranks that share the parameters */
    int tp = g % t, cr = (g / t) % cp, dp = (g / (t * cp)) % d, pp = g / (t * cp * d);
    c->size[COMM_TP] = t;
    c->size[COMM_PP] = p;
    c->size[COMM_DP] = cp * d;
    c->size[COMM_CP] = cp;
    c->rank[COMM_TP] = tp;
    c->rank[COMM_PP] = pp;
    c->rank[COMM_DP] = cr + cp * dp;
    c->rank[COMM_CP] = cr;
    c->all_reduce = nc_all_reduce;
    c->all_gather = nc_all_gather;
    c->reduce_scatter = nc_reduce_scatter;
    c->isend = nc_isend;
    c->irecv = nc_irecv;
    c->wait = nc_wait;
    c->wait_all = nc_wait_all;
    c->cp_sendrecv = nc_cp_sendrecv;
    c->destroy = nc_destroy;
    x->compute = compute;
    x->base = base;
    int rc = TS_OK;
    cudaError_t st = cudaStreamCreateWithFlags(&x->coll, cudaStreamNonBlocking);
    if (st == cudaSuccess)
        st = cudaStreamCreateWithFlags(&x->p2p, cudaStreamNonBlocking);
    if (st == cudaSuccess)
        st = cudaEventCreateWithFlags(&x->ready, cudaEventDisableTiming);
    if (st == cudaSuccess)
        st = cudaEventCreateWithFlags(&x->coll_done, cudaEventDisableTiming);
    for (int i = 0; i < COMM_NCCL_MAX_REQ && st == cudaSuccess; i++)
        st = cudaEventCreateWithFlags(&x->req[i].done, cudaEventDisableTiming);
    if (st != cudaSuccess)
        rc = cuda_fail(err, st, "stream/event creation");
    /* Same order on every rank: TP, PP, DP, then CP (MPI only: the ring's exchange). */
    if (rc == TS_OK)
        rc = make_group(c, base, COMM_TP, cr + cp * (dp + d * pp), err);
    if (rc == TS_OK)
        rc = make_group(c, base, COMM_PP, tp + t * (cr + cp * dp), err);
    if (rc == TS_OK)
        rc = make_group(c, base, COMM_DP, tp + t * pp, err);
    if (rc == TS_OK && MPI_Comm_split(base, tp + t * (dp + d * pp), cr, &x->mpi[COMM_CP]) != MPI_SUCCESS)
        rc = err_set(err, TS_ESTATE, "nccl comm: MPI_Comm_split of the context-parallel group failed");
    if (rc != TS_OK) {
        nc_destroy(c);
        return rc;
    }
    *out = c;
    return TS_OK;
}

int comm_nccl_set_ep(comm *c, int ep, ts_err *err)
{
    nccl_ctx *x = X(c);
    if (x->has_moe)
        return err_set(err, TS_ESTATE, "comm_nccl_set_ep: expert parallelism already set");
    int rc = moe_nccl_init(&x->moe, x->base, c, ep, x->compute, err);
    if (rc != TS_OK)
        return rc;
    x->has_moe = true;
    x->moe_xc = moe_nccl_xchg(&x->moe);
    x->moe_edp = moe_nccl_edp(&x->moe);
    c->moe_xc = &x->moe_xc;
    c->moe_edp = &x->moe_edp;
    return TS_OK;
}
