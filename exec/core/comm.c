/* The single-rank comm: every group has one member. */
#include <stdlib.h>
#include <string.h>

#include "exec/core/comm.h"

static int local_all_reduce(comm *c, comm_group g, float *buf, size_t n, ts_err *err)
{
    (void)c, (void)g, (void)buf, (void)n, (void)err;
    return TS_OK;
}
static int local_copy(comm *c, comm_group g, float *out, const float *in, size_t n, ts_err *err)
{
    (void)c, (void)g, (void)err;
    if (n && out != in)
        memmove(out, in, n * sizeof(float));
    return TS_OK;
}
static int local_p2p(comm *c, int peer, float *buf, size_t n, int tag, int *req, ts_err *err)
{
    (void)c, (void)buf, (void)n, (void)req;
    return err_set(err, TS_ESTATE, "local comm: no pipeline peer %d (tag %d) in a 1-rank run", peer, tag);
}
static int local_send(comm *c, int peer, const float *buf, size_t n, int tag, int *req, ts_err *err)
{
    (void)c, (void)buf, (void)n, (void)req;
    return err_set(err, TS_ESTATE, "local comm: no pipeline peer %d (tag %d) in a 1-rank run", peer, tag);
}
static int local_wait(comm *c, int req, ts_err *err)
{
    (void)c;
    return err_set(err, TS_ESTATE, "local comm: no request %d", req);
}
static int local_test(comm *c, int req, int *done, ts_err *err)
{
    *done = 0;
    return local_wait(c, req, err);
}
static int local_wait_all(comm *c, ts_err *err)
{
    (void)c, (void)err;
    return TS_OK;
}
static void local_destroy(comm *c)
{
    free(c);
}

int comm_local_create(comm **out, ts_err *err)
{
    *out = NULL;
    comm *c = calloc(1, sizeof *c);
    if (!c)
        return err_set(err, TS_ENOMEM, "local comm: out of memory");
    c->name = "local";
    for (int g = 0; g < COMM_NGROUPS; g++)
        c->size[g] = 1;
    c->all_reduce = local_all_reduce;
    c->all_gather = local_copy;
    c->reduce_scatter = local_copy;
    c->isend = local_send;
    c->irecv = local_p2p;
    c->wait = local_wait;
    c->test = local_test;
    c->wait_all = local_wait_all;
    c->destroy = local_destroy;
    *out = c;
    return TS_OK;
}
