#include "exec/runtime.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/core/data.h"
#include "exec/watchdog.h"
#include "sim/sched/sched_dep.h"
#include "sim/util/grow.h"

enum { DIR_F = 0, DIR_B = 1 };

typedef struct {
    int req;
    float *buf;
} pending_send;

struct runtime {
    rt_opts o;
    const sched *s;
    backend *be;
    comm *cm;
    int r, p, v, m, d, nstages;
    size_t io;      /* floats of a pipeline tensor */
    gpt_stage **st; /* [v] */
    int *stage_id;  /* [v] */
    /* per (chunk, mb): index c*m + mb */
    gpt_acts **acts;
    float **in_f, **in_b;   /* received (or handed over) input / output gradient */
    int *rq_f, *rq_b;       /* their receive still in flight: request, or -1 */
    float **out_f, **out_b; /* produced, waiting for their SEND */
    pending_send *ps;
    size_t nps, capps;
    double loss_sum;
    int *tok, *tgt; /* host scratch, B*T */
    rt_span *sp;
    size_t nsp, capsp;
    int64_t origin;
    int cur_iter, cur_mb, cur_chunk;
    rt_data_stats data; /* the data step (rt_data_step) */
    int64_t data_t0;    /* start of the open GPT_OP_DATA span */
};

void rt_opts_default(rt_opts *o)
{
    memset(o, 0, sizeof *o);
    o->seed = 1234;
    o->lr = 1e-4f;
    o->beta1 = 0.9f;
    o->beta2 = 0.95f;
    o->eps = 1e-8f;
}

int64_t rt_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void rt_data_step(const runtime *rt, rt_data_stats *out)
{
    *out = rt->data;
}

void rt_data_step_reset(runtime *rt)
{
    memset(&rt->data, 0, sizeof rt->data);
}

void rt_set_origin(runtime *rt, int64_t origin_ns)
{
    rt->origin = origin_ns;
}

static int push_span(runtime *rt, const rt_span *x)
{
    if (rt->nsp == rt->capsp && grow_to((void **)&rt->sp, &rt->capsp, rt->nsp + 1, 1024, sizeof *rt->sp))
        return TS_ENOMEM;
    rt->sp[rt->nsp++] = *x;
    return TS_OK;
}

/* Op-level profiling hook (gpt_prof_fn): a start mark pushes an open span,
 * the end mark closes the last open one of that name. */
static void prof_hook(void *ud, const char *op, int layer, bool end)
{
    runtime *rt = ud;
    bool data = !strcmp(op, GPT_OP_DATA); /* timed always: the data step's copy */
    if (!rt->o.op_trace && !data)
        return;
    rt->be->sync(rt->be);
    int64_t now = rt_now_ns() - rt->origin;
    if (data && !end)
        rt->data_t0 = now;
    else if (data)
        rt->data.copy_ns += now - rt->data_t0;
    if (!rt->o.op_trace)
        return;
    if (!end) {
        rt_span x = {.name = op,
                     .is_op = true,
                     .iter = rt->cur_iter,
                     .mb = rt->cur_mb,
                     .chunk = rt->cur_chunk,
                     .stage = rt->stage_id[rt->cur_chunk],
                     .layer = layer,
                     .t0_ns = now,
                     .t1_ns = -1};
        push_span(rt, &x); /* out of memory only loses a trace record */
        return;
    }
    for (size_t i = rt->nsp; i-- > 0;)
        if (rt->sp[i].t1_ns < 0 && !strcmp(rt->sp[i].name, op)) {
            rt->sp[i].t1_ns = now;
            return;
        }
}

