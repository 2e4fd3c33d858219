/* search_eval — phase 2 of the search: simulate the pending candidates of a
 * shard over worker threads (see search.h). */
#include "sim/search/search_eval.h"

#include "sim/search/search.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/search/pool.h"
#include "sim/search/search_sim.h"

typedef struct {
    search_set *set;
    const search_eval_opts *o;
    search_eval_fn eval;
    size_t *todo; /* candidate indices of this shard still pending */
    size_t n_todo;
    size_t done; /* under the pool's lock */
    ts_err err;  /* message of the first internal failure */
} eval_state;

/* Simulate candidate i and record the outcome in its slot. */
static int eval_one(eval_state *st, size_t i)
{
    search_set *set = st->set;
    search_cand *c = &set->cands[i];
    config cfg;
    ts_err e;
    err_clear(&e);
    int rc = search_cand_config(set, i, &cfg, &e);
    if (rc == TS_OK)
        rc = st->eval(st->o->eval_user, &cfg, &c->r, &e);
    if (rc == TS_ENOMEM)
        return rc;
    if (rc != TS_OK) {
        const char *m = e.msg[0] ? e.msg : err_code_name(rc);
        set->msgs[i] = strndup(m, SEARCH_MSG_BYTES - 1);
        c->status = SEARCH_REJ_SIM_ERROR;
        return set->msgs[i] ? TS_OK : TS_ENOMEM;
    }
    c->status = c->r.peak_mem_bytes > set->usable_bytes ? SEARCH_REJ_MEMORY_SIM : SEARCH_SIMULATED;
    return TS_OK;
}

static int eval_work(void *ctx, size_t k)
{
    eval_state *st = ctx;
    return eval_one(st, st->todo[k]);
}

/* Under the pool's lock: count, report progress, stop on an internal failure. */
static int eval_done(void *ctx, size_t k, int rc)
{
    eval_state *st = ctx;
    if (rc != TS_OK && st->err.code == TS_OK)
        err_set(&st->err, rc, "search: out of memory simulating candidate %zu", st->todo[k]);
    st->done++;
    if (st->o->progress)
        st->o->progress(st->o->progress_user, st->done, st->n_todo);
    return rc;
}

int search_evaluate(search_set *set, const search_eval_opts *o, ts_err *err)
{
    int nshards = o->nshards > 0 ? o->nshards : 1, shard = o->shard;
    if (o->threads < 1)
        return err_set(err, TS_EINVAL, "search: --threads must be >= 1 (got %d)", o->threads);
    if (shard < 0 || shard >= nshards)
        return err_set(err, TS_EINVAL, "search: shard %d of %d", shard, nshards);
    eval_state st;
    memset(&st, 0, sizeof st);
    st.set = set;
    st.o = o;
    st.eval = o->eval ? o->eval : search_eval_simulate;
    st.todo = malloc((set->n ? set->n : 1) * sizeof *st.todo);
    if (!st.todo)
        return err_set(err, TS_ENOMEM, "search: out of memory");
    for (size_t i = (size_t)shard; i < set->n; i += (size_t)nshards)
        if (set->cands[i].status == SEARCH_PENDING)
            st.todo[st.n_todo++] = i;
    err_clear(&st.err);
    int rc = pool_run(st.n_todo, o->threads, eval_work, eval_done, &st);
    free(st.todo);
    search_recount(set);
    if (rc && err)
        *err = st.err;
    return rc;
}
