/* search_eval — phase 2 of the search: simulate the pending candidates of a
 * shard over worker threads (see search.h). */
#include "search.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    search_set *set;
    const search_eval_opts *o;
    search_eval_fn eval;
    size_t *todo;        /* candidate indices of this shard still pending */
    size_t n_todo;
    size_t next, done;   /* under lock */
    int rc;              /* first internal failure (TS_ENOMEM) */
    ts_err err;
    pthread_mutex_t lock;
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
    c->status = c->r.peak_mem_bytes > set->capacity_bytes ? SEARCH_REJ_MEMORY_SIM
                                                           : SEARCH_SIMULATED;
    return TS_OK;
}

static void *worker(void *arg)
{
    eval_state *st = arg;
    for (;;) {
        pthread_mutex_lock(&st->lock);
        size_t k = st->next;
        bool stop = st->rc != TS_OK || k >= st->n_todo;
        if (!stop)
            st->next++;
        pthread_mutex_unlock(&st->lock);
        if (stop)
            return NULL;
        int rc = eval_one(st, st->todo[k]);
        pthread_mutex_lock(&st->lock);
        if (rc != TS_OK && st->rc == TS_OK) {
            st->rc = rc;
            err_set(&st->err, rc, "search: out of memory simulating candidate %zu", st->todo[k]);
        }
        st->done++;
        if (st->o->progress)
            st->o->progress(st->o->progress_user, st->done, st->n_todo);
        pthread_mutex_unlock(&st->lock);
    }
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
    pthread_mutex_init(&st.lock, NULL);
    int nt = o->threads;
    if ((size_t)nt > st.n_todo)
        nt = st.n_todo ? (int)st.n_todo : 1;
    pthread_t *tids = calloc((size_t)nt, sizeof *tids);
    int started = 0;
    if (tids)
        for (; started < nt - 1; started++)
            if (pthread_create(&tids[started], NULL, worker, &st))
                break;
    worker(&st);
    for (int t = 0; t < started; t++)
        pthread_join(tids[t], NULL);
    free(tids);
    pthread_mutex_destroy(&st.lock);
    free(st.todo);
    search_recount(set);
    if (st.rc) {
        if (err)
            *err = st.err;
        return st.rc;
    }
    return TS_OK;
}