void rt_free(runtime *rt)
{
    if (!rt)
        return;
    bool posted = false; /* receives in flight: only after a failed iteration */
    for (size_t i = 0; rt->rq_f && rt->rq_b && i < (size_t)rt->v * rt->m; i++)
        posted = posted || rt->rq_f[i] >= 0 || rt->rq_b[i] >= 0;
    if (rt->cm && rt->nps && !posted) /* a receive whose send never comes would block wait_all */
        rt->cm->wait_all(rt->cm, NULL);
    size_t nm = (size_t)rt->v * rt->m;
    for (size_t i = 0; i < rt->nps; i++)
        be_free(rt->be, rt->ps[i].buf, rt->io, XMEM_BUFFERS);
    /* all or nothing: rt_create fills these only once every array exists */
    bool filled = rt->st && rt->acts && rt->in_f && rt->in_b && rt->rq_f && rt->rq_b && rt->out_f && rt->out_b;
    for (size_t i = 0; filled && i < nm; i++) {
        int c = (int)(i / (size_t)rt->m);
        gpt_acts_free(rt->st[c], rt->acts[i]);
        /* a receive still posted after a failed iteration may yet be written
         * by MPI: its buffer is left alone (the program aborts anyway) */
        if (rt->rq_f[i] < 0)
            be_free(rt->be, rt->in_f[i], rt->io, XMEM_BUFFERS);
        if (rt->rq_b[i] < 0)
            be_free(rt->be, rt->in_b[i], rt->io, XMEM_BUFFERS);
        be_free(rt->be, rt->out_f[i], rt->io, XMEM_BUFFERS);
        be_free(rt->be, rt->out_b[i], rt->io, XMEM_BUFFERS);
    }
    for (int c = 0; rt->st && c < rt->v; c++)
        gpt_stage_free(rt->st[c]);
    free(rt->st);
    free(rt->stage_id);
    free(rt->acts);
    free(rt->in_f);
    free(rt->in_b);
    free(rt->rq_f);
    free(rt->rq_b);
    free(rt->out_f);
    free(rt->out_b);
    free(rt->ps);
    free(rt->tok);
    free(rt->tgt);
    free(rt->sp);
    free(rt);
}

int rt_create(const rt_opts *o, const sched *s, backend *be, comm *cm, runtime **out, ts_err *err)
{
    *out = NULL;
    if (s->p != cm->size[COMM_PP])
        return err_set(err, TS_EINVAL,
                       "schedule has p=%d pipeline ranks but --pipeline-model-parallel-size "
                       "is %d",
                       s->p, cm->size[COMM_PP]);
    if (s->num_layers != o->dims.layers)
        return err_set(err, TS_EINVAL, "schedule splits %d layers but --num-layers is %d", s->num_layers,
                       o->dims.layers);
    if (o->dims.tie_embed && o->dims.dist_optim && s->p * s->v > 1 && cm->size[COMM_DP] > 1)
        return err_set(err, TS_ENOTSUP,
                       "--use-distributed-optimizer with the output layer tied to the embedding on %d pipeline "
                       "stages: the executor sums the two copies' gradients after the reduce-scatter has sharded "
                       "them (give --untie-embeddings-and-output-weights)",
                       s->p * s->v);
    runtime *rt = calloc(1, sizeof *rt);
    if (!rt)
        return err_set(err, TS_ENOMEM, "runtime: out of memory");
    rt->o = *o;
    rt->s = s;
    rt->be = be;
    rt->cm = cm;
    rt->r = cm->rank[COMM_PP];
    rt->p = s->p;
    rt->v = s->v;
    rt->m = s->m;
    rt->d = cm->size[COMM_DP] / cm->size[COMM_CP]; /* replicas: COMM_DP holds their context-parallel ranks too */
    rt->nstages = s->p * s->v;
    size_t nm = (size_t)rt->v * rt->m, N = (size_t)o->dims.batch * o->dims.seq;
    /* NOLINTNEXTLINE(bugprone-sizeof-expression): the elements are pointers (gpt_stage *) */
    rt->st = calloc((size_t)rt->v, sizeof *rt->st);
    rt->stage_id = calloc((size_t)rt->v, sizeof *rt->stage_id);
    /* NOLINTNEXTLINE(bugprone-sizeof-expression): the elements are pointers (gpt_acts *) */
    rt->acts = calloc(nm, sizeof *rt->acts);
    rt->in_f = calloc(nm, sizeof *rt->in_f);
    rt->in_b = calloc(nm, sizeof *rt->in_b);
    rt->rq_f = malloc(nm * sizeof *rt->rq_f);
    rt->rq_b = malloc(nm * sizeof *rt->rq_b);
    rt->out_f = calloc(nm, sizeof *rt->out_f);
    rt->out_b = calloc(nm, sizeof *rt->out_b);
    rt->tok = calloc(N, sizeof *rt->tok);
    rt->tgt = calloc(N, sizeof *rt->tgt);
    for (size_t i = 0; rt->rq_f && rt->rq_b && i < nm; i++) /* before rt_free reads them */
        rt->rq_f[i] = rt->rq_b[i] = -1;
    if (!rt->st || !rt->stage_id || !rt->acts || !rt->in_f || !rt->in_b || !rt->rq_f || !rt->rq_b || !rt->out_f ||
        !rt->out_b || !rt->tok || !rt->tgt) {
        rt_free(rt);
        return err_set(err, TS_ENOMEM, "runtime: out of memory");
    }
    for (int c = 0; c < rt->v; c++) {
        int sid = sched_stage_of(s, rt->r, c);
        rt->stage_id[c] = sid;
        const sched_stage *ss = &s->stages[sid];
        int rc = gpt_stage_create(&o->dims, ss->first_layer, ss->num_layers, sid == 0, sid == rt->nstages - 1, o->sp,
                                  o->seed, be, cm, &rt->st[c], err);
        if (rc) {
            err_prefix(err, "stage %d (pipeline rank %d, chunk %d): ", sid, rt->r, c);
            rt_free(rt);
            return rc;
        }
        gpt_stage_set_prof(rt->st[c], prof_hook, rt); /* the data step always, the other ops with op_trace */
    }
    rt->io = gpt_stage_io_floats(rt->st[0]);
    rt->origin = 0; /* absolute CLOCK_MONOTONIC until rt_set_origin */
    *out = rt;
    return TS_OK;
}

static int tag_of(const runtime *rt, int mb, int boundary, int dir)
{
    return (mb * rt->nstages + boundary) * 2 + dir;
}

/* Tied word embedding (Megatron's default) with the embedding and the output
 * layer on different stages: before Adam, each of the two gets the sum of
 * both gradients (Megatron's embedding-group all-reduce). On one rank (V
 * placement) an add; across pipeline ranks an exchange between the two
 * (tag past every micro-batch tag): each adds the other's gradient to its
 * own, a + b = b + a bitwise, so both copies stay equal. */
static int sync_tied(runtime *rt, ts_err *err)
{
    size_t n = 0;
    float *ge = NULL, *gh = NULL;
    for (int c = 0; c < rt->v; c++) {
        float *g = gpt_stage_tied_grad(rt->st[c], &n);
        if (g && rt->stage_id[c] == 0)
            ge = g;
        else if (g)
            gh = g;
    }
    if (!ge && !gh)
        return TS_OK;
    backend *be = rt->be;
    if (ge && gh) {
        be->add(be, ge, gh, n);
        be->copy(be, gh, ge, n);
        return TS_OK;
    }
    int peer = -1;
    for (int r = 0; r < rt->p && peer < 0; r++)
        for (int c = 0; c < rt->v; c++)
            if (sched_stage_of(rt->s, r, c) == (ge ? rt->nstages - 1 : 0))
                peer = r;
    float *mine = ge ? ge : gh, *other = NULL;
    int rc = be_alloc(be, n, XMEM_BUFFERS, &other, err), rs = -1, rr = -1, tag = 2 * rt->m * rt->nstages;
    be->sync(be);
    if (!rc)
        rc = rt->cm->irecv(rt->cm, peer, other, n, tag, &rr, err);
    if (!rc)
        rc = rt->cm->isend(rt->cm, peer, mine, n, tag, &rs, err);
    if (!rc)
        rc = rt->cm->wait(rt->cm, rr, err);
    if (!rc)
        rc = rt->cm->wait(rt->cm, rs, err);
    if (!rc)
        be->add(be, mine, other, n);
    be_free(be, other, n, XMEM_BUFFERS);
    return rc;
}

/* Release every finished send's buffer (wait for all if `all`). */
static int reap_sends(runtime *rt, bool all, ts_err *err)
{
    size_t k = 0;
    for (size_t i = 0; i < rt->nps; i++) {
        int done = 0, rc;
        if (all)
            rc = rt->cm->wait(rt->cm, rt->ps[i].req, err), done = 1;
        else
            rc = rt->cm->test(rt->cm, rt->ps[i].req, &done, err);
        if (rc)
            return rc;
        if (done)
            be_free(rt->be, rt->ps[i].buf, rt->io, XMEM_BUFFERS);
        else
            rt->ps[k++] = rt->ps[i];
    }
    rt->nps = k;
    return TS_OK;
}

static int bad_order(const sched_action *a, int r, const char *what, ts_err *err)
{
    return err_set(err, TS_EINVAL, "schedule: pipeline rank %d, %s of micro-batch %d chunk %d: %s", r,
                   sched_act_name((sched_act_kind)a->kind), a->mb, a->chunk, what);
}

static int do_send(runtime *rt, const sched_action *a, float **slot, int boundary, int dir, ts_err *err)
{
    if (!*slot)
        return bad_order(a, rt->r,
                         dir == DIR_F ? "no forward output to send (F not run "
                                        "yet, or sent already)"
                                      : "no input gradient to send",
                         err);
    if (rt->nps == rt->capps && grow_to((void **)&rt->ps, &rt->capps, rt->nps + 1, 64, sizeof *rt->ps))
        return err_set(err, TS_ENOMEM, "runtime: out of memory");
    int req, rc = rt->cm->isend(rt->cm, a->peer, *slot, rt->io, tag_of(rt, a->mb, boundary, dir), &req, err);
    if (rc)
        return rc;
    rt->ps[rt->nps++] = (pending_send){req, *slot};
    *slot = NULL;
    return TS_OK;
}

/* RECV_F / RECV_B: post the receive; the action that consumes it waits
 * (wait_input), as the simulator's receive stream lets compute go on. */
static int do_recv(runtime *rt, const sched_action *a, float **slot, int *req, int boundary, int dir, ts_err *err)
{
    if (*slot)
        return bad_order(a, rt->r, "received twice", err);
    float *buf;
    int rc = be_alloc(rt->be, rt->io, XMEM_BUFFERS, &buf, err);
    if (rc)
        return rc;
    if ((rc = rt->cm->irecv(rt->cm, a->peer, buf, rt->io, tag_of(rt, a->mb, boundary, dir), req, err))) {
        be_free(rt->be, buf, rt->io, XMEM_BUFFERS);
        *req = -1;
        return rc;
    }
    *slot = buf;
    return TS_OK;
}

/* Before F (its input) or B / I (its output gradient) starts: complete the
 * receive of what it consumes, if one is in flight. The wait is idle time,
 * outside the action's span. */
static int wait_input(runtime *rt, const sched_action *a, ts_err *err)
{
    if (a->chunk < 0 || a->chunk >= rt->v || a->mb < 0 || a->mb >= rt->m)
        return TS_OK; /* run_action reports it */
    size_t k = (size_t)a->chunk * rt->m + a->mb;
    int *req = a->kind == ACT_F ? &rt->rq_f[k] : a->kind == ACT_B || a->kind == ACT_I ? &rt->rq_b[k] : NULL;
    if (!req || *req < 0)
        return TS_OK;
    int rc = rt->cm->wait(rt->cm, *req, err);
    *req = -1;
    return rc;
}

static int do_forward(runtime *rt, const sched_action *a, ts_err *err)
{
    int c = a->chunk;
    size_t k = (size_t)c * rt->m + a->mb;
    gpt_stage *st = rt->st[c];
    sched_dep in, out;
    sched_dep_input(rt->s, rt->r, a, &in);
    sched_dep_output(rt->s, rt->r, a, &out);
    if (rt->acts[k])
        return bad_order(a, rt->r, "forward run twice", err);
    if (in.via != SCHED_DEP_NONE && !rt->in_f[k])
        return bad_order(a, rt->r, "forward before its input arrived (missing RECV_F)", err);
    const gpt_dims *d = &rt->o.dims;
    int g = rt->cm->rank[COMM_DP] / rt->cm->size[COMM_CP] * rt->m + a->mb; /* a replica's cp ranks share it */
    bool loads = rt->stage_id[c] == 0 || rt->stage_id[c] == rt->nstages - 1;
    int64_t t0 = loads ? rt_now_ns() : 0;
    data_microbatch(rt->o.seed, rt->cur_iter, rt->m * rt->d, g, d->batch, d->seq, d->vocab, rt->tok, rt->tgt);
    if (loads) {
        rt->data.gen_ns += rt_now_ns() - t0;
        rt->data.mb++;
    }
    bool head = out.via == SCHED_DEP_NONE; /* the last stage: its output is the loss */
    float *y = NULL;
    int rc;
    if (!head && (rc = be_alloc(rt->be, rt->io, XMEM_BUFFERS, &y, err)))
        return rc;
    if ((rc = gpt_acts_create(st, &rt->acts[k], err)))
        goto fail;
    double ls = 0.0;
    if ((rc = gpt_forward(st, rt->acts[k], rt->tok, rt->tgt, rt->in_f[k], y, &ls, err)))
        goto fail;
    rt->loss_sum += ls;
    be_free(rt->be, rt->in_f[k], rt->io, XMEM_BUFFERS);
    rt->in_f[k] = NULL;
    if (out.via == SCHED_DEP_LOCAL)
        rt->in_f[(size_t)out.peer_chunk * rt->m + a->mb] = y; /* local hand-over (ZB-V) */
    else if (out.via == SCHED_DEP_REMOTE)
        rt->out_f[k] = y;
    return TS_OK;
fail:
    be_free(rt->be, y, rt->io, XMEM_BUFFERS);
    return rc;
}

/* B (fused) or I (input part) of (mb, chunk). */
static int do_backward(runtime *rt, const sched_action *a, bool fused, ts_err *err)
{
    int c = a->chunk;
    size_t k = (size_t)c * rt->m + a->mb;
    gpt_stage *st = rt->st[c];
    sched_dep in, out;
    sched_dep_input(rt->s, rt->r, a, &in);
    sched_dep_output(rt->s, rt->r, a, &out);
    if (!rt->acts[k])
        return bad_order(a, rt->r, "backward before forward", err);
    if (in.via != SCHED_DEP_NONE && !rt->in_b[k])
        return bad_order(a, rt->r,
                         "backward before its output gradient arrived "
                         "(missing RECV_B)",
                         err);
    const gpt_dims *d = &rt->o.dims;
    float scale = 1.0f / ((float)d->batch * d->seq * rt->m * rt->d);
    float *dx = NULL;
    int rc;
    if (out.via != SCHED_DEP_NONE && (rc = be_alloc(rt->be, rt->io, XMEM_BUFFERS, &dx, err)))
        return rc;
    rc = fused ? gpt_backward(st, rt->acts[k], rt->in_b[k], scale, dx, err)
               : gpt_backward_input(st, rt->acts[k], rt->in_b[k], scale, dx, err);
    if (rc) {
        be_free(rt->be, dx, rt->io, XMEM_BUFFERS);
        return rc;
    }
    be_free(rt->be, rt->in_b[k], rt->io, XMEM_BUFFERS);
    rt->in_b[k] = NULL;
    if (fused) {
        gpt_acts_free(st, rt->acts[k]);
        rt->acts[k] = NULL;
    }
    if (out.via == SCHED_DEP_LOCAL)
        rt->in_b[(size_t)out.peer_chunk * rt->m + a->mb] = dx;
    else if (out.via == SCHED_DEP_REMOTE)
        rt->out_b[k] = dx;
    return TS_OK;
}

static int do_weight(runtime *rt, const sched_action *a, ts_err *err)
{
    size_t k = (size_t)a->chunk * rt->m + a->mb;
    if (!rt->acts[k])
        return bad_order(a, rt->r, "W before F/I", err);
    int rc = gpt_backward_weight(rt->st[a->chunk], rt->acts[k], err);
    if (rc)
        return rc;
    gpt_acts_free(rt->st[a->chunk], rt->acts[k]);
    rt->acts[k] = NULL;
    return TS_OK;
}

static int run_action(runtime *rt, const sched_action *a, bool *reduced, bool *stepped, ts_err *err)
{
    int c = a->chunk;
    if (a->kind != ACT_OPTIM && (c < 0 || c >= rt->v))
        return bad_order(a, rt->r, "chunk out of range", err);
    if (a->kind != ACT_OPTIM && a->kind != ACT_REDUCE_GRAD && (a->mb < 0 || a->mb >= rt->m))
        return bad_order(a, rt->r, "micro-batch out of range", err);
    size_t k = (size_t)(c < 0 ? 0 : c) * rt->m + (a->mb < 0 ? 0 : a->mb);
    int sid = c >= 0 ? rt->stage_id[c] : -1;
    rt->cur_mb = a->mb;
    rt->cur_chunk = c < 0 ? 0 : c;
    switch ((sched_act_kind)a->kind) {
    case ACT_F:
        return do_forward(rt, a, err);
    case ACT_B:
        return do_backward(rt, a, true, err);
    case ACT_I:
        return do_backward(rt, a, false, err);
    case ACT_W:
        return do_weight(rt, a, err);
    case ACT_SEND_F:
        return do_send(rt, a, &rt->out_f[k], sid, DIR_F, err);
    case ACT_RECV_F:
        return do_recv(rt, a, &rt->in_f[k], &rt->rq_f[k], sid - 1, DIR_F, err);
    case ACT_SEND_B:
        return do_send(rt, a, &rt->out_b[k], sid - 1, DIR_B, err);
    case ACT_RECV_B:
        return do_recv(rt, a, &rt->in_b[k], &rt->rq_b[k], sid, DIR_B, err);
    case ACT_REDUCE_GRAD:
        reduced[c] = true;
        return gpt_stage_reduce_grads(rt->st[c], err);
    case ACT_OPTIM: {
        int rc = sync_tied(rt, err);
        for (int j = 0; j < rt->v && !rc; j++)
            rc = gpt_stage_adam(rt->st[j], rt->o.lr, rt->o.beta1, rt->o.beta2, rt->o.eps, rt->o.weight_decay,
                                rt->cur_iter + 1, err);
        *stepped = true;
        return rc;
    }
    default:
        return bad_order(a, rt->r, "unknown action kind", err);
    }
}

int rt_iteration(runtime *rt, int iter, double *loss, ts_err *err)
{
    int rc = TS_OK;
    bool reduced[SCHED_MAX_V] = {false}, stepped = false;
    rt->cur_iter = iter;
    rt->loss_sum = 0.0;
    for (int c = 0; c < rt->v; c++)
        gpt_stage_zero_grads(rt->st[c]);
    size_t n = rt->s->n_actions[rt->r];
    const sched_action *acts = rt->s->actions[rt->r];
    for (size_t i = 0; i < n && !rc; i++) {
        const sched_action *a = &acts[i];
        wd_action(sched_act_name((sched_act_kind)a->kind), iter, a->mb); /* named if a wait times out */
        if (rt->o.watch_device)
            wd_wait_begin("the action's GPU work and NCCL collectives (device sync)");
        if ((rc = wait_input(rt, a, err))) {
            if (rt->o.watch_device)
                wd_wait_end();
            break;
        }
        rt->be->sync(rt->be);
        int64_t t0 = rt_now_ns() - rt->origin;
        rc = run_action(rt, a, reduced, &stepped, err);
        rt->be->sync(rt->be);
        if (rt->o.watch_device)
            wd_wait_end();
        rt_span x = {.name = sched_act_name((sched_act_kind)a->kind),
                     .is_op = false,
                     .iter = iter,
                     .mb = a->mb,
                     .chunk = a->chunk,
                     .stage = a->chunk >= 0 && a->chunk < rt->v ? rt->stage_id[a->chunk] : -1,
                     .layer = -1,
                     .t0_ns = t0,
                     .t1_ns = rt_now_ns() - rt->origin};
        if (!rc && push_span(rt, &x))
            rc = err_set(err, TS_ENOMEM, "runtime: out of memory for trace spans");
        if (!rc)
            rc = reap_sends(rt, false, err);
    }
    if (rc) {
        err_prefix(err, "iteration %d: ", iter);
        return rc;
    }
    wd_action("end of iteration", iter, -1);
    if (rt->o.watch_device)
        wd_wait_begin("the iteration's last GPU work and NCCL collectives (device sync)");
    /* what the schedule left out */
    for (int c = 0; c < rt->v && !rc; c++)
        if (!reduced[c])
            rc = gpt_stage_reduce_grads(rt->st[c], err);
    if (!rc && !stepped)
        rc = sync_tied(rt, err);
    for (int j = 0; j < rt->v && !rc && !stepped; j++)
        rc =
            gpt_stage_adam(rt->st[j], rt->o.lr, rt->o.beta1, rt->o.beta2, rt->o.eps, rt->o.weight_decay, iter + 1, err);
    if (!rc)
        rc = reap_sends(rt, true, err);
    if (rt->o.watch_device) {
        rt->be->sync(rt->be);
        wd_wait_end();
    }
    for (size_t k = 0; !rc && k < (size_t)rt->v * rt->m; k++)
        if (rt->rq_f[k] >= 0 || rt->rq_b[k] >= 0)
            rc = err_set(err, TS_EINVAL,
                         "schedule: pipeline rank %d received micro-batch %d of chunk %d but never used it", rt->r,
                         (int)(k % (size_t)rt->m), (int)(k / (size_t)rt->m));
        else if (rt->acts[k] || rt->in_f[k] || rt->in_b[k] || rt->out_f[k] || rt->out_b[k])
            rc = err_set(err, TS_EINVAL,
                         "schedule: pipeline rank %d left micro-batch %d of chunk %d "
                         "unfinished (a missing B/W, SEND or consuming action)",
                         rt->r, (int)(k % (size_t)rt->m), (int)(k / (size_t)rt->m));
    if (rc)
        return rc;
    /* the loss: last-stage ranks hold sums over their micro-batches */
    const gpt_dims *d = &rt->o.dims;
    float lv = (float)(rt->loss_sum / ((double)d->batch * d->seq * rt->m * rt->d));
    if ((rc = rt->cm->all_reduce(rt->cm, COMM_PP, &lv, 1, err)) ||
        (rc = rt->cm->all_reduce(rt->cm, COMM_DP, &lv, 1, err)))
        return rc;
    *loss = lv;
    return TS_OK;
}

const rt_span *rt_spans(const runtime *rt, size_t *n)
{
    *n = rt->nsp;
    return rt->sp;
}

void rt_clear_spans(runtime *rt)
{
    rt->nsp = 0;
}

int rt_num_chunks(const runtime *rt)
{
    return rt->v;
}

gpt_stage *rt_chunk(runtime *rt, int chunk)
{
    return rt->st[chunk];
}

int rt_chunk_stage(const runtime *rt, int chunk)
{
    return rt->stage_id[chunk];
}
